//! The Bedrock rules of the test upstreams' request contract: each passes
//! a request the runtime takes and catches one it rejects.

use serde_json::{json, Value};
use support::contract::{check, Api, Contract};

const INVOKE: &str = "/model/us.anthropic.claude-opus-4-7-v1%3A0/invoke-with-response-stream";
const CONVERSE: &str = "/model/us.anthropic.claude-opus-4-7-v1:0/converse";
const MESSAGES: &str = "/anthropic/v1/messages";

/// The rule a request to a Bedrock upstream breaks, if any.
fn rule(path: &str, body: &Value) -> Option<&'static str> {
    let bytes = serde_json::to_vec(body).unwrap();
    Contract::new()
        .bedrock()
        .check("POST", path, &http::HeaderMap::new(), &bytes)
        .err()
        .map(|v| v.rule)
}

fn invoke(extra: Value) -> Value {
    let mut body = json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
        "messages": [{"role": "user", "content": "x"}]});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    body
}

#[test]
fn bedrock_paths_are_told_apart_from_first_party_messages() {
    assert_eq!(Api::of("POST", INVOKE), Some(Api::BedrockInvoke));
    assert_eq!(
        Api::of("POST", "/model/m/converse-stream"),
        Some(Api::BedrockConverse)
    );
    // Only an upstream that is Bedrock reads this path as Bedrock's.
    assert_eq!(Api::of("POST", MESSAGES), Some(Api::Anthropic));
    let fallbacks = serde_json::to_vec(&json!({"model": "claude-opus-4-7", "max_tokens": 8,
        "messages": [{"role": "user", "content": "x"}], "fallbacks": [{"model": "claude-sonnet-4-5"}]}))
    .unwrap();
    let mut beta = http::HeaderMap::new();
    beta.insert(
        "anthropic-beta",
        "server-side-fallback-2026-07-01".parse().unwrap(),
    );
    assert!(check("POST", MESSAGES, &beta, &fallbacks).is_ok());
    assert_eq!(
        rule(MESSAGES, &serde_json::from_slice(&fallbacks).unwrap()),
        Some("B2")
    );
    assert_eq!(Api::of("POST", "/v1/messages"), Some(Api::Anthropic));
    assert_eq!(Api::of("GET", "/inference-profiles"), None);
}

