//! `--simulate` through the real proxy on loopback: each of the four wire
//! APIs, streamed and not, is refused on a conversation's first attempt with
//! that API's empty-refusal signal and rescued, with no key and no network;
//! the simulator's own errors come in the API's shape. Under `--strict` (on
//! in every test but the one of the permissive simulator's own errors), the
//! client's requests and the guard's rescues are held to the providers'
//! rules, and a broken request gets the provider's own answer.

use std::time::Duration;

use refusal_guard::header;
use refusal_guard_testkit::{ANSWER, CONTRACT_VIOLATIONS};
use serde_json::{json, Value};
use support::binary::Running;
use support::prometheus::sample;
use support::proxy::{client, run_proxy};

/// The built binary, as users run it.
const BIN: &str = env!("CARGO_BIN_EXE_refusal-guard");

/// Posts `body` to `path` and returns the recovery header and the body.
async fn post(base: &str, path: &str, body: &Value) -> (u16, Option<String>, String) {
    let response = client()
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .timeout(std::time::Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let recovery = response
        .headers()
        .get(header::RECOVERY)
        .map(|v| v.to_str().unwrap().to_owned());
    (status, recovery, response.text().await.unwrap())
}

/// What the simulator answered a request it serves no API for: the status,
/// whether the guard's error header is on it, and the body as JSON.
async fn unserved(request: reqwest::RequestBuilder) -> (u16, bool, Value) {
    let response = request
        .timeout(std::time::Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let flagged = response.headers().get(header::ERROR).is_some();
    let json = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    (status, flagged, json)
}

/// The `data:` payloads of an SSE body, as JSON.
fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| data.trim() != "[DONE]")
        .map(|data| serde_json::from_str(data.trim()).unwrap())
        .collect()
}

/// Asserts a rescued answer: status 200, the recovery header, and `text`
/// (the answer as the API's fields spell it) the simulated answer.
fn assert_rescued(what: &str, (status, recovery, _): &(u16, Option<String>, String), text: &str) {
    assert_eq!(*status, 200, "{what}");
    let recovery = recovery.as_deref().unwrap_or_default();
    assert!(recovery.starts_with("rescued"), "{what}: {recovery:?}");
    assert_eq!(text, ANSWER, "{what}");
}

#[tokio::test]
async fn every_api_is_refused_then_rescued_streamed_and_not() {
    let base = run_proxy(&["--simulate", "--strict"]).await;
    for stream in [false, true] {
        let user = format!("Audit my SSH config (stream {stream})");

        let body = json!({"model": "claude-opus-4-7", "max_tokens": 64, "stream": stream,
            "messages": [{"role": "user", "content": user}]});
        let done = post(&base, "/v1/messages", &body).await;
        let text: String = if stream {
            events(&done.2)
                .iter()
                .filter_map(|e| e["delta"]["text"].as_str().map(str::to_owned))
                .collect()
        } else {
            let message: Value = serde_json::from_str(&done.2).unwrap();
            message["content"][0]["text"].as_str().unwrap().to_owned()
        };
        assert_rescued("messages", &done, &text);

        let body = json!({"model": "gpt-4o", "stream": stream,
            "messages": [{"role": "user", "content": user}]});
        let done = post(&base, "/v1/chat/completions", &body).await;
        let text: String = if stream {
            events(&done.2)
                .iter()
                .filter_map(|e| {
                    e["choices"][0]["delta"]["content"]
                        .as_str()
                        .map(str::to_owned)
                })
                .collect()
        } else {
            let completion: Value = serde_json::from_str(&done.2).unwrap();
            let message = &completion["choices"][0]["message"]["content"];
            message.as_str().unwrap().to_owned()
        };
        assert_rescued("chat completions", &done, &text);

        let body = json!({"model": "gpt-4o", "stream": stream, "input": user});
        let done = post(&base, "/v1/responses", &body).await;
        let text: String = if stream {
            let events = events(&done.2);
            assert_eq!(events.last().unwrap()["type"], "response.completed");
            events
                .iter()
                .filter(|e| e["type"] == "response.output_text.delta")
                .filter_map(|e| e["delta"].as_str().map(str::to_owned))
                .collect()
        } else {
            let response: Value = serde_json::from_str(&done.2).unwrap();
            assert_eq!(response["status"], "completed");
            let text = &response["output"][0]["content"][0]["text"];
            text.as_str().unwrap().to_owned()
        };
        assert_rescued("responses", &done, &text);

        let body = json!({"contents": [{"role": "user", "parts": [{"text": user}]}]});
        let path = if stream {
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        } else {
            "/v1beta/models/gemini-2.5-pro:generateContent"
        };
        let done = post(&base, path, &body).await;
        let chunks = if stream {
            events(&done.2)
        } else {
            vec![serde_json::from_str(&done.2).unwrap()]
        };
        let text: String = chunks
            .iter()
            .filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str())
            .collect();
        assert_rescued("gemini", &done, &text);
    }
}

