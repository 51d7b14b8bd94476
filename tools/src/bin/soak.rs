//! Bounded soak of the standalone proxy, in one mode per run of the proxy
//! binary (default, `--keepalive 1`, `--live-thinking on`): 1,000 concurrent
//! streams, half of them refused and rescued, plus 200 clients that leave
//! while their stream is held. Checks that
//!
//! - every remaining client receives exactly its own text;
//! - no request reaches the upstream for a client that left, after it left
//!   (no rescue continuation), and every upstream connection is closed;
//! - the proxy's file descriptors return to their idle level after each of
//!   three identical rounds;
//! - its peak RSS stays within [`PEAK_PER_STREAM`] of its idle RSS for each
//!   concurrent stream (every buffer is bounded).
//!
//! RSS is printed (idle, peak, after) but not judged from round to round:
//! glibc keeps freed pages, and how many depends on timing (after round 1
//! anywhere from 46 to 75 MB here, levelling off near 100 MB by round five,
//! while the live heap was back at 0.5 MB after every round by heaptrack).
//! Leaks are caught exactly by `tests/proxy_memory.rs`, which counts every
//! allocation.
//!
//! ```text
//! cargo build -p refusal-guard-proxy --bin refusal-guard && cargo build -p refusal-guard-tools --bin soak
//! target/debug/soak [--streams 1000] [--aborts 200] [--rounds 3] [--mode default|keepalive|live-thinking]
//! ```
//!
//! Loopback only; bounded in count and time (two minutes a mode).
use support::mock_upstream as mock;
use support::raw_upstream;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use raw_upstream::{chunk, head_with, last_chunk, Act, RawRequest, RawUpstream};

const EMPTY_REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";
/// How long the upstream stalls the streams of clients that will leave.
const STALL: Duration = Duration::from_secs(4);
/// When those clients leave, after the upstream has their request (past the
/// `--keepalive 1` head, before the stall ends).
const LEAVE_AFTER: Duration = Duration::from_millis(1500);

/// Requests the upstream read, per marker.
type Seen = Arc<Mutex<HashMap<String, usize>>>;
const MODE_LIMIT: Duration = Duration::from_secs(120);
/// Identical rounds per mode.
const ROUNDS: usize = 3;
/// Most RSS above idle a concurrent stream may take at the peak: about
/// three times the most seen (75 KiB a stream in a debug build).
const PEAK_PER_STREAM: u64 = 256;

struct Settings {
    streams: usize,
    aborts: usize,
    modes: Vec<String>,
    rounds: usize,
    proxy: PathBuf,
}

fn settings() -> Result<Settings, String> {
    let mut settings = Settings {
        streams: 1000,
        aborts: 200,
        modes: vec!["default".into(), "keepalive".into(), "live-thinking".into()],
        rounds: ROUNDS,
        proxy: std::env::current_exe()
            .map(|exe| exe.with_file_name("refusal-guard"))
            .unwrap_or_else(|_| PathBuf::from("refusal-guard")),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        let count = |v: &str| v.parse::<usize>().ok().filter(|n| (1..=2000).contains(n));
        match arg.as_str() {
            "--streams" => settings.streams = count(&value).ok_or("--streams 1..2000")?,
            "--aborts" => settings.aborts = count(&value).ok_or("--aborts 1..2000")?,
            "--mode" => settings.modes = vec![value],
            "--rounds" => {
                settings.rounds = count(&value)
                    .filter(|n| *n >= 2)
                    .ok_or("--rounds 2..2000")?
            }
            "--proxy" => settings.proxy = PathBuf::from(value),
            _ => return Err(format!("unknown argument {arg}")),
        }
    }
    Ok(settings)
}

/// The upstream's script: marker streams, refusals for `refuse-` and
/// `leave-` originals (the latter stalled first), the marker stream again
/// for any later request of a conversation (a rescue continuation).
fn script(
    seen: Arc<Mutex<HashMap<String, usize>>>,
) -> impl Fn(usize, &RawRequest) -> Vec<Act> + Send + Sync {
    let refusal = mock::frames(&mock::fixture(EMPTY_REFUSAL));
    move |_, request| {
        let marker = request.first_user_text();
        let attempt = {
            let mut seen = seen.lock().unwrap();
            let count = seen.entry(marker.clone()).or_default();
            *count += 1;
            *count
        };
        let mut acts = vec![Act::Write(head_with(
            200,
            "text/event-stream",
            &[("connection", "close")],
        ))];
        let frames: Vec<Bytes> = if attempt > 1 || marker.starts_with("ok-") {
            mock::marker_stream(&marker)
        } else {
            refusal.clone()
        };
        for (i, frame) in frames.iter().enumerate() {
            if i == 1 && attempt == 1 && marker.starts_with("leave-") {
                acts.push(Act::Sleep(STALL));
            }
            acts.push(Act::Write(chunk(frame)));
        }
        acts.push(Act::Write(last_chunk()));
        acts.push(Act::Close);
        acts
    }
}

