//! The answer's text in one event of a stream, per wire API: what a caller
//! prints as the stream comes. Only text: thinking,
//! tool calls and refusal text are not the answer.

use serde_json::Value;

use crate::refusal::WireApi;

/// The answer text one event's `data` adds, if any.
pub(crate) fn text_delta(wire_api: WireApi, data: &str) -> Option<String> {
    let event: Value = serde_json::from_str(data).ok()?;
    match wire_api {
        // `content_block_delta` with a `text_delta`.
        WireApi::AnthropicMessages => {
            let delta = event.get("delta")?;
            let is_text = event.get("type")?.as_str()? == "content_block_delta"
                && delta.get("type")?.as_str()? == "text_delta";
            is_text.then(|| delta.get("text")?.as_str().map(str::to_owned))?
        }
        // Every choice's `delta.content` (one choice unless `n` asked for more).
        WireApi::OpenAiChatCompletions => joined(
            event
                .get("choices")?
                .as_array()?
                .iter()
                .filter_map(|choice| choice.get("delta")?.get("content")?.as_str()),
        ),
        // `response.output_text.delta`.
        WireApi::OpenAiResponses => (event.get("type")?.as_str()? == "response.output_text.delta")
            .then(|| event.get("delta")?.as_str().map(str::to_owned))?,
        // The first candidate's parts that are text and not thoughts.
        WireApi::GeminiGenerateContent => joined(
            event
                .get("candidates")?
                .get(0)?
                .get("content")?
                .get("parts")?
                .as_array()?
                .iter()
                .filter(|part| part.get("thought").and_then(Value::as_bool) != Some(true))
                .filter_map(|part| part.get("text")?.as_str()),
        ),
        // Bedrock streams are AWS event streams, not SSE.
        _ => None,
    }
}

fn joined<'a>(parts: impl Iterator<Item = &'a str>) -> Option<String> {
    let text: String = parts.collect();
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wire_api_gives_its_text_and_nothing_else() {
        let cases = [
            (
                WireApi::AnthropicMessages,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
                Some("Hi"),
            ),
            (
                WireApi::AnthropicMessages,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
                None,
            ),
            (
                WireApi::OpenAiChatCompletions,
                r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
                Some("Hi"),
            ),
            (
                WireApi::OpenAiChatCompletions,
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
                None,
            ),
            (
                WireApi::OpenAiResponses,
                r#"{"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":"Hi"}"#,
                Some("Hi"),
            ),
            (
                WireApi::OpenAiResponses,
                r#"{"type":"response.refusal.delta","delta":"No"}"#,
                None,
            ),
            (
                WireApi::GeminiGenerateContent,
                r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"plan","thought":true},{"text":"Hi"}]}}]}"#,
                Some("Hi"),
            ),
            (WireApi::GeminiGenerateContent, "[DONE]", None),
        ];
        for (wire_api, data, text) in cases {
            assert_eq!(
                text_delta(wire_api, data).as_deref(),
                text,
                "{wire_api:?} {data}"
            );
        }
    }
}
