//! The one test support crate (`support`): every integration test, bench
//! and test tool uses it as a dev-dependency.
//!
//! - [`contract`]: the providers' documented request rules, executable
//!   (the crate's `refusal_guard_testkit::contract`), and the
//!   [`Violations`](contract::Violations) recorder: every upstream here
//!   checks each request against them, answers a broken one with the
//!   provider's 400 (404 for a path no provider serves, 501 for an
//!   endpoint the contract does not check), records it, and fails the
//!   test when it goes if a violation is left the test did not take;
//! - [`inner`]: a scripted mock inner service (`tower::service_fn`);
//! - [`requests`]: the Anthropic Messages requests the tests send;
//! - [`exchange`]: one request through a guard over the mock inner service,
//!   and what came of it;
//! - [`mock_upstream`]: a scripted mock provider on a real loopback HTTP
//!   server (also behind the test tools: the e2e harness, load, soak);
//! - [`raw_upstream`]: a raw-socket scripted upstream that misbehaves on
//!   purpose (hangs, resets, cut streams), for the fault tests and the soak;
//! - [`fixtures`]: loading recorded fixtures and turning their formats into
//!   response bodies;
//! - [`chunking`]: cutting a body into chunks, exhaustively or at random;
//! - [`judge`]: one harness that serves a body under every chunking and
//!   checks the verdict;
//! - [`anthropic`]: Anthropic stream event builders;
//! - [`openai`]: OpenAI Chat Completions stream and error builders;
//! - [`chains`]: the fallback chains of the recovery tests;
//! - [`redis_server`]: a real `redis-server` on a free loopback port, that
//!   can be stopped and restarted (also behind `benches/store.rs`);
//! - [`load`]: traffic shaped as `shared/perf/loadgen` sends it (kept-alive
//!   connections, ~20 KB streamed requests back to back);
//! - [`log_capture`]: a tracing subscriber that keeps what a test logged,
//!   and a shared buffer for a formatting subscriber's output;
//! - [`proxy`]: the proxy on loopback and a client posting through it;
//! - [`prometheus`]: reading samples out of the Prometheus text format;
//! - [`socket`]: reading a raw exchange off a socket until the peer closes;
//! - [`otlp`]: a real OTLP receiver (HTTP and gRPC) that decodes what it
//!   gets with the published protobufs;
//! - [`binary`]: the `refusal-guard` binary run as a user runs it, a
//!   scratch directory for its files, what it says on stderr;
//! - [`bedrock`]: a scripted Bedrock runtime on loopback that verifies every
//!   SigV4 signature and frames real event streams;
//! - [`wire`]: a request of each of the four wire APIs, and what a client
//!   reads out of a response (text, how it stopped, an error's code).

pub mod anthropic;
pub mod bedrock;
pub mod binary;
pub mod chains;
pub mod chunking;
pub mod exchange;
pub mod fixtures;
pub mod inner;
pub mod judge;
pub mod load;
pub mod log_capture;
pub mod mock_upstream;
pub mod openai;
pub mod otlp;
pub mod prometheus;
pub mod proxy;
pub mod raw_upstream;
pub mod redis_server;
pub mod requests;
pub mod socket;
mod violations;
pub mod wire;

/// The crate's request contract, and the test upstreams' recorder of its
/// violations.
pub mod contract {
    pub use crate::violations::{header_map, Checked, Tripwire, Violations};
    pub use refusal_guard_testkit::contract::*;
}

// What most tests use, at hand through `use support::*;` (not every test
// uses all of it).
pub use anthropic::{anthropic_stream, events, stream_events};
pub use chains::chains;
pub use chunking::{split_at, Rng};
pub use exchange::*;
pub use fixtures::fixture;
pub use inner::*;
pub use requests::*;
