//! Golden cases per pair (requests, whole answers, streams), round trips,
//! the translated stream at every split point of its input, and the
//! guard's own dialects judging what the translation wrote.

use bytes::Bytes;
use serde_json::{json, Value};

use super::*;
use crate::dialect::translate::*;
use crate::dialect::{self, Dialect};
use crate::refusal::RefusalSignal;
use crate::refusal::WireApi::{
    AnthropicMessages as Anthropic, GeminiGenerateContent as Gemini, OpenAiChatCompletions as Chat,
};

mod responses;

// ---- helpers ----------------------------------------------------------

fn request(
    from: WireApi,
    to: WireApi,
    body: Value,
    stream: bool,
) -> Result<(String, Value), Untranslatable> {
    let prompt = read_request(from, &body, stream)?;
    write_request(to, &prompt, "target-model")
}

fn reply(from: WireApi, to: WireApi, body: Value) -> Value {
    let bytes = translate_reply(from, to, body.to_string().as_bytes()).unwrap();
    let mut value: Value = serde_json::from_slice(&bytes).unwrap();
    forget_time(&mut value);
    value
}

/// Chat's `created` and a response's `created_at` (also in a Responses
/// event's `response`) are the clock's: tests compare everything else.
fn forget_time(value: &mut Value) {
    if let Some(response) = value.get_mut("response") {
        forget_time(response);
    }
    if let Some(object) = value.as_object_mut() {
        object.remove("created");
        object.remove("created_at");
    }
}

fn sse_of(events: &[(Option<&str>, Value)]) -> Bytes {
    let mut out = BytesMut::new();
    for (name, data) in events {
        sse(&mut out, *name, data);
    }
    Bytes::from(out)
}

/// The translated stream of `input` fed in the given chunks.
/// A streamed Anthropic empty refusal (category `cyber`, explanation
/// "Declined.").
fn anthropic_refusal_stream() -> Bytes {
    sse_of(&[
        (
            Some("message_start"),
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "claude-opus-4-7", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 11, "output_tokens": 1}}}),
        ),
        (
            Some("message_delta"),
            json!({"type": "message_delta", "delta": {"stop_reason": "refusal",
            "stop_details": {"type": "refusal", "category": "cyber", "explanation": "Declined."}},
            "usage": {"output_tokens": 1}}),
        ),
        (Some("message_stop"), json!({"type": "message_stop"})),
    ])
}

fn translate_chunks(from: WireApi, to: WireApi, chunks: &[Bytes]) -> Result<Bytes, Untranslatable> {
    let mut translator = StreamTranslator::new(from, to, true)?;
    let mut out = BytesMut::new();
    for chunk in chunks {
        out.extend_from_slice(&translator.push(chunk.clone())?);
    }
    out.extend_from_slice(&translator.finish()?);
    Ok(out.freeze())
}

/// The translated stream, checked to be the same at every split point of
/// the input (and fed byte by byte).
fn translate_stream(from: WireApi, to: WireApi, input: &Bytes) -> Bytes {
    let whole = translate_chunks(from, to, std::slice::from_ref(input)).unwrap();
    for cut in 1..input.len() {
        let split = split_at(input, &[cut]);
        let translated = translate_chunks(from, to, &split).unwrap();
        assert_eq!(
            normalise(&translated),
            normalise(&whole),
            "split at byte {cut} changed the translation"
        );
    }
    let bytewise: Vec<usize> = (1..input.len()).collect();
    let translated = translate_chunks(from, to, &split_at(input, &bytewise)).unwrap();
    assert_eq!(normalise(&translated), normalise(&whole));
    whole
}

/// A translated stream as (event name, data) pairs, `created` left out.
fn normalise(stream: &Bytes) -> Vec<(Option<String>, Value)> {
    dialect::tests::frames(std::str::from_utf8(stream).unwrap())
        .iter()
        .map(|frame| {
            let data = match frame.data() {
                Some("[DONE]") => json!("[DONE]"),
                Some(data) => {
                    let mut value: Value = serde_json::from_str(data).unwrap();
                    forget_time(&mut value);
                    value
                }
                None => Value::Null,
            };
            (frame.event().map(str::to_owned), data)
        })
        .collect()
}

