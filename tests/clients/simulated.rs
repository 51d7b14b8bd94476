//! The strict simulator on a loopback HTTP server: what a client crate
//! that needs a base URL is pointed at.

use std::convert::Infallible;

use hyper_util::rt::{TokioExecutor, TokioIo};
use refusal_guard_testkit::Simulator;
use tower::ServiceExt;

/// The running server. Dropping it stops accepting connections and fails
/// the test if the simulator answered a request that broke a provider's
/// documented rules.
pub struct Simulated {
    pub simulator: Simulator,
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Simulated {
    pub async fn start() -> Simulated {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let simulator = Simulator::new().strict();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = simulator.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = &mut stopped => break,
                };
                let Ok((stream, _)) = accepted else { continue };
                let simulator = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let simulator = simulator.clone();
                        async move {
                            let response = simulator.oneshot(request).await;
                            Ok::<_, Infallible>(
                                response.expect("the simulator answers every request"),
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Simulated {
            simulator,
            url,
            stop: Some(stop),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Simulated {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if !std::thread::panicking() {
            let broken = self.simulator.take_violations();
            assert!(broken.is_empty(), "requests broke the contract: {broken:?}");
        }
    }
}
