//! Anthropic Messages: a message, or its event stream; the error-shaped
//! refusal is the API's 400 "Output blocked by content filtering policy".

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::{event, json_with, pieces, Said, SimulatedBody};
use crate::script::OUTPUT_BLOCKED;

fn stop_reason(said: &Said<'_>) -> &'static str {
    if said.refused() {
        "refusal"
    } else {
        "end_turn"
    }
}

fn stop_details(said: &Said<'_>) -> Value {
    if said.refused() {
        json!({"type":"refusal","category":said.category,"explanation":said.explanation})
    } else {
        Value::Null
    }
}

/// The whole message.
pub(super) fn message(said: &Said<'_>) -> Value {
    let content = if said.text.is_empty() {
        json!([])
    } else {
        json!([{"type":"text","text":said.text}])
    };
    let mut message = json!({"id":"msg_simulated","type":"message","role":"assistant",
        "model":said.model,"content":content,"stop_reason":stop_reason(said),
        "stop_sequence":null,
        "usage":{"input_tokens":said.input_tokens,"output_tokens":said.output_tokens}});
    if said.refused() {
        message["stop_details"] = stop_details(said);
    }
    message
}

/// The event stream: `message_start`, the text block if any, the
/// `message_delta` with the stop reason, `message_stop`.
pub(super) fn stream(said: &Said<'_>) -> Vec<Bytes> {
    let mut chunks = vec![event(
        "message_start",
        &json!({"type":"message_start","message":{"id":"msg_simulated","type":"message",
            "role":"assistant","content":[],"model":said.model,"stop_reason":null,
            "stop_sequence":null,"usage":{"input_tokens":said.input_tokens,"output_tokens":1}}}),
    )];
    if !said.text.is_empty() {
        chunks.push(event(
            "content_block_start",
            &json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ));
        for piece in pieces(said.text) {
            chunks.push(event(
                "content_block_delta",
                &json!({"type":"content_block_delta","index":0,
                    "delta":{"type":"text_delta","text":piece}}),
            ));
        }
        chunks.push(event(
            "content_block_stop",
            &json!({"type":"content_block_stop","index":0}),
        ));
    }
    let mut delta = json!({"stop_reason":stop_reason(said),"stop_sequence":null});
    if said.refused() {
        delta["stop_details"] = stop_details(said);
    }
    chunks.push(event(
        "message_delta",
        &json!({"type":"message_delta","delta":delta,
            "usage":{"output_tokens":said.output_tokens}}),
    ));
    chunks.push(event("message_stop", &json!({"type":"message_stop"})));
    chunks
}

/// The filter's block as the API sends it: HTTP 400, `invalid_request_error`.
pub(super) fn blocked(_said: &Said<'_>) -> Response<SimulatedBody> {
    json_with(
        StatusCode::BAD_REQUEST,
        &json!({"type":"error","error":{"type":"invalid_request_error","message":OUTPUT_BLOCKED},
            "request_id":"req_simulated"}),
    )
}
