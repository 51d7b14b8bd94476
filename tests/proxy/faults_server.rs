//! The proxy's server under faults and bad input, through the real proxy on
//! loopback, with the raw scripted upstream and raw TCP clients. Each test
//! asserts what the client got, what the upstream saw and the access-log line.
//! Bounds are generous: they prove that a wait ends, never how fast.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use refusal_guard::RefusalGuardLayer;
use refusal_guard_proxy::{GuardedClient, Proxy, Upstream};
use support::raw_upstream::{chunk, head, head_with, last_chunk, whole, Act, RawUpstream};
use support::socket::read_until_closed;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TEXT: &str = "anthropic/anthropic-sdk-python/basic_response.txt";
const EMPTY_REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";
const GENEROUS: Duration = Duration::from_secs(15);

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/{name}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/..")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// The proxy running in-process, its access-log lines collected.
struct Running {
    addr: std::net::SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn start(
        upstream: &str,
        layer: RefusalGuardLayer,
        configure: impl FnOnce(Proxy<GuardedClient>) -> Proxy<GuardedClient>,
    ) -> Running {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let proxy = Proxy::new(Upstream::parse(upstream).unwrap(), &layer)
            .unwrap()
            .access_log_to(move |line| sink.lock().unwrap().push(line.to_owned()));
        let proxy = configure(proxy);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(proxy.serve(listener, async {
            let _ = stopped.await;
        }));
        Running {
            addr,
            lines,
            stop: Some(stop),
            task,
        }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (boundedly) for an access-log line containing every needle.
    async fn line_with(&self, needles: &[&str]) -> String {
        let started = Instant::now();
        loop {
            let found = self
                .lines()
                .into_iter()
                .find(|line| needles.iter().all(|n| line.contains(n)));
            if let Some(line) = found {
                return line;
            }
            assert!(
                started.elapsed() < GENEROUS,
                "no access-log line with {needles:?}; lines: {:?}",
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Default options and a default guard in front of `upstream`.
    async fn plain(upstream: &RawUpstream) -> Running {
        Running::over(upstream, |p| p).await
    }

    /// A default guard in front of `upstream`, with options set by
    /// `configure`.
    async fn over(
        upstream: &RawUpstream,
        configure: impl FnOnce(Proxy<GuardedClient>) -> Proxy<GuardedClient>,
    ) -> Running {
        Running::start(&upstream.url(), RefusalGuardLayer::new(), configure).await
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }

    /// Sends raw bytes on a new connection, which it returns open.
    async fn send(&self, request: &[u8]) -> TcpStream {
        let mut socket = self.connect().await;
        socket.write_all(request).await.unwrap();
        socket
    }

    /// Sends raw bytes on a new connection and reads until the proxy closes it.
    async fn exchange(&self, request: &[u8]) -> String {
        read_to_close(&mut self.send(request).await).await
    }

    fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Reads until EOF or a reset, within [`GENEROUS`].
async fn read_to_close(socket: &mut TcpStream) -> String {
    let (out, closed) = read_until_closed(socket, GENEROUS).await;
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(
        closed,
        "the proxy did not close the connection; got {out:?}"
    );
    out
}

fn body_of(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

/// The proxy's own refusal: `response` has `status` and mentions `kind`;
/// returns its JSON body.
fn refused_as(response: &str, status: &str, kind: &str) -> serde_json::Value {
    assert!(
        response.starts_with(&format!("HTTP/1.1 {status}")),
        "{response}"
    );
    assert!(response.contains(kind), "{response}");
    serde_json::from_str(body_of(response)).unwrap()
}

/// A Messages request for the model [`TEXT`] names as the one that
/// answered, so that its answer is no reroute.
fn messages_request(stream: bool, extra_headers: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"model":"claude-3-opus-latest","max_tokens":256,"stream":{stream},"messages":[{{"role":"user","content":"Check my SSH config"}}]}}"#
    );
    format!(
        "POST /v1/messages HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n\
         x-api-key: k\r\n{extra_headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The upstream saw exactly one request, and the proxy's access log has a
/// line with `line` for it.
async fn served_once(proxy: &Running, upstream: &RawUpstream, line: &str) {
    assert_eq!(upstream.requests().len(), 1);
    proxy.line_with(&[line]).await;
}

/// A raw upstream that answers every request with one whole `200` of
/// `content_type` carrying `body`.
async fn answering_ok(content_type: &'static str, body: &'static [u8]) -> RawUpstream {
    RawUpstream::start(move |_, _| vec![Act::Write(whole(200, content_type, body))]).await
}

#[tokio::test]
async fn slowloris_headers_are_cut_at_the_header_read_timeout() {
    let upstream = answering_ok("text/plain", b"ok").await;
    let proxy = Running::over(&upstream, |p| p.header_read_timeout(Duration::from_secs(1))).await;
    let mut socket = proxy.connect().await;
    let started = Instant::now();
    let request = b"GET /v1/models HTTP/1.1\r\nhost: proxy\r\nx-padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut cut = false;
    for byte in request {
        if socket.write_all(&[*byte]).await.is_err() {
            cut = true;
            break;
        }
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(500), socket.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                cut = true;
                break;
            }
            Ok(Ok(n)) => panic!(
                "a response to a slow head: {:?}",
                String::from_utf8_lossy(&buf[..n])
            ),
            Err(_) => {}
        }
    }
    assert!(cut, "the slow client was never cut off");
    assert!(started.elapsed() < GENEROUS);
    assert!(
        upstream.requests().is_empty(),
        "nothing reaches the upstream"
    );
    assert!(
        proxy.lines().is_empty(),
        "no request, no access-log line: {:?}",
        proxy.lines()
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let upstream = answering_ok("application/json", b"{\"data\":[]}").await;
    let proxy = Running::over(&upstream, |p| p.idle_timeout(Duration::from_secs(1))).await;
    let mut socket = proxy
        .send(b"GET /v1/models HTTP/1.1\r\nhost: proxy\r\n\r\n")
        .await;
    let mut first = vec![0u8; 4096];
    let n = socket.read(&mut first).await.unwrap();
    let first = String::from_utf8_lossy(&first[..n]).into_owned();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.ends_with("{\"data\":[]}"), "{first}");
    // Nothing more is sent: the proxy closes the idle connection.
    let rest = read_to_close(&mut socket).await;
    assert_eq!(rest, "", "nothing more after the response");
    served_once(&proxy, &upstream, "GET /v1/models 200 pass").await;
}

#[tokio::test]
async fn dot_segments_never_reach_the_upstream() {
    let upstream = answering_ok("text/plain", b"admin").await;
    let proxy = Running::start(
        &format!("{}/base", upstream.url()),
        RefusalGuardLayer::new(),
        |p| p,
    )
    .await;
    for path in [
        "/../admin",
        "/%2e%2e/admin",
        "/.%2e/admin",
        "/%2E%2E/admin",
        "/v1/../../admin",
        "/v1/%252e%252e/admin",
        "/..%2fadmin",
        "/..\\admin",
        "/v1/chat/completions/../../admin",
    ] {
        let request = format!("GET {path} HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\n\r\n");
        let response = proxy.exchange(request.as_bytes()).await;
        assert!(response.starts_with("HTTP/1.1 400"), "{path}: {response}");
        assert!(
            response.contains("x-refusal-guard-error: dot_segment_in_path"),
            "{response}"
        );
        let json: serde_json::Value = serde_json::from_str(body_of(&response)).unwrap();
        assert!(
            json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("segment"),
            "{json}"
        );
        proxy
            .line_with(&[&format!("GET {path} 400 dot_segment_in_path")])
            .await;
    }
    // OpenAI paths get OpenAI's shape.
    let response = proxy
        .exchange(b"POST /v1/chat/completions/../x HTTP/1.1\r\nhost: p\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        .await;
    let json: serde_json::Value = serde_json::from_str(body_of(&response)).unwrap();
    assert!(
        json["error"]["code"].is_string() && json.get("type").is_none(),
        "{json}"
    );
    assert!(
        upstream.requests().is_empty(),
        "seen: {:?}",
        upstream.requests()
    );
    assert_eq!(upstream.accepted(), 0);
    // A path that merely contains dots still goes through, under the prefix.
    let response = proxy
        .exchange(b"GET /v1/a..b/c.d HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\n\r\n")
        .await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(upstream.requests()[0].path(), "/base/v1/a..b/c.d");
}

#[tokio::test]
async fn connect_and_absolute_form_targets_are_refused() {
    let upstream = answering_ok("text/plain", b"upstream-body").await;
    let proxy = Running::plain(&upstream).await;
    let response = proxy
        .exchange(b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n")
        .await;
    assert!(response.starts_with("HTTP/1.1 405"), "{response}");
    assert!(!response.contains("upstream-body"));
    proxy
        .line_with(&["CONNECT", "405 method_not_allowed"])
        .await;
    let response = proxy
        .exchange(b"GET http://example.com/v1/models HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n")
        .await;
    let json = refused_as(&response, "400", "bad_request_target");
    assert_eq!(
        json["type"], "error",
        "Anthropic's shape by default: {json}"
    );
    proxy
        .line_with(&["GET /v1/models 400 bad_request_target"])
        .await;
    assert!(upstream.requests().is_empty());
    assert_eq!(upstream.accepted(), 0);
}

#[tokio::test]
async fn a_gzip_encoded_refusal_is_seen_and_rescued() {
    let refusal = gzip(&fixture(EMPTY_REFUSAL));
    let text = fixture(TEXT);
    let upstream = RawUpstream::start(move |index, _| {
        let mut acts = Vec::new();
        if index == 0 {
            acts.push(Act::Write(head_with(
                200,
                "text/event-stream",
                &[("content-encoding", "gzip")],
            )));
            for piece in refusal.chunks(50) {
                acts.push(Act::Write(chunk(piece)));
            }
        } else {
            acts.push(Act::Write(head(200, "text/event-stream")));
            acts.push(Act::Write(chunk(&text)));
        }
        acts.push(Act::Write(last_chunk()));
        acts
    })
    .await;
    let proxy = Running::plain(&upstream).await;
    let response = proxy
        .exchange(&messages_request(true, "accept-encoding: gzip\r\n"))
        .await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        !response.to_ascii_lowercase().contains("content-encoding"),
        "{response}"
    );
    assert_rescued(&response, &upstream);
    proxy.line_with(&["POST /v1/messages 200 rescued("]).await;
}

#[tokio::test]
async fn a_gzip_normal_stream_reaches_the_client_decoded() {
    let text = fixture(TEXT);
    let encoded = gzip(&text);
    let upstream = RawUpstream::start(move |_, _| {
        let mut acts = vec![Act::Write(head_with(
            200,
            "text/event-stream",
            &[("content-encoding", "gzip")],
        ))];
        for piece in encoded.chunks(64) {
            acts.push(Act::Write(chunk(piece)));
        }
        acts.push(Act::Write(last_chunk()));
        acts
    })
    .await;
    let proxy = Running::plain(&upstream).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let response = client
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("content-type", "application/json")
        .header("accept-encoding", "gzip")
        .body(body_of(&String::from_utf8(messages_request(true, "")).unwrap()).to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-encoding").is_none());
    let bytes = response.bytes().await.unwrap();
    assert_eq!(
        bytes.as_ref(),
        text.as_slice(),
        "the decoded stream, byte for byte"
    );
    served_once(&proxy, &upstream, "POST /v1/messages 200 ok").await;
}

#[tokio::test]
async fn a_truncated_chunked_request_never_reaches_the_upstream_complete() {
    let upstream = answering_ok("application/json", b"{}").await;
    let proxy = Running::plain(&upstream).await;
    let mut socket = proxy.connect().await;
    socket
        .write_all(b"POST /v1/files HTTP/1.1\r\nhost: proxy\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        .await
        .unwrap();
    // Give the proxy time to start forwarding, then abort the body.
    upstream
        .wait_until(Duration::from_secs(5), |u| u.accepted() > 0)
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(socket);
    let line = proxy.line_with(&["POST /v1/files"]).await;
    assert!(!line.contains(" 200 "), "{line}");
    upstream.wait_all_closed(GENEROUS).await;
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1, "the upstream saw the request start");
    assert_eq!(
        seen[0].body, b"hello",
        "the bytes read so far were forwarded"
    );
    assert!(
        seen.iter().all(|r| !r.complete),
        "a truncated body arrived as complete: {seen:?}"
    );
}

#[tokio::test]
async fn past_the_connection_cap_clients_get_a_503_in_the_api_shape() {
    let upstream = answering_ok("application/json", b"{}").await;
    let proxy = Running::over(&upstream, |p| p.max_connections(2)).await;
    // Two connections take both slots (open, sending nothing yet).
    let held = [proxy.connect().await, proxy.connect().await];
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = proxy
        .exchange(b"POST /v1/chat/completions HTTP/1.1\r\nhost: p\r\ncontent-length: 2\r\n\r\n{}")
        .await;
    let json = refused_as(&response, "503", "over_capacity");
    assert!(
        json["error"]["message"].is_string(),
        "OpenAI's shape: {json}"
    );
    proxy
        .line_with(&["POST /v1/chat/completions 503 over_capacity"])
        .await;
    assert!(upstream.requests().is_empty());
    // Once a slot frees, requests are served again.
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = proxy
        .exchange(b"GET /v1/models HTTP/1.1\r\nhost: p\r\nconnection: close\r\n\r\n")
        .await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(upstream.requests().len(), 1);
}

#[tokio::test]
async fn shutdown_cuts_a_hanging_upstream_at_the_drain_deadline() {
    let upstream =
        RawUpstream::start(|_, _| vec![Act::Write(head(200, "text/event-stream")), Act::Hang])
            .await;
    let mut proxy = Running::over(&upstream, |p| p.drain_timeout(Duration::from_secs(1))).await;
    let mut socket = proxy
        .send(b"GET /v1/events HTTP/1.1\r\nhost: proxy\r\n\r\n")
        .await;
    assert!(
        upstream
            .wait_until(Duration::from_secs(5), |u| u.requests().len() == 1)
            .await
    );
    proxy.stop();
    let started = Instant::now();
    let served = tokio::time::timeout(GENEROUS, &mut proxy.task).await;
    assert!(
        served.is_ok(),
        "serve() did not return after the drain deadline"
    );
    served.unwrap().unwrap().unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the drain waited its deadline"
    );
    let got = read_to_close(&mut socket).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        !got.ends_with("0\r\n\r\n"),
        "a cut stream is not ended cleanly: {got:?}"
    );
    assert!(
        upstream.wait_all_closed(GENEROUS).await,
        "the upstream request was not cancelled"
    );
    proxy.line_with(&["GET /v1/events 200"]).await;
}

/// Sends a streamed Messages request through `proxy` and leaves once
/// `upstream` has it; the access line says the client went (499).
async fn leave_once_upstream_has_it(proxy: &Running, upstream: &RawUpstream) {
    let mut socket = proxy.connect().await;
    socket.write_all(&messages_request(true, "")).await.unwrap();
    assert!(
        upstream
            .wait_until(Duration::from_secs(5), |u| u.requests().len() == 1)
            .await,
        "the original never reached the upstream"
    );
    drop(socket);
    proxy
        .line_with(&["POST /v1/messages 499 client_gone"])
        .await;
}

#[tokio::test]
async fn a_client_that_leaves_before_the_head_still_gets_an_access_log_line() {
    let upstream = RawUpstream::start(|_, _| vec![Act::Hang]).await;
    let proxy = Running::plain(&upstream).await;
    leave_once_upstream_has_it(&proxy, &upstream).await;
    assert!(
        upstream.wait_all_closed(GENEROUS).await,
        "the upstream request was not cancelled"
    );
    assert_eq!(
        upstream.requests().len(),
        1,
        "no retry or rescue after the client left"
    );
}

#[tokio::test]
async fn a_client_that_leaves_mid_hold_gets_no_rescue_sent_upstream() {
    let refusal = fixture(EMPTY_REFUSAL);
    let split = refusal.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
    let upstream = RawUpstream::start(move |_, _| {
        vec![
            Act::Write(head(200, "text/event-stream")),
            Act::Write(chunk(&refusal[..split])),
            Act::Sleep(Duration::from_secs(2)),
            Act::Write(chunk(&refusal[split..])),
            Act::Write(last_chunk()),
        ]
    })
    .await;
    let proxy = Running::plain(&upstream).await;
    // The original is out and held (its refusal half sent) when the client
    // leaves: without the client the refusal's end would call for a rescue.
    leave_once_upstream_has_it(&proxy, &upstream).await;
    // The positive control, waited for: the held original was cancelled,
    // its refusal's end never read (the upstream saw the proxy close it
    // while still sending). A rescue is decided on that end, by the work
    // that held it: with the 499 line (the work dropped with its client)
    // and the original closed, nothing is left that could send one.
    assert!(
        upstream
            .wait_until(GENEROUS, |u| u.closed_by_peer() == 1)
            .await,
        "the held upstream request was not cancelled"
    );
    assert!(upstream.wait_all_closed(GENEROUS).await);
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1, "a rescue for a client that left: {seen:?}");
}

#[tokio::test]
async fn a_long_silent_hold_is_not_an_idle_connection() {
    let text = fixture(TEXT);
    let upstream = RawUpstream::start(move |_, _| {
        vec![
            Act::Sleep(Duration::from_millis(2500)),
            Act::Write(head(200, "text/event-stream")),
            Act::Write(chunk(&text)),
            Act::Write(last_chunk()),
        ]
    })
    .await;
    let proxy = Running::over(&upstream, |p| p.idle_timeout(Duration::from_secs(1))).await;
    let response = proxy.exchange(&messages_request(true, "")).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("message_stop"), "{response}");
    served_once(&proxy, &upstream, "POST /v1/messages 200 ok").await;
}

#[tokio::test]
async fn http2_clients_are_served_and_refused_alike() {
    let upstream = answering_ok("application/json", b"{\"data\":[]}").await;
    let proxy = Running::plain(&upstream).await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let base = format!("http://{}", proxy.addr);
    let response = client
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "{\"data\":[]}");
    let response = client
        .get(format!("{base}/v1/%252e%252e/admin"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(
        response.headers()["x-refusal-guard-error"],
        "dot_segment_in_path"
    );
    assert_eq!(
        upstream.requests().len(),
        1,
        "only the first request went upstream"
    );
    proxy.line_with(&["GET /v1/models 200 pass"]).await;
    proxy.line_with(&["400 dot_segment_in_path"]).await;
}

#[tokio::test]
async fn readyz_answers_503_while_the_proxy_drains() {
    use refusal_guard_proxy::admin::{self, AdminState, Draining};
    let upstream =
        RawUpstream::start(|_, _| vec![Act::Write(head(200, "text/event-stream")), Act::Hang])
            .await;
    let draining = Draining::new();
    let proxy = Proxy::new(
        Upstream::parse(&upstream.url()).unwrap(),
        &RefusalGuardLayer::new(),
    )
    .unwrap()
    .access_log(false)
    .drain_timeout(Duration::from_secs(3));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = draining.clone().after(async {
        let _ = stopped.await;
    });
    let mut served = tokio::spawn(proxy.serve(listener, shutdown));
    let admin_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_addr = admin_listener.local_addr().unwrap();
    let state = AdminState::new().not_ready_when(draining.clone());
    tokio::spawn(admin::serve(admin_listener, state, std::future::pending()));
    let readyz = format!("http://{admin_addr}/readyz");

    let ready = reqwest::get(&readyz).await.unwrap();
    assert_eq!(ready.status(), 200);

    // A stream in flight, then the shutdown signal: the drain begins.
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"GET /v1/events HTTP/1.1\r\nhost: proxy\r\n\r\n")
        .await
        .unwrap();
    assert!(
        upstream
            .wait_until(Duration::from_secs(5), |u| u.requests().len() == 1)
            .await
    );
    stop.send(()).unwrap();
    let draining_answer = reqwest::get(&readyz).await.unwrap();
    assert!(
        !served.is_finished(),
        "still draining when /readyz was asked"
    );
    assert_eq!(draining_answer.status(), 503);
    assert!(draining_answer.text().await.unwrap().contains("draining"));

    let ended = tokio::time::timeout(GENEROUS, &mut served).await;
    assert!(ended.is_ok(), "serve() returned after the drain deadline");
    drop(socket);
}

#[tokio::test]
async fn a_live_thinking_hold_past_the_deadline_settles_its_handle() {
    let thinking = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
    );
    let upstream = RawUpstream::start(move |_, _| {
        vec![
            Act::Write(head(200, "text/event-stream")),
            Act::Write(chunk(thinking.as_bytes())),
            Act::Hang,
        ]
    })
    .await;
    let layer = RefusalGuardLayer::new()
        .live_thinking(true)
        .recovery_deadline(Duration::from_millis(300));
    let proxy = Running::start(&upstream.url(), layer, |p| p).await;

