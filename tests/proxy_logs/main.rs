//! The refusal log when it cannot be written: the request still gets its
//! answer, and the failure is reported (through the tracing subscriber the
//! proxy installs on stderr), rate-limited. Also: the log is private.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use refusal_guard::telemetry::JsonlSink;
use refusal_guard::RefusalGuardLayer;
use refusal_guard_proxy::{Proxy, Upstream};
use support::log_capture::SharedBuffer;
use support::raw_upstream::{chunk, head, last_chunk, Act, RawUpstream};

const EMPTY_REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";

/// What the global subscriber wrote (one per test binary).
fn captured() -> Arc<Mutex<Vec<u8>>> {
    static BUFFER: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUFFER
        .get_or_init(|| {
            let buffer = Arc::new(Mutex::new(Vec::new()));
            let sink = buffer.clone();
            tracing_subscriber::fmt()
                .with_writer(move || SharedBuffer(sink.clone()))
                .with_ansi(false)
                .with_max_level(tracing::Level::WARN)
                .init();
            buffer
        })
        .clone()
}

fn reports(path: &std::path::Path) -> Vec<String> {
    let text = String::from_utf8_lossy(&captured().lock().unwrap()).into_owned();
    let shown = path.display().to_string();
    text.lines()
        .filter(|line| line.contains("could not append") && line.contains(&shown))
        .map(str::to_owned)
        .collect()
}

async fn refusing_upstream() -> RawUpstream {
    let refusal = std::fs::read(format!(
        "{}/tests/fixtures/{EMPTY_REFUSAL}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/..")
    ))
    .unwrap();
    RawUpstream::start(move |_, _| {
        vec![
            Act::Write(head(200, "text/event-stream")),
            Act::Write(chunk(&refusal)),
            Act::Write(last_chunk()),
        ]
    })
    .await
}

/// Sends `count` refused requests through a proxy logging to `sink`;
/// returns the bodies and the access-log lines.
async fn refused_requests(sink: JsonlSink, count: usize) -> (Vec<String>, Vec<String>) {
    let upstream = refusing_upstream().await;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = lines.clone();
    let layer = RefusalGuardLayer::new().rescue(false).telemetry(sink);
    let proxy = Proxy::new(Upstream::parse(&upstream.url()).unwrap(), &layer)
        .unwrap()
        .access_log_to(move |line| seen.lock().unwrap().push(line.to_owned()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/messages", listener.local_addr().unwrap());
    tokio::spawn(proxy.serve(listener, std::future::pending()));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut bodies = Vec::new();
    for i in 0..count {
        let body = format!(
            r#"{{"model":"claude-opus-4-7","max_tokens":64,"stream":true,"messages":[{{"role":"user","content":"question {i}"}}]}}"#
        );
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        bodies.push(response.text().await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = lines.lock().unwrap().clone();
    (bodies, lines)
}

#[tokio::test]
async fn a_log_replaced_by_a_directory_is_reported_once_and_answers_go_on() {
    captured();
    let dir = std::env::temp_dir().join(format!("rg-logfail-{}", std::process::id()));
    let path = dir.join("refusals.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let (bodies, lines) = refused_requests(sink, 3).await;
    for body in &bodies {
        assert!(
            body.contains("\"stop_reason\":\"refusal\""),
            "the refusal as sent: {body}"
        );
    }
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains("POST /v1/messages 200")),
        "{lines:?}"
    );
    let reported = reports(&path);
    assert_eq!(
        reported.len(),
        1,
        "rate-limited to one report: {reported:?}"
    );
    assert!(reported[0].contains("WARN"), "{}", reported[0]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_full_disk_is_reported() {
    captured();
    let path = std::path::Path::new("/dev/full");
    let sink = JsonlSink::open(path).unwrap();
    let (bodies, lines) = refused_requests(sink, 1).await;
    assert!(bodies[0].contains("\"stop_reason\":\"refusal\""));
    assert_eq!(lines.len(), 1, "{lines:?}");
    let reported = reports(path);
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(
        reported[0].to_lowercase().contains("no space"),
        "{}",
        reported[0]
    );
}

#[cfg(unix)]
#[test]
fn the_log_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("rg-logmode-{}", std::process::id()));
    let path = dir.join("nested/refusals.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(sink.path()), 0o600);
    assert_eq!(mode(&dir.join("nested")), 0o700);
    assert_eq!(mode(&dir), 0o700);
    std::fs::remove_dir_all(&dir).unwrap();
}
