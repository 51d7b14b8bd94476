//! Issue 14, items 1, 4 and 5 through the real proxy (`run` from flags, as
//! `proxy/examples/proxy.rs`) over a scripted loopback upstream: a policy per
//! refusal category (OpenAI's policy errors among them), fallback credit
//! off, the conversation header never upstream, the
//! `refusal-guard-recovery` header on recovered responses only, and the
//! trace a sticky route leaves when it ends.

use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use refusal_guard::header;
use refusal_guard::telemetry::{Fanout, JsonlSink, RouteRestored, TelemetrySink};
use refusal_guard::RefusalGuardLayer;
use refusal_guard_proxy::Options;
use refusal_guard_proxy::Report;
use serde_json::{json, Value};
use support::events::*;
use support::proxy::{client, run_proxy};
use support::raw_upstream::{chunk, head_with, last_chunk, whole, Act, RawRequest, RawUpstream};
use support::*;
use tower::Layer;

const OPUS: &str = "claude-opus-4-7";
const SONNET: &str = "claude-sonnet-4-5";
const HAIKU: &str = "claude-haiku-4-5";

/// A JSON refusal of `category`, with a credit token when given.
fn json_refusal(category: &str, token: Option<&str>) -> Value {
    let mut details = json!({"type": "refusal", "category": category, "explanation": null});
    if let Some(token) = token {
        details["fallback_credit_token"] = json!(token);
        details["fallback_has_prefill_claim"] = json!(false);
    }
    json!({"id": "msg_refused", "type": "message", "role": "assistant", "model": OPUS,
        "content": [], "stop_reason": "refusal", "stop_details": details,
        "usage": {"input_tokens": 10, "output_tokens": 0}})
}

