//! The guard in process: the layer over a scripted inner service (or a
//! loopback mock provider), by wire API and by concern. Every recorded
//! fixture is judged whole, at every split point and under random chunkings;
//! the property tests check the invariants against their own model of the
//! rules.

mod anthropic;
mod anthropic_signals;
mod contract;
mod cross_provider;
mod error_refusals;
mod extension_points;
mod faults;
mod fixtures_anthropic;
mod fixtures_gemini;
mod fixtures_openai;
mod ladder;
mod long_holds;
mod partial_continuation;
mod properties;
mod recovery_gemini;
mod recovery_openai;
mod reroutes;
mod sse_framer;
mod telemetry;
mod text_detection;
