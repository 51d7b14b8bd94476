//! OpenAI's safety blocks sent as errors rather than as a `content_filter`
//! stop: an error object whose `code` names the policy that blocked the
//! turn. Shared by Chat Completions and Responses, which carry the same
//! error object (`{"code": .., "message": .., "type": .., "param": ..}`) in
//! an HTTP 4xx body, and Responses also in a stream's `response.failed`
//! event (`response.error`) or `error` event.
//!
//! Only the codes below are refusals; any other code is a plain error and
//! passes as one.

use http::StatusCode;
use serde_json::Value;

use crate::dialect::{str_field, truncate_explanation, RefusalInfo};
use crate::refusal::RefusalSignal;

/// Which OpenAI API an error came from: the two use different sets of codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenAiApi {
    ChatCompletions,
    Responses,
}

/// One error code that is a safety block, and the category it is recorded
/// under.
struct PolicyCode {
    code: &'static str,
    category: &'static str,
    /// Chat Completions answers with it too (every code is a Responses one).
    chat: bool,
}

/// The codes, with where each is documented:
///
/// - `cyber_policy`: OpenAI's "Cybersecurity checks" guide ("API requests
///   will return an error with the error code `cyber_policy`"), for Chat
///   Completions and Responses alike; Codex CLI maps it to its own
///   cyber-policy error from a 400 body and from `response.failed`
///   (codex-rs `api_bridge.rs`, `sse/responses.rs`).
/// - `bio_policy`: the Responses error codes (openai-python
///   `types/responses/response_error.py`, `ResponseErrorCode` in the
///   OpenAPI spec); no Chat Completions source names it.
/// - `invalid_prompt`: the Responses error codes, and the 400 Chat
///   Completions answers a flagged prompt with ("Invalid prompt: your prompt
///   was flagged as potentially violating our usage policy", type
///   `invalid_request_error`; the reasoning guide's "advice on prompting").
/// - `image_content_policy_violation`: the Responses error codes (an input
///   image the policy blocks).
const POLICY_CODES: &[PolicyCode] = &[
    PolicyCode {
        code: "cyber_policy",
        category: "cyber",
        chat: true,
    },
    PolicyCode {
        code: "bio_policy",
        category: "bio",
        chat: false,
    },
    PolicyCode {
        code: "invalid_prompt",
        category: "usage_policy",
        chat: true,
    },
    PolicyCode {
        code: "image_content_policy_violation",
        category: "image_content",
        chat: false,
    },
];

/// The category of a policy error `code` on `api`, if it is one.
fn category_of(code: &str, api: OpenAiApi) -> Option<&'static str> {
    POLICY_CODES
        .iter()
        .find(|known| known.code == code && (known.chat || api == OpenAiApi::Responses))
        .map(|known| known.category)
}

/// A refusal in an error object (`{"code": .., "message": ..}`), if its
/// code names a safety policy `api` blocks with. The explanation is the
/// error's message.
pub(crate) fn policy_error(error: &Value, api: OpenAiApi) -> Option<RefusalInfo> {
    let code = error.get("code").and_then(Value::as_str)?;
    let category = category_of(code, api)?;
    let message = str_field(error, "message").filter(|m| !m.trim().is_empty());
    Some(RefusalInfo {
        signal: Some(RefusalSignal::PolicyError),
        category: Some(category.to_owned()),
        explanation: message.map(|m| truncate_explanation(m.trim())),
        ..RefusalInfo::default()
    })
}

/// A refusal in a client-error body: `{"error": {"code": "cyber_policy",
/// ..}}`.
pub(crate) fn policy_blocked(
    status: StatusCode,
    body: &Value,
    api: OpenAiApi,
) -> Option<RefusalInfo> {
    if !status.is_client_error() {
        return None;
    }
    policy_error(body.get("error")?, api)
}

/// A refusal in a Responses stream's `error` event. The OpenAPI spec puts
/// `code` and `message` at the event's top level (`ResponseErrorEvent`);
/// recorded streams carry them nested in an `error` object instead, as a
/// body's error is, and Codex CLI reads either. Both are read.
pub(crate) fn policy_error_event(event: &Value) -> Option<RefusalInfo> {
    let error = event
        .get("error")
        .filter(|e| e.is_object())
        .unwrap_or(event);
    policy_error(error, OpenAiApi::Responses)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_policy_code_has_its_category_and_the_message_explains() {
        for (code, category) in [
            ("cyber_policy", "cyber"),
            ("bio_policy", "bio"),
            ("invalid_prompt", "usage_policy"),
            ("image_content_policy_violation", "image_content"),
        ] {
            let error = json!({"code": code, "message": " Flagged. ", "type": "invalid_request"});
            let info = policy_error(&error, OpenAiApi::Responses).unwrap();
            assert_eq!(info.signal, Some(RefusalSignal::PolicyError), "{code}");
            assert_eq!(info.category.as_deref(), Some(category), "{code}");
            assert_eq!(info.explanation.as_deref(), Some("Flagged."), "{code}");
        }
        let silent = json!({"code": "cyber_policy", "message": "  "});
        let info = policy_error(&silent, OpenAiApi::Responses).unwrap();
        assert_eq!(info.explanation, None);
    }

    #[test]
    fn chat_completions_blocks_with_its_own_codes_only() {
        let body = |code: &str| json!({"error": {"code": code, "message": "m"}});
        let chat = |code: &str| {
            policy_blocked(
                StatusCode::BAD_REQUEST,
                &body(code),
                OpenAiApi::ChatCompletions,
            )
        };
        assert!(chat("cyber_policy").is_some());
        assert!(chat("invalid_prompt").is_some());
        assert!(chat("bio_policy").is_none());
        assert!(chat("image_content_policy_violation").is_none());
    }

    #[test]
    fn other_codes_and_statuses_are_plain_errors() {
        for code in [
            json!("server_error"),
            json!("rate_limit_exceeded"),
            json!("invalid_image"),
            json!("CYBER_POLICY"),
            json!(400),
            Value::Null,
        ] {
            let body = json!({"error": {"code": code, "message": "m"}});
            assert!(
                policy_blocked(StatusCode::BAD_REQUEST, &body, OpenAiApi::Responses).is_none(),
                "{code}"
            );
        }
        let cyber = json!({"error": {"code": "cyber_policy", "message": "m"}});
        for status in [StatusCode::OK, StatusCode::INTERNAL_SERVER_ERROR] {
            assert!(policy_blocked(status, &cyber, OpenAiApi::Responses).is_none());
        }
        assert!(policy_blocked(StatusCode::FORBIDDEN, &cyber, OpenAiApi::Responses).is_some());
        assert!(
            policy_blocked(StatusCode::BAD_REQUEST, &json!([1]), OpenAiApi::Responses).is_none()
        );
    }

    #[test]
    fn an_error_event_is_read_flat_or_nested() {
        let flat = json!({"type": "error", "code": "bio_policy", "message": "m", "param": null});
        let nested = json!({"type": "error", "error": {"type": "invalid_request",
            "code": "cyber_policy", "message": "m", "param": null}});
        assert_eq!(
            policy_error_event(&flat).unwrap().category.as_deref(),
            Some("bio")
        );
        assert_eq!(
            policy_error_event(&nested).unwrap().category.as_deref(),
            Some("cyber")
        );
        let other = json!({"type": "error", "code": "server_error", "message": "m"});
        assert!(policy_error_event(&other).is_none());
    }
}
