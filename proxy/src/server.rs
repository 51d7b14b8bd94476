//! The accept loop: connection limits, server timeouts and shutdown.
//!
//! - Each connection takes a slot of [`ServerLimits::max_connections`].
//!   When they are all taken, up to [`OVERFLOW`] more connections are
//!   accepted and answered `503` in the API's shape (with `connection:
//!   close`), so clients see why; past that, accepting waits for a slot
//!   (new connections queue in the kernel's backlog). Nothing crashes and
//!   no connection is served without a slot.
//! - HTTP/1 request heads must arrive within the header-read timeout
//!   (hyper's own, so slowloris clients are cut); a connection with no
//!   request in flight is closed after the idle timeout (HTTP/1 and 2).
//! - At shutdown, listening stops, idle connections close, and requests in
//!   flight may finish until the drain deadline; then the rest are cut,
//!   which cancels their work upstream.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::access_log::LogLine;
use super::{error_response, Proxy, ProxyBody};
use refusal_guard::BoxError;

/// Connections accepted past the cap only to be told `503`.
pub(crate) const OVERFLOW: usize = 64;

/// How long an overflow connection may stay open to receive its 503.
const OVERFLOW_GRACE: Duration = Duration::from_secs(5);

/// The server's bounds; see each [`Proxy`] builder method of the same name.
///
/// ```
/// use refusal_guard_proxy::ServerLimits;
///
/// let limits = ServerLimits::default();
/// assert_eq!(limits.max_connections, 4096);
/// assert_eq!(limits.header_read_timeout.as_secs(), 30);
/// assert_eq!(limits.max_head_bytes, 8 * 1024);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerLimits {
    /// Time for a client to send a complete request head (HTTP/1).
    pub header_read_timeout: Duration,
    /// Time a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// Time requests in flight get to finish at shutdown.
    pub drain_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// The largest request head (request line and headers) read, in
    /// bytes; a larger one is answered `431`. The default, 8 KiB, is
    /// nginx's bound on a header line; SDK and agent requests send one or
    /// two KB of headers. Each HTTP/1 connection's read buffer is capped
    /// apart from it, at the larger of this and 128 KiB.
    pub max_head_bytes: usize,
}

/// The cap on each HTTP/1 connection's read buffer (unless
/// [`ServerLimits::max_head_bytes`] is larger). Request bodies are read
/// through it: at hyper's 8 KiB starting buffer a 400 KB agent request took
/// about 50 reads and went upstream in as many writes (guard vs a bare
/// forwarder at 405 KB requests and 16 clients: 1.64x the CPU per request,
/// 5.7x the time to first byte); at 64 KiB 1.17x and 1.60x, at 128 KiB
/// 1.10x and 1.18x, at 256 KiB 1.11x and 1.22x with 6 MB more resident.
/// Without a cap, every kept-alive connection's buffer could grow toward
/// hyper's 400 KB.
const READ_BUFFER_BYTES: usize = 128 * 1024;

impl ServerLimits {
    /// The least [`ServerLimits::max_head_bytes`] hyper accepts.
    pub const MIN_HEAD_BYTES: usize = 8 * 1024;
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(30),
            max_connections: 4096,
            max_head_bytes: 8 * 1024,
        }
    }
}