/// What the guard's dialect for `api` judges in a translated stream: the
/// refusal it finds, and whether it saw real output first.
fn judge_stream(api: &dyn Dialect, stream: &Bytes) -> (bool, Option<dialect::RefusalInfo>) {
    let frames = dialect::tests::frames(std::str::from_utf8(stream).unwrap());
    let seen = dialect::tests::judge_frames(api, &frames);
    let output = seen.iter().any(|s| s.real_output);
    (output, seen.into_iter().find_map(|s| s.refusal))
}

// ---- requests ---------------------------------------------------------

/// A Claude Code style request: system blocks, a tool, a tool call and its
/// result, an image, sampling, thinking (dropped).
fn anthropic_request() -> Value {
    json!({
        "model": "claude-opus-4-7", "max_tokens": 1024, "stream": true,
        "system": [{"type": "text", "text": "You are terse."}],
        "thinking": {"type": "enabled", "budget_tokens": 512},
        "metadata": {"user_id": "u1"},
        "temperature": 0.5, "stop_sequences": ["END"],
        "tools": [{"name": "read_file", "description": "Reads a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture and in a.txt?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.txt"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"},
                {"type": "text", "text": "Go on."}]}
        ]
    })
}

#[test]
fn an_anthropic_request_becomes_a_chat_request() {
    let (path, body) = request(Anthropic, Chat, anthropic_request(), true).unwrap();
    assert_eq!(path, "/v1/chat/completions");
    assert_eq!(
        body,
        json!({
            "model": "target-model",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in this picture and in a.txt?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}}]},
                {"role": "assistant", "content": "Reading it.", "tool_calls": [
                    {"id": "toolu_1", "type": "function",
                     "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}}]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "hello"},
                {"role": "user", "content": [{"type": "text", "text": "Go on."}]}
            ],
            "max_completion_tokens": 1024, "stop": ["END"], "temperature": 0.5,
            "tools": [{"type": "function", "function": {"name": "read_file",
                "description": "Reads a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
            "parallel_tool_calls": false,
            "tool_choice": "auto",
            "stream": true, "stream_options": {"include_usage": true}
        })
    );
}

#[test]
fn a_chat_request_becomes_an_anthropic_request() {
    let chat = json!({
        "model": "gpt-5", "stream": false, "max_completion_tokens": 300, "top_p": 0.9,
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_9", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_9", "content": "sunny"}
        ],
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
        "tool_choice": "required", "stop": "STOP"
    });
    let (path, body) = request(Chat, Anthropic, chat, false).unwrap();
    assert_eq!(path, "/v1/messages");
    assert_eq!(
        body,
        json!({
            "model": "target-model", "max_tokens": 300, "system": "Be brief.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_9", "name": "weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_9", "content": [{"type": "text", "text": "sunny"}]}]}
            ],
            "stop_sequences": ["STOP"], "top_p": 0.9,
            "tools": [{"name": "weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"}
        })
    );
}

#[test]
fn a_chat_request_without_max_tokens_gets_claudes_default() {
    let chat = json!({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]});
    let (_, body) = request(Chat, Anthropic, chat, false).unwrap();
    assert_eq!(body["max_tokens"], json!(anthropic::DEFAULT_MAX_TOKENS));
}

#[test]
fn requests_round_trip_through_the_other_api() {
    // Anthropic -> Chat -> Anthropic keeps everything the shared form
    // carries (thinking and metadata are dropped on the way out).
    let first = read_request(Anthropic, &anthropic_request(), true).unwrap();
    for via in [Chat, Gemini] {
        let (_, written) = write_request(via, &first, "m").unwrap();
        let back = read_request(via, &written, true).unwrap();
        assert_eq!(back.system, first.system, "via {via:?}");
        assert_eq!(back.stop, first.stop);
        assert_eq!(back.temperature, first.temperature);
        assert_eq!(back.max_tokens, first.max_tokens);
        assert_eq!(back.tools, first.tools);
        assert_eq!(back.turns, first.turns, "via {via:?}");
    }
}

