//! OpenAI Responses as a client's API: its requests read (and what cannot
//! be read named), answers written whole and streamed, each stream rebuilt
//! as the official SDK's stream reader rebuilds it, and the guard's
//! Responses dialect judging what was written.

use super::*;
use crate::dialect::openai::responses::OpenAiResponses;
use crate::dialect::openai::translate::responses as openai_responses;
use crate::refusal::WireApi::OpenAiResponses as Responses;

// ---- requests ---------------------------------------------------------

/// A request of every item kind, with fields that are dropped.
fn responses_request() -> Value {
    json!({
        "model": "gpt-5", "stream": true, "store": false,
        "instructions": "You are terse.",
        "metadata": {"run": "1"}, "user": "u1", "prompt_cache_key": "k",
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"], "background": false,
        "text": {"format": {"type": "text"}}, "truncation": "auto",
        "max_output_tokens": 1024, "temperature": 0.5, "top_p": 0.9,
        "parallel_tool_calls": false,
        "tools": [{"type": "function", "name": "read_file", "description": "Reads a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            "strict": true}],
        "tool_choice": {"type": "function", "name": "read_file"},
        "input": [
            {"role": "developer", "content": "Answer in English."},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "What is in this picture and in a.txt?"},
                {"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,iVBORw0K"},
                {"type": "input_image", "detail": "low", "image_url": "https://example.com/cat.png"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "Reading it.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file",
                "arguments": "{\"path\":\"a.txt\"}", "status": "completed"},
            {"type": "function_call_output", "call_id": "call_1", "output": "hello"},
            {"role": "user", "content": "Go on."}
        ]
    })
}

#[test]
fn every_input_item_kind_is_read() {
    let prompt = read_request(Responses, &responses_request(), true).unwrap();
    let expected = Prompt {
        system: Some("You are terse.\n\nAnswer in English.".to_owned()),
        turns: vec![
            Turn {
                role: Role::User,
                parts: vec![
                    Part::Text("What is in this picture and in a.txt?".to_owned()),
                    Part::Image(ImageSource::Base64 {
                        media_type: "image/png".to_owned(),
                        data: "iVBORw0K".to_owned(),
                    }),
                    Part::Image(ImageSource::Url("https://example.com/cat.png".to_owned())),
                ],
            },
            Turn {
                role: Role::Assistant,
                parts: vec![
                    Part::Text("Reading it.".to_owned()),
                    Part::ToolCall {
                        id: "call_1".to_owned(),
                        name: "read_file".to_owned(),
                        arguments: "{\"path\":\"a.txt\"}".to_owned(),
                    },
                ],
            },
            Turn {
                role: Role::User,
                parts: vec![
                    Part::ToolResult {
                        id: "call_1".to_owned(),
                        name: "read_file".to_owned(),
                        content: vec![Part::Text("hello".to_owned())],
                        is_error: false,
                    },
                    Part::Text("Go on.".to_owned()),
                ],
            },
        ],
        tools: vec![Tool {
            name: "read_file".to_owned(),
            description: Some("Reads a file".to_owned()),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        tool_choice: Some(ToolChoice::Named("read_file".to_owned())),
        parallel_tool_calls: Some(false),
        max_tokens: Some(1024),
        stop: Vec::new(),
        temperature: Some(0.5),
        top_p: Some(0.9),
        top_k: None,
        stream: true,
    };
    assert_eq!(prompt, expected);
}

#[test]
fn a_responses_request_becomes_an_anthropic_request() {
    let body = json!({"model": "gpt-5", "instructions": "Be brief.", "input": "Audit my SSH config",
        "max_output_tokens": 300, "tool_choice": "required",
        "tools": [{"type": "function", "name": "run", "parameters": null, "strict": false}]});
    let (path, written) = request(Responses, Anthropic, body, false).unwrap();
    assert_eq!(path, "/v1/messages");
    assert_eq!(
        written,
        json!({"model": "target-model", "max_tokens": 300, "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Audit my SSH config"}]}],
            "tools": [{"name": "run", "input_schema": {"type": "object", "properties": {}}}],
            "tool_choice": {"type": "any"}})
    );
}