/// The proxy's open file descriptors, from /proc: an error, never 0, when
/// /proc cannot be read (the check would pass on nothing).
fn fds(pid: u32) -> Result<usize, String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| dir.count())
        .map_err(|e| format!("cannot read /proc/{pid}/fd: {e}"))
}

/// A `kB` field of the proxy's /proc status (`VmRSS:`, `VmHWM:`), in KiB;
/// an error when it cannot be read.
fn rss_kib(pid: u32, field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no {field} in /proc/{pid}/status"))
}

fn start_proxy(settings: &Settings, mode: &str, upstream: &str) -> Result<(Child, String), String> {
    let mode_args: &[&str] = match mode {
        "default" => &[],
        "keepalive" => &["--keepalive", "1"],
        "live-thinking" => &["--live-thinking", "on"],
        other => return Err(format!("unknown mode {other}")),
    };
    let mut child = Command::new(&settings.proxy)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            upstream,
            "--quiet",
            "--log",
            "off",
        ])
        .args(mode_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", settings.proxy.display()))?;
    let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
    let mut banner = String::new();
    let _ = stderr.read_line(&mut banner);
    let addr = banner
        .split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned);
    std::thread::spawn(move || for _ in stderr.lines() {});
    match addr {
        Some(addr) => Ok((child, addr)),
        None => {
            let _ = child.kill();
            Err(format!("the proxy did not start: {banner}"))
        }
    }
}

/// One client: sends its marker; a `leave-` client drops the request after
/// [`LEAVE_AFTER`]. Returns an error for a client that got the wrong bytes.
async fn client(
    client: reqwest::Client,
    url: String,
    marker: String,
    seen: Seen,
) -> Result<(), String> {
    let body = serde_json::json!({"model":"claude-opus-4-7","max_tokens":64,"stream":true,
        "messages":[{"role":"user","content":marker}]});
    let exchange = async {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| format!("{marker}: {e}"))?;
        if response.status() != 200 {
            return Err(format!("{marker}: HTTP {}", response.status()));
        }
        response.text().await.map_err(|e| format!("{marker}: {e}"))
    };
    if marker.starts_with("leave-") {
        // Leave mid-hold: a while after the upstream has the request, well
        // before its stall ends.
        let leave = async {
            while !seen.lock().unwrap().contains_key(&marker) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(LEAVE_AFTER).await;
        };
        tokio::select! {
            _ = exchange => {}
            () = leave => {}
            () = tokio::time::sleep(MODE_LIMIT) => {}
        }
        return Ok(());
    }
    let text = mock::stream_text(&exchange.await?);
    if text == mock::marker_text(&marker) {
        Ok(())
    } else {
        Err(format!(
            "{marker}: received {:?}",
            text.chars().take(60).collect::<String>()
        ))
    }
}

async fn soak_mode(settings: &Settings, mode: &str) -> Result<(), String> {
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let upstream = RawUpstream::start(script(seen.clone())).await;
    let (mut child, addr) = start_proxy(settings, mode, &upstream.url())?;
    let pid = child.id();
    let result = soak_rounds(settings, mode, (&upstream, &seen), pid, &addr).await;
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let stopped = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !stopped {
        let _ = child.kill();
        return Err(format!(
            "{mode}: the proxy did not stop on SIGTERM within 10 s"
        ));
    }
    result
}

/// Every round of one mode, then the peak RSS against its bound.
async fn soak_rounds(
    settings: &Settings,
    mode: &str,
    (upstream, seen): (&RawUpstream, &Seen),
    pid: u32,
    addr: &str,
) -> Result<(), String> {
    let idle_rss = rss_kib(pid, "VmRSS:")?;
    for round in 1..=settings.rounds {
        drive(settings, (mode, round), upstream, seen, pid, addr).await?;
    }
    let peak_rss = rss_kib(pid, "VmHWM:")?;
    let bound = idle_rss + PEAK_PER_STREAM * (settings.streams + settings.aborts) as u64;
    if peak_rss > bound {
        return Err(format!(
            "{mode}: peak RSS {peak_rss} KiB, over {bound} KiB ({PEAK_PER_STREAM} KiB a stream above idle {idle_rss} KiB)"
        ));
    }
    Ok(())
}

