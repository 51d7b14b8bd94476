//! Load check for the standalone proxy: N concurrent streaming requests
//! (default 200) through the proxy binary against the loopback mock
//! upstream, each with its own marker, each client checking it received
//! exactly its own stream. Reports the proxy process's peak RSS (VmHWM).
//!
//! ```text
//! cargo build -p refusal-guard-proxy --bin refusal-guard && cargo build -p refusal-guard-tools --bin load
//! target/debug/load [--requests 200] [--rounds 3] [--proxy PATH]
//! ```
//!
//! Loopback only; bounded in count (requests x rounds) and time (60 s a
//! round). Exits non-zero on any error.
use support::mock_upstream as mock;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn text_of(stream: &str) -> String {
    stream
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|event| event["delta"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// A `kB` field of `/proc/PID/status`, in KiB.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut requests = 200usize;
    let mut rounds = 3usize;
    let mut proxy_bin = std::env::current_exe()
        .map(|exe| exe.with_file_name("refusal-guard"))
        .unwrap_or_else(|_| PathBuf::from("refusal-guard"));
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next();
        match (arg.as_str(), value) {
            ("--requests", Some(v))
                if v.parse::<usize>().is_ok_and(|n| (1..=2000).contains(&n)) =>
            {
                requests = v.parse().unwrap()
            }
            ("--rounds", Some(v)) if v.parse::<usize>().is_ok_and(|n| (1..=20).contains(&n)) => {
                rounds = v.parse().unwrap()
            }
            ("--proxy", Some(v)) => proxy_bin = PathBuf::from(v),
            _ => {
                eprintln!("usage: load [--requests 1..2000] [--rounds 1..20] [--proxy PATH]");
                return ExitCode::from(2);
            }
        }
    }

    let mock = match mock::MockUpstream::start().await {
        Ok(mock) => mock,
        Err(error) => {
            eprintln!("load: cannot start the mock upstream: {error}");
            return ExitCode::FAILURE;
        }
    };
    let log = std::env::temp_dir().join(format!("refusal-guard-load-{}.jsonl", std::process::id()));
    let mut child = match Command::new(&proxy_bin)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &mock.url(),
            "--quiet",
            "--log",
        ])
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            eprintln!(
                "load: cannot start {}: {error} (build it: cargo build -p refusal-guard-proxy --bin refusal-guard)",
                proxy_bin.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let pid = child.id();
    let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
    let mut banner = String::new();
    let _ = stderr.read_line(&mut banner);
    let Some(addr) = banner
        .split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
    else {
        eprintln!("load: the proxy did not start: {banner}");
        let _ = child.kill();
        return ExitCode::FAILURE;
    };
    // Keep draining the proxy's stderr so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in stderr.lines() {});

    let url = format!("http://{addr}/v1/messages");
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let baseline = status_kib(pid, "VmRSS:").unwrap_or(0);
    let mut failures = 0usize;
    let mut peaks = Vec::new();
    for round in 0..rounds {
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(requests);
        for i in 0..requests {
            let client = client.clone();
            let url = url.clone();
            tasks.push(tokio::spawn(async move {
                let marker = format!("r{round}c{i}");
                let body = serde_json::json!({"model":"claude-opus-4-7","max_tokens":64,"stream":true,
                    "messages":[{"role":"user","content":marker}]});
                let response = client
                    .post(url)
                    .header("content-type", "application/json")
                    .header("x-mock-script", "marker")
                    .header("x-mock-id", &marker)
                    .header("x-mock-marker", &marker)
                    .body(body.to_string())
                    .send()
                    .await
                    .map_err(|e| format!("{marker}: {e}"))?;
                if response.status() != 200 {
                    return Err(format!("{marker}: HTTP {}", response.status()));
                }
                let text = response.text().await.map_err(|e| format!("{marker}: {e}"))?;
                if text_of(&text) != mock::marker_text(&marker) {
                    return Err(format!("{marker}: received another stream"));
                }
                Ok(())
            }));
        }
        let outcome = tokio::time::timeout(Duration::from_secs(60), async {
            let mut errors = Vec::new();
            for task in tasks {
                match task.await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => errors.push(error),
                    Err(error) => errors.push(error.to_string()),
                }
            }
            errors
        })
        .await;
        let errors = match outcome {
            Ok(errors) => errors,
            Err(_) => vec![format!("round {round} did not finish within 60 s")],
        };
        for error in errors.iter().take(5) {
            eprintln!("load: {error}");
        }
        failures += errors.len();
        let peak = status_kib(pid, "VmHWM:").unwrap_or(0);
        peaks.push(peak);
        println!(
            "round {}: {} concurrent streams, {} errors, {:.2}s, proxy peak RSS {} KiB",
            round + 1,
            requests,
            errors.len(),
            started.elapsed().as_secs_f64(),
            peak
        );
    }
    let after = status_kib(pid, "VmRSS:").unwrap_or(0);
    println!(
        "proxy RSS: {baseline} KiB at start, {after} KiB after {rounds} rounds, peak {} KiB",
        peaks.iter().max().copied().unwrap_or(0)
    );
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let stopped = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !stopped {
        eprintln!("load: the proxy did not stop on SIGTERM within 5 s");
        let _ = child.kill();
        failures += 1;
    }
    let _ = std::fs::remove_file(&log);
    let total = requests * rounds;
    println!(
        "load: {} passed, {} failed",
        total - failures.min(total),
        failures
    );
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
