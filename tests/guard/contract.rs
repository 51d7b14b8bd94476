//! The request contract itself (the strict simulator's and every test
//! upstream's): each documented rule passes a request that keeps it and
//! catches one that breaks it, answered in the provider's own error shape.

use serde_json::{json, Value};
use support::contract::{check, Api, Contract};

const MESSAGES: &str = "/v1/messages";
const VERTEX: &str =
    "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-opus-4-7:rawPredict";
const CHAT: &str = "/v1/chat/completions";
const AZURE: &str = "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21";
const RESPONSES: &str = "/v1/responses";
const GEMINI: &str = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse";

fn rule(path: &str, betas: &str, body: &Value) -> Option<&'static str> {
    let mut headers = http::HeaderMap::new();
    if !betas.is_empty() {
        headers.insert("Anthropic-Beta", betas.parse().unwrap());
    }
    let bytes = serde_json::to_vec(body).unwrap();
    check("POST", path, &headers, &bytes).err().map(|v| v.rule)
}

fn claude(extra: Value) -> Value {
    let mut body = json!({"model": "claude-opus-4-7", "max_tokens": 64,
        "messages": [{"role": "user", "content": "x"}]});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    body
}

const FALLBACK_BETA: &str = "server-side-fallback-2026-07-01";

/// A first-party path under a gateway's base path.
const GATEWAY: &str = "/gateway/anthropic/v1/messages";

#[test]
fn the_api_is_told_from_the_path() {
    assert_eq!(Api::of("POST", MESSAGES), Some(Api::Anthropic));
    assert_eq!(Api::of("POST", VERTEX), Some(Api::AnthropicVertex));
    assert_eq!(Api::of("POST", CHAT), Some(Api::OpenAiChat));
    assert_eq!(Api::of("POST", AZURE), Some(Api::AzureChat));
    assert_eq!(Api::of("POST", RESPONSES), Some(Api::Responses));
    assert_eq!(Api::of("POST", GEMINI), Some(Api::Gemini));
    assert_eq!(
        Api::of("POST", "/v1/messages/count_tokens"),
        Some(Api::AnthropicCountTokens)
    );
    let vertex_count =
        "/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict";
    assert_eq!(
        Api::of("POST", vertex_count),
        Some(Api::AnthropicCountTokens)
    );
    assert_eq!(Api::of("GET", MESSAGES), None);
}