    let got = proxy.exchange(&messages_request(true, "")).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(!got.ends_with("0\r\n\r\n"), "a cut stream: {got:?}");
    // An unsettled handle would leave the line waiting, then `unsettled`.
    let line = proxy.line_with(&["POST /v1/messages 200"]).await;
    assert!(!line.contains("unsettled"), "{line}");
    assert!(line.contains(" ok"), "{line}");
}

/// `served` is a whole Messages stream with no refusal in it, after
/// `upstream` got the original and the rescue, each whole; what it got.
fn assert_rescued(served: &str, upstream: &RawUpstream) -> Vec<support::raw_upstream::RawRequest> {
    assert!(served.contains("message_stop"), "{served}");
    assert!(
        !served.contains("\"stop_reason\":\"refusal\""),
        "the refusal was rescued: {served}"
    );
    let seen = upstream.requests();
    assert_eq!(seen.len(), 2, "the original and the rescue: {seen:?}");
    assert!(seen.iter().all(|r| r.complete));
    seen
}

/// What `proxy` answers a Messages request whose head carries a header of
/// `bytes` bytes of padding.
async fn padded(proxy: &Running, bytes: usize) -> String {
    let padding = format!("x-padding: {}\r\n", "a".repeat(bytes));
    proxy.exchange(&messages_request(false, &padding)).await
}

