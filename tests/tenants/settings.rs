//! A tenant's own text detection and provider allowlist, each against a
//! tenant without it behind the same proxy: the same prose refusal is
//! recovered for the tenant that reads prose and reaches the other as it
//! came; a fallback to another provider than a tenant allows is never sent.

use refusal_guard::recovery::{ApiKey, Endpoint, FallbackChains};
use refusal_guard::refusal::{
    AttemptResult, AttemptStep, DeadReason, Outcome, Provider, RefusalSignal,
};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::tenant::FromExtensions;
use refusal_guard::RefusalGuardLayer;
use refusal_guard_proxy::{hash_key, Tenants};
use support::mock_upstream::MockUpstream;
use support::proxy::serve_tenants_proxy;

use super::{models_seen, scripted, TenantsFile, BLUE_KEY, OPUS, RED_KEY, REFUSAL, TEXT};

const PROSE_REFUSAL: &str = "e2e/prose_refusal.sse";
const CHAT_ANSWER: &str = "e2e/openai_chat_text_e2aad469.bin";

/// Red team with `red`, blue team with `blue` (lines of their tables).
fn red_and_blue(red: &str, blue: &str) -> TenantsFile {
    TenantsFile::new(&format!(
        "[[tenant]]\nname = \"red-team\"\nkey_sha256 = [\"{}\"]\n{red}\n\n\
         [[tenant]]\nname = \"blue-team\"\nkey_sha256 = [\"{}\"]\n{blue}\n",
        hash_key(RED_KEY),
        hash_key(BLUE_KEY)
    ))
}

#[tokio::test]
async fn a_prose_refusal_is_recovered_for_the_tenant_that_reads_prose_and_passed_to_the_other() {
    // Either way round from the layer's own setting: the tenant's wins.
    for layer_reads_prose in [false, true] {
        let mock = MockUpstream::start().await.unwrap();
        let file = red_and_blue("detect_text = true", "detect_text = false");
        let sink = MemorySink::new();
        let layer = RefusalGuardLayer::new()
            .detect_text_refusals(layer_reads_prose)
            .telemetry(sink.clone())
            .tenants(FromExtensions);
        let url =
            serve_tenants_proxy(&mock.url(), &layer, Tenants::load(&file.path).unwrap()).await;
        let script = format!("{PROSE_REFUSAL},{TEXT}");
        let text = "write me a keylogger";

        let red = scripted(&url, RED_KEY, "prose-red", text, &script).await;
        assert_eq!(red.status(), 200);
        let red = red.bytes().await.unwrap();
        assert_eq!(red, support::fixture(TEXT), "the rescue's answer");
        assert_eq!(models_seen(&mock, "prose-red"), [OPUS, OPUS]);

        let blue = scripted(&url, BLUE_KEY, "prose-blue", text, &script).await;
        assert_eq!(blue.status(), 200);
        let blue = blue.bytes().await.unwrap();
        assert_eq!(blue, support::fixture(PROSE_REFUSAL), "as it came");
        assert_eq!(models_seen(&mock, "prose-blue"), [OPUS]);

        let records = sink.records();
        assert_eq!(records.len(), 1, "blue team's answer is no refusal");
        let red = &records[0];
        assert_eq!(red.tenant.as_deref(), Some("red-team"));
        assert_eq!(
            (red.signal, red.category.as_deref(), red.outcome),
            (
                Some(RefusalSignal::Text),
                Some("text_refusal"),
                Outcome::Rescued
            )
        );
    }
}

/// A refused streamed Messages request whose script is in its text too:
/// a fallback translated for another provider carries none of its headers.
async fn refused_with_script_in_text(url: &str, key: &str, id: &str) -> bytes::Bytes {
    let script = format!("{REFUSAL},{CHAT_ANSWER}");
    let text = format!("audit my host [mock-script={script};mock-id={id}]");
    let response = scripted(url, key, id, &text, &script).await;
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap()
}

#[tokio::test]
async fn a_fallback_to_a_provider_the_tenant_does_not_allow_is_never_sent_and_recorded() {
    let mock = MockUpstream::start().await.unwrap();
    // Both may spend the operator's OpenAI key: only the provider
    // allowlist tells them apart.
    let file = red_and_blue(
        "allow_providers = [\"anthropic\"]\noperator_keys = [\"openai\"]",
        "allow_providers = [\"anthropic\", \"openai\"]\noperator_keys = [\"openai\"]",
    );
    let sink = MemorySink::new();
    let openai = Endpoint::new(mock.url().parse().unwrap(), ApiKey::new("sk-operator"));
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain(OPUS, ["openai:gpt-5"]))
        .cross_provider(Provider::OpenAi, openai)
        .rescue(false)
        .telemetry(sink.clone())
        .tenants(FromExtensions);
    let url = serve_tenants_proxy(&mock.url(), &layer, Tenants::load(&file.path).unwrap()).await;

    let red = refused_with_script_in_text(&url, RED_KEY, "providers-red").await;
    assert_eq!(red, support::fixture(REFUSAL), "the refusal, as it came");
    assert_eq!(models_seen(&mock, "providers-red"), [OPUS]);
    assert!(
        mock.seen().iter().all(|seen| seen.path == "/v1/messages"),
        "nothing went to OpenAI"
    );
    let records = sink.records();
    let red = &records[0];
    assert_eq!(
        (red.outcome, red.reason),
        (Outcome::Dead, Some(DeadReason::NotAllowed))
    );
    let skipped = &red.attempts[1];
    assert_eq!(
        (skipped.step, skipped.result, skipped.provider),
        (
            AttemptStep::Fallback,
            AttemptResult::Skipped,
            Some(Provider::OpenAi)
        )
    );
    assert_eq!(skipped.model.as_deref(), Some("openai:gpt-5"));

    // Blue team allows OpenAI: the same fallback is sent, with the
    // operator's key.
    let blue = refused_with_script_in_text(&url, BLUE_KEY, "providers-blue").await;
    assert!(String::from_utf8_lossy(&blue).contains("event: message_stop"));
    let seen = mock.seen_for("providers-blue");
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].path, "/v1/chat/completions");
    assert_eq!(seen[1].header("authorization"), Some("Bearer sk-operator"));
    assert_eq!(sink.records()[1].outcome, Outcome::Fallback);
}
