//! Claude on Bedrock end to end in process: the guard over the SigV4 layer
//! over the proxy's real HTTP client, against a scripted Bedrock runtime on
//! loopback that verifies every signature independently and frames its
//! streams as real AWS event streams (tests/support/bedrock.rs).

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use refusal_guard::aws::{Credentials, SigV4Layer};
use refusal_guard::recovery::FallbackChains;
use refusal_guard::refusal::{RefusalKind, WireApi, GUARDRAIL_CATEGORY};
use refusal_guard::telemetry::{MemorySink, RefusalRecord};
use refusal_guard::{Outcome, RefusalGuardLayer};
use refusal_guard_proxy::UpstreamBody;
use serde_json::{json, Value};
use support::bedrock::{self as br, BedrockUpstream};
use tower::{Layer, ServiceExt};

/// The model as `AnthropicBedrock` writes it in the path (`:` raw) and as
/// boto3 does (`%3A`).
const OPUS: &str = "us.anthropic.claude-opus-4-7-v1:0";
const OPUS_BOTO: &str = "us.anthropic.claude-opus-4-7-v1%3A0";
/// The fallback: an inference-profile ARN, whose `/` must go as `%2F`.
const SONNET_ARN: &str =
    "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-v1:0";

struct Done {
    status: u16,
    body: Bytes,
    records: Vec<RefusalRecord>,
    seen: Vec<br::Seen>,
}

fn keys() -> Credentials {
    Credentials::keys(
        br::ACCESS_KEY_ID,
        br::SECRET_ACCESS_KEY,
        Some(br::SESSION_TOKEN.to_owned()),
    )
}

/// Sends one request through guard → SigV4 → HTTP client → `upstream`.
async fn send(
    upstream: &BedrockUpstream,
    layer: RefusalGuardLayer,
    credentials: Credentials,
    method: &str,
    path: &str,
    body: Value,
) -> Done {
    let sink = MemorySink::new();
    let client = refusal_guard_proxy::client().unwrap();
    let signed = SigV4Layer::new(credentials, br::REGION).layer(client);
    let guard = layer.telemetry(sink.clone()).layer(signed);
    let bytes = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    let request = Request::builder()
        .method(method)
        .uri(format!("{}{path}", upstream.url()))
        .header("content-type", "application/json")
        .header("accept", "application/vnd.amazon.eventstream")
        // What the client signed for itself is replaced, not forwarded.
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=CLIENT/x, SignedHeaders=host, Signature=00",
        )
        .body(UpstreamBody::new(Full::new(bytes)))
        .unwrap();
    let response = tokio::time::timeout(std::time::Duration::from_secs(20), guard.oneshot(request))
        .await
        .expect("bounded")
        .unwrap();
    let status = response.status().as_u16();
    let body = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        response.into_body().collect(),
    )
    .await
    .expect("bounded")
    .unwrap()
    .to_bytes();
    Done {
        status,
        body,
        records: sink.records(),
        seen: upstream.seen(),
    }
}

/// [`send`]s a POST signed with [`keys`].
async fn post(
    upstream: &BedrockUpstream,
    layer: RefusalGuardLayer,
    path: &str,
    body: Value,
) -> Done {
    send(upstream, layer, keys(), "POST", path, body).await
}

/// A scripted runtime that takes the session token (as [`keys`] signs)
/// and plays these replies in order.
async fn runtime(replies: Vec<br::Reply>) -> BedrockUpstream {
    BedrockUpstream::start(replies, Some(br::SESSION_TOKEN), None).await
}

/// An empty refusal of Opus on invoke-with-response-stream (after
/// thinking, when `think_first`), then `answer`.
fn refusal_then(think_first: bool, answer: &[Bytes]) -> Vec<br::Reply> {
    vec![
        br::Reply::stream(br::invoke_stream(&br::refusal_events(OPUS, think_first))),
        br::Reply::stream(answer.to_vec()),
    ]
}

fn invoke_body() -> Value {
    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 256,
        "anthropic_beta": ["interleaved-thinking-2025-05-14"],
        "messages": [{"role": "user", "content": "Audit this binary for the overflow."}]})
}

fn joined(chunks: &[Bytes]) -> Bytes {
    chunks.concat().into()
}

fn chained() -> RefusalGuardLayer {
    RefusalGuardLayer::new().fallback_chains(FallbackChains::new().chain(OPUS, [SONNET_ARN]))
}

fn assert_all_signed(seen: &[br::Seen]) {
    for request in seen {
        assert_eq!(
            request.verified,
            Ok(()),
            "{} {}",
            request.method,
            request.path
        );
    }
}