#[test]
fn anthropic_basics() {
    assert_eq!(rule(MESSAGES, "", &claude(json!({}))), None);
    let mut no_model = claude(json!({}));
    no_model.as_object_mut().unwrap().remove("model");
    assert_eq!(rule(MESSAGES, "", &no_model), Some("A2"));
    assert_eq!(
        rule(MESSAGES, "", &claude(json!({"messages": []}))),
        Some("A3")
    );
    let system_role = json!({"messages": [{"role": "system", "content": "x"}]});
    assert_eq!(rule(MESSAGES, "", &claude(system_role)), Some("A3"));
    // The first party takes an assistant turn first (Bedrock does not).
    let assistant_first = json!({"messages": [{"role": "assistant", "content": "x"},
        {"role": "user", "content": "y"}]});
    assert_eq!(rule(MESSAGES, "", &claude(assistant_first)), None);
    let note_before_result = json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "note"},
        {"type": "tool_result", "tool_use_id": "t", "content": "r"}]}]});
    assert_eq!(rule(MESSAGES, "", &claude(note_before_result)), Some("A4"));
    // A model that takes prefill (the Claude 4.6 generation rejects it: A15).
    let one_prefill = json!({"model": "claude-sonnet-4-5", "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": "a"}]});
    assert_eq!(rule(MESSAGES, "", &claude(one_prefill)), None);
    let trailing_space = json!({"messages": [{"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "text", "text": "a "}]}]});
    assert_eq!(rule(MESSAGES, "", &claude(trailing_space)), Some("A5"));
    let ends_in_thinking = json!({"messages": [{"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "text", "text": "a"},
            {"type": "thinking", "thinking": "t", "signature": "s"}]}]});
    assert_eq!(rule(MESSAGES, "", &claude(ends_in_thinking)), Some("A5"));
}

#[test]
fn consecutive_turns_of_one_role_are_one_turn() {
    let user = |content: Value| json!({"role": "user", "content": content});
    let assistant = |content: Value| json!({"role": "assistant", "content": content});
    // Two assistant messages at the end are one prefill, its end the last's.
    let two_prefills = json!([
        user(json!("x")),
        assistant(json!("a")),
        assistant(json!("b"))
    ]);
    let sonnet =
        |messages: Value| claude(json!({"model": "claude-sonnet-4-5", "messages": messages}));
    assert_eq!(rule(MESSAGES, "", &sonnet(two_prefills)), None);
    let spaced = json!([
        user(json!("x")),
        assistant(json!("a ")),
        assistant(json!("b"))
    ]);
    assert_eq!(rule(MESSAGES, "", &sonnet(spaced)), None);
    // A user message after the tool results joins their turn: the note
    // after them keeps the results first, a note before them does not.
    let ask = assistant(json!([{"type": "tool_use", "id": "t", "name": "run", "input": {}}]));
    let result = user(json!([{"type": "tool_result", "tool_use_id": "t", "content": "r"}]));
    let note = user(json!("[refusal-guard] note"));
    let after = json!([user(json!("x")), ask, result, note]);
    assert_eq!(
        rule(MESSAGES, "", &claude(json!({"messages": after}))),
        None
    );
    let before = json!([user(json!("x")), ask, note, result]);
    assert_eq!(
        rule(MESSAGES, "", &claude(json!({"messages": before}))),
        Some("A4")
    );
}

#[test]
fn a_mid_conversation_system_message_follows_a_user_turn() {
    let user = |content: &str| json!({"role": "user", "content": content});
    let assistant = |content: &str| json!({"role": "assistant", "content": content});
    let system = |content: &str| json!({"role": "system", "content": content});
    // A model that takes prefill (A15), for the conversation ending in one.
    let with =
        |messages: Value| claude(json!({"model": "claude-sonnet-4-5", "messages": messages}));
    let at_the_end = json!([user("x"), system("be brief")]);
    assert_eq!(rule(MESSAGES, "", &with(at_the_end.clone())), None);
    assert_eq!(rule(GATEWAY, "", &with(at_the_end.clone())), None);
    let before_assistant = json!([user("x"), system("a"), system("b"), assistant("y")]);
    assert_eq!(rule(MESSAGES, "", &with(before_assistant)), None);
    for misplaced in [
        json!([system("first"), user("x")]),
        json!([user("x"), assistant("y"), system("after an answer")]),
        // A rescue note appended after it: the system message no longer
        // ends the messages nor precedes an assistant turn.
        json!([user("x"), system("be brief"), user("[refusal-guard] note")]),
    ] {
        assert_eq!(
            rule(MESSAGES, "", &with(misplaced.clone())),
            Some("A3"),
            "{misplaced}"
        );
    }
    // After a server tool's result, it may follow an assistant turn.
    let searched = json!({"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}},
        {"type": "web_search_tool_result", "tool_use_id": "s", "content": []}]});
    let after_search = json!([user("x"), searched, system("cite sources")]);
    assert_eq!(rule(MESSAGES, "", &with(after_search)), None);
}

#[test]
fn every_message_but_a_final_assistant_turn_has_content() {
    let user = |content: Value| json!({"role": "user", "content": content});
    let assistant = |content: Value| json!({"role": "assistant", "content": content});
    // A model that takes prefill (A15).
    let with =
        |messages: Value| claude(json!({"model": "claude-sonnet-4-5", "messages": messages}));
    let empty_final = json!([user(json!("x")), assistant(json!([]))]);
    assert_eq!(rule(MESSAGES, "", &with(empty_final)), None);
    let empty_string_final = json!([user(json!("x")), assistant(json!(""))]);
    assert_eq!(rule(MESSAGES, "", &with(empty_string_final)), None);
    for empty in [json!([]), json!("")] {
        let middle = json!([user(json!("x")), assistant(empty.clone()), user(json!("y"))]);
        assert_eq!(rule(MESSAGES, "", &with(middle)), Some("A3"), "{empty}");
        assert_eq!(
            rule(MESSAGES, "", &with(json!([user(empty.clone())]))),
            Some("A3")
        );
    }
    let empty_text = json!([user(json!([{"type": "text", "text": ""}]))]);
    assert_eq!(rule(MESSAGES, "", &with(empty_text)), Some("A3"));
}

#[test]
fn vertex_takes_the_model_in_the_path_and_no_fallbacks() {
    let body = json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 64,
        "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(rule(VERTEX, "", &body), None);
    let mut with_model = body.clone();
    with_model["model"] = json!("claude-opus-4-7");
    assert_eq!(rule(VERTEX, "", &with_model), Some("A2"));
    let mut fallbacks = body.clone();
    fallbacks["fallbacks"] = json!([{"model": "claude-sonnet-4-5"}]);
    assert_eq!(rule(VERTEX, FALLBACK_BETA, &fallbacks), Some("A8"));
    // Vertex takes its own API version only.
    for version in [json!("2023-06-01"), json!("bedrock-2023-05-31"), json!(1)] {
        let mut other = body.clone();
        other["anthropic_version"] = version.clone();
        assert_eq!(rule(VERTEX, "", &other), Some("A2"), "{version}");
    }
}

#[test]
fn fallbacks_rules() {
    let list = |models: &[&str]| {
        claude(json!({"fallbacks": models.iter().map(|m| json!({"model": m})).collect::<Vec<_>>()}))
    };
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &list(&["a", "b", "c"])), None);
    assert_eq!(
        rule(MESSAGES, "server-side-fallback-2026-06-01", &list(&["a"])),
        None
    );
    assert_eq!(rule(MESSAGES, "", &list(&["a"])), Some("A7"));
    assert_eq!(
        rule(MESSAGES, FALLBACK_BETA, &list(&["a", "b", "c", "d"])),
        Some("A6")
    );
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &list(&[])), Some("A6"));
    assert_eq!(
        rule(MESSAGES, FALLBACK_BETA, &list(&["a", "a"])),
        Some("A6")
    );
    assert_eq!(
        rule(MESSAGES, FALLBACK_BETA, &list(&["claude-opus-4-7"])),
        Some("A6")
    );
    let default = claude(json!({"fallbacks": "default"}));
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &default), None);
    assert_eq!(
        rule(MESSAGES, "server-side-fallback-2026-06-01", &default),
        Some("A7")
    );
    let other = claude(json!({"fallbacks": "all"}));
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &other), Some("A6"));
}