#[test]
fn tool_outputs_given_as_parts_and_function_results_reach_gemini() {
    let body = json!({"model": "gpt-5", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "List /"}]},
        {"type": "function_call", "call_id": "call_9", "name": "ls", "arguments": "{\"dir\":\"/\"}"},
        {"type": "function_call_output", "call_id": "call_9",
            "output": [{"type": "input_text", "text": "bin etc"}]}]});
    let prompt = read_request(Responses, &body, false).unwrap();
    assert_eq!(
        prompt.turns[2].parts,
        [Part::ToolResult {
            id: "call_9".to_owned(),
            name: "ls".to_owned(),
            content: vec![Part::Text("bin etc".to_owned())],
            is_error: false,
        }]
    );
    let (_, written) = request(Responses, Gemini, body, false).unwrap();
    assert_eq!(
        written["contents"][1]["parts"][0]["functionCall"],
        json!({"id": "call_9", "name": "ls", "args": {"dir": "/"}})
    );
    assert_eq!(
        written["contents"][2]["parts"][0]["functionResponse"]["name"],
        "ls"
    );
}

/// `base` with `patch`'s top-level fields set.
fn patched(base: &Value, patch: &Value) -> Value {
    let mut body = base.clone();
    for (key, value) in patch.as_object().unwrap() {
        body[key] = value.clone();
    }
    body
}

#[test]
fn what_the_shared_form_cannot_carry_is_named_and_not_sent() {
    let base = json!({"model": "gpt-5", "input": "hi"});
    for (patch, named) in uncarried() {
        let body = patched(&base, &patch);
        let why = read_request(Responses, &body, false).unwrap_err();
        assert!(why.0.contains(named), "{patch}: {why}");
        assert!(request(Responses, Anthropic, body, false).is_err());
    }
}

/// Patches of a Responses request the shared form cannot carry, and the
/// words that name what is uncarried.
fn uncarried() -> Vec<(Value, &'static str)> {
    let user = |part: Value| json!({"input": [{"role": "user", "content": [part]}]});
    vec![
        (
            json!({"previous_response_id": "resp_1"}),
            "`previous_response_id`",
        ),
        (json!({"conversation": {"id": "conv_1"}}), "`conversation`"),
        (json!({"background": true}), "`background`"),
        (json!({"prompt": {"id": "pmpt_1"}}), "`prompt`"),
        (json!({"max_tool_calls": 3}), "`max_tool_calls`"),
        (json!({"top_logprobs": 2}), "`top_logprobs`"),
        (
            json!({"context_management": [{"type": "compaction"}]}),
            "`context_management`",
        ),
        (
            json!({"include": ["reasoning.encrypted_content", "message.output_text.logprobs"]}),
            "`include`",
        ),
        (
            json!({"text": {"format": {"type": "json_schema", "name": "r", "schema": {}}}}),
            "`text.format`",
        ),
        (json!({"text": {"verbosity": "low"}}), "`text.verbosity`"),
        (
            json!({"tools": [{"type": "web_search"}]}),
            "`web_search` tools",
        ),
        (
            json!({"tools": [{"type": "custom", "name": "apply_patch"}]}),
            "`custom` tools",
        ),
        (
            json!({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}),
            "`tool_choice`",
        ),
        (
            json!({"tool_choice": {"type": "web_search_preview"}}),
            "`tool_choice`",
        ),
        (
            json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
            "`item_reference` input items",
        ),
        (
            json!({"input": [{"type": "compaction", "encrypted_content": "x"}]}),
            "`compaction` input items",
        ),
        (
            json!({"input": [{"type": "web_search_call", "id": "ws_1"}]}),
            "`web_search_call` input items",
        ),
        (
            user(json!({"type": "input_file", "file_id": "file_1"})),
            "`input_file` content parts",
        ),
        (
            user(json!({"type": "input_audio", "input_audio": {}})),
            "`input_audio` content parts",
        ),
        (
            user(json!({"type": "input_image", "detail": "auto", "file_id": "file_1"})),
            "an OpenAI file",
        ),
        (
            json!({"input": [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}]}),
            "a system message after the conversation began",
        ),
        (
            json!({"input": [{"role": "tool", "content": "x"}]}),
            "role has no translation",
        ),
        (json!({"input": 3}), "`input`"),
        (json!({"instructions": ["a list"]}), "`instructions`"),
    ]
}