#[tokio::test]
async fn an_empty_refusal_on_invoke_stream_falls_back_to_the_arn_signed_for_each_attempt() {
    for think_first in [false, true] {
        let answer = br::invoke_stream(&br::answer_events(SONNET_ARN, "Here is the audit."));
        let upstream = runtime(refusal_then(think_first, &answer)).await;
        let path = format!("/model/{OPUS}/invoke-with-response-stream");
        let done = post(&upstream, chained(), &path, invoke_body()).await;
        assert_eq!(done.status, 200);
        assert_eq!(
            done.body,
            joined(&answer),
            "the client gets the fallback's frames as sent"
        );
        assert_eq!(done.seen.len(), 2);
        assert_all_signed(&done.seen);
        assert_eq!(done.seen[0].path, path);
        assert_eq!(
            done.seen[1].path,
            "/model/arn:aws:bedrock:us-east-1:123456789012:inference-profile%2Fus.anthropic.claude-sonnet-4-5-v1:0/invoke-with-response-stream"
        );
        // The body stays a Bedrock body: no model, no stream flag.
        let fallback = done.seen[1].json();
        assert!(fallback.get("model").is_none() && fallback.get("stream").is_none());
        assert_eq!(fallback["anthropic_version"], "bedrock-2023-05-31");
        assert_eq!(done.records.len(), 1);
        let record = &done.records[0];
        assert_eq!(record.outcome, Outcome::Fallback);
        assert_eq!(record.wire_api, Some(WireApi::BedrockInvokeModel));
        assert_eq!(record.category.as_deref(), Some("cyber"));
        assert_eq!(record.model.as_deref(), Some(OPUS));
    }
}

#[tokio::test]
async fn a_rescue_appends_the_note_in_the_bedrock_body_and_is_signed() {
    let answer = br::invoke_stream(&br::answer_events(OPUS, "Here is the audit."));
    let upstream = runtime(refusal_then(false, &answer)).await;
    let path = format!("/model/{OPUS_BOTO}/invoke-with-response-stream");
    let done = post(&upstream, RefusalGuardLayer::new(), &path, invoke_body()).await;
    assert_eq!(done.body, joined(&answer));
    assert_all_signed(&done.seen);
    assert_eq!(done.seen[1].path, path, "boto3's %3A is kept on the rescue");
    let rescue = done.seen[1].json();
    assert!(support::last_user_text(&rescue).contains("cyber"));
    assert_eq!(
        rescue["anthropic_beta"],
        json!(["interleaved-thinking-2025-05-14"])
    );
    assert_eq!(done.records[0].outcome, Outcome::Rescued);
}

#[tokio::test]
async fn a_partial_refusal_and_an_exception_frame_pass_through_byte_exact() {
    let mut partial = br::answer_events(OPUS, "Part of the audit");
    partial[4] = json!({"type": "message_delta", "delta": {"stop_reason": "refusal",
        "stop_details": {"type": "refusal", "category": "cyber"}}, "usage": {"output_tokens": 4}});
    let partial = br::invoke_stream(&partial);
    let mut failed = br::invoke_stream(&br::answer_events(OPUS, "")[..2]);
    failed.push(Bytes::from(br::exception(
        "modelStreamErrorException",
        "The model stream failed.",
    )));
    for (chunks, kind) in [(partial, Some(RefusalKind::Partial)), (failed, None)] {
        let upstream = runtime(vec![br::Reply::stream(chunks.clone())]).await;
        let path = format!("/model/{OPUS}/invoke-with-response-stream");
        let done = post(&upstream, chained(), &path, invoke_body()).await;
        assert_eq!(done.body, joined(&chunks));
        assert_eq!(done.seen.len(), 1, "nothing is retried");
        assert_all_signed(&done.seen);
        match kind {
            Some(kind) => {
                assert_eq!(done.records.len(), 1);
                assert_eq!(done.records[0].kind, Some(kind));
                assert_eq!(done.records[0].outcome, Outcome::Partial);
            }
            None => assert!(done.records.is_empty(), "an exception is no refusal"),
        }
    }
}

