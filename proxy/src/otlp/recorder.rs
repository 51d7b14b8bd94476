//! The metric side of the export: a [`metrics`] recorder whose series are
//! OpenTelemetry instruments of the same names, exported by the meter
//! provider's periodic reader.
//!
//! Hand-written over `metrics-util`'s registry: the one published bridge
//! (`metrics-exporter-opentelemetry`) makes a new gauge, starting from
//! zero, each time a gauge is looked up, so a gauge raised in one place
//! and lowered in another (the streams in flight) would read `1` and
//! `-1`; and it forgets a series' description after the first lookup,
//! which the SDK reports as a conflicting instrument. The registry keeps
//! one handle per series, as the Prometheus recorder does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use metrics_util::registry::{Registry, Storage};
use opentelemetry::metrics::Meter;
use opentelemetry::KeyValue;

use refusal_guard::telemetry::metrics::{BYTES_BUCKETS, SECONDS_BUCKETS};

/// A [`metrics`] recorder that records into OpenTelemetry instruments (see
/// [`Otlp::recorder`](super::Otlp::recorder)): counters as counters,
/// gauges as gauges, histograms as histograms with the Prometheus side's
/// buckets (`_seconds` and `_bytes` series); labels become attributes.
#[derive(Clone)]
pub struct OtlpRecorder {
    registry: Arc<Registry<Key, Instruments>>,
}

impl std::fmt::Debug for OtlpRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpRecorder").finish_non_exhaustive()
    }
}

impl OtlpRecorder {
    pub(crate) fn new(meter: Meter) -> Self {
        let instruments = Instruments {
            meter,
            described: Mutex::default(),
        };
        OtlpRecorder {
            registry: Arc::new(Registry::new(instruments)),
        }
    }

    fn describe(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        let mut described = self.registry.storage().lock();
        described.insert(key.as_str().to_owned(), (unit, description));
    }
}

impl Recorder for OtlpRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn register_counter(&self, key: &Key, _metadata: &Metadata<'_>) -> Counter {
        self.registry
            .get_or_create_counter(key, |counter| Counter::from_arc(counter.clone()))
    }

    fn register_gauge(&self, key: &Key, _metadata: &Metadata<'_>) -> Gauge {
        self.registry
            .get_or_create_gauge(key, |gauge| Gauge::from_arc(gauge.clone()))
    }

    fn register_histogram(&self, key: &Key, _metadata: &Metadata<'_>) -> Histogram {
        self.registry
            .get_or_create_histogram(key, |histogram| Histogram::from_arc(histogram.clone()))
    }
}

/// The meter the series' instruments come from, and what each name was
/// described as (the same description every time an instrument of that
/// name is built, as the SDK requires).
struct Instruments {
    meter: Meter,
    described: Mutex<HashMap<String, (Option<Unit>, SharedString)>>,
}

impl Instruments {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Option<Unit>, SharedString)>> {
        self.described
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The unit (as OpenTelemetry spells it) and description of `name`.
    fn description(&self, name: &str) -> (Option<&'static str>, Option<String>) {
        match self.lock().get(name) {
            Some((unit, description)) => (unit.and_then(ucum), Some(description.to_string())),
            None => (None, None),
        }
    }
}

/// A unit as the OpenTelemetry conventions write it (UCUM).
fn ucum(unit: Unit) -> Option<&'static str> {
    match unit {
        Unit::Seconds => Some("s"),
        Unit::Milliseconds => Some("ms"),
        Unit::Bytes => Some("By"),
        Unit::Count => Some("1"),
        _ => None,
    }
}

/// A series' labels as attributes.
fn attributes(key: &Key) -> Vec<KeyValue> {
    key.labels()
        .map(|label| KeyValue::new(label.key().to_owned(), label.value().to_owned()))
        .collect()
}

impl Storage<Key> for Instruments {
    type Counter = Arc<OtelCounter>;
    type Gauge = Arc<OtelGauge>;
    type Histogram = Arc<OtelHistogram>;

    fn counter(&self, key: &Key) -> Self::Counter {
        let (unit, description) = self.description(key.name());
        let mut builder = self.meter.u64_counter(key.name().to_owned());
        if let Some(unit) = unit {
            builder = builder.with_unit(unit);
        }
        if let Some(description) = description {
            builder = builder.with_description(description);
        }
        Arc::new(OtelCounter {
            counter: builder.build(),
            attributes: attributes(key),
            total: AtomicU64::new(0),
        })
    }