#[tokio::test]
async fn a_request_head_past_the_bound_gets_a_431_and_one_within_it_is_served() {
    let upstream = answering_ok("application/json", b"{}").await;

    // The default bound is 8 KiB.
    let defaults = Running::plain(&upstream).await;
    let served = padded(&defaults, 6 * 1024).await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    assert_eq!(upstream.requests().len(), 1);
    let refused = padded(&defaults, 10 * 1024).await;
    assert!(refused.starts_with("HTTP/1.1 431"), "{refused}");
    assert_eq!(
        upstream.requests().len(),
        1,
        "the oversized head went nowhere"
    );

    let raised = Running::over(&upstream, |p| p.max_head_bytes(32 * 1024)).await;
    let served = padded(&raised, 24 * 1024).await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    let refused = padded(&raised, 40 * 1024).await;
    assert!(refused.starts_with("HTTP/1.1 431"), "{refused}");
    assert_eq!(upstream.requests().len(), 2);

    // Past the read buffer (128 KiB) hyper itself refuses the head.
    let refused = padded(&raised, 200 * 1024).await;
    assert!(refused.starts_with("HTTP/1.1 431"), "{refused}");
    assert_eq!(upstream.requests().len(), 2);
}

#[tokio::test]
async fn a_400_kb_request_body_goes_upstream_byte_for_byte() {
    // Read through a buffer larger than the head's bound.
    let upstream = answering_ok("application/json", b"{}").await;
    let proxy = Running::plain(&upstream).await;
    let text = "y".repeat(400 * 1024);
    let body = format!(
        r#"{{"model":"claude-opus-4-7","max_tokens":16,"messages":[{{"role":"user","content":"{text}"}}]}}"#
    );
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-api-key: k\r\nanthropic-version: 2023-06-01\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = proxy.exchange(request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, body.as_bytes());
}

