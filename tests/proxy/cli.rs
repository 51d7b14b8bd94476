//! The `refusal-guard` binary as a user runs it: the proxy without a
//! subcommand (its flags as before), `report` on a refusal log, and bad
//! arguments exiting 2. Every process is bounded: the proxy is killed, each
//! wait has a deadline.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use support::binary::{self, arg, Running, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_refusal-guard");

/// A rescued refusal and a dead one whose refused attempt cost tokens.
const LOG: &str = concat!(
    r#"{"ts":"2026-11-29T18:00:00.000Z","model":"claude-opus-4-7","category":"cyber","explanation":null,"outcome":"rescued","attempts":[{"step":"original","model":"claude-opus-4-7","result":"refused","latency_ms":30},{"step":"rescue","model":"claude-opus-4-7","result":"served","latency_ms":90}]}"#,
    "\n",
    r#"{"ts":"2026-11-29T19:00:00.000Z","model":"claude-x","category":"bio","explanation":null,"outcome":"dead","reason":"rescue_off","attempts":[{"step":"original","model":"claude-x","result":"refused","latency_ms":40,"usage":{"input_tokens":1200,"output_tokens":5}}]}"#,
    "\n",
);

/// The two records above, as the log `dir` holds.
fn log(dir: &TempDir) -> PathBuf {
    dir.write("refusals.jsonl", LOG)
}

fn run(args: &[&str]) -> Output {
    binary::run(BIN, args)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn report_counts_the_log() {
    let dir = TempDir::new("cli-report");
    let log = log(&dir);
    let out = run(&["report", "--log", arg(&log)]);
    assert!(out.status.success(), "{out:?}");
    let shown = stdout(&out);
    assert!(
        shown.starts_with(&format!("Log: {}\n", log.display())),
        "{shown}"
    );
    assert!(
        shown.contains("2 refusals recorded; 1 recovered by a fallback or a rescue (50%)."),
        "{shown}"
    );
    assert!(
        shown.contains("Tokens spent on refused attempts: 1205 (input 1200, output 5)"),
        "{shown}"
    );
    assert!(shown.contains("[cyber]  rescued"), "{shown}");
    assert!(shown.contains("[bio]  dead (rescue_off)"), "{shown}");

    let out = run(&["report", "--log", arg(&log), "--json"]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["total"], 2);
    assert_eq!(json["recovered"], 1);
    assert_eq!(
        json["by_outcome"],
        serde_json::json!({"dead": 1, "rescued": 1})
    );
}

#[test]
fn report_writes_the_dashboard_of_several_logs() {
    let dir = TempDir::new("cli-html");
    let log = log(&dir);
    let older = dir.path().join("older.jsonl");
    std::fs::write(&older, LOG.lines().next().unwrap()).unwrap();
    let page = dir.path().join("report.html");
    let out = run(&[
        "report",
        "--log",
        arg(&log),
        "--log",
        arg(&older),
        "--html",
        arg(&page),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).starts_with("Wrote the dashboard of 3 refusals to "),
        "{}",
        stdout(&out)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!doctype html>"), "{}", &html[..60]);
}

#[test]
fn report_clear_deletes_the_log_and_a_missing_log_is_an_empty_report() {
    let dir = TempDir::new("cli-clear");
    let log = log(&dir);
    let out = run(&["report", "--log", arg(&log), "clear"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out),
        format!("Cleared the refusal log {}\n", log.display())
    );
    assert!(!log.exists());
    let out = run(&["report", "--log", arg(&log)]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out),
        format!(
            "No refusal log yet at {}\nNo refusals recorded.\n",
            log.display()
        )
    );
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["--bogus"][..],
        &["--rescue", "maybe"],
        &["report", "--json", "--html", "x.html"],
        &["report", "--log", "a", "--log", "b"],
        &["report", "wipe"],
        &["report", "--log", ""],
        // The proxy's flags do not go with a subcommand.
        &["--simulate", "report"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: errors go to stderr");
    }
}

#[test]
fn help_shows_the_proxy_flags_and_the_report() {
    let out = run(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = stdout(&out);
    for expected in [
        "Usage: refusal-guard",
        "report",
        "--simulate",
        "REFUSAL_GUARD_LISTEN",
    ] {
        assert!(help.contains(expected), "{expected}: {help}");
    }
    let out = run(&["report", "--help"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("--html <FILE>"), "{}", stdout(&out));
}

/// `refusal-guard --simulate --strict` on a free port, logging to `log`.
fn strict_simulator(log: &str) -> Running {
    let args = [
        "--simulate",
        "--strict",
        "--listen",
        "127.0.0.1:0",
        "--log",
        log,
    ];
    Running::spawn(BIN, &args)
}

/// The `host:port` the running proxy announced.
fn listening(proxy: &Running) -> String {
    let url = proxy.announced("listening on http://");
    url.trim_start_matches("http://").to_owned()
}

#[test]
fn without_a_subcommand_it_runs_the_proxy() {
    let dir = TempDir::new("cli-proxy");
    let log = dir.path().join("refusals.jsonl");
    let proxy = strict_simulator(arg(&log));
    let addr = listening(&proxy);

    let body = r#"{"model":"claude-opus-4-7","max_tokens":64,"messages":[{"role":"user","content":"Check my SSH config"}]}"#;
    let mut socket = TcpStream::connect(&addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        socket,
        "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("Simulated answer"), "{response}");

    // The rescue went to the log given by --log.
    let deadline = Instant::now() + Duration::from_secs(10);
    let written = loop {
        let written = std::fs::read_to_string(&log).unwrap_or_default();
        if !written.is_empty() || Instant::now() > deadline {
            break written;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let record: serde_json::Value = serde_json::from_str(written.trim()).unwrap();
    assert_eq!(record["outcome"], "rescued");
    assert_eq!(record["category"], "cyber");
}

#[test]
fn the_strict_simulator_logs_a_broken_request_in_one_line_without_credentials() {
    let proxy = strict_simulator("off");
    let addr = listening(&proxy);
    let banner = proxy.line_with("listening on", Duration::ZERO);
    assert!(banner.contains("strict"), "{banner}");

    // A Gemini request with its key in the query and in a header, whose
    // one content has no parts: Google's 400.
    let body = r#"{"contents":[{"role":"user","parts":[]}]}"#;
    let mut socket = TcpStream::connect(&addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        socket,
        "POST /v1beta/models/gemini-2.5-pro:generateContent?key=AIza-secret-in-query HTTP/1.1\r\n\
         host: {addr}\r\ncontent-type: application/json\r\nx-goog-api-key: AIza-secret-in-header\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    assert!(response.contains("INVALID_ARGUMENT"), "{response}");

    proxy.line_with("contract violation", Duration::from_secs(10));
    // The positive control: stopped, it has written every line it will
    // (and says, with its status, that it answered a violation).
    let (code, stderr) = proxy.terminated(Duration::from_secs(20));
    assert_eq!(code, Some(3), "{stderr}");
    let logged: Vec<String> = stderr.lines().map(str::to_owned).collect();
    // Its warning lines (the line at exit counts them, naming no request).
    let violations: Vec<&String> = logged
        .iter()
        .filter(|l| l.contains("contract violation:"))
        .collect();
    assert_eq!(violations.len(), 1, "{logged:#?}");
    assert!(violations[0].contains("G2"), "{}", violations[0]);
    assert!(
        violations[0].contains("POST /v1beta/models/gemini-2.5-pro:generateContent"),
        "{}",
        violations[0]
    );
    assert!(
        logged.iter().all(|l| !l.contains("AIza-secret")),
        "a key was logged: {logged:#?}"
    );
}