#[test]
fn credit_token_rules() {
    let object = json!({"token": "t", "mode": "best_effort"});
    let token = claude(json!({"fallback_credit_token": object}));
    assert_eq!(rule(MESSAGES, "fallback-credit-2026-07-01", &token), None);
    assert_eq!(
        rule(MESSAGES, "fallback-credit-2026-06-01", &token),
        Some("A10")
    );
    // The server-side fallback beta of the same date grants the same fields.
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &token), None);
    let bare = claude(json!({"fallback_credit_token": "t"}));
    assert_eq!(rule(MESSAGES, "fallback-credit-2026-06-01", &bare), None);
    assert_eq!(
        rule(MESSAGES, "server-side-fallback-2026-06-01", &bare),
        None
    );
    assert_eq!(rule(MESSAGES, "", &bare), Some("A10"));
    // A mode-less object is the bare string's `strict`.
    let modeless = claude(json!({"fallback_credit_token": {"token": "t"}}));
    assert_eq!(
        rule(MESSAGES, "fallback-credit-2026-07-01", &modeless),
        None
    );
    assert_eq!(
        rule(MESSAGES, "fallback-credit-2026-06-01", &modeless),
        Some("A10")
    );
    let bad_mode = claude(json!({"fallback_credit_token": {"token": "t", "mode": "lenient"}}));
    assert_eq!(
        rule(MESSAGES, "fallback-credit-2026-07-01", &bad_mode),
        Some("A10")
    );
    for fallbacks in [json!("default"), json!([{"model": "a"}])] {
        let both = claude(json!({"fallbacks": fallbacks, "fallback_credit_token": object}));
        let betas = "fallback-credit-2026-07-01, server-side-fallback-2026-07-01";
        assert_eq!(rule(MESSAGES, betas, &both), Some("A9"));
    }
}