#[test]
fn what_a_target_cannot_express_is_named_and_not_sent() {
    let mut document = anthropic_request();
    document["messages"][0]["content"][1] = json!({"type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "x"}});
    let server_tool = {
        let mut body = anthropic_request();
        body["tools"] = json!([{"type": "web_search_20250305", "name": "web_search"}]);
        body
    };
    let unknown = {
        let mut body = anthropic_request();
        body["mcp_servers"] = json!([{"type": "url", "url": "https://x"}]);
        body
    };
    for (body, reason) in [
        (document, "`document` blocks"),
        (server_tool, "server tool `web_search_20250305`"),
        (unknown, "`mcp_servers`"),
    ] {
        let error = request(Anthropic, Chat, body, false).unwrap_err();
        assert!(error.0.contains(reason), "{error} lacks {reason}");
    }
    let chat = |extra: Value| {
        let mut body = json!({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        request(Chat, Anthropic, body, false).unwrap_err().0
    };
    assert!(chat(json!({"n": 2})).contains("`n` above 1"));
    assert!(chat(json!({"audio": {"voice": "alloy"}})).contains("`audio`"));
    assert!(chat(json!({"temperature": 1.5})).contains("temperature from 0 to 1"));
    let audio = json!({"model": "gpt-5", "messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}]}]});
    assert!(request(Chat, Anthropic, audio, false)
        .unwrap_err()
        .0
        .contains("`input_audio`"));
    let many_stops = json!({"model": "claude", "max_tokens": 5, "stop_sequences": ["a", "b", "c", "d", "e"],
        "messages": [{"role": "user", "content": "hi"}]});
    assert!(request(Anthropic, Chat, many_stops, false)
        .unwrap_err()
        .0
        .contains("more than 4"));
    let url_image = json!({"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]});
    assert!(request(Anthropic, Gemini, url_image, false)
        .unwrap_err()
        .0
        .contains("image URLs"));
}

#[test]
fn a_tool_name_the_target_would_reject_is_not_sent() {
    let gemini = |name: &str| {
        json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [{"functionDeclarations": [{"name": name, "parameters": {"type": "OBJECT"}}]}]})
    };
    // Gemini takes dots and colons; Anthropic and Chat do not.
    for to in [Anthropic, Chat] {
        let error = request(Gemini, to, gemini("tools.run"), false).unwrap_err();
        assert!(error.0.contains("tool name `tools.run`"), "{error}");
        assert!(request(Gemini, to, gemini("run_it"), false).is_ok());
    }
    // Gemini wants a letter or `_` first.
    let claude = |name: &str| {
        json!({"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": name, "input_schema": {"type": "object"}}]})
    };
    assert!(request(Anthropic, Gemini, claude("2fa-check"), false).is_err());
    assert!(request(Anthropic, Gemini, claude("twofa-check"), false).is_ok());
    // A call in the history counts as much as a definition.
    let history = json!({"model": "gpt-5", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "-lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]});
    assert!(request(Chat, Gemini, history, false)
        .unwrap_err()
        .0
        .contains("`-lookup`"));
}

#[test]
fn a_gemini_request_becomes_anthropic_and_chat_requests() {
    let gemini = json!({
        "systemInstruction": {"parts": [{"text": "Be kind."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "List /tmp"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"dir": "/tmp"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": "a b"}}}]}
        ],
        "tools": [{"functionDeclarations": [{"name": "ls", "description": "Lists",
            "parameters": {"type": "OBJECT", "properties": {"dir": {"type": "STRING"}}}}]}],
        "generationConfig": {"maxOutputTokens": 200, "temperature": 0.2,
            "thinkingConfig": {"thinkingBudget": 0}},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]
    });
    let (_, claude) = request(Gemini, Anthropic, gemini.clone(), true).unwrap();
    assert_eq!(
        claude,
        json!({
            "model": "target-model", "max_tokens": 200, "system": "Be kind.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "List /tmp"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_0", "name": "ls", "input": {"dir": "/tmp"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_0",
                    "content": [{"type": "text", "text": "a b"}]}]}
            ],
            "temperature": 0.2,
            "tools": [{"name": "ls", "description": "Lists",
                "input_schema": {"type": "object", "properties": {"dir": {"type": "string"}}}}],
            "stream": true
        })
    );
    let (_, chat) = request(Gemini, Chat, gemini, false).unwrap();
    assert_eq!(chat["messages"][2]["tool_calls"][0]["id"], "call_0");
    assert_eq!(
        chat["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_0", "content": "a b"})
    );
}

#[test]
fn an_anthropic_request_becomes_a_gemini_request() {
    let (path, body) = request(Anthropic, Gemini, anthropic_request(), true).unwrap();
    assert_eq!(
        path,
        "/v1beta/models/target-model:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "What is in this picture and in a.txt?"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}}]},
            {"role": "model", "parts": [{"text": "Reading it."},
                {"functionCall": {"id": "toolu_1", "name": "read_file", "args": {"path": "a.txt"}},
                 "thoughtSignature": "skip_thought_signature_validator"}]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": "toolu_1", "name": "read_file", "response": {"output": "hello"}}},
                {"text": "Go on."}]}
        ])
    );
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "You are terse."}]})
    );
    assert_eq!(
        body["generationConfig"],
        json!({"maxOutputTokens": 1024, "stopSequences": ["END"], "temperature": 0.5})
    );
    assert_eq!(
        body["tools"][0]["functionDeclarations"][0]["name"],
        "read_file"
    );
    let (path, _) = request(Anthropic, Gemini, anthropic_request(), false).unwrap();
    assert_eq!(path, "/v1beta/models/target-model:generateContent");
}

