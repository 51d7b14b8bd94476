//! OpenAI Responses: a `response` object, or its named events; the
//! error-shaped refusal is the API's 400 policy error.

use bytes::Bytes;
use http::Response;
use serde_json::{json, Value};

use super::{event, pieces, policy_error, Said, SimulatedBody};

/// The `response` object: `completed`, or `incomplete` by the content
/// filter (with the text sent before it, if any). `status` overrides the
/// status (`in_progress` for the stream's opening event).
pub(super) fn response(said: &Said<'_>, status: Option<&str>) -> Value {
    let (done, details) = if said.refused() {
        ("incomplete", json!({"reason": "content_filter"}))
    } else {
        ("completed", Value::Null)
    };
    let output = if said.text.is_empty() {
        json!([])
    } else {
        json!([message(done, said.text)])
    };
    json!({"id":"resp_simulated","object":"response","created_at":0,
        "status":status.unwrap_or(done),"error":null,"incomplete_details":details,
        "model":said.model,"output":output,
        // The Responses API's usage always details both counts (and the
        // OpenAI SDKs' types require them).
        "usage":{"input_tokens":said.input_tokens,"input_tokens_details":{"cached_tokens":0},
            "output_tokens":said.output_tokens,"output_tokens_details":{"reasoning_tokens":0},
            "total_tokens":said.input_tokens + said.output_tokens}})
}

fn message(status: &str, text: &str) -> Value {
    json!({"id":"msg_simulated","type":"message","status":status,"role":"assistant",
        "content":[{"type":"output_text","text":text,"annotations":[]}]})
}

/// The text's events: the item and its part added, the deltas, the part
/// and the item done.
fn text_events(said: &Said<'_>, done: &str) -> Vec<Value> {
    let mut item = message("in_progress", "");
    item["content"] = json!([]);
    let at = |mut event: Value| {
        event["item_id"] = json!("msg_simulated");
        event["output_index"] = json!(0);
        event["content_index"] = json!(0);
        event
    };
    let mut events = vec![
        json!({"type":"response.output_item.added","output_index":0,"item":item}),
        at(json!({"type":"response.content_part.added",
            "part":{"type":"output_text","text":"","annotations":[]}})),
    ];
    for piece in pieces(said.text) {
        events.push(at(
            json!({"type":"response.output_text.delta","delta":piece}),
        ));
    }
    events.push(at(
        json!({"type":"response.output_text.done","text":said.text}),
    ));
    events.push(at(json!({"type":"response.content_part.done",
        "part":{"type":"output_text","text":said.text,"annotations":[]}})));
    events.push(json!({"type":"response.output_item.done","output_index":0,
        "item":message(done, said.text)}));
    events
}

/// The stream: `response.created`, the text's events if any, then
/// `response.completed` or `response.incomplete`.
pub(super) fn stream(said: &Said<'_>) -> Vec<Bytes> {
    let mut started = response(said, Some("in_progress"));
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    started["incomplete_details"] = Value::Null;
    let mut events = vec![json!({"type":"response.created","response":started})];
    let (done, last) = if said.refused() {
        ("incomplete", "response.incomplete")
    } else {
        ("completed", "response.completed")
    };
    if !said.text.is_empty() {
        events.extend(text_events(said, done));
    }
    events.push(json!({"type":last,"response":response(said, None)}));
    events
        .into_iter()
        .enumerate()
        .map(|(n, mut data)| {
            data["sequence_number"] = json!(n);
            let name = data["type"].as_str().unwrap_or("message").to_owned();
            event(&name, &data)
        })
        .collect()
}

/// The policy error: HTTP 400, `error.code` the reply's code, else
/// `cyber_policy` for `cyber`, `bio_policy` for `bio`, `invalid_prompt`
/// for any other category (the Responses error codes).
pub(super) fn blocked(said: &Said<'_>) -> Response<SimulatedBody> {
    let code = said.code.unwrap_or(match said.category {
        "cyber" => "cyber_policy",
        "bio" => "bio_policy",
        _ => "invalid_prompt",
    });
    policy_error(said, code)
}