#[test]
fn chat_rules() {
    let chat = |messages: Value| json!({"model": "gpt-4o", "messages": messages});
    let user = json!({"role": "user", "content": "x"});
    assert_eq!(rule(CHAT, "", &chat(json!([user]))), None);
    assert_eq!(rule(CHAT, "", &chat(json!([]))), Some("C2"));
    assert_eq!(
        rule(CHAT, "", &chat(json!([{"role": "model", "content": "x"}]))),
        Some("C2")
    );
    let call = json!({"role": "assistant", "content": null,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
    let answer = json!({"role": "tool", "tool_call_id": "c1", "content": "r"});
    assert_eq!(
        rule(CHAT, "", &chat(json!([user, call, answer, user]))),
        None
    );
    let stray = json!({"role": "tool", "tool_call_id": "c9", "content": "r"});
    assert_eq!(
        rule(CHAT, "", &chat(json!([user, call, stray]))),
        Some("C3")
    );
    assert_eq!(rule(CHAT, "", &chat(json!([user, answer]))), Some("C3"));
    assert_eq!(rule(CHAT, "", &chat(json!([user, call, user]))), Some("C3"));
    let mut n = chat(json!([user]));
    n["n"] = json!(0);
    assert_eq!(rule(CHAT, "", &n), Some("C4"));
    // Azure: the deployment in the path stands for the model.
    assert_eq!(rule(AZURE, "", &json!({"messages": [user]})), None);
    assert_eq!(rule(CHAT, "", &json!({"messages": [user]})), Some("C1"));
}

#[test]
fn responses_rules() {
    let body = |input: Value| json!({"model": "gpt-4o", "input": input});
    assert_eq!(rule(RESPONSES, "", &body(json!("hi"))), None);
    let items = json!([{"role": "user", "content": "x"},
        {"type": "function_call_output", "call_id": "c", "output": "r"}]);
    assert_eq!(rule(RESPONSES, "", &body(items)), None);
    assert_eq!(
        rule(
            RESPONSES,
            "",
            &body(json!([{"role": "tool", "content": "x"}]))
        ),
        Some("R2")
    );
    assert_eq!(rule(RESPONSES, "", &body(json!(7))), Some("R2"));
}

#[test]
fn gemini_rules() {
    let turn = |role: &str| json!({"role": role, "parts": [{"text": "x"}]});
    let body = |contents: Value| json!({"contents": contents});
    assert_eq!(
        rule(GEMINI, "", &body(json!([turn("user"), turn("model")]))),
        None
    );
    assert_eq!(rule(GEMINI, "", &body(json!([]))), Some("G1"));
    assert_eq!(
        rule(GEMINI, "", &body(json!([turn("assistant")]))),
        Some("G2")
    );
    assert_eq!(
        rule(GEMINI, "", &body(json!([{"role": "user", "parts": []}]))),
        Some("G2")
    );
    assert_eq!(
        rule(
            GEMINI,
            "",
            &body(json!([{"role": "user", "parts": [{"text": 5}]}]))
        ),
        Some("G2")
    );
    let mut count = body(json!([turn("user")]));
    count["generationConfig"] = json!({"candidateCount": 9});
    assert_eq!(rule(GEMINI, "", &count), Some("G3"));
}

#[test]
fn anthropic_tool_calls_are_answered_in_the_next_turn() {
    let ask = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "run", "input": {}}]});
    let answer = json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]});
    let user = json!({"role": "user", "content": "x"});
    // A model that takes a final assistant turn (A15).
    let messages = |list: Value| claude(json!({"model": "claude-sonnet-4-5", "messages": list}));
    assert_eq!(
        rule(MESSAGES, "", &messages(json!([user, ask, answer]))),
        None
    );
    // A call the model just made, not yet answered, ends the conversation.
    assert_eq!(rule(MESSAGES, "", &messages(json!([user, ask]))), None);
    assert_eq!(
        rule(MESSAGES, "", &messages(json!([user, ask, user]))),
        Some("A11")
    );
    assert_eq!(rule(MESSAGES, "", &messages(json!([answer]))), Some("A11"));
    let other = json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "ok"}]});
    assert_eq!(
        rule(MESSAGES, "", &messages(json!([user, ask, other]))),
        Some("A11")
    );
}