// ---- whole answers ----------------------------------------------------

fn chat_reply(message: Value, finish: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-5",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17,
            "prompt_tokens_details": {"cached_tokens": 2}}})
}

#[test]
fn a_chat_answer_becomes_an_anthropic_message() {
    let answer = chat_reply(
        json!({"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{\"dir\":\"/\"}"}}]}),
        "tool_calls",
    );
    assert_eq!(
        reply(Chat, Anthropic, answer),
        json!({"id": "chatcmpl-1", "type": "message", "role": "assistant", "model": "gpt-5",
            "content": [{"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "call_1", "name": "ls", "input": {"dir": "/"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2}})
    );
    let stops = [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
    ];
    for (finish, stop) in stops {
        let answer = chat_reply(json!({"role": "assistant", "content": "x"}), finish);
        assert_eq!(
            reply(Chat, Anthropic, answer)["stop_reason"],
            stop,
            "{finish}"
        );
    }
}

#[test]
fn chat_refusals_become_anthropic_refusals_the_guard_judges() {
    let filtered = chat_reply(
        json!({"role": "assistant", "content": null}),
        "content_filter",
    );
    let written = reply(Chat, Anthropic, filtered);
    assert_eq!(
        written["stop_details"],
        json!({"type": "refusal", "category": "content_filter", "explanation": null})
    );
    let judged = dialect::anthropic::AnthropicMessages.judge_json(&written);
    let refusal = judged.refusal.expect("judged a refusal");
    assert_eq!(refusal.signal, Some(RefusalSignal::StopReason));
    assert_eq!(refusal.category.as_deref(), Some("content_filter"));
    assert!(!judged.real_output);

    let model_refusal = chat_reply(
        json!({"role": "assistant", "content": null, "refusal": "I can't help with that."}),
        "stop",
    );
    let written = reply(Chat, Anthropic, model_refusal);
    assert_eq!(written["stop_reason"], "refusal");
    assert_eq!(written["stop_details"]["category"], "model_refusal");
    assert_eq!(
        written["stop_details"]["explanation"],
        "I can't help with that."
    );
    assert_eq!(written["content"], json!([]));
}

#[test]
fn an_anthropic_answer_becomes_a_chat_completion() {
    let message = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-4-7",
        "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "Hi"},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 5}});
    assert_eq!(
        reply(Anthropic, Chat, message),
        json!({"id": "msg_1", "object": "chat.completion", "model": "claude-opus-4-7",
            "choices": [{"index": 0, "logprobs": null, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": "Hi", "refusal": null,
                    "tool_calls": [{"id": "toolu_1", "type": "function",
                        "function": {"name": "ls", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 8, "completion_tokens": 4, "total_tokens": 12,
                "prompt_tokens_details": {"cached_tokens": 5}}})
    );
}

#[test]
fn an_anthropic_refusal_becomes_a_chat_content_filter_the_guard_judges() {
    let refused = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-4-7",
        "content": [], "stop_reason": "refusal", "stop_sequence": null,
        "stop_details": {"type": "refusal", "category": "cyber", "explanation": "Declined."},
        "usage": {"input_tokens": 3, "output_tokens": 0}});
    let written = reply(Anthropic, Chat, refused);
    assert_eq!(written["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(written["choices"][0]["message"]["refusal"], "Declined.");
    let judged = dialect::openai::chat::OpenAiChat.judge_json(&written);
    assert_eq!(
        judged.refusal.unwrap().signal,
        Some(RefusalSignal::StopReason)
    );
    assert!(!judged.real_output);
    // The output filter's block, sent as an error body, is a refusal too.
    let blocked = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "Output blocked by content filtering policy"}});
    assert_eq!(
        reply(Anthropic, Chat, blocked)["choices"][0]["finish_reason"],
        "content_filter"
    );
}

#[test]
fn gemini_answers_and_blocks_become_anthropic_and_chat_answers() {
    let answer = json!({"responseId": "r1", "modelVersion": "gemini-2.5-pro",
        "candidates": [{"content": {"role": "model", "parts": [
            {"text": "thinking", "thought": true}, {"text": "Sure."},
            {"functionCall": {"name": "ls", "args": {"dir": "/"}}}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 3, "thoughtsTokenCount": 2}});
    assert_eq!(
        reply(Gemini, Anthropic, answer.clone()),
        json!({"id": "r1", "type": "message", "role": "assistant", "model": "gemini-2.5-pro",
            "content": [{"type": "text", "text": "Sure."},
                {"type": "tool_use", "id": "call_r1_1", "name": "ls", "input": {"dir": "/"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 9, "output_tokens": 5}})
    );
    assert_eq!(
        reply(Gemini, Chat, answer)["choices"][0]["finish_reason"],
        "tool_calls"
    );

    let blocked = json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 9}});
    let claude = reply(Gemini, Anthropic, blocked.clone());
    assert_eq!(claude["stop_details"]["category"], "PROHIBITED_CONTENT");
    let judged = dialect::anthropic::AnthropicMessages.judge_json(&claude);
    assert_eq!(
        judged.refusal.unwrap().category.as_deref(),
        Some("PROHIBITED_CONTENT")
    );
    let chat = reply(Gemini, Chat, blocked);
    assert!(dialect::openai::chat::OpenAiChat
        .judge_json(&chat)
        .refusal
        .is_some());

    let safety = json!({"candidates": [{"finishReason": "SAFETY", "finishMessage": "Unsafe."}]});
    assert_eq!(
        reply(Gemini, Anthropic, safety)["stop_details"]["explanation"],
        "Unsafe."
    );
}

#[test]
fn anthropic_and_chat_refusals_become_gemini_safety_stops_the_guard_judges() {
    let refused = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [], "stop_reason": "refusal",
        "stop_details": {"type": "refusal", "category": "cyber", "explanation": "No."},
        "usage": {"input_tokens": 3, "output_tokens": 0}});
    let written = reply(Anthropic, Gemini, refused);
    assert_eq!(
        written,
        json!({"candidates": [{"index": 0, "finishReason": "SAFETY", "finishMessage": "No."}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 0, "totalTokenCount": 3},
            "modelVersion": "claude", "responseId": "msg_1"})
    );
    let judged = dialect::gemini::GeminiGenerateContent.judge_json(&written);
    assert_eq!(judged.refusal.unwrap().category.as_deref(), Some("SAFETY"));
    let filtered = chat_reply(
        json!({"role": "assistant", "content": null}),
        "content_filter",
    );
    assert_eq!(
        reply(Chat, Gemini, filtered)["candidates"][0]["finishReason"],
        "SAFETY"
    );
    let long = chat_reply(json!({"role": "assistant", "content": "x"}), "length");
    assert_eq!(
        reply(Chat, Gemini, long)["candidates"][0]["finishReason"],
        "MAX_TOKENS"
    );
}

// ---- streams ----------------------------------------------------------

fn chat_chunk(delta: Value, finish: Value) -> (Option<&'static str>, Value) {
    (
        None,
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
    )
}

/// A Chat stream: text, then a tool call whose arguments come in three
/// pieces, the finish, the usage chunk, `[DONE]`.
fn chat_tool_stream() -> Bytes {
    let mut events = vec![
        chat_chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chat_chunk(json!({"content": "Looking"}), Value::Null),
        chat_chunk(json!({"content": " now."}), Value::Null),
        chat_chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "ls", "arguments": ""}}]}),
            Value::Null,
        ),
        chat_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"di"}}]}),
            Value::Null,
        ),
        chat_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "r\":\"/tm"}}]}),
            Value::Null,
        ),
        chat_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "p\"}"}}]}),
            Value::Null,
        ),
        chat_chunk(json!({}), json!("tool_calls")),
    ];
    events.push((None, json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
        "model": "gpt-5", "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}})));
    let mut bytes = BytesMut::from(&sse_of(&events)[..]);
    bytes.extend_from_slice(b"data: [DONE]\n\n");
    bytes.freeze()
}

fn named(name: &str, data: Value) -> (Option<String>, Value) {
    (Some(name.to_owned()), data)
}

#[test]
fn a_chat_stream_becomes_an_anthropic_stream_at_every_split() {
    let translated = translate_stream(Chat, Anthropic, &chat_tool_stream());
    assert_eq!(
        normalise(&translated),
        vec![
            named(
                "message_start",
                json!({"type": "message_start", "message": {"id": "chatcmpl-1",
                "type": "message", "role": "assistant", "model": "gpt-5", "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}}})
            ),
            named(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}})
            ),
            named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "Looking"}})
            ),
            named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": " now."}})
            ),
            named(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0})
            ),
            named(
                "content_block_start",
                json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": "call_1", "name": "ls", "input": {}}})
            ),
            named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "{\"di"}})
            ),
            named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "r\":\"/tm"}})
            ),
            named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "p\"}"}})
            ),
            named(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 1})
            ),
            named(
                "message_delta",
                json!({"type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"input_tokens": 20, "output_tokens": 7}})
            ),
            named("message_stop", json!({"type": "message_stop"})),
        ]
    );
    let (output, refusal) = judge_stream(&dialect::anthropic::AnthropicMessages, &translated);
    assert!(output && refusal.is_none());
}

