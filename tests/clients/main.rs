//! The client integrations (`refusal_guard::client`), each driven by the
//! real crate through its own API (versions locked in Cargo.lock), in
//! process, with no network: async-openai's `create` and `create_stream`
//! on Chat Completions and Responses; rig's completion and streaming
//! completion on its Anthropic, OpenAI and Gemini providers; a
//! `ClientWithMiddleware` call.
//!
//! Upstream: the testkit's simulator on loopback ([`simulated`]), by
//! default refusing the first attempt of every conversation and answering
//! the rest, scripted for partial refusals and policy errors. It holds every
//! request the guard composed to the providers' documented rules: a
//! violation fails the test that caused it.

mod async_openai;
mod reqwest_middleware;
mod rig;
mod simulated;

use refusal_guard::refusal::Outcome;
use refusal_guard::telemetry::{MemorySink, RefusalRecord};

/// The one record `sink` holds, checked: its category, outcome and number
/// of attempts.
fn one_record(
    sink: &MemorySink,
    category: &str,
    outcome: Outcome,
    attempts: usize,
) -> RefusalRecord {
    let records = sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = records.into_iter().next().unwrap();
    assert_eq!(record.category.as_deref(), Some(category), "{record:?}");
    assert_eq!(record.outcome, outcome, "{record:?}");
    assert_eq!(record.attempts.len(), attempts, "{record:?}");
    record
}
