//! The tenants file reloaded while the proxy serves traffic shaped as
//! loadgen's (clients on kept-alive connections sending ~20 KB streamed
//! requests back to back): each version of the file routes its tenant's
//! fallbacks to a model of its own, so every answer says which version
//! served it; every version is taken up while requests are in flight, no
//! request is lost nor any connection dropped, a broken file changes
//! nothing (the last good one is kept, and `/readyz` says why), and SIGHUP
//! reloads at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use refusal_guard_proxy::hash_key;
use support::binary::Running;
use support::load::{loadgen_request, KeepAlive};
use support::mock_upstream::MockUpstream;
use support::proxy::{client, readyz, readyz_until, run_proxy};
use support::requests::messages_request;

use super::{two_tenants, TenantsFile, OPUS, REFUSAL, SONNET, TEXT};

const GREEN_KEY: &str = "green-team-client-key-0003";
const LOAD_KEY: &str = "load-team-client-key-0004";
const CLIENTS: usize = 8;
/// Most requests a client sends, however long the reloads take.
const MOST_EACH: usize = 150;
/// The versions of the file the load runs through; the last adds green team.
const VERSIONS: u32 = 6;

/// The model version `n` of the file sends load team's fallbacks to.
fn fallback_of(n: u32) -> String {
    format!("{SONNET}-{}", 20_260_100 + n)
}

/// Red and blue teams, load team (its Opus refusals falling back to
/// [`fallback_of`] `n`, no rescue), and green team when `green`.
fn version(n: u32, green: bool) -> String {
    let mut text = two_tenants("");
    text.push_str(&format!(
        "\n[[tenant]]\nname = \"load-team\"\nkey_sha256 = [\"{}\"]\nchains = {{ \"{OPUS}\" = [\"{}\"] }}\nrescue = false\n",
        hash_key(LOAD_KEY),
        fallback_of(n)
    ));
    if green {
        text.push_str(&format!(
            "\n[[tenant]]\nname = \"green-team\"\nkey_sha256 = [\"{}\"]\n",
            hash_key(GREEN_KEY)
        ));
    }
    text
}