#[test]
fn a_chat_content_filter_stream_becomes_an_anthropic_refusal_stream() {
    let mut bytes = BytesMut::from(
        &sse_of(&[
            chat_chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chat_chunk(json!({}), json!("content_filter")),
        ])[..],
    );
    bytes.extend_from_slice(b"data: [DONE]\n\n");
    let translated = translate_stream(Chat, Anthropic, &bytes.freeze());
    let events = normalise(&translated);
    assert_eq!(
        events[1].1["delta"],
        json!({"stop_reason": "refusal", "stop_sequence": null,
            "stop_details": {"type": "refusal", "category": "content_filter", "explanation": null}})
    );
    let (output, refusal) = judge_stream(&dialect::anthropic::AnthropicMessages, &translated);
    assert!(!output, "an empty refusal stays empty");
    assert_eq!(refusal.unwrap().category.as_deref(), Some("content_filter"));

    // A structured-outputs refusal, its text in `delta.refusal` pieces.
    let mut bytes = BytesMut::from(
        &sse_of(&[
            chat_chunk(
                json!({"role": "assistant", "refusal": "I can't"}),
                Value::Null,
            ),
            chat_chunk(json!({"refusal": " do that."}), Value::Null),
            chat_chunk(json!({}), json!("stop")),
        ])[..],
    );
    bytes.extend_from_slice(b"data: [DONE]\n\n");
    let translated = translate_stream(Chat, Anthropic, &bytes.freeze());
    let (_, refusal) = judge_stream(&dialect::anthropic::AnthropicMessages, &translated);
    let refusal = refusal.unwrap();
    assert_eq!(refusal.category.as_deref(), Some("model_refusal"));
    assert_eq!(refusal.explanation.as_deref(), Some("I can't do that."));
}