    fn gauge(&self, key: &Key) -> Self::Gauge {
        let (unit, description) = self.description(key.name());
        let mut builder = self.meter.f64_gauge(key.name().to_owned());
        if let Some(unit) = unit {
            builder = builder.with_unit(unit);
        }
        if let Some(description) = description {
            builder = builder.with_description(description);
        }
        Arc::new(OtelGauge {
            gauge: builder.build(),
            attributes: attributes(key),
            value: AtomicU64::new(0f64.to_bits()),
        })
    }

    fn histogram(&self, key: &Key) -> Self::Histogram {
        let (unit, description) = self.description(key.name());
        let mut builder = self.meter.f64_histogram(key.name().to_owned());
        if let Some(unit) = unit {
            builder = builder.with_unit(unit);
        }
        if let Some(description) = description {
            builder = builder.with_description(description);
        }
        if key.name().ends_with("_seconds") {
            builder = builder.with_boundaries(SECONDS_BUCKETS.to_vec());
        } else if key.name().ends_with("_bytes") {
            builder = builder.with_boundaries(BYTES_BUCKETS.to_vec());
        }
        Arc::new(OtelHistogram {
            histogram: builder.build(),
            attributes: attributes(key),
        })
    }
}

/// One counter series.
pub(crate) struct OtelCounter {
    counter: opentelemetry::metrics::Counter<u64>,
    attributes: Vec<KeyValue>,
    /// What it counted so far, for `absolute`.
    total: AtomicU64,
}

impl CounterFn for OtelCounter {
    fn increment(&self, value: u64) {
        self.total.fetch_add(value, Ordering::Relaxed);
        self.counter.add(value, &self.attributes);
    }

    fn absolute(&self, value: u64) {
        let before = self.total.fetch_max(value, Ordering::Relaxed);
        if value > before {
            self.counter.add(value - before, &self.attributes);
        }
    }
}

/// One gauge series; it keeps its value, since the facade raises and
/// lowers gauges by steps and OpenTelemetry's gauge takes values.
pub(crate) struct OtelGauge {
    gauge: opentelemetry::metrics::Gauge<f64>,
    attributes: Vec<KeyValue>,
    value: AtomicU64,
}

impl OtelGauge {
    fn step(&self, by: f64) {
        let mut now = self.value.load(Ordering::Relaxed);
        loop {
            let next = f64::from_bits(now) + by;
            match self.value.compare_exchange_weak(
                now,
                next.to_bits(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return self.gauge.record(next, &self.attributes),
                Err(seen) => now = seen,
            }
        }
    }
}

impl GaugeFn for OtelGauge {
    fn increment(&self, value: f64) {
        self.step(value);
    }

    fn decrement(&self, value: f64) {
        self.step(-value);
    }

    fn set(&self, value: f64) {
        self.value.store(value.to_bits(), Ordering::Relaxed);
        self.gauge.record(value, &self.attributes);
    }
}

/// One histogram series.
pub(crate) struct OtelHistogram {
    histogram: opentelemetry::metrics::Histogram<f64>,
    attributes: Vec<KeyValue>,
}

impl HistogramFn for OtelHistogram {
    fn record(&self, value: f64) {
        self.histogram.record(value, &self.attributes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

    #[test]
    fn a_gauge_raised_and_lowered_in_different_places_keeps_one_value() {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        let recorder = OtlpRecorder::new(provider.meter("test"));
        metrics::with_local_recorder(&recorder, || {
            metrics::describe_gauge!("in_flight", Unit::Count, "streams");
            metrics::gauge!("in_flight", "wire_api" => "x").increment(1.0);
            metrics::gauge!("in_flight", "wire_api" => "x").increment(1.0);
            metrics::gauge!("in_flight", "wire_api" => "x").decrement(1.0);
            metrics::counter!("requests_total", "outcome" => "ok").increment(2);
            metrics::counter!("requests_total", "outcome" => "ok").increment(3);
        });
        provider.force_flush().unwrap();
        let exported = exporter.get_finished_metrics().unwrap();
        let metrics: Vec<_> = exported
            .iter()
            .flat_map(|resource| resource.scope_metrics())
            .flat_map(|scope| scope.metrics())
            .collect();
        let gauge = metrics.iter().find(|m| m.name() == "in_flight").unwrap();
        assert_eq!(gauge.description(), "streams");
        let AggregatedMetrics::F64(MetricData::Gauge(gauge)) = gauge.data() else {
            panic!("not a gauge")
        };
        let values: Vec<f64> = gauge.data_points().map(|p| p.value()).collect();
        assert_eq!(values, [1.0]);
        let counter = metrics
            .iter()
            .find(|m| m.name() == "requests_total")
            .unwrap();
        let AggregatedMetrics::U64(MetricData::Sum(sum)) = counter.data() else {
            panic!("not a sum")
        };
        let values: Vec<u64> = sum.data_points().map(|p| p.value()).collect();
        assert_eq!(values, [5]);
    }
}