#[test]
fn anthropic_sampling_and_tool_definitions() {
    let tool = |name: &str| json!({"name": name, "input_schema": {"type": "object"}});
    assert_eq!(
        rule(
            MESSAGES,
            "",
            &claude(json!({"temperature": 1.0, "stop_sequences": ["END"],
            "tools": [tool("get_weather")], "tool_choice": {"type": "tool", "name": "get_weather"}}))
        ),
        None
    );
    assert_eq!(
        rule(MESSAGES, "", &claude(json!({"temperature": 1.5}))),
        Some("A12")
    );
    assert_eq!(
        rule(MESSAGES, "", &claude(json!({"stop_sequences": "END"}))),
        Some("A12")
    );
    assert_eq!(
        rule(
            MESSAGES,
            "",
            &claude(json!({"tools": [tool("get weather")]}))
        ),
        Some("A12")
    );
    assert_eq!(
        rule(MESSAGES, "", &claude(json!({"tools": [{"name": "f"}]}))),
        Some("A12")
    );
    // A server tool is named by Anthropic.
    let search = json!({"type": "web_search_20250305", "name": "web_search"});
    assert_eq!(
        rule(MESSAGES, "", &claude(json!({"tools": [search]}))),
        None
    );
    assert_eq!(
        rule(
            MESSAGES,
            "",
            &claude(json!({"tool_choice": {"type": "required"}}))
        ),
        Some("A12")
    );
}

#[test]
fn chat_sampling_and_tool_definitions() {
    let chat = |extra: Value| {
        let mut body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]});
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    let tool =
        |name: &str| json!({"type": "function", "function": {"name": name, "parameters": {}}});
    assert_eq!(
        rule(
            CHAT,
            "",
            &chat(json!({"stop": ["a", "b", "c", "d"], "temperature": 2,
            "tools": [tool("run")], "tool_choice": "required"}))
        ),
        None
    );
    assert_eq!(
        rule(CHAT, "", &chat(json!({"stop": ["a", "b", "c", "d", "e"]}))),
        Some("C5")
    );
    assert_eq!(
        rule(CHAT, "", &chat(json!({"temperature": 2.5}))),
        Some("C5")
    );
    assert_eq!(
        rule(CHAT, "", &chat(json!({"tools": [tool("run it")]}))),
        Some("C5")
    );
    assert_eq!(
        rule(
            CHAT,
            "",
            &chat(json!({"tools": [{"name": "run", "parameters": {}}]}))
        ),
        Some("C5")
    );
    assert_eq!(
        rule(CHAT, "", &chat(json!({"tool_choice": "any"}))),
        Some("C5")
    );
    assert_eq!(
        rule(
            CHAT,
            "",
            &chat(json!({"tool_choice": {"type": "function", "function": {"name": "run"}}}))
        ),
        None
    );
}

