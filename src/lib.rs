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
//! use refusal_guard_testkit::Simulator;
//! use refusal_guard::telemetry::MemorySink;
//! use refusal_guard::{Outcome, Refusal, RefusalGuardLayer};
//! use http_body_util::{BodyExt, Full};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let log = MemorySink::new();
//! // The testkit's `Simulator` (crate `refusal-guard-testkit`) stands in for
//! // a real client (see `reqwest::ReqwestService`): it refuses the first
//! // attempt of every conversation.
//! let client = ServiceBuilder::new()
//!     .layer(RefusalGuardLayer::new().telemetry(log.clone()))
//!     .service(Simulator::new().shared());
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
//!   the service and the response body it returns; [`replay`]: the request
//!   bodies it can send again ([`ReplayBody`]), and the body that forwards
//!   one as it arrives while keeping a bounded copy.
//! - [`recovery`]: the [`RecoveryPolicy`](recovery::RecoveryPolicy) that
//!   decides what to try after an empty refusal, its default
//!   [`Ladder`](recovery::Ladder), the rescue note, the runtime switch and
//!   fallback chains; [`recovery::category`]: the ladder's steps per refusal
//!   category;
//!   [`store`]: per-conversation state behind an async
//!   trait; [`timeout`]: the bounded waits on the upstream and their error.
//! - [`refusal`]: the typed metadata; [`telemetry`]: sinks, records and the
//!   report; [`api_error`]: errors the guard answers itself, in each API's
//!   own shape; [`header`]: the names of the headers the crate reads and
//!   writes.
//! - [`sse`]: the incremental SSE framer; [`stream_text`]: the answer's
//!   text out of a guarded stream, per wire API; `text` (feature `text`): the
//!   opt-in prose refusal detector; [`env`](mod@env): configuration from
//!   environment variables.
//! - `reqwest` (feature `reqwest`, off by default, as is `redis` for
//!   [`store`]'s Redis store): the reqwest adapter; `client` (features
//!   `async-openai`, `rig`, `reqwest-middleware`): the guard inside those
//!   client crates; [`outcome`]: the [`CallHandle`] a caller attaches to a
//!   request to learn what became of the call when a client crate keeps the
//!   response to itself.
//! - [`tenant`]: each client its own settings behind one guard (the
//!   [`TenantResolver`](tenant::TenantResolver) names a request's tenant);
//!   [`routing`]: in which order a refusal's fallback candidates are tried
//!   (the operator's, or learned from the records).
//! - [`telemetry::metrics`]: what the guard counts, through the `metrics` facade.
//!
//! Two companion crates, in the same workspace: `refusal-guard-proxy` (the
//! standalone proxy and the `refusal-guard` binary: routes, tenants file,
//! admin listener, report, dashboard, OpenTelemetry export) and
//! `refusal-guard-testkit` (simulated providers that refuse on cue, and the
//! providers' request rules as an executable contract, for tests and demos).
//!
//! Inside, one request flows through the private `guard` module; its
//! pipeline is described in one place, the module docs of
//! `src/guard/mod.rs` (its steps in order, the file each lives in, one
//! streamed request traced through them). Below the guard sit the public
//! extension points ([`recovery`], [`store`], [`telemetry`], `text`),
//! [`replay`] and the wire (the private `dialect` module, [`sse`]);
//! `.ci/module-graph.py` keeps every folder's modules free of cycles (and
//! prints their order, bottom to top) and the public modules on public
//! types.
//!
//! # Vocabulary
//!
//! One word per concept, in the API and the docs alike:
//!
//! - **refusal**: a provider's safety decline. **Empty** when nothing real
//!   (text, a tool call) came before it (thinking does not count),
//!   **partial** otherwise. Only empty refusals are recovered.
//! - **hold**: keeping a response back until it can be decided; then it is
//!   **served**: let through byte for byte, what was held first.
//! - **judge**: reading a response, event by event or as a whole JSON body,
//!   for real output and refusals; what one event showed is a **finding**,
//!   what the response showed so far its **findings**.
//! - **verdict**: what holding a response showed (output, a refusal, an
//!   end, an error, a bound); **decision**: what the call's response then
//!   becomes (as sent, recovered, dead).
//! - **recovery**: what follows an empty refusal, step by step as the
//!   **policy** says: a **fallback** (the request sent to another model, on
//!   the client's API or another provider's; never "hop", a word kept for
//!   HTTP's hop-by-hop headers) or a **rescue** (the request sent again with
//!   a reframing note). Each request sent upstream for a call, the original
//!   included, is an **attempt**; a tenant's cap counts its recovery
//!   attempts per hour.
//! - **outcome**: what became of a refusal (fallback, rescued, partial,
//!   dead); a dead one has a **dead reason**.
//! - **conversation**: the turns one refusal rule spans, named by a
//!   [`ConversationKey`](store::ConversationKey) and kept in a **store**.
//! - **record**: the telemetry value for one refusal, sent to a **sink**;
//!   **settle**: make a call's record once, when what it waits for (a
//!   stream's end, the client) is known.
//! - **inner service**: the client the layer wraps; **upstream**: the
//!   provider it reaches.
//! - **timeout**: a bounded wait on the upstream (head, idle) or on the
//!   whole call (the recovery **deadline**).
#![deny(missing_docs)]
#![deny(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