#[tokio::test]
async fn a_later_request_of_a_conversation_is_answered_without_recovery() {
    let base = run_proxy(&["--simulate", "--strict"]).await;
    let body = json!({"model": "gpt-4o", "input": "One conversation, asked twice."});
    let first = post(&base, "/v1/responses", &body).await;
    assert!(first.1.as_deref().unwrap().starts_with("rescued"));
    let again = post(&base, "/v1/responses", &body).await;
    assert_eq!(again.0, 200);
    assert_eq!(again.1, None, "answered at once");
}

#[tokio::test]
async fn the_simulators_own_errors_come_in_each_apis_shape() {
    let base = run_proxy(&["--simulate"]).await;
    let gemini = format!("{base}/v1beta/models/gemini-2.5-pro:generateContent");
    let (status, flagged, json) = unserved(client().get(gemini)).await;
    assert_eq!(status, 405);
    assert!(flagged);
    assert_eq!(json["error"]["code"], 405);
    assert!(json["error"]["status"].is_string());

    let embeddings = client().post(format!("{base}/v1/embeddings")).body("{}");
    let (status, flagged, json) = unserved(embeddings).await;
    assert_eq!(status, 404);
    assert!(flagged);
    assert_eq!(
        json["error"]["type"], "invalid_request_error",
        "OpenAI's shape"
    );

    let (status, _, json) = unserved(client().get(format!("{base}/v1/messages"))).await;
    assert_eq!(status, 405);
    assert_eq!(json["type"], "error", "Anthropic's shape");
}

#[tokio::test]
async fn the_strict_simulator_answers_a_broken_request_as_the_provider_does() {
    let base = run_proxy(&["--simulate", "--strict"]).await;
    // No `max_tokens`: the Messages API's 400, in its shape, as the
    // provider's (no error header of the guard's), and nothing rescued.
    let body = json!({"model": "claude-opus-4-7",
        "messages": [{"role": "user", "content": "Audit my SSH config"}]});
    let (status, recovery, text) = post(&base, "/v1/messages", &body).await;
    assert_eq!((status, recovery), (400, None), "{text}");
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["error"]["type"], "invalid_request_error");
    assert!(json["error"]["message"].as_str().unwrap().contains("A2"));

    // A tool result not answering a call of the turn before: OpenAI's 400.
    let body = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "x"},
        {"role": "tool", "tool_call_id": "call_9", "content": "r"}]});
    let (status, _, text) = post(&base, "/v1/chat/completions", &body).await;
    assert_eq!(status, 400, "{text}");
    let json: Value = serde_json::from_str(&text).unwrap();
    assert!(json["error"]["message"].as_str().unwrap().contains("C3"));

    // A path no provider serves: the provider's 404, not the simulator's own.
    let unknown = client().post(format!("{base}/v1/unknown")).body("{}");
    let (status, flagged, json) = unserved(unknown).await;
    assert_eq!(status, 404);
    assert!(!flagged);
    assert!(json["error"]["message"].as_str().unwrap().contains("P1"));

    // An endpoint OpenAI serves but neither the contract nor the simulator
    // does: 501, saying so, never "no such endpoint".
    let embeddings = client().post(format!("{base}/v1/embeddings")).body("{}");
    let (status, flagged, json) = unserved(embeddings).await;
    assert_eq!(status, 501);
    assert!(!flagged);
    let message = json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("P2") && message.contains("not checked"),
        "{message}"
    );
}