fn anthropic_stream(stop: Value) -> Bytes {
    sse_of(&[
        (
            Some("message_start"),
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "claude-opus-4-7", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 11, "output_tokens": 1}}}),
        ),
        (Some("ping"), json!({"type": "ping"})),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        ),
        (
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{\"dir\":"}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "\"/\"}"}}),
        ),
        (
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            Some("message_delta"),
            json!({"type": "message_delta", "delta": stop,
            "usage": {"output_tokens": 9}}),
        ),
        (Some("message_stop"), json!({"type": "message_stop"})),
    ])
}

#[test]
fn an_anthropic_stream_becomes_a_chat_stream_at_every_split() {
    let input = anthropic_stream(json!({"stop_reason": "tool_use", "stop_sequence": null}));
    let translated = translate_stream(Anthropic, Chat, &input);
    let chunk = |delta: Value, finish: Value| {
        (
            None,
            json!({"id": "msg_1", "object": "chat.completion.chunk", "model": "claude-opus-4-7",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]}),
        )
    };
    assert_eq!(
        normalise(&translated),
        vec![
            chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "toolu_1", "type": "function",
                "function": {"name": "ls", "arguments": ""}}]}),
                Value::Null
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"dir\":"}}]}),
                Value::Null
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"/\"}"}}]}),
                Value::Null
            ),
            chunk(json!({}), json!("tool_calls")),
            (
                None,
                json!({"id": "msg_1", "object": "chat.completion.chunk", "model": "claude-opus-4-7",
                "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 9, "total_tokens": 20,
                    "prompt_tokens_details": {"cached_tokens": 0}}})
            ),
            (None, json!("[DONE]")),
        ]
    );
    let (output, refusal) = judge_stream(&dialect::openai::chat::OpenAiChat, &translated);
    assert!(output && refusal.is_none());
}

