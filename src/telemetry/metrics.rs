//! A sink that counts refusals through the `metrics` facade.

use super::{RefusalRecord, TelemetrySink};

/// Counts each record through the [`metrics`](crate::metrics) facade:
/// `refusal_guard_refusals_total`, `refusal_guard_recovery_attempts_total`
/// and `refusal_guard_recovery_latency_seconds`.
///
/// Put it beside the log sink so that the counters and the log agree line
/// for line:
///
/// ```
/// use refusal_guard::telemetry::{MemorySink, MetricsSink};
/// use refusal_guard::RefusalGuardLayer;
///
/// let layer = RefusalGuardLayer::new().telemetry((MemorySink::new(), MetricsSink::new()));
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct MetricsSink;

impl MetricsSink {
    /// The sink.
    pub fn new() -> Self {
        MetricsSink
    }
}

impl TelemetrySink for MetricsSink {
    fn record(&self, record: &RefusalRecord) {
        crate::metrics::record_refusal(record);
    }
}
