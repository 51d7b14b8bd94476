//! Faults through the real proxy over loopback, in front of a raw-socket
//! upstream that misbehaves: what the client got (status, bytes, a cut or a
//! clean end), what the upstream saw (a connection closed, no continuation
//! sent) and the record.

use std::net::SocketAddr;
use std::time::Duration;

use refusal_guard::refusal::DeadReason;
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, RefusalGuardLayer};
use refusal_guard_proxy::{Proxy, Upstream};
use serde_json::{json, Value};
use support::anthropic::{anthropic_stream, events as ev};
use support::raw_upstream::{chunk, head, last_chunk, Act, RawUpstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxy in front of `upstream`; stops when the returned sender drops.
async fn proxy(upstream: &RawUpstream, layer: &RefusalGuardLayer) -> (SocketAddr, impl Drop) {
    let url = Upstream::parse(&upstream.url()).unwrap();
    let proxy = Proxy::new(url, layer).unwrap().access_log(false);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(proxy.serve(listener, async move {
        let _ = stopped.await;
    }));
    (addr, stop_on_drop(stop))
}

struct Stop(Option<tokio::sync::oneshot::Sender<()>>);
impl Drop for Stop {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            let _ = stop.send(());
        }
    }
}
fn stop_on_drop(stop: tokio::sync::oneshot::Sender<()>) -> Stop {
    Stop(Some(stop))
}

fn events(events: &[Value]) -> Vec<u8> {
    anthropic_stream(events).to_vec()
}

fn thinking() -> Vec<u8> {
    events(&[
        ev::message_start("claude-x"),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Considering..."}}),
    ])
}

fn refused() -> Vec<u8> {
    let mut out = thinking();
    out.extend(events(&[
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null,"stop_details":{"type":"refusal","category":"cyber","explanation":null}},"usage":{"output_tokens":1}}),
        json!({"type":"message_stop"}),
    ]));
    out
}

/// A whole chunked SSE answer of these bytes.
fn sse(bytes: &[u8]) -> Vec<Act> {
    vec![
        Act::Write(head(200, "text/event-stream")),
        Act::Write(chunk(bytes)),
        Act::Write(last_chunk()),
    ]
}

const BODY: &str = r#"{"model":"claude-x","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Audit my SSH config"}]}"#;

/// A stream head and `bytes`, then a reset: the connection breaks before
/// any real output.
fn reset_after(bytes: Vec<u8>) -> Vec<Act> {
    vec![
        Act::Write(head(200, "text/event-stream")),
        Act::Write(chunk(&bytes)),
        Act::Sleep(Duration::from_millis(50)),
        Act::Reset,
    ]
}

fn post(body: &str) -> Vec<u8> {
    format!(
        "POST /v1/messages HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n\
         accept-encoding: gzip\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// What the client read: the head, the body bytes as sent on the wire, and
/// whether the response ended cleanly (the last chunk, or the whole
/// content-length) rather than being cut.
struct Answer {
    head: String,
    wire_body: Vec<u8>,
}

impl Answer {
    fn status(&self) -> u16 {
        self.head[9..12].parse().unwrap()
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }

    fn chunked(&self) -> bool {
        self.header("transfer-encoding").is_some()
    }

    /// The body, decoded from chunked; and whether it ended cleanly.
    fn body(&self) -> (Vec<u8>, bool) {
        if !self.chunked() {
            let length: usize = self.header("content-length").unwrap().parse().unwrap();
            let clean = self.wire_body.len() == length;
            return (self.wire_body.clone(), clean);
        }
        let mut rest = &self.wire_body[..];
        let mut out = Vec::new();
        loop {
            let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
                return (out, false);
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..end]).unwrap(), 16).unwrap();
            rest = &rest[end + 2..];
            if size == 0 {
                return (out, rest.starts_with(b"\r\n"));
            }
            if rest.len() < size + 2 {
                out.extend_from_slice(&rest[..rest.len().min(size)]);
                return (out, false);
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body().0).unwrap()
    }
}

/// Sends `request` and reads until the proxy closes (bounded).
async fn exchange(addr: SocketAddr, request: &[u8]) -> Answer {
    exchange_raw(addr, request).await.expect("a head")
}

