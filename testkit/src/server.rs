//! The simulator on a loopback port, for clients that need a URL
//! (async-openai, rig, reqwest, an SDK in another language).

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::{SharedSimulator, SimulatedBody, Simulator, MAX_REQUEST_BYTES};
use refusal_guard::BoxError;

/// How long a connection may take to send a request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long requests in flight get to finish at shutdown before their
/// connections are cut.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

#[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
impl Simulator {
    /// Serves this simulator (its state shared, as
    /// [`shared`](Self::shared)) on a free loopback port, over HTTP/1.1, as
    /// a task of the current tokio runtime; dropping the returned server
    /// stops it. Panics if no loopback port can be bound
    /// (see [`try_serve`](Self::try_serve)) or outside a tokio runtime.
    ///
    /// ```
    /// use refusal_guard_testkit::{ReplyKind, Simulator};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let provider = Simulator::new();
    /// let server = provider.serve().await;
    /// let response = reqwest::Client::new()
    ///     .post(format!("{}/v1/chat/completions", server.base_url()))
    ///     .header("content-type", "application/json")
    ///     .body(r#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}"#)
    ///     .send()
    ///     .await?;
    /// assert!(response.text().await?.contains("content_filter"));
    /// assert_eq!(provider.received()[0].reply.as_ref().unwrap().kind(), ReplyKind::Refusal);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn serve(&self) -> SimulatedServer {
        match self.try_serve().await {
            Ok(server) => server,
            Err(error) => panic!("the simulated provider cannot listen on 127.0.0.1: {error}"),
        }
    }

    /// [`serve`](Self::serve), with `Err` when no loopback port can be
    /// bound.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let server = Simulator::new().try_serve().await?;
    /// assert!(server.local_addr().ip().is_loopback());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_serve(&self) -> io::Result<SimulatedServer> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopping) = watch::channel(false);
        let simulator = self.shared();
        let task = tokio::spawn(accept(listener, simulator.clone(), stopping));
        Ok(SimulatedServer {
            addr,
            simulator,
            stop,
            task: Some(task),
        })
    }
}

/// A [`Simulator`] served on loopback by [`Simulator::serve`]. Dropping it
/// stops the server: it stops accepting, and its connections close once
/// their requests are answered (at most 5 s later).
#[derive(Debug)]
pub struct SimulatedServer {
    addr: SocketAddr,
    simulator: SharedSimulator,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl SimulatedServer {
    /// Its base URL, `http://127.0.0.1:PORT`, with no path: an Anthropic
    /// or Gemini client's base URL; OpenAI clients usually expect `/v1`
    /// after it (`format!("{}/v1", server.base_url())`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let server = refusal_guard_testkit::Simulator::new().serve().await;
    /// assert!(server.base_url().starts_with("http://127.0.0.1:"));
    /// # }
    /// ```
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address it listens on.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let server = refusal_guard_testkit::Simulator::new().serve().await;
    /// assert_ne!(server.local_addr().port(), 0);
    /// # }
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The simulator it serves (its state is the one
    /// [`serve`](Simulator::serve) was called on).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let server = refusal_guard_testkit::Simulator::new().serve().await;
    /// assert_eq!(server.simulator().requests(), 0);
    /// # }
    /// ```
    pub fn simulator(&self) -> &SharedSimulator {
        &self.simulator
    }

    /// Stops the server and waits until its connections have closed (at
    /// most 5 s for requests in flight, then they are cut).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let server = refusal_guard_testkit::Simulator::new().serve().await;
    /// let addr = server.local_addr();
    /// server.shutdown().await;
    /// assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    /// # }
    /// ```
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SimulatedServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Accepts connections until told to stop, then drains them.
async fn accept(
    listener: TcpListener,
    simulator: SharedSimulator,
    mut stop: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped(&mut stop) => break,
        };
        match accepted {
            Ok((stream, _)) => {
                let service = simulator.clone();
                connections.spawn(connection(stream, service, stop.clone()));
            }
            Err(error) => {
                // Out of file descriptors and the like: back off.
                tracing::warn!(%error, "simulated provider: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.shutdown().await;
    }
}

/// Serves one connection until it ends, or gracefully once told to stop.
async fn connection(
    stream: TcpStream,
    simulator: SharedSimulator,
    mut stop: watch::Receiver<bool>,
) {
    let service = hyper::service::service_fn(move |request| respond(simulator.clone(), request));
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = stopped(&mut stop) => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = ended {
        tracing::debug!(%error, "simulated provider: connection ended with an error");
    }
}

/// Reads a request (bounded) and answers it.
async fn respond(
    simulator: SharedSimulator,
    request: Request<Incoming>,
) -> Result<Response<SimulatedBody>, BoxError> {
    let (parts, body) = request.into_parts();
    let read: Result<Bytes, BoxError> = Limited::new(body, MAX_REQUEST_BYTES)
        .collect()
        .await
        .map(|body| body.to_bytes());
    simulator.respond_read(&parts, read)
}

/// Completes once the server is told to stop (or its handle is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