/// What a connection was admitted as.
enum Slot {
    Served(#[allow(dead_code)] OwnedSemaphorePermit),
    Overflow(#[allow(dead_code)] OwnedSemaphorePermit),
}

/// The connection slots and the few overflow places past them. (tower's
/// `ConcurrencyLimit` and `LoadShed` bound requests to a service; what runs
/// out here is sockets and file descriptors, so connections are counted at
/// accept.)
struct Admission {
    slots: Arc<Semaphore>,
    overflow: Arc<Semaphore>,
}

impl Admission {
    fn new(limits: &ServerLimits) -> Self {
        Admission {
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            overflow: Arc::new(Semaphore::new(OVERFLOW)),
        }
    }

    /// A slot, else an overflow place, else waits for a slot.
    async fn admit(&self) -> Slot {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Slot::Served(permit);
        }
        if let Ok(permit) = self.overflow.clone().try_acquire_owned() {
            return Slot::Overflow(permit);
        }
        match self.slots.clone().acquire_owned().await {
            Ok(permit) => Slot::Served(permit),
            Err(_) => std::future::pending().await,
        }
    }
}

/// Requests in flight on one connection (a response counts until its body
/// has ended or was dropped).
#[derive(Clone)]
struct InFlight(Arc<watch::Sender<usize>>);

/// One request in flight; dropping it ends it.
struct Busy(Arc<watch::Sender<usize>>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl InFlight {
    fn new() -> Self {
        InFlight(Arc::new(watch::channel(0).0))
    }

    fn start(&self) -> Busy {
        self.0.send_modify(|n| *n += 1);
        Busy(self.0.clone())
    }

    /// Completes once nothing has been in flight for `idle`.
    async fn idle_for(&self, idle: Duration) {
        let mut count = self.0.subscribe();
        loop {
            if count.wait_for(|n| *n == 0).await.is_err() {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(idle) => return,
                changed = count.changed() => if changed.is_err() { return },
            }
        }
    }
}

impl<S: super::UpstreamService> Proxy<S> {
    /// Serves connections from `listener` until `shutdown` completes, then
    /// stops accepting, lets requests in flight (streams included) finish
    /// until the drain deadline, and cuts what is left.
    pub async fn serve<F>(self, listener: TcpListener, shutdown: F) -> std::io::Result<()>
    where
        F: Future<Output = ()> + Send,
    {
        let admission = Admission::new(&self.limits);
        let (stop, stopping) = watch::channel(false);
        let mut connections = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            while connections.try_join_next().is_some() {}
            let accepted = tokio::select! {
                accepted = admit_and_accept(&admission, &listener) => accepted,
                () = &mut shutdown => break,
            };
            let Some((stream, slot)) = accepted else {
                continue;
            };
            let proxy = self.clone();
            connections.spawn(proxy.connection(stream, slot, stopping.clone()));
        }
        drop(listener);
        let _ = stop.send(true);
        self.drain(connections).await;
        Ok(())
    }

    async fn drain(&self, mut connections: JoinSet<()>) {
        let drained = tokio::time::timeout(self.limits.drain_timeout, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                connections = connections.len(),
                deadline = ?self.limits.drain_timeout,
                "drain deadline reached: cutting the connections still open"
            );
            connections.shutdown().await;
        }
    }

    /// Serves one connection until it ends, is idle too long or the server
    /// stops.
    async fn connection(self, stream: TcpStream, slot: Slot, stopping: watch::Receiver<bool>) {
        let in_flight = InFlight::new();
        let (overflow, idle) = match slot {
            Slot::Served(_) => (false, self.limits.idle_timeout),
            Slot::Overflow(_) => (true, self.limits.idle_timeout.min(OVERFLOW_GRACE)),
        };
        let service = {
            let (in_flight, proxy) = (in_flight.clone(), self.clone());
            hyper::service::service_fn(move |request| {
                let (proxy, busy) = (proxy.clone(), in_flight.start());
                async move { Ok::<_, Infallible>(proxy.respond(request, overflow, busy).await) }
            })
        };
        let mut builder = auto::Builder::new(TokioExecutor::new());
        let max_head = self.limits.max_head_bytes.max(ServerLimits::MIN_HEAD_BYTES);
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout)
            .max_buf_size(max_head.max(READ_BUFFER_BYTES))
            // A streamed answer goes out one small event at a time: each
            // chunk copied behind its size line and sent as one buffer
            // costs the kernel less than the three-piece vectored write
            // hyper would make of it (the same bytes, one send per chunk).
            .writev(false);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(max_head).unwrap_or(u32::MAX));
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let mut connection = std::pin::pin!(connection);
        let (close, mut closing) = oneshot::channel();
        tokio::spawn(close_when_idle_or_stopping(
            in_flight, idle, stopping, close,
        ));
        // Only the connection and a cheap one-shot are polled at each of
        // the connection's wake-ups (one per chunk it forwards); the idle
        // and shutdown watches live on their own task.
        let ended = tokio::select! {
            biased;
            ended = connection.as_mut() => ended,
            Ok(()) = &mut closing => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(error) = ended {
            tracing::debug!(%error, "connection ended with an error");
        }
        drop(slot);
    }

    /// A request on a served connection goes to [`Proxy::handle`]; one on
    /// an overflow connection gets a 503.
    async fn respond(
        &self,
        request: Request<hyper::body::Incoming>,
        overflow: bool,
        busy: Busy,
    ) -> Response<WhileBusy> {
        let response = if overflow {
            over_capacity(self.log_line(&request))
        } else if head_bytes(&request) > self.limits.max_head_bytes {
            head_too_large(self.log_line(&request))
        } else {
            self.handle(request).await
        };
        // Served as it is, not boxed again: one dynamic call less for
        // every chunk.
        response.map(|body| WhileBusy { body, _busy: busy })
    }
}

