//! A raw-socket scripted upstream for fault tests: a real TCP server on
//! loopback that reads each HTTP/1.1 request itself (head, then a
//! `content-length` or chunked body), records it, and then plays a script of
//! socket actions, misbehaving at will: hang before or after the head, reset,
//! close mid-stream, drip bytes.
//!
//! Every complete request is first checked against the provider's
//! documented rules ([`contract`]): one that breaks a rule is answered with
//! the provider's 400 instead of the script, recorded, and makes dropping
//! the upstream panic (outside a panic).
//!
//! It records, per request, whether the body arrived complete, and counts
//! connections open and closed by the peer, so a test can assert what the
//! upstream saw: a request aborted, a connection closed, no continuation sent.
//!
//! ```ignore
//! let upstream = RawUpstream::start(|index, _request| match index {
//!     0 => vec![Act::Write(head(200, "text/event-stream")), Act::Hang],
//!     _ => vec![Act::Write(head(200, "text/event-stream")), Act::Write(chunk(b"...")), Act::Write(last_chunk())],
//! }).await;
//! ```

// Loaded here and in the other standalone upstream: each must stand alone.
use crate::contract;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One thing the upstream does on the socket after reading a request.
#[derive(Debug, Clone)]
pub enum Act {
    /// Write these bytes (use [`head`], [`chunk`], [`last_chunk`]).
    Write(Bytes),
    /// Wait this long.
    Sleep(Duration),
    /// Keep the connection open, sending nothing, until the peer closes it
    /// (or ten minutes pass).
    Hang,
    /// Close abruptly with a TCP reset (RST).
    Reset,
    /// Close cleanly (FIN) without finishing the response.
    Close,
}

/// One request the upstream read.
#[derive(Debug, Clone)]
pub struct RawRequest {
    /// The request line, e.g. `POST /v1/messages HTTP/1.1`.
    pub line: String,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body bytes read (decoded from chunked when chunked).
    pub body: Vec<u8>,
    /// Whether the body arrived whole (its declared length, or a last chunk).
    pub complete: bool,
}

impl RawRequest {
    /// The request path (with query).
    pub fn path(&self) -> &str {
        self.line.split(' ').nth(1).unwrap_or("")
    }

    /// The first value of a header, by lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The text of the first message: its string content, or the text of
    /// its first content block (as a rescue continuation may send it).
    pub fn first_user_text(&self) -> String {
        let content = &self.json()["messages"][0]["content"];
        content
            .as_str()
            .or_else(|| content[0]["text"].as_str())
            .unwrap_or_default()
            .to_owned()
    }
}

type Script = dyn Fn(usize, &RawRequest) -> Vec<Act> + Send + Sync;

#[derive(Default)]
struct State {
    requests: Mutex<Vec<RawRequest>>,
    accepted: AtomicUsize,
    open: AtomicUsize,
    /// Connections whose peer closed them (EOF or error while reading or
    /// writing), as opposed to the script closing them.
    closed_by_peer: AtomicUsize,
    /// Bytes read from every connection so far, requests whole or not.
    received: AtomicUsize,
    violations: contract::Violations,
}

/// The running upstream. It stops when dropped.
pub struct RawUpstream {
    addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
        if !std::thread::panicking() {
            self.state.violations.assert_none();
        }
    }
}

impl RawUpstream {
    /// Starts on a free loopback port; `script(index, request)` says what to
    /// do after the `index`-th request (counted from 0 across connections).
    pub async fn start<F>(script: F) -> RawUpstream
    where
        F: Fn(usize, &RawRequest) -> Vec<Act> + Send + Sync + 'static,
    {
        Self::start_keeping(contract::Contract::new(), script).await
    }