#[test]
fn bookkeeping_and_reasoning_settings_are_dropped() {
    let base = json!({"model": "gpt-5", "input": "hi", "max_output_tokens": 50});
    let (_, plain) = request(Responses, Anthropic, base.clone(), false).unwrap();
    let extras = json!({"store": true, "metadata": {"a": "b"}, "user": "u", "service_tier": "auto",
        "prompt_cache_key": "k", "prompt_cache_retention": "24h", "safety_identifier": "s",
        "reasoning": {"effort": "high"}, "stream_options": {"include_obfuscation": false},
        "truncation": "disabled", "background": false, "include": [],
        "text": {"format": {"type": "text"}, "verbosity": null}, "previous_response_id": null});
    let (_, dropped) = request(Responses, Anthropic, patched(&base, &extras), false).unwrap();
    assert_eq!(dropped, plain);
}

#[test]
fn responses_is_a_client_api_and_never_a_target() {
    let body = json!({"model": "gpt-5", "input": "hi"});
    let prompt = read_request(Responses, &body, false).unwrap();
    let why = write_request(Responses, &prompt, "gpt-5").unwrap_err();
    assert!(why.0.contains("client's API only"), "{why}");
    assert!(read_reply(Responses, &json!({"output": []})).is_err());
    assert!(StreamTranslator::new(Responses, Anthropic, false).is_err());
    assert!(BodyTranslation::new(Responses, Chat, false, false, 1 << 20).is_err());
    assert!(StreamTranslator::new(Anthropic, Responses, false).is_ok());
    assert!(BodyTranslation::new(Gemini, Responses, false, false, 1 << 20).is_ok());
    // Bedrock is neither.
    let why = read_request(WireApi::BedrockConverse, &body, false).unwrap_err();
    assert_eq!(why.0, "bedrock_converse has no translation");
    assert!(write_request(WireApi::BedrockConverse, &prompt, "m").is_err());
}

// ---- whole answers ----------------------------------------------------

fn claude_message(content: Value, stop: Value) -> Value {
    let mut message = json!({"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-opus-4-7", "content": content, "stop_sequence": null,
        "usage": {"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 5}});
    for (key, value) in stop.as_object().unwrap() {
        message[key] = value.clone();
    }
    message
}

#[test]
fn an_anthropic_answer_becomes_a_response() {
    let message = claude_message(
        json!([{"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "Hi"},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}]),
        json!({"stop_reason": "tool_use"}),
    );
    let written = reply(Anthropic, Responses, message);
    assert_eq!(
        written,
        json!({"id": "resp_msg_1", "object": "response", "status": "completed", "error": null,
            "incomplete_details": null, "model": "claude-opus-4-7",
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
            "output": [
                {"id": "msg_msg_1_0", "type": "message", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Hi", "annotations": []}]},
                {"id": "fc_msg_1_1", "type": "function_call", "status": "completed",
                    "call_id": "toolu_1", "name": "ls", "arguments": "{}"}],
            "usage": {"input_tokens": 8, "input_tokens_details": {"cached_tokens": 5},
                "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 12}})
    );
    let judged = OpenAiResponses.judge_json(&written);
    assert!(judged.real_output && judged.tool_call && judged.refusal.is_none());
}

#[test]
fn a_max_tokens_stop_is_an_incomplete_response() {
    let message = claude_message(
        json!([{"type": "text", "text": "Step one"}]),
        json!({"stop_reason": "max_tokens"}),
    );
    let written = reply(Anthropic, Responses, message);
    assert_eq!(written["status"], "incomplete");
    assert_eq!(
        written["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(written["output"][0]["status"], "incomplete");
    assert_eq!(written["output"][0]["content"][0]["text"], "Step one");
    assert!(OpenAiResponses.judge_json(&written).refusal.is_none());
}

#[test]
fn refusals_become_responses_refusals_the_guard_judges() {
    let refused = claude_message(
        json!([]),
        json!({"stop_reason": "refusal",
            "stop_details": {"type": "refusal", "category": "cyber", "explanation": "Declined."}}),
    );
    let written = reply(Anthropic, Responses, refused);
    assert_eq!(written["status"], "completed");
    assert_eq!(
        written["output"],
        json!([{"id": "msg_msg_1_0", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "refusal", "refusal": "Declined."}]}])
    );
    let judged = OpenAiResponses.judge_json(&written);
    assert!(!judged.real_output);
    let refusal = judged.refusal.unwrap();
    assert_eq!(refusal.signal, Some(RefusalSignal::ModelRefusal));
    assert_eq!(refusal.explanation.as_deref(), Some("Declined."));

    // A content filter says so in its status, as Responses' own does.
    let filtered = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
        "model": "gpt-5", "choices": [{"index": 0, "finish_reason": "content_filter",
            "message": {"role": "assistant", "content": null}}]});
    let written = reply(Chat, Responses, filtered);
    assert_eq!(written["status"], "incomplete");
    assert_eq!(
        written["incomplete_details"],
        json!({"reason": "content_filter"})
    );
    assert_eq!(written["output"], json!([]));
    let refusal = OpenAiResponses.judge_json(&written).refusal.unwrap();
    assert_eq!(refusal.signal, Some(RefusalSignal::StopReason));
    assert_eq!(refusal.category.as_deref(), Some("content_filter"));

    // A Gemini block: a refusal part naming the block reason.
    let blocked = json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}});
    let written = reply(Gemini, Responses, blocked);
    let judged = OpenAiResponses.judge_json(&written);
    assert!(judged.refusal.is_some() && !judged.real_output);
}

// ---- streams ----------------------------------------------------------

/// An Anthropic stream: thinking, text in two deltas, a tool call whose
/// arguments come in two pieces, then `stop`.
fn claude_stream(stop: Value) -> Bytes {
    let block = |index: u64, block: Value| {
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        )
    };
    let delta = |index: u64, delta: Value| {
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        )
    };
    let end = |index: u64| {
        (
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": index}),
        )
    };
    sse_of(&[
        (
            Some("message_start"),
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "claude-opus-4-7", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 11, "output_tokens": 1}}}),
        ),
        block(0, json!({"type": "thinking", "thinking": ""})),
        delta(0, json!({"type": "thinking_delta", "thinking": "hm"})),
        end(0),
        block(1, json!({"type": "text", "text": ""})),
        delta(1, json!({"type": "text_delta", "text": "Hel"})),
        delta(1, json!({"type": "text_delta", "text": "lo."})),
        end(1),
        block(
            2,
            json!({"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}),
        ),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"dir\":"}),
        ),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "\"/\"}"}),
        ),
        end(2),
        (
            Some("message_delta"),
            json!({"type": "message_delta", "delta": stop, "usage": {"output_tokens": 9}}),
        ),
        (Some("message_stop"), json!({"type": "message_stop"})),
    ])
}