async fn drive(
    settings: &Settings,
    (mode, round): (&str, usize),
    upstream: &RawUpstream,
    seen: &Seen,
    pid: u32,
    addr: &str,
) -> Result<(), String> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (idle_fds, idle_rss) = (fds(pid)?, rss_kib(pid, "VmRSS:")?);
    let started = Instant::now();
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| e.to_string())?;
    let errors = run_clients(&http, settings, (round, seen), addr).await;
    drop(http);
    let elapsed = started.elapsed();
    let peak_rss = rss_kib(pid, "VmHWM:")?;
    // Past the stall: a continuation for a client that left would be sent now.
    tokio::time::sleep(STALL + Duration::from_secs(1)).await;
    let closed = upstream.wait_all_closed(Duration::from_secs(30)).await;
    let settled = wait_for(Duration::from_secs(30), || {
        fds(pid).is_ok_and(|n| n <= idle_fds + 2)
    })
    .await;
    let (after_fds, after_rss) = (fds(pid)?, rss_kib(pid, "VmRSS:")?);
    let continued: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(marker, count)| marker.starts_with(&format!("leave-{round}-")) && **count > 1)
        .map(|(marker, _)| marker.clone())
        .collect();
    println!(
        "soak {mode} round {round}: {} streams + {} leaving clients in {:.1}s; errors {}; \
         continuations for clients that left {}; upstream connections left open {}; \
         proxy fds idle {idle_fds} -> after {after_fds}; RSS idle {idle_rss} KiB, peak {peak_rss} KiB, after {after_rss} KiB",
        settings.streams,
        settings.aborts,
        elapsed.as_secs_f64(),
        errors.len(),
        continued.len(),
        upstream.open(),
    );
    for error in errors.iter().take(5) {
        eprintln!("soak {mode}: {error}");
    }
    let mut failed = Vec::new();
    if !errors.is_empty() {
        failed.push(format!(
            "{} clients did not get their own bytes",
            errors.len()
        ));
    }
    if !continued.is_empty() {
        failed.push(format!(
            "{} continuations sent for clients that left",
            continued.len()
        ));
    }
    if !closed {
        failed.push(format!(
            "{} upstream connections still open",
            upstream.open()
        ));
    }
    if !settled {
        failed.push(format!(
            "file descriptors did not return to idle ({idle_fds} -> {after_fds})"
        ));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{mode}: {}", failed.join("; ")))
    }
}

/// Runs every client of one round at once; returns their errors.
async fn run_clients(
    http: &reqwest::Client,
    settings: &Settings,
    (round, seen): (usize, &Seen),
    addr: &str,
) -> Vec<String> {
    let url = format!("http://{addr}/v1/messages");
    // Markers are unique across rounds: the upstream counts requests per
    // marker to tell an original from a continuation.
    let markers = (0..settings.streams)
        .map(|i| match i % 2 {
            0 => format!("ok-{round}-{i}"),
            _ => format!("refuse-{round}-{i}"),
        })
        .chain((0..settings.aborts).map(|i| format!("leave-{round}-{i}")));
    let tasks: Vec<_> = markers
        .map(|marker| tokio::spawn(client(http.clone(), url.clone(), marker, seen.clone())))
        .collect();
    let mut errors = Vec::new();
    let all = tokio::time::timeout(MODE_LIMIT, async {
        for task in tasks {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => errors.push(error),
                Err(error) => errors.push(error.to_string()),
            }
        }
    })
    .await;
    if all.is_err() {
        errors.push(format!("not finished within {MODE_LIMIT:?}"));
    }
    errors
}

async fn wait_for(limit: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done()
}

#[tokio::main]
async fn main() -> ExitCode {
    let settings = match settings() {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("soak: {message}\nusage: soak [--streams N] [--aborts N] [--rounds N] [--mode default|keepalive|live-thinking] [--proxy PATH]");
            return ExitCode::from(2);
        }
    };
    // This process holds a client and an upstream socket per stream.
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let mut failures = 0;
    for mode in &settings.modes {
        if let Err(message) = soak_mode(&settings, mode).await {
            eprintln!("soak FAILED: {message}");
            failures += 1;
        }
    }
    if failures == 0 {
        println!("soak: all modes passed");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