#[tokio::test]
async fn converse_stream_content_filtered_is_rescued_in_converse_shape() {
    let filtered: Vec<Bytes> = [
        br::converse_event("messageStart", &json!({"role": "assistant", "p": "abc"})),
        br::converse_event("messageStop", &json!({"stopReason": "content_filtered", "p": "abcd"})),
        br::converse_event("metadata", &json!({"usage": {"inputTokens": 9, "outputTokens": 0, "totalTokens": 9}, "metrics": {"latencyMs": 80}})),
    ]
    .map(Bytes::from)
    .to_vec();
    let answer: Vec<Bytes> = [
        br::converse_event("messageStart", &json!({"role": "assistant"})),
        br::converse_event(
            "contentBlockDelta",
            &json!({"delta": {"text": "Sure."}, "contentBlockIndex": 0}),
        ),
        br::converse_event("contentBlockStop", &json!({"contentBlockIndex": 0})),
        br::converse_event("messageStop", &json!({"stopReason": "end_turn"})),
    ]
    .map(Bytes::from)
    .to_vec();
    let upstream = runtime(vec![
        br::Reply::stream(filtered),
        br::Reply::stream(answer.clone()),
    ])
    .await;
    let path = format!("/model/{OPUS_BOTO}/converse-stream");
    let body = json!({"messages": [{"role": "user", "content": [{"text": "Explain the exploit."}]}],
        "inferenceConfig": {"maxTokens": 256}});
    let done = post(&upstream, RefusalGuardLayer::new(), &path, body).await;
    assert_eq!(done.body, joined(&answer));
    assert_all_signed(&done.seen);
    let rescue = done.seen[1].json();
    let content = rescue["messages"][0]["content"].as_array().unwrap();
    assert_eq!(content.len(), 2);
    assert!(content[1]["text"].as_str().unwrap().len() > 10);
    assert!(
        content[1].get("type").is_none(),
        "Converse blocks carry no type"
    );
    let record = &done.records[0];
    assert_eq!(record.wire_api, Some(WireApi::BedrockConverse));
    assert_eq!(record.category.as_deref(), Some("content_filtered"));
    assert_eq!(record.outcome, Outcome::Rescued);
}

