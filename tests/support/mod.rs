//! The one test support module: every integration test includes it with
//! `mod support;`.
//!
//! - [`inner`]: a scripted mock inner service (`tower::service_fn`) and the
//!   request builders for driving a guard over it;
//! - [`mock_upstream`]: a scripted mock provider on a real loopback HTTP
//!   server (also used by `examples/e2e_harness.rs` and `examples/load.rs`
//!   through `#[path]`, so it stands alone);
//! - [`fixtures`]: loading recorded fixtures and turning their formats into
//!   response bodies;
//! - [`chunking`]: cutting a body into chunks, exhaustively or at random;
//! - [`judge`]: one harness that serves a body under every chunking and
//!   checks the verdict;
//! - [`anthropic`]: Anthropic stream event builders;
//! - [`chains`]: the fallback chains of the recovery tests.
#![allow(dead_code, unused_imports)]

pub mod anthropic;
pub mod chains;
pub mod chunking;
pub mod fixtures;
pub mod inner;
pub mod judge;
pub mod mock_upstream;

pub use anthropic::{anthropic_stream, events};
pub use chains::chains;
pub use chunking::{split_at, Rng};
pub use fixtures::fixture;
pub use inner::*;