fn json_answer(model: &str) -> Value {
    json!({"id": "msg_ok", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": format!("answer from {model}")}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 4}})
}

/// What the scripted upstream does with a Messages request: the original
/// (on the client's model, no note, no `fallbacks`) is refused with the
/// category its user text names (`refuse:CATEGORY`); every recovery is
/// answered, by the model it asks for. Streams when the request does.
fn reply(request: &RawRequest) -> Vec<Act> {
    let json = request.json();
    let model = json["model"].as_str().unwrap_or_default().to_owned();
    let text = json.to_string();
    let stream = json["stream"] == json!(true);
    let recovery =
        model != OPUS || json.get("fallbacks").is_some() || text.contains("[refusal-guard]");
    let category = json["messages"][0]["content"]
        .as_str()
        .and_then(|t| t.strip_prefix("refuse:"))
        .map(str::to_owned);
    let (body, content_type) = match (recovery, category, stream) {
        (false, Some(category), true) => (
            anthropic_stream(&think_then_refuse(OPUS, &category)),
            "text/event-stream",
        ),
        (false, Some(category), false) => (
            Bytes::from(json_refusal(&category, None).to_string()),
            "application/json",
        ),
        (_, _, true) => (
            anthropic_stream(&text_answer(&model, &format!("answer from {model}"))),
            "text/event-stream",
        ),
        (_, _, false) => (
            Bytes::from(json_answer(&model).to_string()),
            "application/json",
        ),
    };
    vec![Act::Write(whole(200, content_type, &body))]
}

fn refusing(category: &str, stream: bool) -> Value {
    messages_request(OPUS, stream, &format!("refuse:{category}"))
}

async fn post(base: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{base}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-test-key")
        .header("anthropic-version", "2023-06-01")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// The requests the upstream received since `from`.
fn since(upstream: &RawUpstream, from: usize) -> Vec<Value> {
    upstream.requests()[from..]
        .iter()
        .map(RawRequest::json)
        .collect()
}

// ---- a policy per category -------------------------------------------------

#[tokio::test]
async fn the_policy_sends_each_category_down_its_own_path() {
    let upstream = RawUpstream::start(|_, request| reply(request)).await;
    let base = run_proxy(&[
        "--upstream",
        &upstream.url(),
        "--chain",
        &format!("{OPUS}={SONNET},{HAIKU}"),
        "--retarget",
        &format!("{SONNET},{HAIKU}"),
        "--policy",
        "bio=stop; cyber=fallback; frontier_llm=retarget; SAFETY=rescue,fallback; *=rescue",
    ])
    .await;

    // bio: stop. One request upstream; the client gets the refusal as sent.
    let response = post(&base, &refusing("bio", false)).await;
    assert!(response.headers().get(header::RECOVERY).is_none());
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body, json_refusal("bio", None));
    assert_eq!(upstream.requests().len(), 1);

    // cyber: the chain only, first fallback answers. No note anywhere.
    let from = upstream.requests().len();
    let response = post(&base, &refusing("cyber", true)).await;
    assert_eq!(
        response.headers()[header::RECOVERY],
        format!("fallback; category=cyber; served-by={SONNET}")
    );
    let text = response.text().await.unwrap();
    assert!(text.contains(&format!("answer from {SONNET}")), "{text}");
    let seen = since(&upstream, from);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1]["model"], SONNET);
    assert!(!seen[1].to_string().contains("[refusal-guard]"));
    assert!(seen[1].get("fallbacks").is_none());

    // frontier_llm: retarget. The same model again, with the retarget list
    // as server-side fallbacks; no chain fallback, no rescue.
    let from = upstream.requests().len();
    let response = post(&base, &refusing("frontier_llm", false)).await;
    assert!(response.headers()[header::RECOVERY]
        .to_str()
        .unwrap()
        .starts_with("fallback; category=frontier_llm"));
    let seen = since(&upstream, from);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1]["model"], OPUS);
    assert_eq!(
        seen[1]["fallbacks"],
        json!([{"model": SONNET}, {"model": HAIKU}])
    );
    let beta = upstream.requests()[from + 1]
        .header("anthropic-beta")
        .map(str::to_owned);
    assert!(
        beta.is_some_and(|b| b.contains("server-side-fallback")),
        "the fallbacks beta"
    );

    // A category without an entry takes `*`, and `Safety` matches `SAFETY`
    // (names ignore case): the rescue first, on the client's model.
    for category in ["violence", "Safety"] {
        let from = upstream.requests().len();
        let response = post(&base, &refusing(category, true)).await;
        assert_eq!(
            response.headers()[header::RECOVERY],
            format!("rescued; category={category}; served-by={OPUS}")
        );
        let seen = since(&upstream, from);
        assert_eq!(seen.len(), 2, "{category}: {seen:?}");
        assert_eq!(seen[1]["model"], OPUS);
        assert!(seen[1].to_string().contains("[refusal-guard]"));
    }
}

// ---- a category that is not safety ---------------------------------------------

const GEMINI_PRO: &str = "gemini-2.5-pro";
const GEMINI_FLASH: &str = "gemini-2.5-flash";

/// What a scripted Gemini upstream does: the original (on the client's
/// model, no note) ends in an empty copyright stop; a fallback or a rescue is
/// answered, by the model in its path.
fn gemini_reply(request: &RawRequest) -> Vec<Act> {
    let path = request.path().to_owned();
    let noted = request.json().to_string().contains("[refusal-guard]");
    let chunk = if path.contains(&format!("/models/{GEMINI_PRO}:")) && !noted {
        json!({"candidates": [{"content": {"role": "model", "parts": []},
            "finishReason": "RECITATION", "index": 0}], "modelVersion": GEMINI_PRO})
    } else {
        let model = if noted { GEMINI_PRO } else { GEMINI_FLASH };
        json!({"candidates": [{"content": {"role": "model",
            "parts": [{"text": format!("answer from {model}")}]},
            "finishReason": "STOP", "index": 0}], "modelVersion": model})
    };
    let body = format!("data: {chunk}\r\n\r\n");
    vec![Act::Write(whole(200, "text/event-stream", body.as_bytes()))]
}

