//! The four wire APIs as a client sees them: a request of each (streamed or
//! not), and what a client reads out of a response (the text and how it
//! stopped), whether the body is a JSON object, a Gemini array or a stream.

use refusal_guard::refusal::WireApi;
use serde_json::{json, Value};

/// The four wire APIs the simulator serves.
pub const APIS: [WireApi; 4] = [
    WireApi::AnthropicMessages,
    WireApi::OpenAiChatCompletions,
    WireApi::OpenAiResponses,
    WireApi::GeminiGenerateContent,
];

/// The path and body of a request to `model` with one user message,
/// `prompt`, as each API's client writes it.
pub fn request(api: WireApi, model: &str, prompt: &str, stream: bool) -> (String, Value) {
    match api {
        WireApi::AnthropicMessages => (
            "/v1/messages".to_owned(),
            json!({"model": model, "max_tokens": 256, "stream": stream,
                "messages": [{"role": "user", "content": prompt}]}),
        ),
        WireApi::OpenAiChatCompletions => (
            "/v1/chat/completions".to_owned(),
            json!({"model": model, "stream": stream,
                "messages": [{"role": "user", "content": prompt}]}),
        ),
        WireApi::OpenAiResponses => (
            "/v1/responses".to_owned(),
            json!({"model": model, "stream": stream, "input": prompt}),
        ),
        _ => {
            let method = if stream {
                "streamGenerateContent?alt=sse"
            } else {
                "generateContent"
            };
            (
                format!("/v1beta/models/{model}:{method}"),
                json!({"contents": [{"role": "user", "parts": [{"text": prompt}]}]}),
            )
        }
    }
}

/// What a client reads out of a response: its text, and how it stopped
/// (Anthropic's `stop_reason`, Chat Completions' `finish_reason`, the
/// Responses status, Gemini's last `finishReason`, or `blocked:REASON` for
/// a Gemini block); for an error, its code or type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Read {
    pub text: String,
    pub stop: Option<String>,
    pub error: Option<String>,
}

/// Reads `body` (a JSON body, a Gemini array or an SSE stream) of `api`.
pub fn read(api: WireApi, body: &str) -> Read {
    let mut read = Read::default();
    for object in objects(body) {
        if let Some(error) = object.get("error").filter(|e| e.is_object()) {
            let code = error["code"].as_str().or(error["type"].as_str());
            let status = error["status"].as_str();
            read.error = code.or(status).map(str::to_owned);
            continue;
        }
        match api {
            WireApi::AnthropicMessages => anthropic(&object, &mut read),
            WireApi::OpenAiChatCompletions => chat(&object, &mut read),
            WireApi::OpenAiResponses => responses(&object, &mut read),
            _ => gemini(&object, &mut read),
        }
    }
    read
}

/// The JSON objects of a body: its `data:` payloads, else the elements of
/// an array, else the body itself.
fn objects(body: &str) -> Vec<Value> {
    let data: Vec<Value> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| serde_json::from_str(data).ok())
        .collect();
    if !data.is_empty() {
        return data;
    }
    match serde_json::from_str(body) {
        Ok(Value::Array(items)) => items,
        Ok(value) => vec![value],
        Err(_) => Vec::new(),
    }
}

fn anthropic(object: &Value, read: &mut Read) {
    match object["type"].as_str() {
        Some("message") => {
            for block in object["content"].as_array().into_iter().flatten() {
                read.text.push_str(block["text"].as_str().unwrap_or(""));
            }
            read.stop = object["stop_reason"].as_str().map(str::to_owned);
        }
        Some("content_block_delta") => {
            read.text
                .push_str(object["delta"]["text"].as_str().unwrap_or(""));
        }
        Some("message_delta") => {
            read.stop = object["delta"]["stop_reason"].as_str().map(str::to_owned);
        }
        _ => {}
    }
}

fn chat(object: &Value, read: &mut Read) {
    for choice in object["choices"].as_array().into_iter().flatten() {
        let content = choice["delta"]["content"]
            .as_str()
            .or(choice["message"]["content"].as_str());
        read.text.push_str(content.unwrap_or(""));
        if let Some(finish) = choice["finish_reason"].as_str() {
            read.stop = Some(finish.to_owned());
        }
    }
}

fn responses(object: &Value, read: &mut Read) {
    if object["type"] == "response.output_text.delta" {
        read.text.push_str(object["delta"].as_str().unwrap_or(""));
    }
    let response = match object["type"].as_str() {
        Some("response.completed" | "response.incomplete" | "response.failed") => {
            &object["response"]
        }
        None if object["object"] == "response" => {
            for item in object["output"].as_array().into_iter().flatten() {
                for part in item["content"].as_array().into_iter().flatten() {
                    read.text.push_str(part["text"].as_str().unwrap_or(""));
                }
            }
            object
        }
        _ => return,
    };
    read.stop = response["status"].as_str().map(str::to_owned);
}

fn gemini(object: &Value, read: &mut Read) {
    if let Some(reason) = object["promptFeedback"]["blockReason"].as_str() {
        read.stop = Some(format!("blocked:{reason}"));
    }
    for candidate in object["candidates"].as_array().into_iter().flatten() {
        for part in candidate["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            read.text.push_str(part["text"].as_str().unwrap_or(""));
        }
        if let Some(finish) = candidate["finishReason"].as_str() {
            read.stop = Some(finish.to_owned());
        }
    }
}