#[tokio::test]
async fn upstream_response_heads_are_read_up_to_16_kib_and_bodies_whole() {
    let upstream = RawUpstream::start(|_, request| {
        let body = vec![b'7'; 100_000];
        let padding = match request.header("x-test-padding") {
            Some(bytes) => "a".repeat(bytes.parse().unwrap()),
            None => String::new(),
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-padding: {padding}\r\n\
             content-length: {}\r\n\r\n",
            body.len()
        );
        vec![
            Act::Write(bytes::Bytes::from(head)),
            Act::Write(bytes::Bytes::from(body)),
        ]
    })
    .await;
    let proxy = Running::plain(&upstream).await;
    assert_eq!(refusal_guard_proxy::UPSTREAM_READ_BYTES, 16 * 1024);

    // A head within the bound, then a body many reads long: all of it.
    let served = proxy
        .exchange(&messages_request(false, "x-test-padding: 12000\r\n"))
        .await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    assert!(
        served.contains(&"a".repeat(12000)),
        "the long header passed"
    );
    assert_eq!(body_of(&served), "7".repeat(100_000));

    // A head past it: the client gets an error in the API's shape.
    let refused = proxy
        .exchange(&messages_request(false, "x-test-padding: 20000\r\n"))
        .await;
    let error = refused_as(&refused, "502", "api_error");
    assert_eq!(error["type"], "error", "{refused}");
    assert_eq!(upstream.requests().len(), 2);
}

