//! The tenants file reloaded while the proxy serves a steady load: no
//! request is lost, a broken file changes nothing (the last good one is
//! kept, and `/readyz` says why), and SIGHUP reloads at once.

use std::time::{Duration, Instant};

use refusal_guard::proxy::hash_key;
use support::mock_upstream::MockUpstream;
use support::proxy::{client, run_proxy};
use support::requests::messages_request;

use super::{two_tenants, TenantsFile, BLUE_KEY, OPUS, RED_KEY, TEXT};

const GREEN_KEY: &str = "green-team-client-key-0003";
const CLIENTS: usize = 12;
const REQUESTS_EACH: usize = 30;

/// Red and blue teams, and green team when `green`; red team's rescue as
/// `rescue` says (each version differs from the one before).
fn version(green: bool, rescue: bool) -> String {
    let mut text = two_tenants("").replace("rescue = false", &format!("rescue = {rescue}"));
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

async fn readyz(admin: &str) -> (u16, String) {
    let response = client()
        .get(format!("{admin}/readyz"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_loses_no_request_and_a_broken_file_changes_nothing() {
    let mock = MockUpstream::start().await.unwrap();
    let file = TenantsFile::new(&version(false, false));
    let admin = format!("127.0.0.1:{}", free_port());
    let url = tenants_proxy(&mock, &file, "0.05", &["--admin", &admin]).await;
    let admin = format!("http://{admin}");
    assert_eq!(status_with(&client(), &url, GREEN_KEY).await, 401);

    // The load: clients on kept-alive connections, one after another.
    let mut load = Vec::new();
    for i in 0..CLIENTS {
        let (url, http) = (url.clone(), client());
        let key = if i % 2 == 0 { RED_KEY } else { BLUE_KEY };
        load.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..REQUESTS_EACH {
                statuses.push(status_with(&http, &url, key).await);
            }
            statuses
        }));
    }
    // Reloads while it runs.
    for i in 0..6 {
        file.write(&version(false, i % 2 == 0));
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    // A broken file (it would add green team): nothing changes.
    let broken = version(true, true).replace(
        "[[tenant]]\nname = \"green-team\"",
        "[[tenant]]\nname = \"green team\"",
    );
    file.write(&broken);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (status, ready) = loop {
        let (status, ready) = readyz(&admin).await;
        if ready.contains("FAILED") || Instant::now() > deadline {
            break (status, ready);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status, 200, "still serving the last good file: {ready}");
    assert!(ready.contains("the last good file is kept"), "{ready}");
    assert!(ready.contains("tenant `green team`"), "{ready}");
    assert_eq!(status_with(&client(), &url, GREEN_KEY).await, 401);
    assert_eq!(status_with(&client(), &url, RED_KEY).await, 200);
    // Fixed: green team is admitted, and /readyz is clear again.
    file.write(&version(true, true));
    until_status(&url, GREEN_KEY, 200).await;
    let (_, ready) = readyz(&admin).await;
    assert!(
        !ready.contains("FAILED") && ready.contains("3 tenants"),
        "{ready}"
    );

    let mut answered = 0;
    for client in load {
        let statuses = client.await.unwrap();
        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
        answered += statuses.len();
    }
    assert_eq!(answered, CLIENTS * REQUESTS_EACH);
    // Every request of the load reached the upstream once.
    assert!(mock.seen().len() >= answered);
}

#[tokio::test]
async fn sighup_reloads_the_file_at_once() {
    let mock = MockUpstream::start().await.unwrap();
    let file = TenantsFile::new(&version(false, false));
    // Looked at only every ten minutes: only the signal reloads it here.
    let url = tenants_proxy(&mock, &file, "600", &[]).await;
    assert_eq!(status_with(&client(), &url, GREEN_KEY).await, 401);
    file.write(&version(true, false));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        status_with(&client(), &url, GREEN_KEY).await,
        401,
        "not yet"
    );
    let pid = std::process::id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    until_status(&url, GREEN_KEY, 200).await;
}
