//! The eval's one file of provider JSON, as a client has it: the requests
//! it builds from a prompt, the credentials each API takes, and the usage
//! it reads from the answer it was served (the guard reads usage from
//! refused responses only; a served answer is the client's to account, and
//! the spend cap counts it).

use std::fmt;
use std::str::FromStr;

use http::{HeaderMap, HeaderValue};
use refusal_guard::refusal::{Provider, WireApi};
use serde_json::{json, Map, Value};

/// The `anthropic-version` the Messages API requires on every request.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The wire APIs a prompt can be sent as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Api {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Chat Completions.
    OpenAi,
    /// OpenAI Responses.
    OpenAiResponses,
    /// Gemini `generateContent` (`streamGenerateContent?alt=sse` streamed).
    Gemini,
}

impl Api {
    /// The name a `--send` and a prompt line's `api` use.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::OpenAi => "openai",
            Api::OpenAiResponses => "openai-responses",
            Api::Gemini => "gemini",
        }
    }

    pub(crate) fn wire_api(self) -> WireApi {
        match self {
            Api::Anthropic => WireApi::AnthropicMessages,
            Api::OpenAi => WireApi::OpenAiChatCompletions,
            Api::OpenAiResponses => WireApi::OpenAiResponses,
            Api::Gemini => WireApi::GeminiGenerateContent,
        }
    }

    pub(crate) fn provider(self) -> Provider {
        self.wire_api().provider()
    }

    /// The request's path (and query).
    pub(crate) fn path(self, model: &str, stream: bool) -> String {
        match (self, stream) {
            (Api::Anthropic, _) => "/v1/messages".to_owned(),
            (Api::OpenAi, _) => "/v1/chat/completions".to_owned(),
            (Api::OpenAiResponses, _) => "/v1/responses".to_owned(),
            (Api::Gemini, true) => format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            (Api::Gemini, false) => format!("/v1beta/models/{model}:generateContent"),
        }
    }

    /// A request asking `model` one user turn, `text`.
    pub(crate) fn request(self, model: &str, text: &str, stream: bool, max_tokens: u32) -> Value {
        match self {
            Api::Anthropic => json!({"model": model, "max_tokens": max_tokens, "stream": stream,
                "messages": [{"role": "user", "content": text}]}),
            Api::OpenAi => {
                let mut body = json!({"model": model, "max_completion_tokens": max_tokens,
                    "stream": stream, "messages": [{"role": "user", "content": text}]});
                if stream {
                    // Usage comes in a stream's last chunk only when asked for.
                    body["stream_options"] = json!({"include_usage": true});
                }
                body
            }
            Api::OpenAiResponses => json!({"model": model, "max_output_tokens": max_tokens,
                "stream": stream, "input": text}),
            Api::Gemini => json!({"contents": [{"role": "user", "parts": [{"text": text}]}],
                "generationConfig": {"maxOutputTokens": max_tokens}}),
        }
    }

    /// Whether a body of this API asks for a stream (Gemini: none of its
    /// body's business; a prompt line's Gemini body is sent unstreamed).
    pub(crate) fn streams(self, body: &Map<String, Value>) -> bool {
        match self {
            Api::Gemini => false,
            _ => body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        }
    }

    /// What a prompt line's body must hold for this API to take it at all;
    /// the rest is the provider's to judge.
    pub(crate) fn check_body(self, body: &Map<String, Value>) -> Result<(), String> {
        let (field, array) = match self {
            Api::Anthropic | Api::OpenAi => ("messages", true),
            Api::OpenAiResponses => ("input", false),
            Api::Gemini => ("contents", true),
        };
        match body.get(field) {
            Some(Value::Array(items)) if !items.is_empty() => Ok(()),
            Some(Value::String(_)) if !array => Ok(()),
            _ => Err(format!("a {self} `body` needs a non-empty `{field}`")),
        }
    }

    /// The first text of a body's first turn: what the simulated providers
    /// name a conversation's prompt by.
    pub(crate) fn first_user_text(self, body: &Map<String, Value>) -> Option<String> {
        let first = match self {
            Api::Anthropic | Api::OpenAi => body.get("messages")?.get(0)?.get("content")?,
            Api::OpenAiResponses => match body.get("input")? {
                text @ Value::String(_) => text,
                items => items.get(0)?.get("content")?,
            },
            Api::Gemini => body.get("contents")?.get(0)?.get("parts")?,
        };
        Some(text_of(first))
    }

    /// Puts the client's `key` where this API takes it, with the headers
    /// every request of it carries.
    pub(crate) fn credentials(self, headers: &mut HeaderMap, key: &str) -> Result<(), String> {
        let value = |v: String| {
            HeaderValue::from_str(&v).map_err(|_| format!("the {self} key is not a header value"))
        };
        let mut sensitive = match self {
            Api::Anthropic => {
                headers.insert(
                    "anthropic-version",
                    HeaderValue::from_static(ANTHROPIC_VERSION),
                );
                ("x-api-key", value(key.to_owned())?)
            }
            Api::OpenAi | Api::OpenAiResponses => {
                ("authorization", value(format!("Bearer {key}"))?)
            }
            Api::Gemini => ("x-goog-api-key", value(key.to_owned())?),
        };
        sensitive.1.set_sensitive(true);
        headers.insert(sensitive.0, sensitive.1);
        Ok(())
    }

    /// The tokens an answer of this API reports (input and output, cache
    /// reads included), read from a whole JSON body or from each event of a
    /// stream; `None` when it reports none.
    pub(crate) fn reported_tokens(self, body: &[u8]) -> Option<u64> {
        let mut seen = Tokens::default();
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Array(chunks)) => chunks.iter().for_each(|c| seen.merge(self.tokens_in(c))),
            Ok(whole) => seen.merge(self.tokens_in(&whole)),
            Err(_) => {
                for line in body.split(|b| *b == b'\n') {
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    let Some(data) = line.strip_prefix(b"data:") else {
                        continue;
                    };
                    if let Ok(event) = serde_json::from_slice::<Value>(data.trim_ascii_start()) {
                        seen.merge(self.tokens_in(&event));
                    }
                }
            }
        }
        seen.total()
    }

    /// The usage one JSON value (a body, or an event) carries. Counts are
    /// cumulative in every API's stream, so the largest seen is the total.
    fn tokens_in(self, value: &Value) -> Tokens {
        let usage = match self {
            Api::Anthropic => value
                .get("usage")
                .or_else(|| value.get("message")?.get("usage")),
            Api::OpenAi => value.get("usage"),
            Api::OpenAiResponses => value
                .get("usage")
                .or_else(|| value.get("response")?.get("usage")),
            Api::Gemini => value.get("usageMetadata"),
        };
        let Some(usage) = usage.filter(|u| u.is_object()) else {
            return Tokens::default();
        };
        let count = |key: &str| usage.get(key).and_then(Value::as_u64);
        let sum = |keys: &[&str]| keys.iter().filter_map(|k| count(k)).reduce(|a, b| a + b);
        match self {
            Api::Anthropic => Tokens {
                input: sum(&[
                    "input_tokens",
                    "cache_read_input_tokens",
                    "cache_creation_input_tokens",
                ]),
                output: count("output_tokens"),
            },
            Api::OpenAi => Tokens {
                input: count("prompt_tokens"),
                output: count("completion_tokens"),
            },
            Api::OpenAiResponses => Tokens {
                input: count("input_tokens"),
                output: count("output_tokens"),
            },
            Api::Gemini => Tokens {
                input: count("promptTokenCount"),
                output: sum(&["candidatesTokenCount", "thoughtsTokenCount"]),
            },
        }
    }
}

