//! The proxy keeps no memory from one round of streams to the next. The proxy
//! runs in this process as `proxy/examples/proxy.rs` runs it, and every byte the
//! process allocates is counted, so a leak shows exactly, whatever the
//! allocator keeps for itself: RSS cannot tell one (glibc holds freed pages,
//! and how many depends on timing; the soak, `tools/src/bin/soak.rs`, prints it).
//!
//! Each round is the same: streams that succeed, streams refused and rescued,
//! and clients that leave while their stream is held, over real loopback
//! connections to the raw scripted upstream. Conversations recur from round
//! to round, so the conversation store holds the same entries throughout.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use support::mock_upstream::{fixture, frames, marker_stream, marker_text, stream_text};
use support::proxy::run_proxy;
use support::raw_upstream::{chunk, head_with, last_chunk, Act, RawRequest, RawUpstream};

/// The system allocator, counting the bytes it holds for the program.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the
// counter only adds what it handed out and subtracts what came back.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        unsafe { System.dealloc(pointer, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const EMPTY_REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";
/// Streams per round that succeed, that are refused and rescued, and clients
/// that leave while held.
const OK: usize = 100;
const REFUSED: usize = 100;
const LEAVING: usize = 40;
/// How long the upstream stalls the streams of clients that will leave.
const STALL: Duration = Duration::from_secs(2);
/// When those clients leave, once the upstream has their request.
const LEAVE_AFTER: Duration = Duration::from_millis(300);
/// Rounds run before the baseline is read (lazy statics, pools, the store's
/// entries, the metrics' label sets).
const WARM_ROUNDS: usize = 2;
/// Rounds measured against that baseline.
const MEASURED_ROUNDS: usize = 4;
/// Bytes per stream a measured round may leave behind: far less than any
/// request, response or connection state (kilobytes each). The margin is
/// for what the runtimes keep or let go lazily: the bytes held after a round
/// were seen to step by about 40 KB either way, never to climb.
const ALLOWED_PER_STREAM: isize = 128;

/// Requests the upstream read, per marker.
type Seen = Arc<Mutex<HashMap<String, usize>>>;

/// The upstream: the marker stream for `ok-` and for the second request of
/// each `refuse-` exchange (its continuation); a refusal for the first, and
/// a refusal stalled after its first event for every `leave-` request.
fn script(seen: Seen) -> impl Fn(usize, &RawRequest) -> Vec<Act> + Send + Sync {
    let refusal = frames(&fixture(EMPTY_REFUSAL));
    move |_, request| {
        let marker = request.first_user_text();
        let attempt = {
            let mut seen = seen.lock().unwrap();
            let count = seen.entry(marker.clone()).or_default();
            *count += 1;
            *count
        };
        let original = attempt % 2 == 1 || marker.starts_with("leave-");
        let frames: Vec<Bytes> = if marker.starts_with("ok-") || !original {
            marker_stream(&marker)
        } else {
            refusal.clone()
        };
        let mut acts = vec![Act::Write(head_with(
            200,
            "text/event-stream",
            &[("connection", "close")],
        ))];
        for (i, frame) in frames.iter().enumerate() {
            if i == 1 && marker.starts_with("leave-") {
                acts.push(Act::Sleep(STALL));
            }
            acts.push(Act::Write(chunk(frame)));
        }
        acts.push(Act::Write(last_chunk()));
        acts.push(Act::Close);
        acts
    }
}

/// One client: posts its marker and checks it got its own text back, or
/// (a `leave-` client) drops the exchange once the upstream holds it.
async fn client(http: reqwest::Client, url: String, marker: String, seen: Seen) {
    let body = serde_json::json!({"model":"claude-opus-4-7","max_tokens":64,"stream":true,
        "messages":[{"role":"user","content":marker}]});
    let exchange = async {
        let response = http
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{marker}");
        response.text().await.unwrap()
    };
    if !marker.starts_with("leave-") {
        let text = tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .unwrap_or_else(|_| panic!("{marker}: no answer within 30 s"));
        assert_eq!(stream_text(&text), marker_text(&marker), "{marker}");
        return;
    }
    // Markers recur, so "the upstream has it" means one request more than
    // before this round.
    let requests = || seen.lock().unwrap().get(&marker).copied().unwrap_or(0);
    let before = requests();
    let leave = async {
        while requests() == before {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(LEAVE_AFTER).await;
    };
    tokio::select! {
        _ = exchange => panic!("{marker}: answered before it left"),
        () = leave => {}
    }
}

/// One round: every client at once, then until the proxy has closed every
/// upstream connection (the held streams' included).
async fn round(url: &str, upstream: &RawUpstream, seen: &Seen) {
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let markers = (0..OK)
        .map(|i| format!("ok-{i}"))
        .chain((0..REFUSED).map(|i| format!("refuse-{i}")))
        .chain((0..LEAVING).map(|i| format!("leave-{i}")));
    let clients: Vec<_> = markers
        .map(|marker| tokio::spawn(client(http.clone(), url.to_owned(), marker, seen.clone())))
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    drop(http);
    assert!(
        upstream.wait_all_closed(STALL * 10).await,
        "{} upstream connections still open",
        upstream.open()
    );
    // The upstream records what it read; only the proxy's memory is measured.
    drop(upstream.take_requests());
}

/// The bytes held once nothing has changed for half a second (within 20 s).
async fn settled_live_bytes() -> isize {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = LIVE.load(Ordering::Relaxed);
    let mut steady_since = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = LIVE.load(Ordering::Relaxed);
        if now != last {
            (last, steady_since) = (now, Instant::now());
        } else if steady_since.elapsed() >= Duration::from_millis(500) {
            break;
        }
    }
    last
}

/// Runs the rounds through a proxy started with `flags`; returns the bytes
/// held after the warm rounds and after each measured round.
async fn live_bytes_per_round(flags: &[&str]) -> (isize, Vec<isize>) {
    let seen: Seen = Arc::default();
    let upstream = RawUpstream::start(script(seen.clone())).await;
    let upstream_url = upstream.url();
    let mut args = vec!["--upstream", upstream_url.as_str()];
    args.extend_from_slice(flags);
    let url = format!("{}/v1/messages", run_proxy(&args).await);
    for _ in 0..WARM_ROUNDS {
        round(&url, &upstream, &seen).await;
    }
    let baseline = settled_live_bytes().await;
    let mut after = Vec::new();
    for _ in 0..MEASURED_ROUNDS {
        round(&url, &upstream, &seen).await;
        after.push(settled_live_bytes().await);
    }
    (baseline, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_memory_is_kept_from_one_round_to_the_next() {
    let streams = (OK + REFUSED + LEAVING) as isize;
    let allowed = ALLOWED_PER_STREAM * streams * MEASURED_ROUNDS as isize;
    // One mode at a time: the counter sees the whole process.
    for flags in [&[][..], &["--keepalive", "1"], &["--live-thinking", "on"]] {
        let (baseline, after) = live_bytes_per_round(flags).await;
        let grown = after.last().unwrap() - baseline;
        println!("{flags:?}: {baseline} bytes held after the warm rounds, then {after:?}");
        assert!(
            grown <= allowed,
            "{flags:?}: {grown} bytes more held after {MEASURED_ROUNDS} rounds of {streams} \
             streams (allowed {allowed}): {baseline} then {after:?}"
        );
    }
}