/// The data of a Responses stream's events, each checked to name its type
/// in its frame and to carry the next sequence number from 0.
fn responses_events(stream: &Bytes) -> Vec<Value> {
    let events = normalise(stream);
    for (at, (name, data)) in events.iter().enumerate() {
        assert_eq!(name.as_deref(), data["type"].as_str(), "{data}");
        assert_eq!(data["sequence_number"], json!(at), "{data}");
    }
    events.into_iter().map(|(_, data)| data).collect()
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

/// Appends `delta` to the string at `field` of `value`.
fn append(value: &mut Value, field: &str, delta: &Value) {
    let joined = format!(
        "{}{}",
        value[field].as_str().unwrap(),
        delta.as_str().unwrap()
    );
    value[field] = json!(joined);
}

/// The content part an event names.
fn part_at<'a>(items: &'a mut [Value], event: &Value) -> &'a mut Value {
    let at = |key: &str| event[key].as_u64().unwrap() as usize;
    &mut items[at("output_index")]["content"][at("content_index")]
}

/// Rebuilds the output from the events as the official SDK's stream reader
/// does (items by `output_index`, content parts by `content_index`, text
/// and arguments from their deltas), failing where it would fail, checks
/// every `.done` against what was rebuilt, and returns the final event's
/// response once its output is checked to be the rebuilt one.
fn rebuild(events: &[Value]) -> Value {
    assert_eq!(
        kinds(&events[..2]),
        ["response.created", "response.in_progress"]
    );
    let mut items: Vec<Value> = Vec::new();
    for (at, event) in events.iter().enumerate().skip(2) {
        let index = |key: &str| event[key].as_u64().map(|i| i as usize);
        let output = index("output_index");
        if let (Some(output), Some(item_id)) = (output, event.get("item_id")) {
            assert_eq!(&items[output]["id"], item_id, "{event}");
        }
        match event["type"].as_str().unwrap() {
            "response.output_item.added" => {
                assert_eq!(output, Some(items.len()), "{event}");
                items.push(event["item"].clone());
            }
            "response.content_part.added" => {
                let parts = items[output.unwrap()]["content"].as_array_mut().unwrap();
                assert_eq!(index("content_index"), Some(parts.len()), "{event}");
                parts.push(event["part"].clone());
            }
            "response.output_text.delta" => {
                assert!(event["logprobs"].is_array(), "{event}");
                let part = part_at(&mut items, event);
                assert_eq!(part["type"], "output_text");
                append(part, "text", &event["delta"]);
            }
            "response.refusal.delta" => {
                let part = part_at(&mut items, event);
                assert_eq!(part["type"], "refusal");
                append(part, "refusal", &event["delta"]);
            }
            "response.function_call_arguments.delta" => {
                let item = &mut items[output.unwrap()];
                assert_eq!(item["type"], "function_call");
                append(item, "arguments", &event["delta"]);
            }
            "response.output_text.done" => {
                assert!(event["logprobs"].is_array(), "{event}");
                assert_eq!(part_at(&mut items, event)["text"], event["text"]);
            }
            "response.refusal.done" => {
                assert_eq!(part_at(&mut items, event)["refusal"], event["refusal"]);
            }
            "response.content_part.done" => {
                assert_eq!(part_at(&mut items, event), &event["part"]);
            }
            "response.function_call_arguments.done" => {
                let item = &items[output.unwrap()];
                assert_eq!(item["arguments"], event["arguments"]);
                assert_eq!(item["name"], event["name"]);
            }
            "response.output_item.done" => {
                let item = &mut items[output.unwrap()];
                let mut rebuilt = item.clone();
                rebuilt["status"] = event["item"]["status"].clone();
                assert_eq!(rebuilt, event["item"]);
                *item = event["item"].clone();
            }
            "response.completed" | "response.incomplete" => {
                assert_eq!(at, events.len() - 1, "the final event is the last");
                let response = &event["response"];
                assert_eq!(response["output"], Value::Array(items));
                assert_eq!(response["object"], "response");
                return response.clone();
            }
            other => panic!("unexpected event {other}"),
        }
    }
    panic!("the stream has no final event")
}