async fn gemini_post(base: &str) -> reqwest::Response {
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "Print the lyrics."}]}]});
    client()
        .post(format!(
            "{base}/v1beta/models/{GEMINI_PRO}:streamGenerateContent?alt=sse"
        ))
        .header("content-type", "application/json")
        .header("x-goog-api-key", "test-key")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// A Gemini copyright stop through the proxy: by default it climbs the
/// chain with the client's request as sent and never the rescue note; with
/// no fallback to serve it, the client gets it as sent; and `--policy` still
/// gives the category other steps (here the rescue it would not take).
#[tokio::test]
async fn a_recitation_falls_back_without_the_note_unless_the_policy_says_otherwise() {
    let upstream = RawUpstream::start(|_, request| gemini_reply(request)).await;
    let chained = run_proxy(&[
        "--upstream",
        &upstream.url(),
        "--chain",
        &format!("{GEMINI_PRO}={GEMINI_FLASH}"),
    ])
    .await;
    let response = gemini_post(&chained).await;
    assert_eq!(
        response.headers()[header::RECOVERY],
        format!("fallback; category=recitation; served-by={GEMINI_FLASH}")
    );
    let text = response.text().await.unwrap();
    assert!(
        text.contains(&format!("answer from {GEMINI_FLASH}")),
        "{text}"
    );
    let seen = since(&upstream, 0);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[1], seen[0],
        "the fallback sends the client's body, no note"
    );

    let unchained = run_proxy(&["--upstream", &upstream.url()]).await;
    let from = upstream.requests().len();
    let response = gemini_post(&unchained).await;
    assert!(response.headers().get(header::RECOVERY).is_none());
    let text = response.text().await.unwrap();
    assert!(text.contains("\"finishReason\":\"RECITATION\""), "{text}");
    assert_eq!(since(&upstream, from).len(), 1, "no rescue");

    let opted_in = run_proxy(&[
        "--upstream",
        &upstream.url(),
        "--policy",
        "recitation=fallback,rescue",
    ])
    .await;
    let from = upstream.requests().len();
    let response = gemini_post(&opted_in).await;
    assert_eq!(
        response.headers()[header::RECOVERY],
        format!("rescued; category=recitation; served-by={GEMINI_PRO}")
    );
    let seen = since(&upstream, from);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[1].to_string().contains("[refusal-guard]"));
}

/// `--allow-fallbacks`: what `--retarget --inject-fallbacks` writes for a
/// model is limited to its allowed fallback models (Fable's: Opus 4.8; a
/// model given `MODEL=` gets no list), which the upstream's contract (A14)
/// checks. Without it, the list the API rejects is taken back: the client
/// still gets its answer, after one 400 it never sees.
#[tokio::test]
async fn allow_fallbacks_limits_what_a_retarget_writes_and_a_rejected_list_is_taken_back() {
    const FABLE: &str = "claude-fable-5";
    const OPUS_4_8: &str = "claude-opus-4-8";
    let upstream = RawUpstream::start(|_, request| reply(request)).await;
    let retarget = format!("{SONNET},{OPUS_4_8}");
    let base = run_proxy(&[
        "--upstream",
        &upstream.url(),
        "--retarget",
        &retarget,
        "--inject-fallbacks",
        "--allow-fallbacks",
        &format!("{FABLE}={OPUS_4_8}"),
        "--allow-fallbacks=claude-sonnet-5=",
    ])
    .await;
    for (model, expected) in [
        (FABLE, Some(json!([{"model": OPUS_4_8}]))),
        ("claude-sonnet-5", None),
    ] {
        let from = upstream.requests().len();
        let response = post(&base, &messages_request(model, false, "hello")).await;
        assert_eq!(response.status(), 200, "{model}");
        let seen = since(&upstream, from);
        assert_eq!(seen.len(), 1, "{model}: {seen:?}");
        assert_eq!(seen[0].get("fallbacks").cloned(), expected, "{model}");
    }
    assert_eq!(upstream.take_violations(), 0);

    let upstream = RawUpstream::start(|_, request| reply(request)).await;
    let base = run_proxy(&[
        "--upstream",
        &upstream.url(),
        "--retarget",
        &retarget,
        "--inject-fallbacks",
    ])
    .await;
    let response = post(&base, &messages_request(FABLE, true, "hello")).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains(&format!("answer from {FABLE}")), "{text}");
    let seen = since(&upstream, 0);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].get("fallbacks").is_some());
    assert_eq!(seen[1], messages_request(FABLE, true, "hello"));
    assert_eq!(
        upstream.take_violations(),
        1,
        "the one 400, never the client's"
    );
}