/// A guarded Messages request of about `kb` KB (one long user turn): the
/// raw HTTP/1.1 head, with a `content-length` or chunked, and the body.
fn large_request(kb: usize, chunked: bool) -> (Vec<u8>, Vec<u8>) {
    let filler = "The quick brown fox jumps over the lazy dog. ".repeat(kb * 1024 / 45);
    let body = serde_json::json!({
        "model": "claude-opus-4-7", "max_tokens": 256, "stream": true,
        "messages": [{"role": "user", "content": format!("Check my SSH config. {filler}")}],
    })
    .to_string()
    .into_bytes();
    let framing = if chunked {
        "transfer-encoding: chunked\r\n".to_owned()
    } else {
        format!("content-length: {}\r\n", body.len())
    };
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n\
         x-api-key: k\r\n{framing}connection: close\r\n\r\n"
    );
    (head.into_bytes(), body)
}

/// The data of a chunked HTTP/1.1 response body.
fn dechunked(response: &[u8]) -> Vec<u8> {
    let at = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let mut rest = &response[at + 4..];
    let mut data = Vec::new();
    while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..end]).unwrap(), 16).unwrap();
        if size == 0 {
            break;
        }
        data.extend_from_slice(&rest[end + 2..end + 2 + size]);
        rest = &rest[end + 2 + size + 2..];
    }
    data
}