#[test]
fn an_anthropic_refusal_stream_becomes_a_chat_content_filter() {
    let empty = anthropic_refusal_stream();
    let translated = translate_stream(Anthropic, Chat, &empty);
    let events = normalise(&translated);
    assert_eq!(
        events[0].1["choices"][0]["delta"],
        json!({"role": "assistant", "refusal": "Declined."})
    );
    assert_eq!(events[1].1["choices"][0]["finish_reason"], "content_filter");
    let (output, refusal) = judge_stream(&dialect::openai::chat::OpenAiChat, &translated);
    assert!(!output);
    let refusal = refusal.unwrap();
    assert_eq!(refusal.signal, Some(RefusalSignal::StopReason));
    assert_eq!(refusal.explanation.as_deref(), Some("Declined."));
    // And as Gemini: a safety finish.
    let translated = translate_stream(Anthropic, Gemini, &empty);
    let (output, refusal) = judge_stream(&dialect::gemini::GeminiGenerateContent, &translated);
    assert!(!output);
    assert_eq!(refusal.unwrap().explanation.as_deref(), Some("Declined."));
}

#[test]
fn every_stop_reason_maps_in_streams() {
    let cases = [
        (json!({"stop_reason": "end_turn"}), "stop", "STOP"),
        (json!({"stop_reason": "max_tokens"}), "length", "MAX_TOKENS"),
        (
            json!({"stop_reason": "stop_sequence", "stop_sequence": "END"}),
            "stop",
            "STOP",
        ),
        (json!({"stop_reason": "tool_use"}), "tool_calls", "STOP"),
        (
            json!({"stop_reason": "refusal"}),
            "content_filter",
            "SAFETY",
        ),
    ];
    for (stop, chat, gemini) in cases {
        let input = anthropic_stream(stop.clone());
        let events =
            normalise(&translate_chunks(Anthropic, Chat, std::slice::from_ref(&input)).unwrap());
        let finish = events
            .iter()
            .find_map(|(_, d)| d["choices"][0]["finish_reason"].as_str().map(str::to_owned));
        assert_eq!(finish.as_deref(), Some(chat), "{stop}");
        let events = normalise(&translate_chunks(Anthropic, Gemini, &[input]).unwrap());
        let finish = events.iter().find_map(|(_, d)| {
            d["candidates"][0]["finishReason"]
                .as_str()
                .map(str::to_owned)
        });
        assert_eq!(finish.as_deref(), Some(gemini), "{stop}");
    }
    // Back: each Chat finish reason as Anthropic's stop reason.
    for (finish, stop) in [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("content_filter", "refusal"),
    ] {
        let mut bytes =
            BytesMut::from(&sse_of(&[chat_chunk(json!({"content": "x"}), json!(finish))])[..]);
        bytes.extend_from_slice(b"data: [DONE]\n\n");
        let events = normalise(&translate_chunks(Chat, Anthropic, &[bytes.freeze()]).unwrap());
        let delta = events
            .iter()
            .find(|(name, _)| name.as_deref() == Some("message_delta"))
            .unwrap();
        assert_eq!(delta.1["delta"]["stop_reason"], stop, "{finish}");
    }
}

fn gemini_stream(last: Value) -> Bytes {
    sse_of(&[
        (
            None,
            json!({"responseId": "r1", "modelVersion": "gemini-2.5-pro", "candidates": [{"content":
            {"role": "model", "parts": [{"text": "Here"}]}, "index": 0}]}),
        ),
        (
            None,
            json!({"responseId": "r1", "modelVersion": "gemini-2.5-pro", "candidates": [{"content":
            {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"dir": "/"}}}]}, "index": 0}]}),
        ),
        (None, last),
    ])
}