/// The status of one answered request with `key`.
async fn status_with(http: &reqwest::Client, url: &str, key: &str) -> u16 {
    let body = messages_request(OPUS, true, "hello");
    let request = http
        .post(format!("{url}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-test-key")
        .header("anthropic-version", "2023-06-01")
        .header("x-mock-script", TEXT)
        .header("x-mock-id", super::uuid_ish())
        .header("x-refusal-guard-key", key)
        .body(body.to_string());
    request.send().await.unwrap().status().as_u16()
}

/// Waits (at most 10 s) until `key` gets `status`.
async fn until_status(url: &str, key: &str, status: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_with(&client(), url, key).await != status {
        assert!(Instant::now() < deadline, "{key} never got {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The proxy guarding `mock` for the tenants of `file`, looked at every
/// `poll` seconds, with these `more` flags; its URL.
async fn tenants_proxy(
    mock: &MockUpstream,
    file: &TenantsFile,
    poll: &str,
    more: &[&str],
) -> String {
    let upstream = mock.url();
    let path = file.path.to_string_lossy().into_owned();
    let mut flags = vec![
        "--upstream",
        &upstream,
        "--tenants",
        &path,
        "--tenants-poll",
        poll,
    ];
    flags.extend_from_slice(more);
    run_proxy(&flags).await
}

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().port()
}

/// One request of the load, as a client saw it.
struct Answered {
    id: String,
    outcome: Result<(u16, bool), String>,
}

/// One loadgen-style client of load team: its kept-alive connection posts
/// refused requests (each recovered by load team's fallback) back to back
/// until `stop`, at most [`MOST_EACH`]; `done` counts the answers read.
async fn load_client(
    url: String,
    n: usize,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
) -> Vec<Answered> {
    let mut connection = KeepAlive::connect(&url).await;
    let script = format!("{REFUSAL},{TEXT}");
    let mut answered = Vec::new();
    while !stop.load(Ordering::Relaxed) && answered.len() < MOST_EACH {
        let id = format!("load-{n}-{}", answered.len());
        let body = loadgen_request(OPUS, 20, &id);
        let headers = [
            ("x-api-key", "sk-test-key"),
            ("anthropic-version", "2023-06-01"),
            ("x-refusal-guard-key", LOAD_KEY),
            ("x-mock-script", script.as_str()),
            ("x-mock-id", id.as_str()),
        ];
        let outcome = connection.post("/v1/messages", &headers, &body).await;
        let outcome = outcome.map(|(status, body)| {
            // Whole, as loadgen counts a request: a terminal event, and
            // the fallback's answer, not the refusal.
            let text = String::from_utf8_lossy(&body);
            let whole = text.contains("event: message_stop")
                && text.contains("\"stop_reason\":\"end_turn\"");
            (status.as_u16(), whole)
        });
        let failed = outcome.is_err();
        answered.push(Answered { id, outcome });
        done.fetch_add(1, Ordering::SeqCst);
        if failed {
            break;
        }
    }
    answered
}

/// The good reloads `/readyz` counts.
fn reloads(ready: &str) -> u64 {
    let count = ready
        .split("reloaded ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next());
    count
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {ready}"))
}

/// Waits (at most 10 s) until the load has answered `more` requests after
/// the `done` it had.
async fn answered_more(done: &AtomicUsize, more: usize) {
    let from = done.load(Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.load(Ordering::SeqCst) < from + more {
        assert!(Instant::now() < deadline, "the load stalled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_loses_no_request_and_a_broken_file_changes_nothing() {
    let mock = MockUpstream::start().await.unwrap();
    let file = TenantsFile::new(&version(1, false));
    let admin = format!("127.0.0.1:{}", free_port());
    let url = tenants_proxy(&mock, &file, "0.05", &["--admin", &admin]).await;
    let admin = format!("http://{admin}");
    let (_, ready) = readyz_until(&admin, |ready| ready.contains("3 tenants")).await;
    let first = reloads(&ready);
    assert_eq!(status_with(&client(), &url, GREEN_KEY).await, 401);

    let (stop, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let load: Vec<_> = (0..CLIENTS)
        .map(|n| tokio::spawn(load_client(url.clone(), n, stop.clone(), done.clone())))
        .collect();
    // Past the requests in flight when a version was taken up (one a
    // client), one more answer was admitted under it: every version
    // serves some of the load.
    let under_each_version = CLIENTS + 1;
    answered_more(&done, under_each_version).await;
    let mut count = first;
    for n in 2..VERSIONS {
        file.write(&version(n, false));
        let (_, ready) = readyz_until(&admin, |ready| reloads(ready) > count).await;
        count = reloads(&ready);
        answered_more(&done, under_each_version).await;
    }
    // A broken file (it would send the fallbacks elsewhere and add green
    // team): nothing changes.
    let broken = version(99, true).replace("name = \"green-team\"", "name = \"green team\"");
    file.write(&broken);
    let (status, ready) = readyz_until(&admin, |ready| ready.contains("FAILED")).await;
    assert_eq!(status, 200, "still serving the last good file: {ready}");
    assert!(ready.contains("the last good file is kept"), "{ready}");
    assert!(ready.contains("tenant `green team`"), "{ready}");
    answered_more(&done, under_each_version).await;
    assert_eq!(status_with(&client(), &url, GREEN_KEY).await, 401);
    let (_, still) = readyz(&admin).await;
    assert!(
        still.contains("FAILED") && reloads(&still) == reloads(&ready),
        "{still}"
    );
    // Fixed: green team is admitted, and /readyz is clear again.
    file.write(&version(VERSIONS, true));
    let (_, ready) = readyz_until(&admin, |ready| !ready.contains("FAILED")).await;
    assert!(ready.contains("4 tenants"), "{ready}");
    assert!(
        reloads(&ready) >= first + u64::from(VERSIONS) - 1,
        "{ready}"
    );
    assert_eq!(status_with(&client(), &url, GREEN_KEY).await, 200);
    answered_more(&done, under_each_version).await;
    stop.store(true, Ordering::Relaxed);

    let mut clients = Vec::new();
    for client in load {
        clients.push(
            tokio::time::timeout(Duration::from_secs(10), client)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    // Which version served each request: the model its fallback went to.
    let versions: HashMap<String, u32> = (1..=VERSIONS).map(|n| (fallback_of(n), n)).collect();
    let mut fallbacks: HashMap<String, Vec<String>> = HashMap::new();
    for seen in mock.seen() {
        let model = seen.json()["model"].as_str().unwrap_or_default().to_owned();
        fallbacks.entry(seen.id.clone()).or_default().push(model);
    }
    let mut served_by = vec![0; VERSIONS as usize + 1];
    for answers in &clients {
        let mut last = 0;
        for answer in answers {
            assert_eq!(answer.outcome, Ok((200, true)), "{}", answer.id);
            let models = &fallbacks[&answer.id];
            assert_eq!(models.len(), 2, "{}: {models:?}", answer.id);
            assert_eq!(models[0], OPUS);
            let version = *versions
                .get(&models[1])
                .unwrap_or_else(|| panic!("{}: a fallback to {}", answer.id, models[1]));
            // A client's next request never meets an older file.
            assert!(
                version >= last,
                "{}: version {version} after {last}",
                answer.id
            );
            last = version;
            served_by[version as usize] += 1;
        }
    }
    for n in 1..=VERSIONS {
        assert!(
            served_by[n as usize] > 0,
            "version {n} served none: {served_by:?}"
        );
    }
    let answered: usize = clients.iter().map(Vec::len).sum();
    assert_eq!(answered, done.load(Ordering::SeqCst));
    assert!(answered >= (VERSIONS as usize + 1) * under_each_version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file_at_once() {
    let mock = MockUpstream::start().await.unwrap();
    let file = TenantsFile::new(&version(1, false));
    // The binary in a process of its own, so that the signal reaches it
    // alone; the file looked at only every ten minutes, so that only the
    // signal reloads it here.
    let path = file.path.to_string_lossy().into_owned();
    let upstream = mock.url();
    let running = Running::spawn(
        super::BIN,
        &[
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--log",
            "off",
            "--tenants",
            &path,
            "--tenants-poll",
            "600",
        ],
    );
    let url = running.announced("listening on http://");
    let admin = running.announced("admin on http://");
    assert_eq!(status_with(&client(), &url, GREEN_KEY).await, 401);
    file.write(&version(1, true));
    assert_eq!(
        status_with(&client(), &url, GREEN_KEY).await,
        401,
        "not yet"
    );
    running.signal("HUP");
    // The positive control: the signal's reload, seen taking the new file.
    until_status(&url, GREEN_KEY, 200).await;
    // Then the absence: it was the only reload, so the file's change alone
    // (no signal, the next look ten minutes away) reloaded nothing.
    let (_, ready) = readyz(&admin).await;
    assert_eq!(reloads(&ready), 1, "{ready}");
}
