//! Tenants and learned routing through the proxy on loopback, in front of
//! the scripted mock upstream (which checks every request against the
//! provider's contract): two tenants with their own policies and
//! allowlists behind one proxy, keys from the tenants file, the hourly fallback
//! cap, the file reloaded under load, and fallbacks ordered by what served.

mod binary;
mod documented;
mod reload;
mod report;
mod routing;
mod settings;

use std::path::PathBuf;
use std::sync::Arc;

use refusal_guard::recovery::FallbackChains;
use refusal_guard::refusal::{AttemptResult, AttemptStep, DeadReason, Outcome};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::tenant::FromExtensions;
use refusal_guard::RefusalGuardLayer;
use refusal_guard_proxy::{hash_key, Tenants};
use serde_json::{json, Value};
use support::binary::TempDir;
use support::mock_upstream::MockUpstream;
use support::proxy::{client, post_messages, serve_tenants_proxy};
use support::requests::messages_request;

const OPUS: &str = "claude-opus-4-7";
const SONNET: &str = "claude-sonnet-4-5";
const HAIKU: &str = "claude-haiku-4-5";
const REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";
const TEXT: &str = "anthropic/anthropic-sdk-python/basic_response.txt";
const BIN: &str = env!("CARGO_BIN_EXE_refusal-guard");
const RED_KEY: &str = "red-team-client-key-0001";
const BLUE_KEY: &str = "blue-team-client-key-0002";

/// A tenants file in a directory of its own, removed on drop.
pub struct TenantsFile {
    dir: TempDir,
    pub path: PathBuf,
}

impl TenantsFile {
    pub fn new(text: &str) -> TenantsFile {
        let dir = TempDir::new("tenants");
        let path = dir.write("tenants.toml", text);
        TenantsFile { dir, path }
    }

    /// Replaces the file whole, as an operator's deploy does.
    pub fn write(&self, text: &str) {
        self.dir.write("tenants.toml", text);
    }
}

pub fn uuid_ish() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{nanos}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Red team: its own chain from Opus, Haiku then Sonnet, but only
/// `claude-sonnet-*` allowed, and no rescue. Blue team: the proxy's chain,
/// but `cyber` refusals stop. `extra` is added to red team's table.
pub fn two_tenants(extra: &str) -> String {
    format!(
        r#"
[[tenant]]
name = "red-team"
key_sha256 = ["{red}"]
chains = {{ "{OPUS}" = ["{HAIKU}", "{SONNET}"] }}
allow_models = ["claude-sonnet-*"]
rescue = false
{extra}

[[tenant]]
name = "blue-team"
key_sha256 = ["{blue}"]
policy = "cyber=stop;*=fallback,rescue"
"#,
        red = hash_key(RED_KEY),
        blue = hash_key(BLUE_KEY),
    )
}

/// A proxy (in process) guarding `mock` with the layer's chain Opus →
/// Sonnet, admitting the keys of `tenants`; its URL.
async fn proxy(mock: &MockUpstream, tenants: Arc<Tenants>, sink: &MemorySink) -> String {
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain(OPUS, [SONNET]))
        .telemetry(sink.clone())
        .tenants(FromExtensions);
    serve_tenants_proxy(&mock.url(), &layer, tenants).await
}

