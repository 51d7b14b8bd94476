//! Gemini `generateContent`: the answer whole, in chunks (`alt=sse`, or one
//! JSON array); a refusal stops with `finishReason: "SAFETY"`, the
//! error-shaped one blocks the prompt (`promptFeedback.blockReason`).

use bytes::Bytes;
use serde_json::{json, Value};

use super::Said;
use crate::script::ReplyKind;

/// The ratings a block carries: dangerous content, probability high.
fn ratings() -> Value {
    json!([{"category":"HARM_CATEGORY_DANGEROUS_CONTENT","probability":"HIGH","blocked":true}])
}

fn usage(said: &Said<'_>) -> Value {
    json!({"promptTokenCount":said.input_tokens,"candidatesTokenCount":said.output_tokens,
        "totalTokenCount":said.input_tokens + said.output_tokens})
}

fn chunk(said: &Said<'_>, candidate: Value) -> Value {
    json!({"candidates":[candidate],"modelVersion":said.model,"usageMetadata":usage(said)})
}

/// The blocked prompt: feedback and no candidates.
fn blocked(said: &Said<'_>) -> Value {
    json!({"promptFeedback":{"blockReason":said.code.unwrap_or("SAFETY"),
            "safetyRatings":ratings()},
        "modelVersion":said.model,"usageMetadata":usage(said)})
}

/// The chunks of the answer: the text a sentence at a time, the last
/// ending with `STOP`; or, refused, after the text (if any) a chunk with
/// no content ending with `SAFETY`.
pub(super) fn chunks(said: &Said<'_>) -> Vec<Value> {
    if said.kind == ReplyKind::Blocked {
        return vec![blocked(said)];
    }
    let mut chunks: Vec<Value> = said
        .text
        .split_inclusive(". ")
        .map(|piece| {
            chunk(
                said,
                json!({"content":{"role":"model","parts":[{"text":piece}]},"index":0}),
            )
        })
        .collect();
    if said.refused() {
        chunks.push(chunk(
            said,
            json!({"finishReason":"SAFETY","index":0,"safetyRatings":ratings()}),
        ));
    } else if let Some(last) = chunks.last_mut() {
        last["candidates"][0]["finishReason"] = json!("STOP");
    } else {
        chunks.push(chunk(said, json!({"finishReason":"STOP","index":0})));
    }
    chunks
}

/// The whole `generateContent` answer.
pub(super) fn whole(said: &Said<'_>) -> Value {
    if said.kind == ReplyKind::Blocked {
        return blocked(said);
    }
    let mut candidate = json!({"index":0,"finishReason":"STOP"});
    if !said.text.is_empty() {
        candidate["content"] = json!({"role":"model","parts":[{"text":said.text}]});
    }
    if said.refused() {
        candidate["finishReason"] = json!("SAFETY");
        candidate["safetyRatings"] = ratings();
    }
    chunk(said, candidate)
}

/// The `alt=sse` stream: each chunk a `data:` event.
pub(super) fn stream(said: &Said<'_>) -> Vec<Bytes> {
    chunks(said)
        .into_iter()
        .map(|chunk| Bytes::from(format!("data: {chunk}\r\n\r\n")))
        .collect()
}
