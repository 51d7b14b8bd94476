//! The one test support module: every integration test includes it with
//! `mod support;`.
//!
//! - [`inner`]: a scripted mock inner service (`tower::service_fn`);
//! - [`requests`]: the Anthropic Messages requests the tests send;
//! - [`exchange`]: one request through a guard over the mock inner service,
//!   and what came of it;
//! - [`mock_upstream`]: a scripted mock provider on a real loopback HTTP
//!   server (also used by `examples/e2e_harness.rs` and `examples/load.rs`
//!   through `#[path]`, so it stands alone);
//! - [`raw_upstream`]: a raw-socket scripted upstream that misbehaves on
//!   purpose (hangs, resets, cut streams), for the fault tests (also used by
//!   `examples/soak.rs` through `#[path]`);
//! - [`fixtures`]: loading recorded fixtures and turning their formats into
//!   response bodies;
//! - [`chunking`]: cutting a body into chunks, exhaustively or at random;
//! - [`judge`]: one harness that serves a body under every chunking and
//!   checks the verdict;
//! - [`anthropic`]: Anthropic stream event builders;
//! - [`chains`]: the fallback chains of the recovery tests;
//! - [`redis_server`]: a real `redis-server` on a free loopback port, that
//!   can be stopped and restarted (also used by `benches/store.rs` through
//!   `#[path]`);
//! - [`log_capture`]: a tracing subscriber that keeps what a test logged,
//!   and a shared buffer for a formatting subscriber's output;
//! - [`proxy`]: the proxy on loopback and a client posting through it;
//! - [`prometheus`]: reading samples out of the Prometheus text format;
//! - [`socket`]: reading a raw exchange off a socket until the peer closes;
//! - `bedrock` (feature `bedrock`): a scripted Bedrock runtime on loopback
//!   that verifies every SigV4 signature and frames real event streams.
#![allow(dead_code)]

pub mod anthropic;
#[cfg(feature = "bedrock")]
pub mod bedrock;
pub mod chains;
pub mod chunking;
pub mod exchange;
pub mod fixtures;
pub mod inner;
pub mod judge;
pub mod log_capture;
pub mod mock_upstream;
pub mod prometheus;
pub mod proxy;
pub mod raw_upstream;
pub mod redis_server;
pub mod requests;
pub mod socket;

// What most tests use, at hand through `use support::*;` (not every test
// uses all of it).
#[allow(unused_imports)]
pub use anthropic::{anthropic_stream, events};
#[allow(unused_imports)]
pub use chains::chains;
#[allow(unused_imports)]
pub use chunking::{split_at, Rng};
#[allow(unused_imports)]
pub use exchange::*;
#[allow(unused_imports)]
pub use fixtures::fixture;
#[allow(unused_imports)]
pub use inner::*;
#[allow(unused_imports)]
pub use requests::*;
