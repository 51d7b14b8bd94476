//! A sink that counts refusals through the `metrics` facade.

use metrics::{counter, histogram, Label, SharedString};

use super::{RefusalRecord, TelemetrySink};
use crate::refusal::{AttemptStep, Outcome, RefusalKind, RefusalSignal};
use crate::telemetry::metrics::{
    category_label, model_label, tenant_label, FALLBACK_CREDIT, RECOVERY_ATTEMPTS,
    RECOVERY_LATENCY, REFUSALS, REFUSED_TOKENS, REROUTES,
};
use crate::tenant::Tenant;

/// Counts each record through the [`metrics`](::metrics) facade:
/// `refusal_guard_refusals_total`, `refusal_guard_recovery_attempts_total`,
/// `refusal_guard_refused_tokens_total`, `refusal_guard_fallback_credit_total`,
/// `refusal_guard_reroutes_total` and `refusal_guard_recovery_latency_seconds`.
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
        record_refusal(record);
    }
}

/// The `kind` label: `empty`, `partial`, or `text` for a prose refusal.
fn kind_label(record: &RefusalRecord) -> &'static str {
    match (record.signal, record.kind) {
        (RefusalSignal::Text, _) => "text",
        (_, RefusalKind::Empty) => "empty",
        (_, RefusalKind::Partial) => "partial",
    }
}

/// Counts one refusal record: the refusal, its recovery attempts, the
/// tokens its refused attempts cost, and its latency. [`MetricsSink`] calls
/// this.
///
/// A provider's server-side fallback (the outcome `fallback` without a
/// fallback attempt of the guard's own) counts as one `retarget` attempt
/// with result `served`.
///
/// ```
/// let record = serde_json::from_str(
///     r#"{"ts":"2026-01-01T00:00:00.000Z","category":"cyber","outcome":"dead"}"#,
/// ).unwrap();
/// refusal_guard::telemetry::record_refusal(&record); // a no-op without a recorder
/// ```
pub fn record_refusal(record: &RefusalRecord) {
    let tenant = tenant_label(record.tenant.as_deref().unwrap_or(Tenant::DEFAULT_NAME));
    let labels = vec![
        Label::new("provider", record.provider.as_str()),
        Label::new("wire_api", record.wire_api.as_str()),
        Label::new("category", category_label(record.category.as_deref())),
        Label::new("kind", kind_label(record)),
        Label::new("outcome", record.outcome.as_str()),
        Label::new("model", model_label(record.model.as_deref())),
        Label::new("tenant", tenant.clone()),
    ];
    let scope = labels[..2].to_vec();
    counter!(REFUSALS, labels).increment(1);
    for (step, result) in recovery_attempts(record) {
        counter!(RECOVERY_ATTEMPTS, "step" => step, "result" => result, "tenant" => tenant.clone())
            .increment(1);
    }
    count_refused_tokens(record, &tenant);
    count_reroutes(record, &scope, &tenant);
    for attempt in &record.attempts {
        if let Some(credit) = &attempt.fallback_credit {
            // The reason is the provider's closed vocabulary; anything
            // else is folded as a category would be.
            let reason = category_label(credit.reason().or(Some("none")));
            counter!(FALLBACK_CREDIT, "status" => credit.as_str(), "reason" => reason, "tenant" => tenant.clone())
                .increment(1);
        }
    }
    histogram!(RECOVERY_LATENCY, "outcome" => record.outcome.as_str(), "tenant" => tenant)
        .record(record.latency_ms as f64 / 1000.0);
}

/// Adds each attempt's refused usage to [`REFUSED_TOKENS`], under the
/// model that refused (the attempt's, else the record's): a refused
/// attempt's, or what the attempts a provider's server-side fallbacks declined cost
/// (see [`Attempt::usage`](crate::refusal::Attempt::usage)).
fn count_refused_tokens(record: &RefusalRecord, tenant: &SharedString) {
    for attempt in &record.attempts {
        let Some(usage) = attempt.usage else {
            continue;
        };
        let model = model_label(attempt.model.as_deref().or(record.model.as_deref()));
        let category = category_label(record.category.as_deref());
        for (kind, tokens) in usage.kinds() {
            if let Some(tokens) = tokens.filter(|&t| t > 0) {
                let labels = vec![
                    Label::new("model", model.clone()),
                    Label::new("category", category.clone()),
                    Label::new("kind", kind),
                    Label::new("tenant", tenant.clone()),
                ];
                counter!(REFUSED_TOKENS, labels).increment(tokens);
            }
        }
    }
}

/// Adds each rerouted attempt to [`REROUTES`], under the model it asked
/// for (the attempt's, else the record's) and the one that served it.
/// `scope`: the record's `provider` and `wire_api` labels.
fn count_reroutes(record: &RefusalRecord, scope: &[Label], tenant: &SharedString) {
    for attempt in &record.attempts {
        let Some(served) = attempt.rerouted_to.as_deref() else {
            continue;
        };
        let requested = attempt.model.as_deref().or(record.model.as_deref());
        let mut labels = scope.to_vec();
        labels.push(Label::new("requested", model_label(requested)));
        labels.push(Label::new("served", model_label(Some(served))));
        labels.push(Label::new("tenant", tenant.clone()));
        counter!(REROUTES, labels).increment(1);
    }
}

/// The `(step, result)` of each recovery attempt a record counts, as
/// [`record_refusal`] counts them.
///
/// ```
/// let record: refusal_guard::telemetry::RefusalRecord = serde_json::from_str(
///     r#"{"ts":"2026-01-01T00:00:00.000Z","outcome":"rescued","attempts":[
///         {"step":"original","model":"m","result":"refused","latency_ms":3},
///         {"step":"rescue","model":"m","result":"served","latency_ms":9}]}"#,
/// ).unwrap();
/// assert_eq!(refusal_guard::telemetry::recovery_attempts(&record), [("rescue", "served")]);
/// ```
pub fn recovery_attempts(record: &RefusalRecord) -> Vec<(&'static str, &'static str)> {
    let mut steps: Vec<_> = record
        .attempts
        .iter()
        .filter(|a| a.step != AttemptStep::Original)
        .map(|a| (a.step.as_str(), a.result.as_str()))
        .collect();
    if steps.is_empty() && record.outcome == Outcome::Fallback {
        steps.push(("retarget", "served"));
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_side_fallback_counts_as_retarget() {
        let record: RefusalRecord = serde_json::from_str(
            r#"{"ts":"2026-01-01T00:00:00.000Z","outcome":"fallback","attempts":[
                {"step":"original","model":"m","result":"served","latency_ms":3}]}"#,
        )
        .unwrap();
        assert_eq!(recovery_attempts(&record), [("retarget", "served")]);
        let dead: RefusalRecord =
            serde_json::from_str(r#"{"ts":"2026-01-01T00:00:00.000Z","outcome":"dead"}"#).unwrap();
        assert!(recovery_attempts(&dead).is_empty());
    }
}