#[test]
fn an_invalid_policy_fails_at_start_naming_the_bad_part() {
    for (spec, part) in [
        ("bio=stop;cyber=fallback,explode", "unknown step `explode`"),
        ("=stop", "empty category"),
        ("bio=stop;Bio=fallback", "category `Bio` given twice"),
        ("bio=stop,rescue", "`stop` combined with other steps"),
    ] {
        let error = Options::try_parse_from(["proxy", "--policy", spec]).unwrap_err();
        assert_eq!(error.exit_code(), 2, "{spec}");
        let message = error.to_string();
        assert!(message.contains(part), "{spec}: {message}");
        assert!(message.contains("--policy"), "{message}");
    }
    let ok = Options::try_parse_from(["proxy", "--policy", "bio=stop;*=fallback,rescue"]).unwrap();
    assert_eq!(ok.policy.unwrap().to_string(), "bio=stop;*=fallback,rescue");
}

// ---- OpenAI's policy errors ---------------------------------------------------

const GPT: &str = "gpt-5.5";
const GPT_MINI: &str = "gpt-5.4-mini";

/// The headers OpenAI's errors carry, which must reach the client as sent.
const OPENAI_HEADERS: &[(&str, &str)] = &[
    ("x-request-id", "req_policy_1"),
    ("openai-processing-ms", "17"),
];

/// An OpenAI error body with this `code`.
fn openai_error(code: &str) -> Bytes {
    Bytes::from(
        json!({"error": {"message": format!("flagged: {code}"), "type": "invalid_request",
            "param": null, "code": code}})
        .to_string(),
    )
}

/// What the scripted upstream does with a Responses request whose input is
/// `fail:CODE` (or `fail-all:CODE`): the client's model (every model, for
/// `fail-all`) fails with that error code, as a 400 with OpenAI's headers to
/// a JSON request and as a `response.failed` stream to a streamed one; any
/// other request is answered.
fn openai_reply(request: &RawRequest) -> Vec<Act> {
    let json = request.json();
    let input = json["input"].as_str().unwrap_or_default();
    let (every_model, code) = match input.split_once(':') {
        Some(("fail", code)) => (false, code),
        Some(("fail-all", code)) => (true, code),
        _ => (false, ""),
    };
    let stream = json["stream"] == json!(true);
    let fails = !code.is_empty() && (every_model || json["model"] == GPT);
    match (fails, stream) {
        (true, false) => vec![
            Act::Write(head_with(400, "application/json", OPENAI_HEADERS)),
            Act::Write(chunk(&openai_error(code))),
            Act::Write(last_chunk()),
        ],
        (true, true) => {
            let failed = json!({"type": "response.failed", "sequence_number": 0,
                "response": {"id": "resp_1", "object": "response", "status": "failed",
                    "model": GPT, "output": [],
                    "error": {"code": code, "message": format!("flagged: {code}")}}});
            let stream = format!("event: response.failed\ndata: {failed}\n\n");
            vec![Act::Write(whole(
                200,
                "text/event-stream",
                stream.as_bytes(),
            ))]
        }
        (false, false) => vec![Act::Write(whole(
            200,
            "application/json",
            &fixture("usage/responses-answer.json"),
        ))],
        (false, true) => vec![Act::Write(whole(
            200,
            "text/event-stream",
            &fixture("e2e/responses_text.sse"),
        ))],
    }
}

