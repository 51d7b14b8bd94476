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

/// The `fallback` blocks of a server-side fallback that served: one a hop,
/// the last naming the model that served.
fn fallback_blocks(said: &Said<'_>) -> Vec<Value> {
    let Some(handoff) = said.handoff else {
        return Vec::new();
    };
    let next = handoff.refused.iter().skip(1).chain([&handoff.served]);
    handoff
        .refused
        .iter()
        .zip(next)
        .map(|(from, to)| {
            json!({"type":"fallback","from":{"model":from},"to":{"model":to},
                "trigger":{"type":"refusal","category":handoff.category}})
        })
        .collect()
}

/// The usage: the serving attempt's, and, after a server-side fallback,
/// one iteration an attempt (`message` for those that refused,
/// `fallback_message` for the one that served).
fn usage(said: &Said<'_>) -> Value {
    let mut usage = json!({"input_tokens":said.input_tokens,"output_tokens":said.output_tokens});
    if let Some(handoff) = said.handoff {
        let mut iterations: Vec<Value> = handoff
            .refused
            .iter()
            .map(|model| {
                json!({"type":"message","model":model,"input_tokens":said.input_tokens,
                    "output_tokens":0})
            })
            .collect();
        iterations.push(json!({"type":"fallback_message","model":handoff.served,
            "input_tokens":said.input_tokens,"output_tokens":said.output_tokens}));
        usage["iterations"] = Value::Array(iterations);
    }
    usage
}

/// The whole message (named for the model that served it).
pub(super) fn message(said: &Said<'_>) -> Value {
    let mut content = fallback_blocks(said);
    if !said.text.is_empty() {
        content.push(json!({"type":"text","text":said.text}));
    }
    let model = said.handoff.map_or(said.model, |h| h.served.as_str());
    let mut message = json!({"id":"msg_simulated","type":"message","role":"assistant",
        "model":model,"content":content,"stop_reason":stop_reason(said),
        "stop_sequence":null,"usage":usage(said)});
    if said.refused() {
        message["stop_details"] = stop_details(said);
    }
    message
}

/// The event stream: `message_start` (naming the model asked for), the
/// `fallback` blocks of a server-side fallback, the text block if any, the
/// `message_delta` with the stop reason (and the iterations after a
/// fallback), `message_stop`.
pub(super) fn stream(said: &Said<'_>) -> Vec<Bytes> {
    let mut chunks = vec![event(
        "message_start",
        &json!({"type":"message_start","message":{"id":"msg_simulated","type":"message",
            "role":"assistant","content":[],"model":said.model,"stop_reason":null,
            "stop_sequence":null,"usage":{"input_tokens":said.input_tokens,"output_tokens":1}}}),
    )];
    let blocks = fallback_blocks(said);
    let text_index = blocks.len();
    for (index, block) in blocks.into_iter().enumerate() {
        chunks.push(event(
            "content_block_start",
            &json!({"type":"content_block_start","index":index,"content_block":block}),
        ));
        chunks.push(event(
            "content_block_stop",
            &json!({"type":"content_block_stop","index":index}),
        ));
    }
    if !said.text.is_empty() {
        chunks.push(event(
            "content_block_start",
            &json!({"type":"content_block_start","index":text_index,
                "content_block":{"type":"text","text":""}}),
        ));
        for piece in pieces(said.text) {
            chunks.push(event(
                "content_block_delta",
                &json!({"type":"content_block_delta","index":text_index,
                    "delta":{"type":"text_delta","text":piece}}),
            ));
        }
        chunks.push(event(
            "content_block_stop",
            &json!({"type":"content_block_stop","index":text_index}),
        ));
    }
    let mut delta = json!({"stop_reason":stop_reason(said),"stop_sequence":null});
    if said.refused() {
        delta["stop_details"] = stop_details(said);
    }
    let mut usage = usage(said);
    if said.handoff.is_none() {
        usage = json!({"output_tokens":said.output_tokens});
    }
    chunks.push(event(
        "message_delta",
        &json!({"type":"message_delta","delta":delta,"usage":usage}),
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