#[tokio::test]
async fn a_large_request_reaches_the_upstream_as_it_arrives_and_its_copy_serves_the_rescue() {
    let (refusal, text) = (fixture(EMPTY_REFUSAL), fixture(TEXT));
    let upstream = RawUpstream::start(move |index, _| {
        let body = if index == 0 { &refusal } else { &text };
        vec![
            Act::Write(head(200, "text/event-stream")),
            Act::Write(chunk(body)),
            Act::Write(last_chunk()),
        ]
    })
    .await;
    let proxy = Running::plain(&upstream).await;
    let (head, body) = large_request(400, false);
    let half = body.len() / 2;
    let mut socket = proxy.send(&[&head[..], &body[..half]].concat()).await;
    // The upstream reads the first half while the client has not sent the
    // rest: the guard does not wait for the whole body.
    let reached = upstream
        .wait_until(GENEROUS, |u| u.received() >= half)
        .await;
    assert!(
        reached,
        "the upstream got {} bytes of the first {half} while the rest was unsent",
        upstream.received()
    );
    assert!(
        upstream.requests().is_empty(),
        "the request is not whole yet"
    );
    socket.write_all(&body[half..]).await.unwrap();
    let (response, closed) = read_until_closed(&mut socket, GENEROUS).await;
    assert!(closed);
    let text_response = String::from_utf8_lossy(&response);
    assert!(text_response.starts_with("HTTP/1.1 200"), "{text_response}");
    let served = String::from_utf8_lossy(&dechunked(&response)).into_owned();
    let seen = assert_rescued(&served, &upstream);
    assert_eq!(seen[0].body, body, "the original, byte for byte");
    // The rescue is built from the copy: the whole conversation again.
    let original = &seen[0].json()["messages"][0]["content"];
    let rescue = String::from_utf8_lossy(&seen[1].body);
    assert!(
        rescue.contains(original.as_str().unwrap()),
        "the rescue carries the original turn whole"
    );
    proxy.line_with(&["POST /v1/messages 200 rescued("]).await;
}