async fn post_responses(base: &str, input: &str, stream: bool) -> reqwest::Response {
    client()
        .post(format!("{base}/v1/responses"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-test-key")
        .body(json!({"model": GPT, "stream": stream, "input": input}).to_string())
        .send()
        .await
        .unwrap()
}

/// The response reached the client as the upstream sent it: status 400,
/// OpenAI's headers, the error body of `code`.
async fn assert_sent_as_is(response: reqwest::Response, code: &str) {
    assert_eq!(response.status(), 400, "{code}");
    assert!(response.headers().get(header::RECOVERY).is_none());
    assert_eq!(response.headers()["content-type"], "application/json");
    for (name, value) in OPENAI_HEADERS {
        assert_eq!(response.headers()[*name], *value, "{code}: {name}");
    }
    assert_eq!(
        response.bytes().await.unwrap(),
        openai_error(code),
        "{code}"
    );
}

#[tokio::test]
async fn openai_policy_errors_take_their_categorys_steps_and_the_rest_pass_as_sent() {
    let upstream = RawUpstream::start(|_, request| openai_reply(request)).await;
    let base = run_proxy(&[
        "--upstream",
        &upstream.url(),
        "--chain",
        &format!("{GPT}={GPT_MINI}"),
        "--rescue",
        "off",
        "--policy",
        "bio=stop;*=fallback",
    ])
    .await;

    // cyber_policy takes `*`: the chain's model answers, streamed or not.
    for stream in [true, false] {
        let from = upstream.requests().len();
        let response = post_responses(&base, "fail:cyber_policy", stream).await;
        assert_eq!(response.status(), 200, "stream {stream}");
        // The model that served, as its answer names it.
        let (answer, served_by) = if stream {
            (fixture("e2e/responses_text.sse"), GPT_MINI)
        } else {
            (fixture("usage/responses-answer.json"), "gpt-4o-2024-08-06")
        };
        assert_eq!(
            response.headers()[header::RECOVERY],
            format!("fallback; category=cyber; served-by={served_by}")
        );
        assert_eq!(response.bytes().await.unwrap(), answer);
        let seen = since(&upstream, from);
        let models: Vec<&Value> = seen.iter().map(|s| &s["model"]).collect();
        assert_eq!(models, [GPT, GPT_MINI], "stream {stream}");
    }

    // bio_policy stops: the 400 as sent, one request.
    let from = upstream.requests().len();
    assert_sent_as_is(
        post_responses(&base, "fail:bio_policy", false).await,
        "bio_policy",
    )
    .await;
    assert_eq!(since(&upstream, from).len(), 1);

    // invalid_prompt on every model: the chain is climbed, then the first
    // 400 is delivered as sent.
    let from = upstream.requests().len();
    let response = post_responses(&base, "fail-all:invalid_prompt", false).await;
    assert_sent_as_is(response, "invalid_prompt").await;
    assert_eq!(since(&upstream, from).len(), 2);

    // A code that names no policy is a plain error: nothing is tried.
    let from = upstream.requests().len();
    let response = post_responses(&base, "fail:server_error", false).await;
    assert_sent_as_is(response, "server_error").await;
    assert_eq!(since(&upstream, from).len(), 1);
}

// ---- fallback credit off -----------------------------------------------------

#[tokio::test]
async fn credit_off_presents_no_token_even_when_the_refusal_offers_one() {
    let upstream = RawUpstream::start(|index, request| {
        let json = request.json();
        let body = if index == 0 {
            json_refusal("cyber", Some("tok-offered"))
        } else {
            json_answer(json["model"].as_str().unwrap_or_default())
        };
        vec![Act::Write(whole(
            200,
            "application/json",
            body.to_string().as_bytes(),
        ))]
    })
    .await;
    let base = run_proxy(&[
        "--upstream",
        &upstream.url(),
        "--chain",
        &format!("{OPUS}={SONNET}"),
        "--fallback-credit",
        "off",
    ])
    .await;
    let response = post(&base, &messages_request(OPUS, false, "x")).await;
    assert_eq!(response.status(), 200);
    let requests = upstream.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let beta = request.header("anthropic-beta").unwrap_or_default();
        assert!(!beta.contains("fallback-credit"), "{beta}");
        assert!(request.json().get("fallback_credit_token").is_none());
    }
    assert_eq!(requests[1].json()["model"], SONNET);
}

// ---- the conversation header -------------------------------------------------

#[tokio::test]
async fn the_conversation_header_never_reaches_the_upstream_on_any_path() {
    // Token counting has no rules in the contract: this upstream serves it.
    let serving = Contract::new().serving("/v1/messages/count_tokens");
    let upstream = RawUpstream::start_keeping(serving, |_, request| {
        let body = match request.json()["model"].as_str() {
            Some(model) => json_answer(model),
            None => json!({"data": []}),
        };
        vec![Act::Write(whole(
            200,
            "application/json",
            body.to_string().as_bytes(),
        ))]
    })
    .await;
    let base = run_proxy(&["--upstream", &upstream.url()]).await;
    let message = messages_request(OPUS, false, "x").to_string();
    let count = json!({"model": OPUS, "messages": [{"role": "user", "content": "x"}]});
    let calls: Vec<(&str, &str, Option<String>)> = vec![
        ("POST", "/v1/messages", Some(message)),
        ("POST", "/v1/messages/count_tokens", Some(count.to_string())),
        ("GET", "/v1/models", None),
        ("GET", "/v1/messages", None),
        ("POST", "/v1/unknown/path", Some("{}".to_owned())),
        ("POST", "/v1/chat/completions", Some("not json".to_owned())),
    ];
    // A path no API serves gets the provider's 404, and the last body
    // breaks the API's rules: its 400. The provider answers both so.
    let statuses = [200, 200, 200, 200, 404, 400];
    for ((method, path, body), status) in calls.iter().zip(statuses) {
        let mut request = client()
            .request(method.parse().unwrap(), format!("{base}{path}"))
            .header("x-refusal-guard-conversation", "conv-secret-1")
            .header("content-type", "application/json");
        if let Some(body) = body {
            request = request.body(body.clone());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), status, "{method} {path}");
    }
    assert_eq!(upstream.take_violations(), 2);
    let requests = upstream.requests();
    assert_eq!(requests.len(), calls.len());
    for (request, (method, path, _)) in requests.iter().zip(&calls) {
        assert!(request.line.starts_with(method), "{}", request.line);
        assert_eq!(request.path(), *path);
        assert!(
            request.header("x-refusal-guard-conversation").is_none(),
            "{method} {path} carried the conversation header"
        );
    }
}

