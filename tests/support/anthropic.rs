//! Anthropic Messages stream builders.

use bytes::Bytes;
use serde_json::Value;

/// Builds an Anthropic stream from event payloads (each names its `type`).
pub fn anthropic_stream(events: &[Value]) -> Bytes {
    let mut out = String::new();
    for event in events {
        let kind = event["type"].as_str().unwrap_or("unknown");
        out.push_str(&format!("event: {kind}\ndata: {event}\n\n"));
    }
    Bytes::from(out)
}

/// The JSON payload of each frame's `data:` line of an SSE body: the
/// events a stream carried, back in the shape [`anthropic_stream`] takes.
pub fn stream_events(body: &[u8]) -> Vec<Value> {
    std::str::from_utf8(body)
        .unwrap()
        .split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

pub mod events {
    use serde_json::{json, Value};

    pub fn message_start(model: &str) -> Value {
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":model,"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}})
    }
    pub fn block_start(index: u64, block: Value) -> Value {
        json!({"type":"content_block_start","index":index,"content_block":block})
    }
    pub fn text_delta(index: u64, text: &str) -> Value {
        json!({"type":"content_block_delta","index":index,"delta":{"type":"text_delta","text":text}})
    }
    pub fn thinking_delta(index: u64, text: &str) -> Value {
        json!({"type":"content_block_delta","index":index,"delta":{"type":"thinking_delta","thinking":text}})
    }
    pub fn block_stop(index: u64) -> Value {
        json!({"type":"content_block_stop","index":index})
    }
    pub fn stop(reason: &str) -> Value {
        json!({"type":"message_delta","delta":{"stop_reason":reason,"stop_sequence":null},"usage":{"output_tokens":5}})
    }
    pub fn refusal(category: Option<&str>, explanation: Option<&str>) -> Value {
        json!({"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null,"stop_details":{"type":"refusal","category":category,"explanation":explanation}},"usage":{"output_tokens":5}})
    }
    /// A refusal's `message_delta` with a credit token (or none), and what
    /// became of the token the request presented (`usage.fallback_credit`'s
    /// `status`), when given.
    pub fn credited_refusal(token: Option<&str>, credit: Option<Value>) -> Value {
        let mut event = json!({"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null,"stop_details":{"type":"refusal","category":"cyber","explanation":null,"fallback_credit_token":token,"fallback_has_prefill_claim":token.map(|_| false)}},"usage":{"output_tokens":0}});
        if let Some(status) = credit {
            event["usage"]["fallback_credit"] = json!({ "status": status });
        }
        event
    }
    pub fn message_stop() -> Value {
        json!({"type":"message_stop"})
    }
    pub fn ping() -> Value {
        json!({"type":"ping"})
    }

    /// A whole text answer.
    pub fn text_answer(model: &str, text: &str) -> Vec<Value> {
        vec![
            message_start(model),
            block_start(0, json!({"type":"text","text":""})),
            text_delta(0, text),
            block_stop(0),
            stop("end_turn"),
            message_stop(),
        ]
    }

    /// Thinking, then a refusal with no output.
    pub fn think_then_refuse(model: &str, category: &str) -> Vec<Value> {
        vec![
            message_start(model),
            block_start(0, json!({"type":"thinking","thinking":""})),
            thinking_delta(0, "Let me consider this request carefully."),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}),
            block_stop(0),
            ping(),
            refusal(Some(category), Some("Declined under the usage policy.")),
            message_stop(),
        ]
    }
}
