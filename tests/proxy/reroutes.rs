//! Reroutes through the built binary: a response another model served than
//! the one asked for is said in the opt-in `refusal-guard-reroute` header,
//! logged, counted on the admin port's metrics and listed by
//! `refusal-guard report`; with `--recover-reroutes` the chain serves the
//! turn instead, before any of the rerouted answer reaches the client.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::binary::{self, arg, Running, TempDir};
use support::mock_upstream::{fixture, marker_stream, MockUpstream};
use support::prometheus::sample;
use support::proxy::{client, post_messages};
use support::requests::messages_request;

const BIN: &str = env!("CARGO_BIN_EXE_refusal-guard");

/// A stream Claude Opus 4.8 answered (the TypeScript SDK's fixture).
const BY_OPUS_4_8: &str = "anthropic/anthropic-sdk-typescript/basic_response.txt";

/// `refusal-guard` in front of `upstream`, logging to `log`, its admin
/// listener on, with `flags` after.
fn proxy(upstream: &str, log: &Path, flags: &[&str]) -> Running {
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--upstream",
        upstream,
        "--log",
        arg(log),
    ];
    args.extend_from_slice(flags);
    Running::spawn(BIN, &args)
}

/// The log's records once it holds `count` lines, waited for at most 10 s
/// (a stream's record is written as its end is read).
fn records(log: &Path, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        if lines.len() >= count {
            assert_eq!(lines.len(), count, "{text}");
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{count} records never came: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reroute_is_said_logged_counted_and_reported() {
    let upstream = MockUpstream::start().await.unwrap();
    let dir = TempDir::new("reroute-recorded");
    let log = dir.path().join("refusals.jsonl");
    let running = proxy(&upstream.url(), &log, &["--reroute-header"]);
    let base = running.announced("listening on http://");
    let admin = running.announced("admin on http://");

    let body = messages_request("claude-opus-4-7", true, "Audit my SSH config.");
    let response = post_messages(&base, BY_OPUS_4_8, "rerouted", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let said = response.headers().get("refusal-guard-reroute").cloned();
    assert_eq!(
        said.as_ref().map(|v| v.to_str().unwrap()),
        Some("requested=claude-opus-4-7; served=claude-opus-4-8")
    );
    let served = response.bytes().await.unwrap();
    assert_eq!(served, fixture(BY_OPUS_4_8), "served as it came");
    assert_eq!(upstream.seen_for("rerouted").len(), 1);

    let record = &records(&log, 1)[0];
    assert_eq!(record["outcome"], "rerouted");
    assert_eq!(record["signal"], "rerouted");
    assert_eq!(record["category"], "rerouted");
    assert_eq!(record["model"], "claude-opus-4-7");
    assert_eq!(record["served_model"], "claude-opus-4-8");
    assert_eq!(record["provider"], "anthropic");
    assert!(record["conversation"].is_string(), "{record}");
    assert_eq!(record["attempts"][0]["rerouted_to"], "claude-opus-4-8");

    let metrics = client()
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let labels = [
        ("provider", "anthropic"),
        ("requested", "claude-opus-4-7"),
        ("served", "claude-opus-4-8"),
    ];
    let counted = sample(&metrics, "refusal_guard_reroutes_total", &labels);
    assert_eq!(counted, Some(1.0), "{metrics}");
    drop(running);

    let report = binary::run(BIN, &["report", "--log", arg(&log)]);
    assert!(report.status.success(), "{report:?}");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("Reroutes (another model served than the one asked for)"),
        "{text}"
    );
    assert!(
        text.contains("anthropic: claude-opus-4-7 -> claude-opus-4-8"),
        "{text}"
    );
    let json = binary::run(BIN, &["report", "--log", arg(&log), "--json"]);
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        json["reroutes"]["anthropic: claude-opus-4-7 -> claude-opus-4-8"],
        1
    );
    assert_eq!(json["by_outcome"]["rerouted"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_recover_reroutes_the_chain_serves_the_turn() {
    let upstream = MockUpstream::start().await.unwrap();
    let dir = TempDir::new("reroute-recovered");
    let log = dir.path().join("refusals.jsonl");
    let flags = [
        "--recover-reroutes",
        "--chain",
        "claude-opus-4-7=claude-opus-4-7",
    ];
    let running = proxy(&upstream.url(), &log, &flags);
    let base = running.announced("listening on http://");

    // Rerouted to Opus 4.8, then asked again: Opus 4.7 answers.
    let script = format!("{BY_OPUS_4_8},marker");
    let body = messages_request("claude-opus-4-7", true, "Audit my SSH config.");
    let response = post_messages(&base, &script, "recovered", &body)
        .header("x-mock-marker", "asked-again")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let recovered = response.headers().get("refusal-guard-recovery").cloned();
    assert_eq!(
        recovered.as_ref().map(|v| v.to_str().unwrap()),
        Some("fallback; category=rerouted; served-by=claude-opus-4-7")
    );
    assert!(
        response.headers().get("refusal-guard-reroute").is_none(),
        "opt-in"
    );
    let served = response.bytes().await.unwrap();
    let expected: Vec<u8> = marker_stream("asked-again").concat();
    assert_eq!(served, expected, "only the fallback's bytes");
    let seen = upstream.seen_for("recovered");
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].json()["model"], "claude-opus-4-7");

    let record = &records(&log, 1)[0];
    assert_eq!(record["outcome"], "fallback");
    assert_eq!(record["category"], "rerouted");
    assert_eq!(record["attempts"][0]["result"], "refused");
    assert_eq!(record["attempts"][0]["rerouted_to"], "claude-opus-4-8");
    assert_eq!(record["attempts"][1]["result"], "served");
    assert!(
        record["attempts"][1].get("rerouted_to").is_none(),
        "{record}"
    );
}