    /// [`start`](Self::start) for an upstream that keeps `contract` (one
    /// that also serves a path no API has, say).
    pub async fn start_keeping<F>(contract: contract::Contract, script: F) -> RawUpstream
    where
        F: Fn(usize, &RawRequest) -> Vec<Act> + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State {
            violations: contract::Violations::keeping(contract),
            ..State::default()
        });
        let script: Arc<Script> = Arc::new(script);
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                shared.open.fetch_add(1, Ordering::SeqCst);
                let (state, script) = (shared.clone(), script.clone());
                tokio::spawn(async move {
                    serve_connection(socket, &state, &*script).await;
                    state.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        RawUpstream { addr, state, task }
    }

    /// `host:port`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://host:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request read so far, complete or not.
    pub fn requests(&self) -> Vec<RawRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Every request read so far, forgotten here (a long run keeps the
    /// upstream's own memory flat this way).
    pub fn take_requests(&self) -> Vec<RawRequest> {
        std::mem::take(&mut *self.state.requests.lock().unwrap())
    }

    /// How many requests were answered with a contract 400, forgotten here
    /// (for a test that sends a broken request on purpose).
    pub fn take_violations(&self) -> usize {
        self.state.violations.take().len()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }

    /// Bytes read so far from every connection (heads and bodies), counted
    /// as they arrive, before any request is whole: a test can see a request
    /// reach the upstream while it is still being sent.
    pub fn received(&self) -> usize {
        self.state.received.load(Ordering::SeqCst)
    }

    /// Connections the peer closed.
    pub fn closed_by_peer(&self) -> usize {
        self.state.closed_by_peer.load(Ordering::SeqCst)
    }

    /// Waits until no connection is open, at most `limit`; whether it got there.
    pub async fn wait_all_closed(&self, limit: Duration) -> bool {
        self.wait_until(limit, |up| up.open() == 0).await
    }

    /// Waits until `done(self)` holds, at most `limit`; whether it did.
    pub async fn wait_until(&self, limit: Duration, done: impl Fn(&Self) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if done(self) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        done(self)
    }
}

async fn serve_connection(mut socket: TcpStream, state: &State, script: &Script) {
    let mut buffer = Vec::new();
    loop {
        let request = match read_request(&mut socket, &mut buffer, &state.received).await {
            Ok(Some(request)) => request,
            // A clean close between requests is the peer's too.
            Ok(None) | Err(_) => {
                state.closed_by_peer.fetch_add(1, Ordering::SeqCst);
                return;
            }
        };
        let complete = request.complete;
        let index = {
            let mut requests = state.requests.lock().unwrap();
            requests.push(request.clone());
            requests.len() - 1
        };
        if !complete {
            state.closed_by_peer.fetch_add(1, Ordering::SeqCst);
            return;
        }
        let close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let method = request.line.split(' ').next().unwrap_or("");
        let headers = contract::header_map(&request.headers);
        let verdict = state
            .violations
            .check(method, request.path(), &headers, &request.body);
        let acts = match verdict {
            Ok(()) => script(index, &request),
            Err(violation) => vec![Act::Write(response_bytes(&violation))],
        };
        match play(&mut socket, acts).await {
            Played::Done if close => {
                let _ = socket.shutdown().await;
                return;
            }
            Played::Done => continue,
            Played::PeerClosed => {
                state.closed_by_peer.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Played::ScriptClosed => return,
        }
    }
}

/// The provider's error for a violation, as HTTP/1.1 bytes.
fn response_bytes(violation: &contract::Violation) -> Bytes {
    let response = violation.response();
    let mut head = format!(
        "HTTP/1.1 {}\r\ncontent-length: {}\r\n",
        response.status(),
        response.body().len()
    );
    for (name, value) in response.headers() {
        head.push_str(&format!(
            "{name}: {}\r\n",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    head.push_str("\r\n");
    [head.as_bytes(), response.body()].concat().into()
}

enum Played {
    /// Every act ran: the connection may carry another request.
    Done,
    PeerClosed,
    ScriptClosed,
}

async fn play(socket: &mut TcpStream, acts: Vec<Act>) -> Played {
    for act in acts {
        match act {
            Act::Write(bytes) => {
                if socket.write_all(&bytes).await.is_err() {
                    return Played::PeerClosed;
                }
                let _ = socket.flush().await;
            }
            Act::Sleep(pause) => {
                if peer_closes_within(socket, pause).await {
                    return Played::PeerClosed;
                }
            }
            Act::Hang => {
                return if peer_closes_within(socket, Duration::from_secs(600)).await {
                    Played::PeerClosed
                } else {
                    Played::ScriptClosed
                };
            }
            Act::Reset => {
                let _ = socket.set_zero_linger();
                return Played::ScriptClosed;
            }
            Act::Close => {
                let _ = socket.shutdown().await;
                return Played::ScriptClosed;
            }
        }
    }
    Played::Done
}

/// Waits `pause`, watching for the peer closing the connection meanwhile.
async fn peer_closes_within(socket: &mut TcpStream, pause: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + pause;
    let mut scratch = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut scratch)).await {
            Err(_elapsed) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // Bytes of a pipelined request: not expected here, ignored.
            Ok(Ok(_)) => continue,
        }
    }
}

/// Reads one request; `Ok(None)` when the peer closed before a request began.
async fn read_request(
    socket: &mut TcpStream,
    buffer: &mut Vec<u8>,
    received: &AtomicUsize,
) -> std::io::Result<Option<RawRequest>> {
    let head_end = loop {
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            break end;
        }
        if !fill(socket, buffer, received).await? {
            return Ok(None);
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    buffer.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut request = RawRequest {
        line,
        headers,
        body: Vec::new(),
        complete: false,
    };
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    request.complete = if chunked {
        read_chunked(socket, buffer, &mut request.body, received).await?
    } else {
        let length = request
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        read_exact_body(socket, buffer, length, &mut request.body, received).await?
    };
    Ok(Some(request))
}

async fn read_exact_body(
    socket: &mut TcpStream,
    buffer: &mut Vec<u8>,
    length: usize,
    body: &mut Vec<u8>,
    received: &AtomicUsize,
) -> std::io::Result<bool> {
    while buffer.len() < length {
        if !fill(socket, buffer, received).await.unwrap_or(false) {
            body.append(buffer);
            return Ok(false);
        }
    }
    body.extend(buffer.drain(..length));
    Ok(true)
}

async fn read_chunked(
    socket: &mut TcpStream,
    buffer: &mut Vec<u8>,
    body: &mut Vec<u8>,
    received: &AtomicUsize,
) -> std::io::Result<bool> {
    loop {
        let line_end = loop {
            if let Some(end) = find(buffer, b"\r\n") {
                break end;
            }
            if !fill(socket, buffer, received).await.unwrap_or(false) {
                return Ok(false);
            }
        };
        let size_text = String::from_utf8_lossy(&buffer[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        buffer.drain(..line_end + 2);
        // The chunk's data and its CRLF (for the last chunk: the final CRLF,
        // trailers being unused here).
        while buffer.len() < size + 2 {
            if !fill(socket, buffer, received).await.unwrap_or(false) {
                let take = buffer.len().min(size);
                body.extend(buffer.drain(..take));
                return Ok(false);
            }
        }
        body.extend(buffer.drain(..size));
        buffer.drain(..2);
        if size == 0 {
            return Ok(true);
        }
    }
}

/// Reads more bytes; `false` at EOF.
async fn fill(
    socket: &mut TcpStream,
    buffer: &mut Vec<u8>,
    received: &AtomicUsize,
) -> std::io::Result<bool> {
    let mut scratch = [0u8; 16 * 1024];
    let n = socket.read(&mut scratch).await?;
    received.fetch_add(n, Ordering::SeqCst);
    buffer.extend_from_slice(&scratch[..n]);
    Ok(n > 0)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A response head with chunked transfer encoding.
pub fn head(status: u16, content_type: &str) -> Bytes {
    head_with(status, content_type, &[])
}

/// A chunked response head with extra headers.
pub fn head_with(status: u16, content_type: &str, extra: &[(&str, &str)]) -> Bytes {
    let mut text = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n"
    );
    for (name, value) in extra {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    Bytes::from(text)
}

/// One chunk of a chunked body.
pub fn chunk(data: &[u8]) -> Bytes {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

/// The last chunk: the body is complete.
pub fn last_chunk() -> Bytes {
    Bytes::from_static(b"0\r\n\r\n")
}

/// A whole response with a `content-length`.
pub fn whole(status: u16, content_type: &str, body: &[u8]) -> Bytes {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    Bytes::from(out)
}
