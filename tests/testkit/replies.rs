//! Each scripted reply, on each wire API, streamed and not, as a client
//! reads it through the guard (started in process, a simulator on loopback
//! its upstream): refusals recovered, a partial refusal and a provider
//! error passed through byte for byte as the simulator sent them.

use http::StatusCode;
use refusal_guard::RefusalGuardLayer;
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
