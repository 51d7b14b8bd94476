//! A tower middleware that keeps a provider's safety-classifier refusal from
//! silently ending an agent's turn.
//!
//! Frontier models can decline a request mid-flight: HTTP 200, a refusal stop
//! reason, often no output. [`RefusalGuardLayer`] wraps the HTTP client service
//! an agent uses to call LLM APIs (Anthropic Messages, OpenAI Chat Completions
//! and Responses, Gemini and Vertex AI) and:
//!
//! - **sees** every request and response, streamed (SSE, frame by frame, robust
//!   to any split) or not;
//! - **tells** an *empty* refusal (nothing real emitted yet; thinking does not
//!   count) from a *partial* one (text or a tool call came first);
//! - **recovers** empty refusals before the client sees them: retargeted
//!   server-side fallbacks, a client-side fallback chain, then one honest
//!   reframed continuation, at most once per conversation until it produces
//!   real output again;
//! - **leaves alone** partial refusals and never loses the original: when
//!   nothing recovers, the client gets the refusal byte for byte;
//! - **records** every refusal as a typed [`Refusal`] (in the response
//!   extensions) and as a [`telemetry::RefusalRecord`] sent to a pluggable
//!   [`telemetry::TelemetrySink`].
//!
//! Responses it does not recognise, and everything that is not a refusal,
//! pass through byte-exact.
//!
//! # Example
//!
//! ```
//! use refusal_guard::simulate::Simulator;
//! use refusal_guard::telemetry::MemorySink;
//! use refusal_guard::{Outcome, Refusal, RefusalGuardLayer};
//! use http_body_util::{BodyExt, Full};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let log = MemorySink::new();
//! // `Simulator` stands in for a real client (see `reqwest::ReqwestService`):
//! // it refuses the first attempt of every conversation.
//! let client = ServiceBuilder::new()
//!     .layer(RefusalGuardLayer::new().telemetry(log.clone()))
//!     .service(Simulator::new());
//!
//! let request = http::Request::post("https://api.anthropic.com/v1/messages")
//!     .header("content-type", "application/json")
//!     .body(Full::new(bytes::Bytes::from(
//!         r#"{"model":"claude-opus-4-7","max_tokens":512,"stream":true,
//!             "messages":[{"role":"user","content":"Audit my SSH config"}]}"#,
//!     )))?;
//! let response = client.oneshot(request).await?;
//!
//! let refusal = response.extensions().get::<Refusal>().cloned().expect("it refused");
//! assert_eq!(refusal.outcome, Outcome::Rescued);
//! assert_eq!(refusal.code(), "cyber");
//! let body = response.into_body().collect().await?.to_bytes();
//! assert!(String::from_utf8_lossy(&body).contains("\"stop_reason\":\"end_turn\""));
//! assert_eq!(log.records().len(), 1);
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
//!
//! - [`layer`]: the layer and all its configuration; [`service`] and [`body`]:
//!   the service and the response body it returns.
//! - [`recovery`]: the rescue note, the runtime switch, fallback chains and
//!   the per-call budget; [`store`]: per-conversation state behind an async
//!   trait.
//! - [`refusal`]: the typed metadata; [`telemetry`]: sinks, records and the
//!   report.
//! - [`sse`]: the incremental SSE framer; [`soft`]: the opt-in prose refusal
//!   detector; [`env`](mod@env): configuration from environment variables.
//! - [`simulate`]: a simulated provider for demos and tests; `reqwest` and
//!   `proxy` (default features): the reqwest adapter and the standalone proxy.
//! - [`metrics`]: what the guard counts, through the `metrics` facade;
//!   `admin` (feature `proxy`): the admin listener (metrics, health, the
//!   refusals dashboard).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "proxy")]
pub mod admin;
pub mod api_error;
pub mod body;
mod dialect;
pub mod env;
mod hold;
pub mod layer;
pub mod metrics;
#[cfg(feature = "proxy")]
pub mod proxy;
pub mod recovery;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis_store;
pub mod refusal;
pub mod replay;
#[cfg(feature = "reqwest")]
pub mod reqwest;
mod reserve;
mod respond;
pub mod service;
pub mod simulate;
pub mod soft;
pub mod sse;
pub mod store;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod store_fallback;
pub mod telemetry;
pub mod timeout;

pub use body::GuardBody;
pub use layer::RefusalGuardLayer;
pub use refusal::{Outcome, Refusal, RefusalHandle};
pub use replay::ReplayBody;
pub use service::RefusalGuard;