#[test]
fn gemini_generation_config_and_function_names() {
    let body = |extra: Value| {
        let mut body = json!({"contents": [{"role": "user", "parts": [{"text": "x"}]}]});
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    let declare = |name: &str| json!([{"functionDeclarations": [{"name": name}]}]);
    assert_eq!(
        rule(
            GEMINI,
            "",
            &body(
                json!({"generationConfig": {"stopSequences": ["a", "b", "c", "d", "e"],
            "temperature": 2.0}, "tools": declare("tools.run_v2")})
            )
        ),
        None
    );
    assert_eq!(
        rule(
            GEMINI,
            "",
            &body(json!({"generationConfig": {"stopSequences": ["a", "b", "c", "d", "e", "f"]}}))
        ),
        Some("G4")
    );
    assert_eq!(
        rule(
            GEMINI,
            "",
            &body(json!({"generationConfig": {"temperature": -1}}))
        ),
        Some("G4")
    );
    // Each API names functions as it says: 1 to 64 characters, a letter or
    // `_` first, then letters, digits, `_`, `.`, `-`; the Gemini API takes
    // `:` too, Vertex AI does not.
    let vertex = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent";
    let express = "/v1/publishers/google/models/gemini-2.5-pro:generateContent";
    let at_64 = format!("mcp__{}", "x".repeat(59));
    let at_65 = format!("{at_64}x");
    for (name, gemini, on_vertex) in [
        ("tools.run_v2", true, true),
        ("_private-run", true, true),
        ("2run", false, false),
        ("-run", false, false),
        ("mcp:files.read", true, false),
        ("mcp__files:read", true, false),
        ("run it", false, false),
        ("run/it", false, false),
        ("", false, false),
        (at_64.as_str(), true, true),
        (at_65.as_str(), false, false),
    ] {
        let sent = body(json!({"tools": declare(name)}));
        let says = |ok: bool| if ok { None } else { Some("G4") };
        assert_eq!(
            rule(GEMINI, "", &sent),
            says(gemini),
            "Gemini API: {name:?}"
        );
        assert_eq!(
            rule(vertex, "", &sent),
            says(on_vertex),
            "Vertex AI: {name:?}"
        );
        assert_eq!(
            rule(express, "", &sent),
            says(on_vertex),
            "Vertex AI express: {name:?}"
        );
    }
}

#[test]
fn a_post_to_a_path_no_provider_serves_is_a_404_unless_served() {
    let headers = http::HeaderMap::new();
    let unknown = check("POST", "/v1/other?key=k", &headers, b"{}").expect_err("no API has it");
    assert_eq!((unknown.rule, unknown.status().as_u16()), ("P1", 404));
    assert_eq!(unknown.api, None);
    // No key from the query in what is logged.
    assert_eq!(unknown.request, "POST /v1/other");
    let body: Value = serde_json::from_str(&unknown.body()).unwrap();
    assert_eq!(body["error"]["type"], "not_found_error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no provider serves"));
    let served = Contract::new().serving("/v1/other");
    assert!(served.check("POST", "/v1/other", &headers, b"{}").is_ok());
    assert!(check("GET", "/v1/models", &headers, b"").is_ok());
}

#[test]
fn a_real_endpoint_the_contract_does_not_check_is_not_implemented() {
    let headers = http::HeaderMap::new();
    let unchecked = |path: &str| {
        let broken = check("POST", path, &headers, b"{}").expect_err("not served by default");
        assert_eq!(
            (broken.rule, broken.status().as_u16()),
            ("P2", 501),
            "{path}"
        );
        assert!(broken.message.contains("not checked"), "{path}: {broken}");
        broken
    };
    // In the shape the path suggests, and never "no such endpoint".
    let openai: Value =
        serde_json::from_slice(unchecked("/v1/embeddings").response().body()).unwrap();
    assert_eq!(openai["error"]["type"], "server_error");
    assert!(openai["error"]["message"]
        .as_str()
        .unwrap()
        .contains("OpenAI's embeddings"));
    let anthropic: Value = serde_json::from_str(&unchecked("/v1/messages/batches").body()).unwrap();
    assert_eq!(anthropic["type"], "error");
    for path in [
        "/v1/messages/batches/msgbatch_1/cancel",
        "/v1/complete",
        "/v1/files",
        "/v1/moderations",
        "/openai/deployments/emb/embeddings?api-version=2024-10-21",
        "/v1/responses/compact",
        "/v1/responses/resp_1/cancel",
        "/v1beta/models/gemini-2.5-pro:countTokens",
        "/v1beta/models/text-embedding-004:embedContent",
    ] {
        unchecked(path);
    }
    // A test that answers one opts in: then it is not checked at all.
    let serving = Contract::new().serving("/v1/embeddings");
    assert!(serving
        .check("POST", "/v1/embeddings", &headers, b"not json")
        .is_ok());
    // Bedrock's own, on a Bedrock upstream; a first-party one is a 404 there.
    let bedrock = Contract::new().bedrock();
    let count = bedrock
        .check(
            "POST",
            "/model/anthropic.claude-opus-4-7/count-tokens",
            &headers,
            b"{}",
        )
        .unwrap_err();
    assert_eq!((count.rule, count.status().as_u16()), ("P2", 501));
    assert!(count.response().headers().contains_key("x-amzn-errortype"));
    let batches = bedrock
        .check("POST", "/v1/messages/batches", &headers, b"{}")
        .unwrap_err();
    assert_eq!(batches.rule, "P1");
}