// ---- the recovery header -------------------------------------------------------

#[tokio::test]
async fn only_recovered_responses_carry_the_recovery_header() {
    let upstream = RawUpstream::start(|_, request| reply(request)).await;
    let base = run_proxy(&[
        "--upstream",
        &upstream.url(),
        "--chain",
        &format!("{OPUS}={SONNET}"),
        "--policy",
        "bio=stop;cyber=fallback;*=rescue",
    ])
    .await;
    for stream in [false, true] {
        // Untouched: an answer, and a refusal the policy let through.
        for body in [
            messages_request(OPUS, stream, "hello"),
            refusing("bio", stream),
        ] {
            let response = post(&base, &body).await;
            assert_eq!(response.status(), 200);
            let names: Vec<_> = response.headers().keys().map(|k| k.to_string()).collect();
            assert!(
                !names.iter().any(|n| n.starts_with("refusal-guard")),
                "{names:?}"
            );
        }
        let response = post(&base, &refusing("cyber", stream)).await;
        assert_eq!(
            response.headers()[header::RECOVERY],
            format!("fallback; category=cyber; served-by={SONNET}"),
            "stream {stream}"
        );
        let response = post(&base, &refusing("weird cat\"egory", stream)).await;
        assert_eq!(
            response.headers()[header::RECOVERY],
            format!("rescued; category=weird_cat_egory; served-by={OPUS}"),
            "stream {stream}: sanitised"
        );
    }
}