/// The models of the requests the mock received for `id`, in order.
fn models_seen(mock: &MockUpstream, id: &str) -> Vec<String> {
    mock.seen_for(id)
        .iter()
        .map(|seen| seen.json()["model"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn refused_request(url: &str, key: &str, id: &str, text: &str) -> reqwest::Response {
    scripted(url, key, id, text, &format!("{REFUSAL},{TEXT},{TEXT}")).await
}

/// A streamed Messages request on Opus that the mock answers with `script`.
async fn scripted(url: &str, key: &str, id: &str, text: &str, script: &str) -> reqwest::Response {
    let body = messages_request(OPUS, true, text);
    post_messages(url, script, id, &body)
        .header("x-refusal-guard-key", key)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_same_refusal_is_recovered_for_one_tenant_and_passed_through_for_the_other() {
    let mock = MockUpstream::start().await.unwrap();
    let file = TenantsFile::new(&two_tenants(""));
    let sink = MemorySink::new();
    let url = proxy(&mock, Tenants::load(&file.path).unwrap(), &sink).await;

    let red = refused_request(&url, RED_KEY, "red-1", "audit my host").await;
    assert_eq!(red.status(), 200);
    let red = red.text().await.unwrap();
    assert!(red.contains("\"stop_reason\":\"end_turn\""), "{red}");
    // Haiku is on red team's chain but outside its allowlist: never sent.
    assert_eq!(models_seen(&mock, "red-1"), [OPUS, SONNET]);

    let blue = refused_request(&url, BLUE_KEY, "blue-1", "audit my host").await;
    assert_eq!(blue.status(), 200);
    let blue = blue.bytes().await.unwrap();
    assert_eq!(
        blue,
        support::fixture(REFUSAL),
        "the refusal reaches blue team byte for byte"
    );
    assert_eq!(models_seen(&mock, "blue-1"), [OPUS], "nothing after it");

    // The tenant's key never goes upstream; the client's own key does.
    for seen in mock.seen() {
        assert_eq!(seen.header("x-refusal-guard-key"), None);
        assert_eq!(seen.header("x-api-key"), Some("sk-test-key"));
    }
    let records = sink.records();
    let red = records
        .iter()
        .find(|r| r.tenant.as_deref() == Some("red-team"))
        .unwrap();
    assert_eq!(red.outcome, Outcome::Fallback);
    let skipped = &red.attempts[1];
    assert_eq!(
        (skipped.step, skipped.result, skipped.model.as_deref()),
        (AttemptStep::Fallback, AttemptResult::Skipped, Some(HAIKU))
    );
    // Sonnet served after it: the skip still says why it was one.
    assert_eq!(skipped.reason, Some(DeadReason::NotAllowed));
    assert_eq!(red.reason, None, "a served refusal has no dead reason");
    let line = serde_json::to_value(&red.attempts[1]).unwrap();
    assert_eq!(line["reason"], "not_allowed", "{line}");
    assert!(serde_json::to_value(&red.attempts[2])
        .unwrap()
        .get("reason")
        .is_none());
    assert_eq!(red.attempts[2].model.as_deref(), Some(SONNET));
    let blue = records
        .iter()
        .find(|r| r.tenant.as_deref() == Some("blue-team"))
        .unwrap();
    assert_eq!(
        (blue.outcome, blue.reason),
        (Outcome::Dead, Some(DeadReason::PolicyStop))
    );
}

#[tokio::test]
async fn a_fallback_only_outside_the_allowlist_is_skipped_and_the_refusal_served() {
    let mock = MockUpstream::start().await.unwrap();
    let only_haiku = format!(
        "[[tenant]]\nname = \"narrow\"\nkey_sha256 = [\"{}\"]\nallow_models = [\"{HAIKU}\"]\nrescue = false\n",
        hash_key(RED_KEY)
    );
    let file = TenantsFile::new(&only_haiku);
    let sink = MemorySink::new();
    let url = proxy(&mock, Tenants::load(&file.path).unwrap(), &sink).await;
    let response = refused_request(&url, RED_KEY, "narrow-1", "audit my host").await;
    assert_eq!(response.bytes().await.unwrap(), support::fixture(REFUSAL));
    assert_eq!(models_seen(&mock, "narrow-1"), [OPUS], "Sonnet never sent");
    let record = &sink.records()[0];
    assert_eq!(record.reason, Some(DeadReason::NotAllowed));
    assert_eq!(record.attempts[1].result, AttemptResult::Skipped);
    assert_eq!(record.attempts[1].reason, Some(DeadReason::NotAllowed));
}

#[tokio::test]
async fn past_its_recovery_attempts_for_the_hour_a_tenant_gets_the_refusal_recorded_capped() {
    let mock = MockUpstream::start().await.unwrap();
    let file = TenantsFile::new(&two_tenants("recovery_attempts_per_hour = 1"));
    let sink = MemorySink::new();
    let url = proxy(&mock, Tenants::load(&file.path).unwrap(), &sink).await;
    let first = refused_request(&url, RED_KEY, "cap-1", "audit host one").await;
    assert!(first.text().await.unwrap().contains("end_turn"));
    let second = refused_request(&url, RED_KEY, "cap-2", "audit host two").await;
    assert_eq!(second.bytes().await.unwrap(), support::fixture(REFUSAL));
    assert_eq!(
        models_seen(&mock, "cap-2"),
        [OPUS],
        "no fallback past the cap"
    );
    // Another tenant's fallbacks are its own.
    let blue = refused_request(&url, BLUE_KEY, "cap-3", "fix host three").await;
    assert_eq!(blue.bytes().await.unwrap(), support::fixture(REFUSAL));
    assert_eq!(
        models_seen(&mock, "cap-3").len(),
        1,
        "blue team stops cyber"
    );
    let records = sink.records();
    assert_eq!(records.len(), 3);
    assert_eq!(
        (records[1].outcome, records[1].reason),
        (Outcome::Dead, Some(DeadReason::Capped))
    );
    assert_eq!(records[1].tenant.as_deref(), Some("red-team"));
}

/// A request to `path` with `body` and a key the file does not list.
async fn unknown_key(url: &str, path: &str, body: Value) -> (u16, Value) {
    let response = client()
        .post(format!("{url}{path}"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer someone-elses-key-0003")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn an_unknown_key_gets_401_in_each_apis_shape_and_nothing_goes_upstream() {
    let mock = MockUpstream::start().await.unwrap();
    let file = TenantsFile::new(&two_tenants(""));
    let url = proxy(
        &mock,
        Tenants::load(&file.path).unwrap(),
        &MemorySink::new(),
    )
    .await;
    let messages = messages_request(OPUS, false, "hi");
    let (status, anthropic) = unknown_key(&url, "/v1/messages", messages.clone()).await;
    assert_eq!(status, 401);
    assert_eq!(anthropic["type"], "error");
    assert_eq!(anthropic["error"]["type"], "authentication_error");
    let chat = json!({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]});
    let (status, openai) = unknown_key(&url, "/v1/chat/completions", chat).await;
    assert_eq!(status, 401);
    assert!(openai["error"]["message"].is_string(), "{openai}");
    assert_eq!(openai["error"]["code"], "client_key_required");
    let responses = json!({"model": "gpt-5", "input": "hi"});
    let (status, openai) = unknown_key(&url, "/v1/responses", responses).await;
    assert_eq!(status, 401);
    assert!(openai["error"]["message"].is_string(), "{openai}");
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let path = "/v1beta/models/gemini-2.5-pro:generateContent";
    let (status, google) = unknown_key(&url, path, gemini).await;
    assert_eq!(status, 401);
    assert_eq!(google["error"]["code"], 401);
    assert_eq!(google["error"]["status"], "UNAUTHENTICATED");
    // No key at all, and a known key's hash presented as the key.
    let (status, _) = unknown_key(&url, "/v1/messages", messages.clone()).await;
    assert_eq!(status, 401);
    let hashed = client()
        .post(format!("{url}/v1/messages"))
        .header("x-refusal-guard-key", hash_key(RED_KEY))
        .body(messages.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(hashed.status(), 401, "the file's hash is not a key");
    assert!(mock.seen().is_empty(), "nothing went upstream");
}

#[tokio::test]
async fn two_tenants_never_share_a_conversations_rescue() {
    // The same conversation from two tenants: each has its own rescue.
    let mock = MockUpstream::start().await.unwrap();
    let file = TenantsFile::new(&format!(
        "[[tenant]]\nname = \"one\"\nkey_sha256 = [\"{}\"]\n\n[[tenant]]\nname = \"two\"\nkey_sha256 = [\"{}\"]\n",
        hash_key(RED_KEY),
        hash_key(BLUE_KEY)
    ));
    let sink = MemorySink::new();
    let layer = RefusalGuardLayer::new()
        .telemetry(sink.clone())
        .tenants(FromExtensions);
    let tenants = Tenants::load(&file.path).unwrap();
    let url = serve_tenants_proxy(&mock.url(), &layer, tenants).await;
    // Tenant one's rescue refuses too: its conversation has used its one
    // rescue. Tenant two's same conversation still has its own.
    let text = "the same conversation";
    let again = format!("{REFUSAL},{REFUSAL}");
    let one = scripted(&url, RED_KEY, "share-1", text, &again).await;
    assert_eq!(one.bytes().await.unwrap(), support::fixture(REFUSAL));
    let two = refused_request(&url, BLUE_KEY, "share-2", text).await;
    assert!(two.text().await.unwrap().contains("end_turn"));
    let records = sink.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].reason, Some(DeadReason::StillRefused));
    assert_eq!(records[1].outcome, Outcome::Rescued);
    assert_ne!(records[0].conversation, records[1].conversation);
}