#[test]
fn token_counting_takes_a_messages_body_without_max_tokens_or_stream() {
    const COUNT: &str = "/v1/messages/count_tokens?beta=true";
    let count = json!({"model": "claude-opus-4-7", "system": "s",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"name": "run", "input_schema": {"type": "object"}}]});
    assert_eq!(rule(COUNT, "", &count), None);
    let with = |key: &str, value: Value| {
        let mut body = count.clone();
        body[key] = value;
        body
    };
    // What a Messages body forwarded unchanged carries: the API's 400.
    let broken = check(
        "POST",
        COUNT,
        &http::HeaderMap::new(),
        &serde_json::to_vec(&with("max_tokens", json!(64))).unwrap(),
    )
    .unwrap_err();
    assert_eq!(
        (broken.rule, broken.api),
        ("A16", Some(Api::AnthropicCountTokens))
    );
    assert!(broken
        .message
        .starts_with("max_tokens: Extra inputs are not permitted"));
    assert_eq!(rule(COUNT, "", &with("stream", json!(true))), Some("A16"));
    let mut no_model = count.clone();
    no_model.as_object_mut().unwrap().remove("model");
    assert_eq!(rule(COUNT, "", &no_model), Some("A16"));
    // The messages are read as a Messages request's.
    assert_eq!(rule(COUNT, "", &with("messages", json!([]))), Some("A3"));
    let stray_result = json!([{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t9", "content": "r"}]}]);
    assert_eq!(
        rule(COUNT, "", &with("messages", stray_result)),
        Some("A11")
    );
    let bad_tool = json!([{"name": "run it", "input_schema": {"type": "object"}}]);
    assert_eq!(rule(COUNT, "", &with("tools", bad_tool)), Some("A12"));
    // Vertex AI's keeps `model` in the body, beside `anthropic_version`.
    let vertex =
        "/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict";
    let on_vertex = with("anthropic_version", json!("vertex-2023-10-16"));
    assert_eq!(rule(vertex, "", &on_vertex), None);
    assert_eq!(rule(vertex, "", &with("max_tokens", json!(8))), Some("A16"));
}

#[test]
fn a_broken_request_is_answered_in_the_providers_shape() {
    let broken = |path: &str| {
        check("POST", path, &http::HeaderMap::new(), b"not json")
            .expect_err("not JSON breaks every API")
    };
    let anthropic: Value = serde_json::from_str(&broken(MESSAGES).body()).unwrap();
    assert_eq!(anthropic["type"], "error");
    assert_eq!(anthropic["error"]["type"], "invalid_request_error");
    let openai: Value = serde_json::from_str(&broken(CHAT).body()).unwrap();
    assert_eq!(openai["error"]["type"], "invalid_request_error");
    assert!(openai["error"].get("param").is_some() && openai["error"].get("code").is_some());
    let gemini: Value = serde_json::from_str(&broken(GEMINI).body()).unwrap();
    assert_eq!(gemini["error"]["code"], 400);
    assert_eq!(gemini["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(broken(MESSAGES).status(), 400);
}

/// `A13`-`A15`: the keys of a `fallbacks` entry, each requested model's
/// allowed fallback models, and the models that reject a final assistant
/// turn unless a credit token authorises it.
#[test]
fn fallback_entries_allowed_models_and_prefill_by_model() {
    let fable = |mut extra: Value| {
        extra["model"] = json!("claude-fable-5");
        claude(extra)
    };
    let entry = json!({"model": "claude-opus-4-8", "max_tokens": 9, "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"}, "speed": "standard"});
    let ok = fable(json!({"fallbacks": [entry]}));
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &ok), None);
    let extra_key = fable(json!({"fallbacks": [{"model": "claude-opus-4-8", "temperature": 0}]}));
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &extra_key), Some("A13"));

    let outside = fable(json!({"fallbacks": [{"model": "claude-sonnet-4-5"}]}));
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &outside), Some("A14"));
    for model in ["claude-sonnet-5", "claude-haiku-4-5-20251001"] {
        for fallbacks in [json!("default"), json!([{"model": "claude-opus-4-8"}])] {
            let none = claude(json!({"model": model, "fallbacks": fallbacks}));
            assert_eq!(rule(MESSAGES, FALLBACK_BETA, &none), Some("A14"), "{model}");
        }
    }
    // A model whose list the contract does not know is not checked.
    let unknown = claude(json!({"fallbacks": [{"model": "claude-sonnet-4-5"}]}));
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &unknown), None);

    let prefill = json!([{"role": "user", "content": "x"}, {"role": "assistant", "content": "{"}]);
    for model in [
        "claude-fable-5",
        "claude-opus-4-7",
        "claude-sonnet-4-6",
        "claude-opus-5",
    ] {
        let body = claude(json!({"model": model, "messages": prefill}));
        assert_eq!(rule(MESSAGES, "", &body), Some("A15"), "{model}");
    }
    for model in ["claude-haiku-4-5", "claude-sonnet-4-5", "claude-x"] {
        let body = claude(json!({"model": model, "messages": prefill}));
        assert_eq!(rule(MESSAGES, "", &body), None, "{model}");
    }
    let token = json!({"token": "t", "mode": "best_effort"});
    let authorised = fable(json!({"messages": prefill, "fallback_credit_token": token}));
    assert_eq!(
        rule(MESSAGES, "fallback-credit-2026-07-01", &authorised),
        None
    );
    // Valid sent to every model named: a prefill names no model that rejects it.
    let named = claude(json!({"model": "claude-sonnet-4-5", "messages": prefill,
        "fallbacks": [{"model": "claude-opus-4-8"}]}));
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &named), Some("A15"));
    let takes_it = claude(json!({"model": "claude-sonnet-4-5", "messages": prefill,
        "fallbacks": [{"model": "claude-haiku-4-5"}]}));
    assert_eq!(rule(MESSAGES, FALLBACK_BETA, &takes_it), None);
}

/// A request the Messages API rejects (no `max_tokens`) through an
/// [`answering`](support::answering) upstream's service, from a task that
/// keeps the service after the test has its answer, as a guard's keep-alive
/// and live-thinking tasks keep theirs. The runtime drops that task after
/// the test returns, where a panic fails nothing: the check the test holds
/// is what fails it.
#[tokio::test]
#[should_panic(expected = "the upstream received requests the real API rejects")]
async fn a_violation_fails_the_test_while_a_task_still_holds_the_upstreams_service() {
    use tower::{Service, ServiceExt};

    let upstream = support::answering(|_request| async {
        support::sse_response(support::Chunked::chunks(Vec::new()))
    });
    let mut service = upstream.service();
    let (answered, status) = tokio::sync::oneshot::channel();
    let (_held, release) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let broken = json!({"model": "claude-opus-4-7",
            "messages": [{"role": "user", "content": "hi"}]});
        let request = support::post(MESSAGES, &broken);
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        let _ = answered.send(response.status());
        // Held until the runtime drops this task, after the test.
        let _ = release.await;
        drop(service);
    });
    assert_eq!(status.await.unwrap(), 400, "the provider's 400");
}