/// Sends on `close` once the proxy is stopping or nothing has been in
/// flight on the connection for `idle`; ends with the connection (when
/// `close`'s receiver is dropped) otherwise.
async fn close_when_idle_or_stopping(
    in_flight: InFlight,
    idle: Duration,
    mut stopping: watch::Receiver<bool>,
    mut close: oneshot::Sender<()>,
) {
    tokio::select! {
        () = close.closed() => return,
        _ = stopping.wait_for(|stop| *stop) => {}
        () = in_flight.idle_for(idle) => {}
    }
    let _ = close.send(());
}

/// A response body that keeps its request counted as in flight until it is
/// dropped.
struct WhileBusy {
    body: ProxyBody,
    _busy: Busy,
}

impl Body for WhileBusy {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

async fn admit_and_accept(
    admission: &Admission,
    listener: &TcpListener,
) -> Option<(TcpStream, Slot)> {
    let mut slot = admission.admit().await;
    match listener.accept().await {
        Ok((stream, _peer)) => {
            // A slot may have freed while this overflow place waited.
            if let Slot::Overflow(_) = slot {
                if let Ok(permit) = admission.slots.clone().try_acquire_owned() {
                    slot = Slot::Served(permit);
                }
            }
            let _ = stream.set_nodelay(true);
            Some((stream, slot))
        }
        Err(error) => {
            // Out of file descriptors and the like: back off.
            tracing::warn!(%error, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// The bytes of a request's head as HTTP/1 sends it: the request line,
/// each header line, the blank line.
fn head_bytes<B>(request: &Request<B>) -> usize {
    let uri = request.uri();
    let target = uri.path_and_query().map_or(1, |p| p.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len());
    let line = request.method().as_str().len() + target + 12;
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    line + headers + 2
}

/// A head past [`ServerLimits::max_head_bytes`] (one the read buffer still
/// held): `431`, as hyper answers one past the buffer, and the connection
/// closed.
fn head_too_large(line: LogLine) -> Response<ProxyBody> {
    closing_error(
        line,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "head_too_large",
        "refusal-guard: the request head is larger than the proxy's --max-head-bytes",
    )
}

fn over_capacity(line: LogLine) -> Response<ProxyBody> {
    let mut response = closing_error(
        line,
        StatusCode::SERVICE_UNAVAILABLE,
        "over_capacity",
        "refusal-guard: the proxy is serving its maximum number of connections; retry shortly",
    );
    response.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    response
}

/// The proxy's own error in the API's shape, logged, with the connection
/// closed after it.
fn closing_error(
    mut line: LogLine,
    status: StatusCode,
    code: &str,
    message: &str,
) -> Response<ProxyBody> {
    line.write(status.as_u16(), code, "");
    let mut response = error_response(line.path(), status, code, message);
    response.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    response
}