/// The same; `None` when the connection closed before a whole head.
async fn exchange_raw(addr: SocketAddr, request: &[u8]) -> Option<Answer> {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(request).await.unwrap();
    let mut raw = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buffer = [0u8; 8192];
        loop {
            match socket.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the proxy answered within 10 s");
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    Some(Answer {
        head: String::from_utf8_lossy(&raw[..end]).into_owned(),
        wire_body: raw[end + 4..].to_vec(),
    })
}

fn quick() -> RefusalGuardLayer {
    RefusalGuardLayer::new()
        .upstream_head_timeout(Duration::from_millis(400))
        .upstream_idle_timeout(Duration::from_millis(400))
}

#[tokio::test]
async fn hang_before_head_is_a_504_and_the_upstream_connection_closes() {
    let upstream = RawUpstream::start(|_, _| vec![Act::Hang]).await;
    let (addr, _stop) = proxy(&upstream, &quick()).await;

    let answer = exchange(addr, &post(BODY)).await;
    assert_eq!(answer.status(), 504);
    assert_eq!(answer.json()["error"]["type"], "timeout_error");
    assert!(answer.body().1, "a whole error body");
    assert!(
        upstream
            .wait_until(Duration::from_secs(5), |u| u.closed_by_peer() == 1)
            .await
    );
}

#[tokio::test]
async fn hang_after_head_is_a_504_and_the_upstream_connection_closes() {
    let upstream = RawUpstream::start(|_, _| {
        vec![
            Act::Write(head(200, "text/event-stream")),
            Act::Write(chunk(&thinking())),
            Act::Hang,
        ]
    })
    .await;
    let sink = MemorySink::new();
    let (addr, _stop) = proxy(&upstream, &quick().telemetry(sink.clone())).await;

    let answer = exchange(addr, &post(BODY)).await;
    assert_eq!(answer.status(), 504);
    assert_eq!(
        answer.header("x-refusal-guard-error").unwrap(),
        "upstream_idle_timeout"
    );
    assert!(
        upstream
            .wait_until(Duration::from_secs(5), |u| u.closed_by_peer() == 1)
            .await
    );
    assert!(sink.records().is_empty());
}

#[tokio::test]
async fn reset_before_output_is_never_a_complete_response() {
    let upstream =
        RawUpstream::start(|_, _| reset_after(events(&[ev::message_start("claude-x")]))).await;
    let (addr, _stop) = proxy(&upstream, &quick()).await;

    // The server may close before its first bytes leave: an error too.
    let Some(answer) = exchange_raw(addr, &post(BODY)).await else {
        return;
    };
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.header("content-length"), None, "{}", answer.head);
    let (body, clean) = answer.body();
    assert!(events(&[ev::message_start("claude-x")]).starts_with(&body));
    assert!(!clean, "the stream is cut, not ended");
}

#[tokio::test]
async fn reset_after_a_live_head_cuts_the_stream() {
    let upstream = RawUpstream::start(|_, _| reset_after(thinking())).await;
    let (addr, _stop) = proxy(&upstream, &quick().live_thinking(true)).await;

    let answer = exchange(addr, &post(BODY)).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.header("content-length"), None, "{}", answer.head);
    let (body, clean) = answer.body();
    assert_eq!(body, thinking(), "the thinking went out live");
    assert!(!clean, "the stream is cut, not ended");
}