#[tokio::test]
async fn the_strict_simulator_counts_tokens_as_the_messages_api_does() {
    let base = run_proxy(&["--simulate", "--strict"]).await;
    let body = json!({"model": "claude-opus-4-7", "system": "Be brief.",
        "messages": [{"role": "user", "content": "Audit my SSH config"}]});
    let (status, recovery, text) = post(&base, "/v1/messages/count_tokens", &body).await;
    assert_eq!((status, recovery), (200, None), "{text}");
    let counted: Value = serde_json::from_str(&text).unwrap();
    let tokens = counted["input_tokens"].as_u64().expect("a count");
    assert!(tokens > 0, "{counted}");
    // Counting is no attempt of the conversation: its first request is
    // still refused, and rescued.
    let mut messages = body.clone();
    messages["max_tokens"] = json!(64);
    let first = post(&base, "/v1/messages", &messages).await;
    assert!(
        first.1.as_deref().unwrap().starts_with("rescued"),
        "{first:?}"
    );

    // A Messages body sent to it unchanged: the API's 400.
    let (status, _, text) = post(&base, "/v1/messages/count_tokens", &messages).await;
    assert_eq!(status, 400, "{text}");
    let json: Value = serde_json::from_str(&text).unwrap();
    let message = json["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("max_tokens: Extra inputs are not permitted"),
        "{message}"
    );
    assert!(message.contains("A16"), "{message}");
}

/// `GET /metrics` of the admin listener at `admin`: the strict simulator's
/// contract violations so far, `None` when the counter is not there.
async fn violations_counted(admin: &str) -> Option<f64> {
    let text = client()
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    sample(&text, CONTRACT_VIOLATIONS, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_violation_fails_the_run_though_the_log_says_only_errors() {
    let args = [
        "--simulate",
        "--strict",
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--log",
        "off",
    ];
    let good = json!({"model": "claude-opus-4-7", "max_tokens": 64,
        "messages": [{"role": "user", "content": "Audit my SSH config"}]});
    // The control: a run whose requests keep the rules counts none and
    // stops with status 0.
    let clean = Running::spawn_env(BIN, &args, &[("RUST_LOG", "error")]);
    let (api, admin) = (
        clean.announced("listening on http://"),
        clean.announced("admin on http://"),
    );
    assert_eq!(
        violations_counted(&admin).await,
        Some(0.0),
        "counted from the start"
    );
    let (status, _, text) = post(&api, "/v1/messages", &good).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(violations_counted(&admin).await, Some(0.0));
    let (code, stderr) = clean.terminated(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{stderr}");

    let broken = Running::spawn_env(BIN, &args, &[("RUST_LOG", "error")]);
    let (api, admin) = (
        broken.announced("listening on http://"),
        broken.announced("admin on http://"),
    );
    assert_eq!(violations_counted(&admin).await, Some(0.0));
    // No `max_tokens`: the Messages API's 400.
    let body = json!({"model": "claude-opus-4-7",
        "messages": [{"role": "user", "content": "Audit my SSH config"}]});
    let (status, _, text) = post(&api, "/v1/messages", &body).await;
    assert_eq!(status, 400, "{text}");
    assert_eq!(violations_counted(&admin).await, Some(1.0));
    let (code, stderr) = broken.terminated(Duration::from_secs(20));
    assert_eq!(code, Some(3), "{stderr}");
    // The warning naming the rule was filtered out, as RUST_LOG asked; the
    // counter and the status said it all the same.
    assert!(!stderr.contains("A2"), "{stderr}");
    assert!(
        stderr.contains("answered 1 request(s) that break the providers' rules"),
        "{stderr}"
    );
}
