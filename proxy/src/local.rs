//! The proxy in this process on a loopback port: for a client that takes
//! only a base URL (most Anthropic and Gemini client crates, any HTTP
//! client), the guard without a separate process.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{Proxy, UpstreamService};

/// What [`RunningProxy::shutdown`] waits past the drain deadline for the
/// server's task to end before it gives up on it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

impl<S: UpstreamService> Proxy<S> {
    /// Starts the proxy on a free loopback port (`127.0.0.1`) as a task of
    /// the current tokio runtime, and returns its address and the handle
    /// that stops it: point any client at
    /// [`base_url`](RunningProxy::base_url). `Err` when no loopback port
    /// can be bound. Panics outside a tokio runtime.
    ///
    /// The access log stays as set (on by default: one line per request on
    /// stderr; [`access_log(false)`](Self::access_log) turns it off).
    ///
    /// ```
    /// use refusal_guard_proxy::{Proxy, Upstream};
    /// use refusal_guard_testkit::Simulator;
    /// use refusal_guard::{header, RefusalGuardLayer};
    /// use tower::Layer;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // The simulated provider stands in for the real one here:
    /// // `Proxy::new(Upstream::parse("https://api.anthropic.com")?, &layer)?`.
    /// let provider = RefusalGuardLayer::new().layer(Simulator::new().shared());
    /// let upstream = Upstream::parse("http://simulated.invalid")?;
    /// let guard = Proxy::with_service(upstream, provider).access_log(false).start().await?;
    ///
    /// // A client with no middleware hook: it takes a base URL, nothing more.
    /// let response = reqwest::Client::new()
    ///     .post(format!("{}/v1/messages", guard.base_url()))
    ///     .header("content-type", "application/json")
    ///     .body(r#"{"model":"claude-opus-4-7","max_tokens":64,
    ///               "messages":[{"role":"user","content":"Audit my SSH config"}]}"#)
    ///     .send()
    ///     .await?;
    /// assert!(response.headers()[header::RECOVERY].to_str()?.starts_with("rescued"));
    /// assert!(response.text().await?.contains("end_turn"));
    ///
    /// guard.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn start(self) -> io::Result<RunningProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let drain = self.limits.drain_timeout;
        let (stop, stopped) = oneshot::channel::<()>();
        // The sender sent or dropped alike ends the wait: a dropped handle
        // stops the server.
        let shutdown = async move {
            let _ = stopped.await;
        };
        let task = tokio::spawn(self.serve(listener, shutdown));
        Ok(RunningProxy {
            addr,
            drain,
            stop: Some(stop),
            task: Some(task),
        })
    }
}

/// A proxy started by [`Proxy::start`]: its loopback address, and the
/// handle that stops it. Dropping it stops the server too: it stops
/// accepting and closes idle connections at once, and lets requests in
/// flight finish until the drain deadline
/// ([`drain_timeout`](Proxy::drain_timeout), 30 s by default), in the
/// background.
#[derive(Debug)]
pub struct RunningProxy {
    addr: SocketAddr,
    drain: Duration,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl RunningProxy {
    /// The address it listens on.
    ///
    /// ```no_run
    /// # async fn run(guard: refusal_guard_proxy::RunningProxy) {
    /// assert!(guard.local_addr().ip().is_loopback());
    /// # }
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:PORT` (no trailing slash): what a
    /// client's base URL option takes. OpenAI clients usually expect the
    /// `/v1` in it: `format!("{}/v1", guard.base_url())`.
    ///
    /// ```no_run
    /// # async fn run(guard: refusal_guard_proxy::RunningProxy) {
    /// assert!(guard.base_url().starts_with("http://127.0.0.1:"));
    /// # }
    /// ```
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server and waits for it: no new connections, idle ones
    /// closed, requests in flight (streams included) finished or, at the
    /// drain deadline, cut. `Err` if the server failed, or did not end
    /// within the drain deadline and a few seconds more (its task is then
    /// aborted).
    ///
    /// ```no_run
    /// # async fn run(guard: refusal_guard_proxy::RunningProxy) -> std::io::Result<()> {
    /// guard.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(mut task) = self.task.take() else {
            return Ok(());
        };
        match tokio::time::timeout(self.drain + SHUTDOWN_GRACE, &mut task).await {
            Ok(Ok(served)) => served,
            Ok(Err(failed)) => Err(io::Error::other(failed)),
            Err(_) => {
                task.abort();
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "refusal-guard: the in-process proxy did not stop within its drain deadline",
                ))
            }
        }
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
