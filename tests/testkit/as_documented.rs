//! The testkit used exactly as its README (`testkit/README.md`) shows: its
//! two examples, verbatim (the README's doc test compiles them; this runs
//! them).

use bytes::Bytes;
use http_body_util::Full;
use refusal_guard::recovery::FallbackChains;
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer};
use refusal_guard_testkit::{Reply, ReplyKind, Simulator, When};
use tower::{Layer, ServiceExt};

#[tokio::test]
async fn the_agent_meets_a_bio_refusal_then_an_answer() {
    let provider =
        Simulator::answering().when(When::any().call(1), Reply::refusal().category("bio"));
    let server = provider.serve().await;

    let ask = || async {
        reqwest::Client::new()
            .post(format!("{}/v1/messages", server.base_url()))
            .header("content-type", "application/json")
            .body(
                r#"{"model":"claude-opus-4-7","max_tokens":256,
                      "messages":[{"role":"user","content":"How do BSL-3 labs stay safe?"}]}"#,
            )
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    assert!(ask().await.contains(r#""category":"bio""#));
    assert!(ask().await.contains(r#""stop_reason":"end_turn""#));

    // What the agent sent, what it got, and whether it kept the API's rules.
    let sent = provider.received();
    assert_eq!(sent[0].body["model"], "claude-opus-4-7");
    assert_eq!(sent[0].reply.as_ref().unwrap().kind(), ReplyKind::Refusal);
    assert_eq!(sent[1].reply.as_ref().unwrap().kind(), ReplyKind::Answer);
    provider.assert_no_violations();
}

#[tokio::test]
async fn the_guard_falls_back_when_opus_refuses_cyber() {
    let provider = Simulator::answering()
        .keywords([("exploit", "cyber")])
        .when(
            When::any().model("claude-opus-4-7").category("cyber"),
            Reply::refusal(),
        );
    // The guard clones the service it wraps: give it a handle to the
    // provider's state (a plain clone would be a new provider).
    let guard = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["claude-opus-4-8"]))
        .layer(provider.shared());

    let request = http::Request::post("https://api.anthropic.com/v1/messages")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            r#"{"model":"claude-opus-4-7","max_tokens":256,
                "messages":[{"role":"user","content":"Explain this exploit's patch"}]}"#,
        )))
        .unwrap();
    let response = guard.oneshot(request).await.unwrap();
    assert_eq!(
        response.extensions().get::<Refusal>().unwrap().outcome,
        Outcome::Fallback
    );

    let models: Vec<_> = provider
        .received()
        .into_iter()
        .map(|r| r.model.unwrap())
        .collect();
    assert_eq!(models, ["claude-opus-4-7", "claude-opus-4-8"]);
    provider.assert_no_violations();
}