#[test]
fn invoke_model_takes_a_bedrock_body_only() {
    assert_eq!(rule(INVOKE, &invoke(json!({}))), None);
    let documented = json!({"anthropic_beta": ["interleaved-thinking-2025-05-14"]});
    assert_eq!(rule(INVOKE, &invoke(documented)), None);
    // An unknown beta, and first-party betas Bedrock does not take.
    for beta in [
        "a-beta",
        "server-side-fallback-2026-07-01",
        "fallback-credit-2026-07-01",
    ] {
        let betas = json!({"anthropic_beta": [beta]});
        assert_eq!(rule(INVOKE, &invoke(betas)), Some("B1"), "{beta}");
    }
    assert_eq!(
        rule(INVOKE, &invoke(json!({"model": "claude-opus-4-7"}))),
        Some("B1")
    );
    assert_eq!(rule(INVOKE, &invoke(json!({"stream": true}))), Some("B1"));
    // Bedrock's own version only: not the `2026-10-21` a later SDK sends,
    // which the ARN-versioned models InvokeModel serves do not support.
    assert_eq!(
        rule(INVOKE, &invoke(json!({"anthropic_version": "2026-10-21"}))),
        Some("B1")
    );
    assert_eq!(
        rule(INVOKE, &invoke(json!({"anthropic_version": "2023-06-01"}))),
        Some("B1")
    );
    assert_eq!(
        rule(
            INVOKE,
            &invoke(json!({"anthropic_version": "vertex-2023-10-16"}))
        ),
        Some("B1")
    );
    assert_eq!(
        rule(INVOKE, &invoke(json!({"anthropic_beta": "a-beta"}))),
        Some("B1")
    );
    // Consecutive assistant messages are one turn, its end the prefill.
    let two_prefills = json!({"messages": [{"role": "user", "content": "x"},
        {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b "}]});
    assert_eq!(rule(INVOKE, &invoke(two_prefills)), Some("A5"));
    // Bedrock, unlike the first party, wants a user turn first.
    let assistant_first = json!({"messages": [{"role": "assistant", "content": "a"},
        {"role": "user", "content": "x"}]});
    assert_eq!(rule(INVOKE, &invoke(assistant_first.clone())), Some("A3"));
    let mut messages = assistant_first;
    messages["model"] = json!("claude-opus-4-7");
    messages["max_tokens"] = json!(8);
    assert_eq!(rule(MESSAGES, &messages), Some("A3"));
    // Mid-conversation system messages: on the Messages API on Bedrock,
    // not on InvokeModel.
    let system = json!({"messages": [{"role": "user", "content": "x"},
        {"role": "system", "content": "be brief"}]});
    assert_eq!(rule(INVOKE, &invoke(system.clone())), Some("A3"));
    let mut messages = system;
    messages["model"] = json!("claude-opus-4-7");
    messages["max_tokens"] = json!(8);
    assert_eq!(rule(MESSAGES, &messages), None);
}

#[test]
fn no_server_side_fallback_and_credit_only_under_bedrocks_beta() {
    let fallbacks = json!({"fallbacks": [{"model": "claude-sonnet-4-5"}]});
    assert_eq!(rule(INVOKE, &invoke(fallbacks.clone())), Some("B2"));
    let token = json!({"fallback_credit_token": "tok"});
    assert_eq!(rule(INVOKE, &invoke(token.clone())), Some("B2"));
    let credit = json!({"fallback_credit_token": "tok",
        "anthropic_beta": ["fallback-credit-2026-06-09"]});
    assert_eq!(rule(INVOKE, &invoke(credit)), None);
    let object_form = json!({"fallback_credit_token": {"token": "tok", "mode": "strict"},
        "anthropic_beta": ["fallback-credit-2026-06-09"]});
    assert_eq!(rule(INVOKE, &invoke(object_form)), Some("B2"));
    let mut messages = json!({"model": "claude-opus-4-7", "max_tokens": 64,
        "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(rule(MESSAGES, &messages), None);
    messages["fallbacks"] = fallbacks["fallbacks"].clone();
    assert_eq!(rule(MESSAGES, &messages), Some("B2"));
    let mut credited = invoke(json!({}));
    credited["model"] = json!("claude-opus-4-7");
    credited
        .as_object_mut()
        .unwrap()
        .remove("anthropic_version");
    credited["fallback_credit_token"] = json!("tok");
    assert_eq!(rule(MESSAGES, &credited), Some("B2"));
}

#[test]
fn the_messages_api_on_bedrock_takes_only_bedrocks_betas_in_its_header() {
    let body = serde_json::to_vec(&json!({"model": "claude-opus-4-7", "max_tokens": 64,
        "messages": [{"role": "user", "content": "x"}]}))
    .unwrap();
    let with_betas = |path: &str, betas: &str| {
        let mut headers = http::HeaderMap::new();
        headers.insert("anthropic-beta", betas.parse().unwrap());
        Contract::new()
            .bedrock()
            .check("POST", path, &headers, &body)
            .err()
    };
    let documented = "context-1m-2025-08-07, interleaved-thinking-2025-05-14";
    assert!(with_betas(MESSAGES, documented).is_none());
    // First-party betas, and any Bedrock does not know, in the header:
    // Bedrock's "invalid beta flag", in Bedrock's shape.
    for beta in [
        "server-side-fallback-2026-07-01",
        "fallback-credit-2026-07-01",
        "context-1m-2025-08-07,a-beta",
    ] {
        let broken = with_betas(MESSAGES, beta).expect("an unknown beta");
        assert_eq!(
            (broken.rule, broken.api),
            ("B5", Some(Api::BedrockMessages)),
            "{beta}"
        );
        assert!(broken.message.contains("invalid beta flag"), "{broken}");
        assert!(broken.response().headers().contains_key("x-amzn-errortype"));
    }
    // InvokeModel takes its betas in the body; a header there is not read.
    let invoke_body = serde_json::to_vec(&invoke(json!({}))).unwrap();
    let mut headers = http::HeaderMap::new();
    headers.insert("anthropic-beta", "a-beta".parse().unwrap());
    assert!(Contract::new()
        .bedrock()
        .check("POST", INVOKE, &headers, &invoke_body)
        .is_ok());
    // On a first-party upstream the same path is the first party's.
    let mut headers = http::HeaderMap::new();
    headers.insert("anthropic-beta", "a-beta".parse().unwrap());
    assert!(check("POST", MESSAGES, &headers, &body).is_ok());
}

#[test]
fn converse_turns_alternate_and_blocks_are_unions() {
    let turn = |role: &str, block: Value| json!({"role": role, "content": [block]});
    let body =
        |messages: Value| json!({"messages": messages, "inferenceConfig": {"maxTokens": 64}});
    let text = json!({"text": "x"});
    let ok = body(json!([
        turn("user", text.clone()),
        turn("assistant", text.clone())
    ]));
    assert_eq!(rule(CONVERSE, &ok), None);
    let twice = body(json!([
        turn("user", text.clone()),
        turn("user", text.clone())
    ]));
    assert_eq!(rule(CONVERSE, &twice), Some("B3"));
    let typed = body(json!([turn("user", json!({"type": "text", "text": "x"}))]));
    assert_eq!(rule(CONVERSE, &typed), Some("B3"));
    let empty = body(json!([{"role": "user", "content": []}]));
    assert_eq!(rule(CONVERSE, &empty), Some("B3"));
    let mut zero = body(json!([turn("user", text)]));
    zero["inferenceConfig"]["maxTokens"] = json!(0);
    assert_eq!(rule(CONVERSE, &zero), Some("B3"));
}

#[test]
fn converse_answers_every_tool_use_in_the_next_message() {
    let body = |messages: Value| json!({"messages": messages});
    let user = |block: Value| json!({"role": "user", "content": [block]});
    let text = json!({"text": "x"});
    let call = |id: &str| json!({"toolUse": {"toolUseId": id, "name": "grep", "input": {}}});
    let result = |id: &str| json!({"toolResult": {"toolUseId": id, "content": [{"text": "r"}]}});
    let asked = json!({"role": "assistant", "content": [call("t1"), call("t2")]});
    let answered = json!({"role": "user", "content": [result("t1"), result("t2")]});
    let ok = body(json!([user(text.clone()), asked, answered]));
    assert_eq!(rule(CONVERSE, &ok), None);
    let half = body(json!([user(text.clone()), asked, user(result("t1"))]));
    assert_eq!(rule(CONVERSE, &half), Some("B4"));
    let stray = body(json!([user(result("t9"))]));
    assert_eq!(rule(CONVERSE, &stray), Some("B4"));
    let unanswered = body(json!([user(text.clone()), asked, user(text)]));
    assert_eq!(rule(CONVERSE, &unanswered), Some("B4"));
}

#[test]
fn a_bedrock_upstream_serves_bedrock_paths_only() {
    let broken = Contract::new()
        .bedrock()
        .check("POST", "/v1/messages", &http::HeaderMap::new(), b"{}")
        .unwrap_err();
    assert_eq!((broken.rule, broken.status().as_u16()), ("P1", 404));
    assert!(broken.response().headers().contains_key("x-amzn-errortype"));
    let listing =
        Contract::new()
            .bedrock()
            .check("GET", "/inference-profiles", &http::HeaderMap::new(), b"");
    assert!(listing.is_ok());
}

#[test]
fn a_broken_bedrock_request_is_answered_in_bedrocks_shape() {
    let broken = Contract::new()
        .bedrock()
        .check("POST", INVOKE, &http::HeaderMap::new(), b"not json")
        .unwrap_err();
    let body: Value = serde_json::from_str(&broken.body()).unwrap();
    assert!(body["message"].as_str().unwrap().contains("B1"));
    assert!(body.get("error").is_none() && broken.api == Some(Api::BedrockInvoke));
    assert_eq!(
        broken.response().headers()["x-amzn-errortype"],
        "ValidationException"
    );
}