#[test]
fn an_anthropic_stream_becomes_a_responses_stream_at_every_split() {
    let input = claude_stream(json!({"stop_reason": "tool_use", "stop_sequence": null}));
    let translated = translate_stream(Anthropic, Responses, &input);
    let events = responses_events(&translated);
    assert_eq!(
        kinds(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(events[0]["response"]["id"], "resp_msg_1");
    assert_eq!(events[0]["response"]["status"], "in_progress");
    assert_eq!(events[0]["response"]["model"], "claude-opus-4-7");
    assert_eq!(
        events[4],
        json!({"type": "response.output_text.delta", "sequence_number": 4,
            "item_id": "msg_msg_1_0", "output_index": 0, "content_index": 0,
            "delta": "Hel", "logprobs": []})
    );
    assert_eq!(
        events[9]["item"],
        json!({"id": "fc_msg_1_1", "type": "function_call", "status": "in_progress",
            "call_id": "toolu_1", "name": "ls", "arguments": ""})
    );
    let response = rebuild(&events);
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"][0]["content"][0]["text"], "Hello.");
    assert_eq!(response["output"][1]["arguments"], "{\"dir\":\"/\"}");
    assert_eq!(response["usage"]["input_tokens"], 11);
    assert_eq!(response["usage"]["output_tokens"], 9);
    assert_eq!(response["usage"]["total_tokens"], 20);
    let (output, refusal) = judge_stream(&OpenAiResponses, &translated);
    assert!(output && refusal.is_none());

    // The whole answer says what the stream's final event says.
    let message = claude_message(
        json!([{"type": "text", "text": "Hello."},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"dir": "/"}}]),
        json!({"stop_reason": "tool_use"}),
    );
    let whole = reply(Anthropic, Responses, message);
    assert_eq!(whole["output"], response["output"]);
}

#[test]
fn a_chat_stream_becomes_a_responses_stream_at_every_split() {
    let translated = translate_stream(Chat, Responses, &chat_tool_stream());
    let events = responses_events(&translated);
    let response = rebuild(&events);
    assert_eq!(response["id"], "resp_chatcmpl-1");
    assert_eq!(response["output"][0]["content"][0]["text"], "Looking now.");
    assert_eq!(response["output"][1]["call_id"], "call_1");
    assert_eq!(response["output"][1]["arguments"], "{\"dir\":\"/tmp\"}");
    assert_eq!(response["usage"]["input_tokens"], 20);
}