#[test]
fn a_gemini_stream_becomes_anthropic_and_chat_streams_at_every_split() {
    let input = gemini_stream(
        json!({"responseId": "r1", "candidates": [{"content": {"role": "model",
        "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 4, "totalTokenCount": 9}}),
    );
    let claude = normalise(&translate_stream(Gemini, Anthropic, &input));
    let kinds: Vec<&str> = claude
        .iter()
        .map(|(name, _)| name.as_deref().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(claude[4].1["content_block"]["id"], "call_r1_0");
    assert_eq!(claude[5].1["delta"]["partial_json"], "{\"dir\":\"/\"}");
    assert_eq!(claude[7].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(
        claude[7].1["usage"],
        json!({"input_tokens": 5, "output_tokens": 4})
    );
    let chat = normalise(&translate_stream(Gemini, Chat, &input));
    assert_eq!(
        chat[0].1["choices"][0]["delta"],
        json!({"role": "assistant", "content": "Here"})
    );
    assert_eq!(
        chat[1].1["choices"][0]["delta"]["tool_calls"][0]["id"],
        "call_r1_0"
    );
    assert_eq!(chat[3].1["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(chat[4].1["usage"]["total_tokens"], 9);
}

#[test]
fn a_gemini_block_stream_becomes_an_anthropic_refusal() {
    let blocked = sse_of(&[(
        None,
        json!({"promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 5}}),
    )]);
    let translated = translate_stream(Gemini, Anthropic, &blocked);
    let (output, refusal) = judge_stream(&dialect::anthropic::AnthropicMessages, &translated);
    assert!(!output);
    assert_eq!(refusal.unwrap().category.as_deref(), Some("SAFETY"));
}

#[test]
fn a_tool_call_split_across_deltas_is_one_gemini_call() {
    let input = anthropic_stream(json!({"stop_reason": "tool_use"}));
    let translated = normalise(&translate_stream(Anthropic, Gemini, &input));
    assert_eq!(
        translated[0].1["candidates"][0]["content"]["parts"],
        json!([{"functionCall": {"id": "toolu_1", "name": "ls", "args": {"dir": "/"}}}])
    );
    assert_eq!(translated[1].1["candidates"][0]["finishReason"], "STOP");
    assert_eq!(translated[1].1["usageMetadata"]["promptTokenCount"], 11);
    assert_eq!(translated.len(), 2);
}

#[test]
fn a_cut_stream_is_an_error_never_a_finished_answer() {
    for (from, cut) in [
        (
            Anthropic,
            anthropic_stream(json!({"stop_reason": "end_turn"})).slice(..400),
        ),
        (Chat, chat_tool_stream().slice(..300)),
        (Gemini, gemini_stream(json!({})).slice(..150)),
    ] {
        for to in [Anthropic, Chat, Gemini] {
            if to != from {
                assert!(
                    translate_chunks(from, to, std::slice::from_ref(&cut)).is_err(),
                    "{from:?} -> {to:?}"
                );
            }
        }
    }
}

#[test]
fn frames_are_translated_as_they_arrive() {
    let input = chat_tool_stream();
    let mut translator = StreamTranslator::new(Chat, Anthropic, true).unwrap();
    // Whole frames, each with its blank line.
    let text = std::str::from_utf8(&input).unwrap();
    let frames: Vec<&str> = text.split_inclusive("\n\n").collect();
    let mut seen = Vec::new();
    for frame in &frames[..3] {
        seen.push(
            translator
                .push(Bytes::copy_from_slice(frame.as_bytes()))
                .unwrap(),
        );
    }
    let third = std::str::from_utf8(&seen[2]).unwrap();
    assert!(third.contains("\" now.\""), "{third}");
}

/// `bytes` cut at each of `cuts` (in order; cuts outside it are skipped).
fn split_at(bytes: &bytes::Bytes, cuts: &[usize]) -> Vec<bytes::Bytes> {
    let mut chunks = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        if cut > start && cut < bytes.len() {
            chunks.push(bytes.slice(start..cut));
            start = cut;
        }
    }
    chunks.push(bytes.slice(start..));
    chunks
}