#[tokio::test]
async fn a_json_invoke_refusal_falls_back_and_listings_pass_signed_and_untouched() {
    let refused = json!({"id": "msg_r", "type": "message", "role": "assistant", "model": OPUS,
        "content": [], "stop_reason": "refusal", "stop_details": {"type": "refusal", "category": "cyber"},
        "usage": {"input_tokens": 5, "output_tokens": 0}});
    let answer = json!({"id": "msg_a", "type": "message", "role": "assistant", "model": SONNET_ARN,
        "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 2}});
    let upstream = runtime(vec![br::Reply::json(&refused), br::Reply::json(&answer)]).await;
    let done = post(
        &upstream,
        chained(),
        &format!("/model/{OPUS}/invoke"),
        invoke_body(),
    )
    .await;
    assert_eq!(serde_json::from_slice::<Value>(&done.body).unwrap(), answer);
    assert_eq!(done.records[0].outcome, Outcome::Fallback);
    // Claude Code's first call in Bedrock mode, then a probe.
    let listing = "/inference-profiles?type=SYSTEM_DEFINED&maxResults=1000";
    let done = send(&upstream, chained(), keys(), "GET", listing, Value::Null).await;
    assert_eq!(done.status, 200);
    assert_eq!(done.body.as_ref(), br#"{"inferenceProfileSummaries":[]}"#);
    let last = done.seen.last().unwrap();
    assert_eq!(last.path, listing);
    assert_all_signed(&done.seen);
}

#[tokio::test]
async fn a_wrong_secret_is_refused_by_the_upstream_and_a_bearer_key_is_sent_as_is() {
    let upstream = BedrockUpstream::start(vec![], None, Some("bedrock-api-key-1")).await;
    let wrong = Credentials::keys(br::ACCESS_KEY_ID, "not-the-secret", None);
    let done = send(
        &upstream,
        chained(),
        wrong,
        "POST",
        &format!("/model/{OPUS}/invoke"),
        invoke_body(),
    )
    .await;
    assert_eq!(done.status, 403, "the verifier rejects a bad signature");
    assert!(String::from_utf8_lossy(&done.body).contains("signature"));
    assert!(done.seen[0].verified.is_err());

    let answer = json!({"type": "message", "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn"});
    let upstream = BedrockUpstream::start(
        vec![br::Reply::json(&answer)],
        None,
        Some("bedrock-api-key-1"),
    )
    .await;
    let bearer = Credentials::Bearer("bedrock-api-key-1".into());
    let done = send(
        &upstream,
        chained(),
        bearer,
        "POST",
        &format!("/model/{OPUS}/invoke"),
        invoke_body(),
    )
    .await;
    assert_eq!(done.status, 200);
    assert_eq!(done.seen[0].verified, Ok(()));
    assert!(done.seen[0].headers.get("x-amz-date").is_none());
}

#[test]
fn the_signature_check_agrees_with_the_published_aws_test_vector() {
    // AWS's SigV4 test suite, `get-vanilla`.
    let mut headers = http::HeaderMap::new();
    headers.insert("host", "example.amazonaws.com".parse().unwrap());
    headers.insert("x-amz-date", "20150830T123600Z".parse().unwrap());
    headers.insert(
        "authorization",
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
            .parse()
            .unwrap(),
    );
    let keys = br::Keys {
        id: "AKIDEXAMPLE",
        secret: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        region: "us-east-1",
        service: "service",
    };
    assert_eq!(
        br::verify_sigv4(&keys, "GET", "/", &headers, b"", None),
        Ok(())
    );
    assert!(br::verify_sigv4(&keys, "POST", "/", &headers, b"", None).is_err());
}

#[tokio::test]
async fn keep_alive_comments_are_never_written_into_an_event_stream() {
    let answer = br::invoke_stream(&br::answer_events(SONNET_ARN, "Here is the audit."));
    let upstream = runtime(refusal_then(true, &answer)).await;
    // The refusal's frames come 2 ms apart: a 1 ms keep-alive would fire.
    let layer = chained().keepalive_after(std::time::Duration::from_millis(1));
    let path = format!("/model/{OPUS}/invoke-with-response-stream");
    let done = post(&upstream, layer, &path, invoke_body()).await;
    assert_eq!(done.body, joined(&answer));
    assert_eq!(done.records[0].outcome, Outcome::Fallback);
}

/// A guardrail's canned answer on InvokeModel, as Bedrock sends it.
fn guardrail_answer() -> Value {
    json!({"id": "msg_g", "type": "message", "role": "assistant", "model": OPUS,
        "content": [{"type": "text", "text": "Sorry, the model cannot answer this question."}],
        "stop_reason": "end_turn", "amazon-bedrock-guardrailAction": "INTERVENED",
        "usage": {"input_tokens": 5, "output_tokens": 9}})
}

#[tokio::test]
async fn an_operators_guardrail_is_recorded_and_passed_through_not_worked_around() {
    let canned = guardrail_answer();
    let upstream = runtime(vec![br::Reply::json(&canned)]).await;
    let path = format!("/model/{OPUS}/invoke");
    let done = post(&upstream, chained(), &path, invoke_body()).await;
    assert_eq!(done.status, 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&done.body).unwrap(),
        canned,
        "the client gets the guardrail's answer as sent"
    );
    assert_eq!(
        done.seen.len(),
        1,
        "neither the chain nor a rescue is tried"
    );
    let record = &done.records[0];
    assert_eq!(record.category.as_deref(), Some(GUARDRAIL_CATEGORY));
    assert_eq!(record.outcome, Outcome::Dead);
}

#[tokio::test]
async fn a_guardrail_is_recovered_only_when_the_policy_names_it() {
    let answer = json!({"id": "msg_a", "type": "message", "role": "assistant", "model": SONNET_ARN,
        "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 2}});
    let upstream = runtime(vec![
        br::Reply::json(&guardrail_answer()),
        br::Reply::json(&answer),
    ])
    .await;
    let opted_in = chained().category_policy("guardrail_intervened=fallback".parse().unwrap());
    let path = format!("/model/{OPUS}/invoke");
    let done = post(&upstream, opted_in, &path, invoke_body()).await;
    assert_eq!(serde_json::from_slice::<Value>(&done.body).unwrap(), answer);
    assert_eq!(done.seen.len(), 2);
    assert_all_signed(&done.seen);
    assert_eq!(done.records[0].outcome, Outcome::Fallback);
    assert_eq!(
        done.records[0].category.as_deref(),
        Some(GUARDRAIL_CATEGORY)
    );
}

/// An empty refusal stream whose final `message_delta` offers a credit
/// token, as Bedrock sends it to a request that opted in.
fn credited_refusal(token: &str) -> Vec<Bytes> {
    let mut events = br::refusal_events(OPUS, false);
    let delta = events
        .iter_mut()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    delta["delta"]["stop_details"]["fallback_credit_token"] = json!(token);
    br::invoke_stream(&events)
}

#[tokio::test]
async fn a_fallback_presents_bedrocks_credit_token_only_when_the_client_opted_in() {
    const CREDIT_BETA: &str = "fallback-credit-2026-06-09";
    for opted_in in [true, false] {
        let answer = br::invoke_stream(&br::answer_events(SONNET_ARN, "Here is the audit."));
        let upstream = runtime(vec![
            br::Reply::stream(credited_refusal("credit-tok-1")),
            br::Reply::stream(answer.clone()),
        ])
        .await;
        let mut body = invoke_body();
        if opted_in {
            body["anthropic_beta"] = json!(["interleaved-thinking-2025-05-14", CREDIT_BETA]);
        }
        let path = format!("/model/{OPUS}/invoke-with-response-stream");
        let done = post(&upstream, chained(), &path, body.clone()).await;
        assert_eq!(done.body, joined(&answer), "opted in: {opted_in}");
        assert_eq!(done.seen.len(), 2, "the contract took the fallback");
        let fallback = done.seen[1].json();
        assert_eq!(
            fallback["anthropic_beta"], body["anthropic_beta"],
            "the client's betas, unchanged"
        );
        let expected = opted_in.then(|| json!("credit-tok-1"));
        assert_eq!(fallback.get("fallback_credit_token").cloned(), expected);
        assert!(fallback.get("fallbacks").is_none());
        assert_eq!(done.records[0].outcome, Outcome::Fallback);
    }
}