#[tokio::test]
async fn reset_during_the_continuation_serves_the_refusal_as_sent() {
    for live in [false, true] {
        let upstream = RawUpstream::start(|index, _| match index {
            0 => sse(&refused()),
            _ => vec![
                Act::Write(head(200, "text/event-stream")),
                Act::Write(chunk(&events(&[ev::message_start("claude-x")]))),
                Act::Sleep(Duration::from_millis(50)),
                Act::Reset,
            ],
        })
        .await;
        let sink = MemorySink::new();
        let layer = quick().live_thinking(live).telemetry(sink.clone());
        let (addr, _stop) = proxy(&upstream, &layer).await;

        let answer = exchange(addr, &post(BODY)).await;
        assert_eq!(answer.status(), 200);
        let (body, clean) = answer.body();
        assert!(clean, "live={live}");
        assert_eq!(body, refused(), "live={live}: the original, byte for byte");
        assert_eq!(upstream.requests().len(), 2);
        let record = &sink.records()[0];
        assert_eq!(record.outcome, Outcome::Dead);
        assert_eq!(record.reason, Some(DeadReason::UpstreamError));
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Default,
    KeepAlive,
    LiveThinking,
}

/// The original refuses, the rescue stalls after its head, and the client
/// hangs up: the rescue's connection is closed, nothing more is sent
/// upstream, and the record says the client left.
async fn stall_then_client_abort(mode: Mode) {
    let upstream = RawUpstream::start(|index, _| match index {
        0 => sse(&refused()),
        _ => vec![
            Act::Write(head(200, "text/event-stream")),
            Act::Write(chunk(&thinking())),
            Act::Hang,
        ],
    })
    .await;
    let sink = MemorySink::new();
    let layer = RefusalGuardLayer::new().telemetry(sink.clone());
    let layer = match mode {
        Mode::Default => layer,
        Mode::KeepAlive => layer
            .keepalive_after(Duration::from_millis(50))
            .keepalive_interval(Duration::from_millis(50)),
        Mode::LiveThinking => layer.live_thinking(true),
    };
    let (addr, _stop) = proxy(&upstream, &layer).await;

    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(&post(BODY)).await.unwrap();
    assert!(
        upstream
            .wait_until(Duration::from_secs(5), |u| u.requests().len() == 2)
            .await,
        "{mode:?}: the rescue was sent"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(socket);

    // The original's connection may stay pooled; the rescue's must close.
    assert!(
        upstream
            .wait_until(Duration::from_secs(5), |u| u.closed_by_peer() == 1)
            .await,
        "{mode:?}: the rescue's connection closed ({} open)",
        upstream.open()
    );
    let recorded = tokio::time::timeout(Duration::from_secs(5), async {
        while sink.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(recorded.is_ok(), "{mode:?}: a record");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(upstream.requests().len(), 2, "{mode:?}: nothing sent after");
    let record = &sink.records()[0];
    assert_eq!(record.outcome, Outcome::Dead, "{mode:?}");
    assert_eq!(record.reason, Some(DeadReason::ClientGone), "{mode:?}");
}

#[tokio::test]
async fn stall_then_client_abort_in_default_mode() {
    stall_then_client_abort(Mode::Default).await;
}

#[tokio::test]
async fn stall_then_client_abort_with_keepalive() {
    stall_then_client_abort(Mode::KeepAlive).await;
}

#[tokio::test]
async fn stall_then_client_abort_with_live_thinking() {
    stall_then_client_abort(Mode::LiveThinking).await;
}

#[tokio::test]
async fn a_truncated_chunked_request_never_reaches_the_upstream() {
    let upstream = RawUpstream::start(|_, _| sse(&refused())).await;
    let (addr, _stop) = proxy(&upstream, &quick()).await;

    let mut socket = TcpStream::connect(addr).await.unwrap();
    let partial = &BODY.as_bytes()[..40];
    let mut request =
        b"POST /v1/messages HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n\
transfer-encoding: chunked\r\n\r\n"
            .to_vec();
    request.extend_from_slice(&chunk(partial));
    socket.write_all(&request).await.unwrap();
    // The client stops sending (half-close) but still listens.
    socket.shutdown().await.unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut raw)).await;
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("invalid_request_error"), "{text}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(upstream.requests().is_empty(), "nothing went upstream");
}

#[tokio::test]
async fn guarded_requests_ask_the_upstream_for_identity() {
    let upstream = RawUpstream::start(|_, _| sse(&thinking())).await;
    let (addr, _stop) = proxy(&upstream, &quick()).await;
    exchange(addr, &post(BODY)).await;
    assert_eq!(
        upstream.requests()[0].header("accept-encoding"),
        Some("identity")
    );
}

/// A named raw request and the check its error body must pass.
type ApiRequest = (&'static str, Vec<u8>, fn(&Value) -> bool);

/// A request of each wire API (and one the guard does not judge), as raw
/// HTTP/1.1, with a check that an error body is in that API's shape.
fn requests_of_every_api() -> Vec<ApiRequest> {
    fn with(line: &str, body: &str) -> Vec<u8> {
        format!(
            "{line} HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
    let chat = r#"{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let responses = r#"{"model":"gpt-x","stream":true,"input":"hi"}"#;
    let gemini = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
    let anthropic: fn(&Value) -> bool = |j| j["type"] == "error" && j["error"]["type"].is_string();
    let openai: fn(&Value) -> bool = |j| j["error"]["code"].is_string();
    let google: fn(&Value) -> bool = |j| j["error"]["status"].is_string();
    vec![
        ("anthropic", post(BODY), anthropic),
        ("chat", with("POST /v1/chat/completions", chat), openai),
        ("responses", with("POST /v1/responses", responses), openai),
        (
            "gemini",
            with(
                "POST /v1beta/models/gemini-x:streamGenerateContent?alt=sse",
                gemini,
            ),
            google,
        ),
        // Anthropic and OpenAI share this path; the proxy answers it in
        // Anthropic's shape.
        ("models", with("GET /v1/models", ""), anthropic),
    ]
}

/// Every wire API, guarded or not, gets a whole 502 in its own shape.
async fn each_api_gets_a_502(upstream: &RawUpstream, fault: &str) {
    let (addr, _stop) = proxy(upstream, &quick()).await;
    for (name, request, shaped) in requests_of_every_api() {
        let answer = exchange_raw(addr, &request)
            .await
            .unwrap_or_else(|| panic!("{fault}, {name}: closed without a head"));
        assert_eq!(answer.status(), 502, "{fault}, {name}: {}", answer.head);
        assert!(
            answer.header("x-refusal-guard-error").is_some(),
            "{fault}, {name}: {}",
            answer.head
        );
        assert!(answer.body().1, "{fault}, {name}: a whole error body");
        let json = answer.json();
        assert!(
            shaped(&json),
            "{fault}, {name}: not the API's shape: {json}"
        );
    }
}

#[tokio::test]
async fn a_reset_before_the_head_is_a_502_for_every_api() {
    let upstream = RawUpstream::start(|_, _| vec![Act::Reset]).await;
    each_api_gets_a_502(&upstream, "reset").await;
}

#[tokio::test]
async fn a_close_before_the_head_is_a_502_for_every_api() {
    let upstream = RawUpstream::start(|_, _| vec![Act::Close]).await;
    each_api_gets_a_502(&upstream, "close").await;
}

#[tokio::test]
async fn a_garbage_head_is_a_502_for_every_api() {
    let upstream = RawUpstream::start(|_, _| {
        vec![
            Act::Write(bytes::Bytes::from_static(b"NOT HTTP AT ALL\r\n\r\n")),
            Act::Close,
        ]
    })
    .await;
    each_api_gets_a_502(&upstream, "garbage").await;
}

#[tokio::test]
async fn a_refused_connection_is_a_502_for_every_api() {
    let closed = support::socket::ClosedPort::new();
    let dead = closed.addr();
    let url = Upstream::parse(&format!("http://{dead}")).unwrap();
    let proxy = Proxy::new(url, &quick()).unwrap().access_log(false);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(proxy.serve(listener, async move {
        let _ = stopped.await;
    }));
    for (name, request, shaped) in requests_of_every_api() {
        let answer = exchange(addr, &request).await;
        assert_eq!(answer.status(), 502, "{name}: {}", answer.head);
        assert_eq!(
            answer.header("x-refusal-guard-error").as_deref(),
            Some("upstream_unreachable")
        );
        assert!(shaped(&answer.json()), "{name}: {}", answer.json());
    }
}

#[tokio::test]
async fn a_reset_before_output_cuts_a_live_thinking_stream() {
    // The head went out with live thinking: the client gets a cut stream,
    // never a clean end.
    let upstream =
        RawUpstream::start(|_, _| reset_after(events(&[ev::message_start("claude-x")]))).await;
    let (addr, _stop) = proxy(&upstream, &quick().live_thinking(true)).await;

    let answer = exchange(addr, &post(BODY)).await;
    assert_eq!(answer.status(), 200);
    let (body, clean) = answer.body();
    assert!(events(&[ev::message_start("claude-x")]).starts_with(&body));
    assert!(!clean, "the stream is cut, not ended");
}