#[test]
fn a_refusal_stream_becomes_a_refusal_part_the_guard_judges() {
    let refused = anthropic_refusal_stream();
    let translated = translate_stream(Anthropic, Responses, &refused);
    let events = responses_events(&translated);
    assert_eq!(
        kinds(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.refusal.delta",
            "response.refusal.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(events[3]["part"], json!({"type": "refusal", "refusal": ""}));
    let response = rebuild(&events);
    assert_eq!(
        response["output"][0]["content"],
        json!([{"type": "refusal", "refusal": "Declined."}])
    );
    let (output, refusal) = judge_stream(&OpenAiResponses, &translated);
    assert!(!output);
    let refusal = refusal.unwrap();
    assert_eq!(refusal.signal, Some(RefusalSignal::ModelRefusal));
    assert_eq!(refusal.explanation.as_deref(), Some("Declined."));
}

#[test]
fn a_refusal_after_text_is_a_second_part_of_the_message() {
    let mut events = Vec::new();
    let mut writer = openai_responses::StreamWriter::new();
    let mut out = BytesMut::new();
    for event in [
        Event::Start {
            id: Some("resp_7".to_owned()),
            model: Some("m".to_owned()),
        },
        Event::Text("Sure: ".to_owned()),
        Event::Stop(Stop::Refusal(RefusalStop {
            category: Some("cyber".to_owned()),
            explanation: None,
        })),
        Event::Done,
    ] {
        writer.event(event, &mut out).unwrap();
    }
    events.extend(responses_events(&out.freeze()));
    let response = rebuild(&events);
    assert_eq!(response["id"], "resp_7");
    assert_eq!(
        response["output"],
        json!([{"id": "msg_7_0", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "Sure: ", "annotations": []},
                {"type": "refusal", "refusal": "cyber"}]}])
    );
    let refusal_delta = events
        .iter()
        .find(|e| e["type"] == "response.refusal.delta")
        .unwrap();
    assert_eq!(refusal_delta["content_index"], 1);
}

#[test]
fn a_chat_content_filter_stream_becomes_an_incomplete_response() {
    let filtered = {
        let mut bytes = BytesMut::from(
            &sse_of(&[
                chat_chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                chat_chunk(json!({}), json!("content_filter")),
            ])[..],
        );
        bytes.extend_from_slice(b"data: [DONE]\n\n");
        bytes.freeze()
    };
    let translated = translate_stream(Chat, Responses, &filtered);
    let events = responses_events(&translated);
    assert_eq!(
        kinds(&events),
        [
            "response.created",
            "response.in_progress",
            "response.incomplete"
        ]
    );
    let response = rebuild(&events);
    assert_eq!(response["status"], "incomplete");
    assert_eq!(
        response["incomplete_details"],
        json!({"reason": "content_filter"})
    );
    let (output, refusal) = judge_stream(&OpenAiResponses, &translated);
    assert!(!output);
    let refusal = refusal.unwrap();
    assert_eq!(refusal.signal, Some(RefusalSignal::StopReason));
    assert_eq!(refusal.category.as_deref(), Some("content_filter"));
}

#[test]
fn a_max_tokens_stream_ends_incomplete_with_the_item_incomplete() {
    let input = claude_stream(json!({"stop_reason": "max_tokens", "stop_sequence": null}));
    let translated = translate_stream(Anthropic, Responses, &input);
    let events = responses_events(&translated);
    assert_eq!(events.last().unwrap()["type"], "response.incomplete");
    let response = rebuild(&events);
    assert_eq!(
        response["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    // The earlier message was finished; the call the limit cut was not.
    assert_eq!(response["output"][0]["status"], "completed");
    assert_eq!(response["output"][1]["status"], "incomplete");
    let (output, refusal) = judge_stream(&OpenAiResponses, &translated);
    assert!(output && refusal.is_none());
}

#[test]
fn a_cut_stream_into_responses_is_an_error() {
    let input = claude_stream(json!({"stop_reason": "end_turn"}));
    let cut = input.slice(..input.len() - 120);
    assert!(translate_chunks(Anthropic, Responses, &[cut]).is_err());
}

#[test]
fn arguments_outside_a_call_and_an_endless_answer_are_errors() {
    let mut writer = openai_responses::StreamWriter::new();
    let mut out = BytesMut::new();
    writer.event(Event::Text("a".to_owned()), &mut out).unwrap();
    assert!(writer
        .event(Event::ToolArgs("{}".to_owned()), &mut out)
        .is_err());
    let long = "x".repeat(1 << 20);
    let held = (0..8).try_for_each(|_| writer.event(Event::Text(long.clone()), &mut out));
    assert!(held.is_err(), "more than the final event may repeat");
}
