//! The Anthropic Messages requests the tests send.

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use serde_json::Value;

/// A Messages request body.
pub fn messages_request(model: &str, stream: bool, user: &str) -> Value {
    serde_json::json!({
        "model": model,
        "max_tokens": 1024,
        "stream": stream,
        "system": "You are a security assistant.",
        "messages": [{"role": "user", "content": user}],
    })
}

/// The text of the last content part of a Messages request body's last
/// message, asserted to be the user's: where a rescue puts its note.
pub fn last_user_text(body: &Value) -> String {
    let last = body["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "user");
    last["content"].as_array().unwrap().last().unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A POST of this JSON body to this path of the Anthropic API.
pub fn post(path: &str, body: &Value) -> Request<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap();
    Request::post(format!("https://api.anthropic.com{path}"))
        .header("content-type", "application/json")
        .header("content-length", bytes.len())
        .header("x-api-key", "sk-test")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap()
}

/// A Messages request (`POST /v1/messages`).
pub fn messages(model: &str, stream: bool, user: &str) -> Request<Full<Bytes>> {
    post("/v1/messages", &messages_request(model, stream, user))
}
