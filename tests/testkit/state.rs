//! A simulator's state is its own: a clone starts afresh; a shared handle,
//! a server and the guard over it share the simulator's.

use refusal_guard::refusal::WireApi;
use refusal_guard::RefusalGuardLayer;
use refusal_guard_testkit::{ReplyKind, Simulator};
use support::wire::read;
use tower::{Layer, ServiceExt};

use super::ask;

const PROMPT: &str = "Audit my SSH config";

/// The reply kinds `simulator` gave, oldest first.
fn kinds(simulator: &Simulator) -> Vec<ReplyKind> {
    simulator
        .received()
        .iter()
        .map(|r| r.reply.as_ref().unwrap().kind())
        .collect()
}

#[tokio::test]
async fn a_clone_has_seen_nothing_a_server_shares_its_simulator() {
    let client = support::proxy::client();
    let simulator = Simulator::new();
    let first = simulator.serve().await;
    let second = simulator.serve().await;
    let apart = simulator.clone();
    let third = apart.serve().await;
    for server in [&first, &second, &third] {
        let got = ask(
            &client,
            &server.base_url(),
            (WireApi::OpenAiChatCompletions, "gpt-5"),
            PROMPT,
            true,
        )
        .await;
        assert_eq!(got.status, 200);
    }
    // The two servers of one simulator: one conversation, refused then
    // answered; the clone's server: the conversation's first attempt.
    assert_eq!(kinds(&simulator), [ReplyKind::Refusal, ReplyKind::Answer]);
    assert_eq!(kinds(&apart), [ReplyKind::Refusal]);
    assert_eq!(first.simulator().requests(), 2);
}

#[tokio::test]
async fn the_guard_wraps_a_shared_handle_and_the_test_reads_the_simulator() {
    let simulator = Simulator::new();
    let guard = RefusalGuardLayer::new().layer(simulator.shared());
    let (path, body) = support::wire::request(WireApi::OpenAiResponses, "gpt-5", PROMPT, false);
    let request = http::Request::post(format!("http://simulated{path}"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    let response = guard.clone().oneshot(request).await.unwrap();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap();
    let seen = read(
        WireApi::OpenAiResponses,
        std::str::from_utf8(&body.to_bytes()).unwrap(),
    );
    assert_eq!(seen.stop.as_deref(), Some("completed"));
    // The guard's clones of the handle shared the simulator's state: the
    // rescue was the conversation's second attempt.
    assert_eq!(kinds(&simulator), [ReplyKind::Refusal, ReplyKind::Answer]);
    let rescue = &simulator.received()[1];
    assert_eq!((rescue.attempt, rescue.attempt_on_model), (2, 2));
    assert_eq!(rescue.body["input"][0]["content"], PROMPT);
    simulator.assert_no_violations();
}