pub mod api_error;
#[cfg(any(
    feature = "async-openai",
    feature = "rig",
    feature = "reqwest-middleware"
))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(
        feature = "async-openai",
        feature = "rig",
        feature = "reqwest-middleware"
    )))
)]
pub mod client;
mod dialect;
pub mod env;
mod guard;
pub mod header;
pub mod outcome;
pub mod recovery;
pub mod refusal;
pub mod replay;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod reqwest;
pub mod routing;
pub mod sse;
pub mod store;
pub mod stream_text;
pub mod telemetry;
pub mod tenant;
#[cfg(feature = "text")]
#[cfg_attr(docsrs, doc(cfg(feature = "text")))]
pub mod text;

#[cfg(feature = "bedrock")]
#[cfg_attr(docsrs, doc(cfg(feature = "bedrock")))]
pub use dialect::bedrock::aws;
pub use guard::{body, layer, service, timeout};

/// The boxed error of the guard's bodies: an inner body's error, or the
/// guard's own ([`timeout::UpstreamTimeout`], a cut stream).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub use body::GuardBody;
pub use layer::RefusalGuardLayer;
pub use outcome::{CallHandle, CallOutcome};
pub use refusal::{Outcome, Refusal, RefusalHandle};
pub use replay::ReplayBody;
pub use service::RefusalGuard;

/// The pages of the README, `CHANGELOG.md` and `docs/` about the library,
/// so that their Rust examples compile (and, unless `no_run`, run) as doc
/// tests: `cargo test --workspace --all-features --doc` (the proxy's pages
/// are the proxy crate's doc tests). Each page is included under the features its
/// examples use. rustdoc reads a code block without a language as Rust, so
/// every other block names its own (`sh`, `text`, `json`, `python`).
#[cfg(doctest)]
mod pages {
    #[cfg(all(
        feature = "reqwest",
        feature = "async-openai",
        feature = "rig",
        feature = "reqwest-middleware"
    ))]
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../CHANGELOG.md")]
    struct Changelog;
    #[cfg(feature = "bedrock")]
    #[doc = include_str!("../docs/bedrock.md")]
    struct Bedrock;
    #[doc = include_str!("../docs/design.md")]
    struct Design;
    #[cfg(feature = "text")]
    #[doc = include_str!("../docs/layer.md")]
    struct Layer;
    #[doc = include_str!("../docs/providers.md")]
    struct Providers;
    #[doc = include_str!("../docs/speed.md")]
    struct Speed;
    #[doc = include_str!("../docs/testing.md")]
    struct Testing;
    #[cfg(feature = "text")]
    #[doc = include_str!("../docs/text-detection.md")]
    struct TextDetection;
}
