//! A sink that emits `tracing` events.

use tracing::Level;

use super::{kind_str, signal_str, RefusalRecord, TelemetrySink};
use crate::refusal::Outcome;

/// Emits one `tracing` event per record, with target
/// `refusal_guard::refusal` and the record's fields as structured fields
/// (`outcome`, `reason`, `model`, `category`, `explanation`, `provider`,
/// `wire_api`, `signal`, `kind`, `served_model`, `request_id`,
/// `conversation`, `attempts` (how many), `latency_ms`, `ts`). Unknown
/// fields are left out.
///
/// By default dead refusals are logged at `WARN` and every other outcome
/// (recovered or partial) at `INFO`.
///
/// ```
/// use refusal_guard::telemetry::TracingSink;
/// use tracing::Level;
///
/// let sink = TracingSink::new().level(Level::DEBUG).dead_level(Level::ERROR);
/// # let _ = sink;
/// ```
#[derive(Debug, Clone)]
pub struct TracingSink {
    level: Level,
    dead_level: Level,
}

impl TracingSink {
    /// A sink logging dead refusals at `WARN` and the rest at `INFO`.
    pub fn new() -> Self {
        TracingSink {
            level: Level::INFO,
            dead_level: Level::WARN,
        }
    }

    /// The level for refusals that were recovered or left alone (`fallback`,
    /// `rescued`, `partial`).
    pub fn level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }

    /// The level for refusals that stayed dead.
    pub fn dead_level(mut self, level: Level) -> Self {
        self.dead_level = level;
        self
    }
}

impl Default for TracingSink {
    fn default() -> Self {
        TracingSink::new()
    }
}

macro_rules! emit {
    ($level:expr, $record:expr) => {{
        let record = $record;
        tracing::event!(
            target: "refusal_guard::refusal",
            $level,
            outcome = record.outcome.as_str(),
            reason = record.reason.map(|r| r.as_str()),
            model = record.model.as_deref(),
            category = record.category.as_deref(),
            explanation = record.explanation.as_deref(),
            provider = record.provider.as_str(),
            wire_api = record.wire_api.as_str(),
            signal = signal_str(record.signal),
            kind = kind_str(record.kind),
            served_model = record.served_model.as_deref(),
            request_id = record.request_id.as_deref(),
            conversation = record.conversation.as_deref(),
            attempts = record.attempts.len(),
            latency_ms = record.latency_ms,
            ts = record.ts.as_str(),
            "provider refusal: {}",
            record.outcome
        )
    }};
}

impl TelemetrySink for TracingSink {
    fn record(&self, record: &RefusalRecord) {
        let level = if record.outcome == Outcome::Dead {
            self.dead_level
        } else {
            self.level
        };
        // `tracing` needs the level as a constant at each call site.
        if level == Level::ERROR {
            emit!(Level::ERROR, record)
        } else if level == Level::WARN {
            emit!(Level::WARN, record)
        } else if level == Level::INFO {
            emit!(Level::INFO, record)
        } else if level == Level::DEBUG {
            emit!(Level::DEBUG, record)
        } else {
            emit!(Level::TRACE, record)
        }
    }
}
