//! Reading a request: which wire API it speaks (from its path), and what
//! the script needs of its body (model, stream, prompt, conversation).

use serde_json::Value;
use sha2::{Digest, Sha256};

use refusal_guard::refusal::WireApi;

/// The wire API a request speaks, told from its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wire {
    Anthropic,
    /// Anthropic's token counting, answered without a conversation.
    AnthropicCountTokens,
    OpenAiChat,
    OpenAiResponses,
    /// The model is in the path. `sse` for `streamGenerateContent?alt=sse`,
    /// `array` for `streamGenerateContent` without it (one JSON array).
    Gemini {
        model: String,
        sse: bool,
        array: bool,
    },
}

impl Wire {
    pub(crate) fn recognise(uri: &http::Uri) -> Option<Wire> {
        let path = uri.path().trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            return Some(Wire::OpenAiChat);
        }
        if path.ends_with("/responses") {
            return Some(Wire::OpenAiResponses);
        }
        if path.ends_with("/messages") {
            return Some(Wire::Anthropic);
        }
        if path.ends_with("/messages/count_tokens") {
            return Some(Wire::AnthropicCountTokens);
        }
        let last = path.rsplit('/').next()?;
        let (model, method) = last.split_once(':')?;
        let streaming = match method {
            "generateContent" => false,
            "streamGenerateContent" => true,
            _ => return None,
        };
        let sse = streaming
            && uri
                .query()
                .is_some_and(|q| q.split('&').any(|p| p.eq_ignore_ascii_case("alt=sse")));
        Some(Wire::Gemini {
            model: model.to_owned(),
            sse,
            array: streaming && !sse,
        })
    }

    pub(crate) fn api(&self) -> WireApi {
        match self {
            Wire::Anthropic | Wire::AnthropicCountTokens => WireApi::AnthropicMessages,
            Wire::OpenAiChat => WireApi::OpenAiChatCompletions,
            Wire::OpenAiResponses => WireApi::OpenAiResponses,
            Wire::Gemini { .. } => WireApi::GeminiGenerateContent,
        }
    }
}

/// What the script and the replies need of one request's body.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    pub(crate) wire: Wire,
    pub(crate) model: String,
    /// Whether the answer is a stream (an SSE stream, or Gemini's array).
    pub(crate) stream: bool,
    /// Chat Completions: `stream_options.include_usage`.
    pub(crate) include_usage: bool,
    /// The first user message's first text.
    pub(crate) prompt: String,
    /// The conversation: the API, the system prompt and the prompt.
    pub(crate) conversation: [u8; 32],
    /// A rough count of the request's input tokens.
    pub(crate) input_tokens: u64,
}

impl Turn {
    pub(crate) fn read(wire: Wire, request: &Value) -> Turn {
        let model = match &wire {
            Wire::Gemini { model, .. } => model.clone(),
            _ => request["model"]
                .as_str()
                .unwrap_or("simulated-model")
                .to_owned(),
        };
        let stream = match &wire {
            Wire::Gemini { sse, array, .. } => *sse || *array,
            _ => request["stream"].as_bool().unwrap_or(false),
        };
        let prompt = prompt(request).unwrap_or_default();
        Turn {
            conversation: conversation_key(wire.api(), request, &prompt),
            include_usage: request["stream_options"]["include_usage"]
                .as_bool()
                .unwrap_or(false),
            input_tokens: rough_token_count(request),
            wire,
            model,
            stream,
            prompt,
        }
    }
}

/// A plausible `input_tokens` for a request: a token for every four bytes
/// of its system prompt, messages (or input, or contents) and tools as
/// JSON, at least one.
pub(crate) fn rough_token_count(request: &Value) -> u64 {
    let bytes: usize = [
        "system",
        "instructions",
        "systemInstruction",
        "system_instruction",
        "messages",
        "input",
        "contents",
        "tools",
    ]
    .iter()
    .filter_map(|key| request.get(*key))
    .map(|value| value.to_string().len())
    .sum();
    (bytes as u64).div_ceil(4).max(1)
}

/// The system prompt and the first user message: the same for every
/// attempt of a conversation, whatever the guard appends (in each API's
/// fields).
fn conversation_key(api: WireApi, request: &Value, prompt: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    // Each provider meets a conversation afresh.
    let mut part = |text: &str| {
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    };
    part(api.as_str());
    for system in [
        "system",
        "instructions",
        "systemInstruction",
        "system_instruction",
    ] {
        part(
            &request
                .get(system)
                .map(Value::to_string)
                .unwrap_or_default(),
        );
    }
    part(prompt);
    hasher.finalize().into()
}

/// The prompt: the first user message's first text, whether its content is
/// a string or blocks (the guard may turn a string into blocks to append
/// its note), a Responses `input` string, or a Gemini content's parts.
fn prompt(request: &Value) -> Option<String> {
    if let Some(Value::String(input)) = request.get("input") {
        return Some(input.clone());
    }
    let messages = ["messages", "contents", "input"]
        .iter()
        .find_map(|key| request.get(*key)?.as_array())?;
    let first_user = messages.iter().find(|message| {
        message
            .get("role")
            .and_then(Value::as_str)
            .map_or(true, |role| role == "user")
    })?;
    Some(first_text(first_user))
}

/// The first text of a message, whatever shape its content has.
fn first_text(message: &Value) -> String {
    let blocks = match (&message["content"], &message["parts"]) {
        (Value::String(text), _) => return text.clone(),
        (Value::Array(blocks), _) | (_, Value::Array(blocks)) => blocks,
        (other, _) => return other.to_string(),
    };
    blocks
        .iter()
        .find_map(|b| b["text"].as_str())
        .unwrap_or("")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_prompt_is_the_first_user_text_of_every_api() {
        let chat = json!({"messages": [{"role": "system", "content": "s"},
            {"role": "user", "content": "p"}, {"role": "user", "content": "note"}]});
        assert_eq!(prompt(&chat).as_deref(), Some("p"));
        let blocks = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "p"}, {"type": "text", "text": "note"}]}]});
        assert_eq!(prompt(&blocks).as_deref(), Some("p"));
        let gemini = json!({"contents": [{"parts": [{"text": "p"}]}]});
        assert_eq!(prompt(&gemini).as_deref(), Some("p"));
        let responses = json!({"input": [{"role": "user",
            "content": [{"type": "input_text", "text": "p"}]}]});
        assert_eq!(prompt(&responses).as_deref(), Some("p"));
        assert_eq!(prompt(&json!({"input": "p"})).as_deref(), Some("p"));
    }

    #[test]
    fn the_rescue_note_keeps_the_conversation() {
        let api = WireApi::AnthropicMessages;
        let first = json!({"messages": [{"role": "user", "content": "p"}]});
        let rescue = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "p"}, {"type": "text", "text": "note"}]}]});
        let other = json!({"system": "s", "messages": [{"role": "user", "content": "p"}]});
        let key = |body: &Value| conversation_key(api, body, &prompt(body).unwrap());
        assert_eq!(key(&first), key(&rescue));
        assert_ne!(key(&first), key(&other));
    }
}