#[tokio::test]
async fn an_upload_cut_after_forwarding_began_reaches_the_upstream_incomplete() {
    for chunked in [false, true] {
        let upstream = answering_ok("application/json", b"{}").await;
        let proxy = Running::plain(&upstream).await;
        let (head, body) = large_request(64, chunked);
        let half = &body[..body.len() / 2];
        let sent = if chunked {
            [&head[..], &chunk(half)[..]].concat()
        } else {
            [&head[..], half].concat()
        };
        let socket = proxy.send(&sent).await;
        let began = upstream
            .wait_until(GENEROUS, |u| u.received() >= half.len())
            .await;
        assert!(began, "forwarding began before the body was whole");
        drop(socket);
        upstream.wait_all_closed(GENEROUS).await;
        let seen = upstream.requests();
        assert_eq!(seen.len(), 1, "chunked {chunked}: {seen:?}");
        assert!(
            !seen[0].complete,
            "chunked {chunked}: a cut body arrived as complete"
        );
        assert_eq!(
            seen[0].body, half,
            "chunked {chunked}: what the client sent, and no end"
        );
        let line = proxy.line_with(&["POST /v1/messages"]).await;
        assert!(!line.contains(" 200 "), "{line}");
    }
}

#[tokio::test]
async fn a_request_that_outgrows_its_copy_goes_on_whole_and_its_refusal_as_sent() {
    let refusal = fixture(EMPTY_REFUSAL);
    let sent = refusal.clone();
    let upstream = RawUpstream::start(move |_, _| {
        vec![
            Act::Write(head(200, "text/event-stream")),
            Act::Write(chunk(&sent)),
            Act::Write(last_chunk()),
        ]
    })
    .await;
    let layer = RefusalGuardLayer::new().max_request_body(16 * 1024);
    let proxy = Running::start(&upstream.url(), layer, |p| p).await;
    let (head, body) = large_request(64, true);
    let (first, rest) = body.split_at(4 * 1024);
    let mut socket = proxy.send(&[&head[..], &chunk(first)[..]].concat()).await;
    let began = upstream
        .wait_until(GENEROUS, |u| u.received() >= first.len())
        .await;
    assert!(began, "forwarding began within the bound");
    // Past the bound, with no length declared: the copy is dropped and the
    // request goes on.
    socket
        .write_all(&[&chunk(rest)[..], &last_chunk()[..]].concat())
        .await
        .unwrap();
    let (response, closed) = read_until_closed(&mut socket, GENEROUS).await;
    assert!(closed);
    assert!(response.starts_with(b"HTTP/1.1 200"));
    assert_eq!(
        dechunked(&response),
        refusal,
        "with no copy to recover from, the refusal as the upstream sent it"
    );
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1, "no recovery attempt was faked");
    assert!(seen[0].complete);
    assert_eq!(seen[0].body, body, "forwarded whole, byte for byte");
}
