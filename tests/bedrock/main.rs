//! Claude on Bedrock: the AWS event-stream framer at every split point,
//! recovery through the SigV4 layer against a scripted Bedrock runtime that
//! verifies every signature, and the proxy in gateway mode (its client key).

mod framing;
mod gateway;
mod recovery;

/// The scripted runtime keeps Bedrock's documented request rules: what the
/// guard's rewrites could break is answered with Bedrock's 400.
#[test]
fn the_bedrock_contract_rejects_what_bedrock_rejects() {
    use serde_json::json;
    use support::contract::check_bedrock;
    let headers = http::HeaderMap::new();
    let rule = |path: &str, body: serde_json::Value| {
        let bytes = serde_json::to_vec(&body).unwrap();
        check_bedrock("POST", path, &headers, &bytes)
            .err()
            .map(|v| v.rule)
    };
    let invoke = "/model/us.anthropic.claude-opus-4-7-v1:0/invoke";
    let ok = json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(rule(invoke, ok.clone()), None);
    let with = |field: &str, value: serde_json::Value| {
        let mut body = ok.clone();
        body[field] = value;
        body
    };
    assert_eq!(rule(invoke, with("model", json!("m"))), Some("B1"));
    assert_eq!(rule(invoke, with("anthropic_beta", json!("b"))), Some("B1"));
    assert_eq!(
        rule(invoke, with("fallbacks", json!([{"model": "m"}]))),
        Some("B2")
    );
    let mantle = "/anthropic/v1/messages";
    let mut first_party = with("fallback_credit_token", json!("t"));
    first_party["model"] = json!("claude-opus-4-7");
    assert_eq!(rule(mantle, first_party), Some("B2"));
    let converse = "/model/m/converse-stream";
    let user = json!({"role": "user", "content": [{"text": "hi"}]});
    assert_eq!(rule(converse, json!({"messages": [user.clone()]})), None);
    assert_eq!(
        rule(converse, json!({"messages": [user.clone(), user]})),
        Some("B3")
    );
}
