//! Each scripted reply, on each wire API, streamed and not, as a client
//! reads it through the guard (started in process, a simulator on loopback
//! its upstream): refusals recovered, a partial refusal and a provider
//! error passed through byte for byte as the simulator sent them.

use http::StatusCode;
use refusal_guard::telemetry::{MemorySink, RefusalRecord};
use refusal_guard::{Outcome, RefusalGuardLayer};
use refusal_guard_testkit::{Reply, Simulator, When, ANSWER};
use support::wire::{read, APIS};

use super::{ask, guarded};

const PARTIAL: &str = "Step 1: read the config. Step 2: ";

/// One model per reply kind; the refusals only on a conversation's first
/// attempt, so the guard's rescue is answered.
fn scripted() -> Simulator {
    Simulator::answering()
        .when(When::any().model("refuses").attempt(1), Reply::refusal())
        .when(When::any().model("partial"), Reply::partial(PARTIAL))
        .when(When::any().model("blocked").attempt(1), Reply::blocked())
        .when(
            When::any().model("fails"),
            Reply::error(StatusCode::SERVICE_UNAVAILABLE).retry_after(3),
        )
}

#[tokio::test]
async fn answers_and_refusals_of_every_api_reach_the_client_recovered() {
    let client = support::proxy::client();
    let simulator = scripted();
    let (_server, guard) = guarded(&simulator, &RefusalGuardLayer::new()).await;
    for api in APIS {
        for stream in [false, true] {
            for model in ["answers", "refuses", "blocked"] {
                let what = format!("{api} {model} stream={stream}");
                let got = ask(&client, &guard.base_url(), (api, model), &what, stream).await;
                assert_eq!(got.status, 200, "{what}: {got:?}");
                let seen = read(api, &got.body);
                assert_eq!(seen.text, ANSWER, "{what}: {got:?}");
                let recovery = got.recovery.unwrap_or_default();
                let attempts: Vec<u32> = simulator
                    .take_received()
                    .iter()
                    .map(|r| r.attempt)
                    .collect();
                if model == "answers" {
                    assert_eq!(recovery, "", "{what}");
                    assert_eq!(attempts, [1], "{what}");
                } else {
                    assert!(recovery.starts_with("rescued"), "{what}: {recovery:?}");
                    // The original, then the rescue: the same conversation.
                    assert_eq!(attempts, [1, 2], "{what}");
                }
            }
        }
    }
    simulator.assert_no_violations();
}

#[tokio::test]
async fn a_partial_refusal_and_a_provider_error_pass_through_as_sent() {
    let client = support::proxy::client();
    let simulator = scripted();
    // What the simulator itself sends, asked directly (a clone: the same
    // script, its own state).
    let direct = simulator.clone().serve().await;
    let (_server, guard) = guarded(&simulator, &RefusalGuardLayer::new()).await;
    for api in APIS {
        for stream in [false, true] {
            for model in ["partial", "fails"] {
                let what = format!("{api} {model} stream={stream}");
                let sent = ask(&client, &direct.base_url(), (api, model), &what, stream).await;
                let got = ask(&client, &guard.base_url(), (api, model), &what, stream).await;
                assert_eq!(got.status, sent.status, "{what}");
                assert_eq!(got.body, sent.body, "{what}: byte for byte");
                let seen = read(api, &got.body);
                if model == "partial" {
                    assert_eq!(seen.text, PARTIAL, "{what}");
                    assert!(seen.stop.is_some(), "{what}: {got:?}");
                } else {
                    assert_eq!(got.status, 503, "{what}");
                    assert_eq!(got.retry_after.as_deref(), Some("3"), "{what}");
                    assert!(seen.error.is_some(), "{what}: {got:?}");
                }
            }
        }
    }
    simulator.assert_no_violations();
}

#[tokio::test]
async fn an_anthropic_server_side_fallback_is_served_by_the_first_model_that_answers() {
    let client = support::proxy::client();
    // Opus 4.7 refuses every request; the guard names Opus 4.8 in the
    // request's `fallbacks`, and the simulator, as the API does, hands the
    // refused turn to it within the one request.
    let simulator = Simulator::answering().when(
        When::any().model("claude-opus-4-7"),
        Reply::refusal().category("bio"),
    );
    let sink = MemorySink::new();
    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks(["claude-opus-4-8"])
        .inject_server_fallbacks(true)
        .rescue(false)
        .telemetry(sink.clone());
    let (_server, guard) = guarded(&simulator, &layer).await;
    for stream in [false, true] {
        let api = refusal_guard::refusal::WireApi::AnthropicMessages;
        let what = format!("server-side fallback, stream={stream}");
        let got = ask(
            &client,
            &guard.base_url(),
            (api, "claude-opus-4-7"),
            &what,
            stream,
        )
        .await;
        assert_eq!(got.status, 200, "{what}: {got:?}");
        assert_eq!(read(api, &got.body).text, ANSWER, "{what}");
        assert!(
            got.body.contains(r#""type":"fallback""#),
            "{what}: {}",
            got.body
        );
        assert!(
            got.body.contains(r#""fallback_message""#),
            "{what}: {}",
            got.body
        );
        let sent = simulator.take_received();
        assert_eq!(sent.len(), 1, "{what}: one request");
        assert_eq!(sent[0].body["fallbacks"][0]["model"], "claude-opus-4-8");
        assert_eq!(sent[0].served_model.as_deref(), Some("claude-opus-4-8"));
        // The guard saw the provider's own fallback serve the turn.
        let record = wait_for_record(&sink).await;
        assert_eq!(record.outcome, Outcome::Fallback, "{what}");
        assert_eq!(record.category.as_deref(), Some("bio"), "{what}");
        assert_eq!(
            record.served_model.as_deref(),
            Some("claude-opus-4-8"),
            "{what}"
        );
    }
    simulator.assert_no_violations();
}

/// The one record `sink` gets (it is sent as the response ends: waited
/// for, at most 10 s).
async fn wait_for_record(sink: &MemorySink) -> RefusalRecord {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut records = sink.take();
        if let Some(record) = records.pop() {
            assert!(records.is_empty(), "one record: {records:?}");
            return record;
        }
        assert!(std::time::Instant::now() < deadline, "no record");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