/// Input and output tokens, each the largest count seen.
#[derive(Debug, Default, Clone, Copy)]
struct Tokens {
    input: Option<u64>,
    output: Option<u64>,
}

impl Tokens {
    fn merge(&mut self, other: Tokens) {
        self.input = self.input.max(other.input);
        self.output = self.output.max(other.output);
    }

    fn total(self) -> Option<u64> {
        match (self.input, self.output) {
            (None, None) => None,
            (input, output) => Some(input.unwrap_or(0) + output.unwrap_or(0)),
        }
    }
}

/// A turn's first text: a string, or its first block (or part) with a
/// `text`.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .find_map(|b| b.get("text").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Api {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        [
            Api::Anthropic,
            Api::OpenAi,
            Api::OpenAiResponses,
            Api::Gemini,
        ]
        .into_iter()
        .find(|api| api.as_str() == name.trim())
        .ok_or_else(|| {
            format!("unknown API `{name}`: expected anthropic, openai, openai-responses or gemini")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_from_whole_bodies_and_streams() {
        let anthropic = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":24}}\n\n"
        );
        assert_eq!(
            Api::Anthropic.reported_tokens(anthropic.as_bytes()),
            Some(36)
        );
        let chat = br#"{"usage":{"prompt_tokens":12,"completion_tokens":24,"total_tokens":36}}"#;
        assert_eq!(Api::OpenAi.reported_tokens(chat), Some(36));
        let chat_stream = b"data: {\"choices\":[]}\n\ndata: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}\n\ndata: [DONE]\n\n";
        assert_eq!(Api::OpenAi.reported_tokens(chat_stream), Some(11));
        let gemini = br#"[{"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":3}},{"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":24}}]"#;
        assert_eq!(Api::Gemini.reported_tokens(gemini), Some(36));
        let responses = b"event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":2,\"output_tokens\":3}}}\r\n\r\n";
        assert_eq!(Api::OpenAiResponses.reported_tokens(responses), Some(5));
        assert_eq!(Api::OpenAi.reported_tokens(b"{}"), None);
    }

    #[test]
    fn requests_and_credentials_per_api() {
        let body = Api::OpenAi.request("gpt-5", "hi", true, 64);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(
            Api::Gemini.path("gemini-2.5-pro", true),
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        let mut headers = HeaderMap::new();
        Api::Anthropic.credentials(&mut headers, "sk-ant").unwrap();
        assert!(headers["x-api-key"].is_sensitive());
        assert_eq!(headers["anthropic-version"], ANTHROPIC_VERSION);
        let body = Api::Gemini.request("g", "hello", false, 8);
        let text = Api::Gemini.first_user_text(body.as_object().unwrap());
        assert_eq!(text.as_deref(), Some("hello"));
        assert!("claude".parse::<Api>().is_err());
    }
}