// ---- a sticky route that ends -----------------------------------------------

/// A sink that keeps the route-restored events it receives.
#[derive(Clone, Default)]
struct Restorations(std::sync::Arc<std::sync::Mutex<Vec<RouteRestored>>>);

impl TelemetrySink for Restorations {
    fn record(&self, _record: &refusal_guard::telemetry::RefusalRecord) {}
    fn route_restored(&self, event: &RouteRestored) {
        self.0.lock().unwrap().push(event.clone());
    }
}

// On a paused clock, which the store's TTLs follow: no real waiting.
#[tokio::test(start_paused = true)]
async fn the_first_request_after_a_sticky_route_ends_leaves_a_restored_trace() {
    let dir = std::env::temp_dir().join(format!("rg-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("refusals.jsonl");
    let _ = std::fs::remove_file(&log);
    let events = Restorations::default();
    let sink = Fanout::new()
        .and(events.clone())
        .and(JsonlSink::open(&log).unwrap());
    let upstream = Upstream::new(vec![
        Reply::sse(&anthropic_stream(&think_then_refuse(OPUS, "cyber"))),
        Reply::sse(&anthropic_stream(&text_answer(SONNET, "a"))),
        Reply::sse(&anthropic_stream(&text_answer(SONNET, "b"))),
        Reply::sse(&anthropic_stream(&text_answer(OPUS, "c"))),
        Reply::sse(&anthropic_stream(&text_answer(OPUS, "d"))),
    ]);
    let mut guard = RefusalGuardLayer::new()
        .fallback_chains(chains())
        .sticky_fallback(Duration::from_secs(1))
        .telemetry(sink)
        .layer(upstream.service());
    let request = || messages(OPUS, true, "same conversation");
    call(&mut guard, request()).await; // refused, served by the fallback
    call(&mut guard, request()).await; // routed to the fallback
    assert_eq!(upstream.seen()[2].json()["model"], SONNET);
    assert!(events.0.lock().unwrap().is_empty(), "no end within the TTL");
    tokio::time::advance(Duration::from_millis(1001)).await;
    call(&mut guard, request()).await; // the route ended: back to the primary
    call(&mut guard, request()).await; // told once only
    assert_eq!(upstream.seen()[3].json()["model"], OPUS);
    let seen = events.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].model.as_deref(), Some(OPUS));
    assert_eq!(seen[0].routed_to, SONNET);
    assert!(seen[0].conversation.is_some());
    // The log line is apart from refusal records: the report counts it as
    // a restoration, not as a refusal nor as a bad line.
    let (report, skipped) = Report::read_path(&log).unwrap();
    assert_eq!((report.total, report.restored, skipped), (1, 1, 0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(r#""event":"route_restored""#), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_forwarded_body_that_is_not_json_past_its_head_gets_the_providers_400_as_sent() {
    // Forwarded as it arrives, the body's head is only located: the
    // provider judges the rest, and its 400 reaches the client untouched,
    // with no recovery tried.
    let upstream = RawUpstream::start(|_, request| reply(request)).await;
    let base = run_proxy(&["--upstream", &upstream.url()]).await;
    let body = format!(
        r#"{{"model":"{OPUS}","max_tokens":16,"stream":true,"messages":[{{"role":"user","content":"a{}b"}}]}}"#,
        '\u{1}'
    );
    let response = client()
        .post(format!("{base}/v1/messages"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let answer: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(answer["type"], "error", "Anthropic's shape: {answer}");
    assert_eq!(answer["error"]["type"], "invalid_request_error");
    assert_eq!(upstream.take_violations(), 1);
    assert_eq!(upstream.requests().len(), 1, "nothing retried");
}
