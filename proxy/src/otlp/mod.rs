//! OpenTelemetry export (feature `otlp`): the guard's spans and metrics
//! sent to an OTLP collector, over OTLP/HTTP (protobuf) or gRPC, configured
//! by the standard `OTEL_*` environment variables.
//!
//! - Traces: each guarded request's span (`guarded_request`) with one child
//!   span per attempt the guard sent upstream (`chat MODEL`, kind client),
//!   with the GenAI conventions' attributes and the guard's own
//!   (`refusal_guard.*`); the names are listed in docs/deploy.md
//!   (OpenTelemetry export).
//!   Spans go through a bounded queue drained in batches on the runtime: a
//!   slow or dead collector never blocks a request, and what cannot be
//!   queued or delivered is dropped and counted
//!   ([`OTLP_DROPPED_SPANS`](refusal_guard::telemetry::metrics::OTLP_DROPPED_SPANS)).
//! - Metrics: [`OtlpRecorder`] is a [`metrics`] recorder that records every
//!   series of [`telemetry::metrics`](refusal_guard::telemetry::metrics) into
//!   OpenTelemetry instruments of the same names, exported periodically.
//!
//! The variables read: `OTEL_EXPORTER_OTLP_ENDPOINT`, `_PROTOCOL` (`grpc` or
//! `http/protobuf`, the default), `_HEADERS`, `_TIMEOUT`, `_INSECURE` and
//! their `_TRACES_` and `_METRICS_` forms (by the `opentelemetry-otlp`
//! exporters); `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` (the
//! service is `refusal-guard` unless they name one); `OTEL_TRACES_SAMPLER`;
//! `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`,
//! `OTEL_BSP_SCHEDULE_DELAY` and `OTEL_BSP_EXPORT_TIMEOUT` (the span queue);
//! `OTEL_METRIC_EXPORT_INTERVAL` and `OTEL_METRIC_EXPORT_TIMEOUT`.
//!
//! The proxy turns it on with `--otlp`; an application using the layer
//! installs it itself:
//!
//! ```no_run
//! use refusal_guard_proxy::otlp::Otlp;
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let otlp = Otlp::from_env()?;
//! tracing_subscriber::registry().with(otlp.layer()).init();
//! metrics::set_global_recorder(otlp.recorder())?;
//! // ... serve ...
//! otlp.shutdown(std::time::Duration::from_secs(5)).await;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanExporter as _};
use opentelemetry_sdk::Resource;
use tracing::{Level, Metadata};

mod recorder;
mod spans;

pub use recorder::OtlpRecorder;

use spans::{QueueSettings, SpanQueue};

/// The service name when neither `OTEL_SERVICE_NAME` nor
/// `OTEL_RESOURCE_ATTRIBUTES` names one.
const SERVICE_NAME: &str = "refusal-guard";
/// How often the held-bytes gauges are set from the guard's counts while
/// the export runs (the export reads them at its own interval).
const PUBLISH_EVERY: Duration = Duration::from_secs(5);

/// The OTLP export: the tracer and meter providers, the bounded span queue
/// and the tracing layer and metrics recorder over them.
///
/// Build it inside a Tokio runtime: the span queue and the metric reader
/// run as tasks on it.
pub struct Otlp {
    tracer_provider: SdkTracerProvider,
    tracer: SdkTracer,
    meter_provider: SdkMeterProvider,
    queue: spans::Flush,
    publisher: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for Otlp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Otlp").finish_non_exhaustive()
    }
}

/// Why the OTLP export could not be set up (a bad `OTEL_*` value, a
/// protocol or compression this build does not have).
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
/// let error = refusal_guard_proxy::otlp::Otlp::from_env().unwrap_err();
/// assert!(error.to_string().contains("http/json"), "{error}");
/// # std::env::remove_var("OTEL_EXPORTER_OTLP_PROTOCOL");
/// # });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpError(String);

impl fmt::Display for OtlpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OtlpError {}

impl Otlp {
    /// Sets the export up from the environment (see the module's
    /// documentation for the variables). Must be called within a Tokio
    /// runtime.
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() {
    /// let otlp = refusal_guard_proxy::otlp::Otlp::from_env().expect("OTLP settings");
    /// # let _ = otlp;
    /// # }
    /// ```
    pub fn from_env() -> Result<Otlp, OtlpError> {
        Otlp::from_lookup(|key| std::env::var(key).ok())
    }

    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Otlp, OtlpError> {
        check_protocols(&var)?;
        let resource = resource(&var);
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .build()
            .map_err(|e| OtlpError(format!("OTLP trace exporter: {e}")))?;
        exporter.set_resource(&resource);
        let (queue, flush) = SpanQueue::start(exporter, QueueSettings::from_env(&var));
        let scope = InstrumentationScope::builder("refusal-guard")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer_provider = SdkTracerProvider::builder()
            .with_span_processor(queue)
            .with_resource(resource.clone())
            .build();
        let tracer = tracer_provider.tracer_with_scope(scope);
        let metric_exporter = opentelemetry_otlp::MetricExporter::builder()
            .build()
            .map_err(|e| OtlpError(format!("OTLP metric exporter: {e}")))?;
        let reader =
            opentelemetry_sdk::metrics::periodic_reader_with_async_runtime::PeriodicReader::builder(
                metric_exporter,
                opentelemetry_sdk::runtime::Tokio,
            )
            .build();
        let meter_provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource)
            .build();
        let publisher = tokio::spawn(async {
            let mut every = tokio::time::interval(PUBLISH_EVERY);
            loop {
                every.tick().await;
                refusal_guard::telemetry::metrics::publish_held_bytes();
            }
        });
        Ok(Otlp {
            tracer_provider,
            tracer,
            meter_provider,
            queue: flush,
            publisher,
        })
    }

    /// The tracing layer that turns the guard's spans into OpenTelemetry
    /// spans for the export: spans of `refusal_guard` targets at `DEBUG` and
    /// above (the attempt spans are `DEBUG`), and their events at `INFO` and
    /// above (the settled event, whose fields the request's span carries,
    /// left out). It filters for itself: give the other layers filters of
    /// their own (`Layer::with_filter`), not a global one, or the attempt
    /// spans never reach it.
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() {
    /// use tracing_subscriber::layer::SubscriberExt;
    ///
    /// let otlp = refusal_guard_proxy::otlp::Otlp::from_env().unwrap();
    /// let subscriber = tracing_subscriber::registry().with(otlp.layer());
    /// # let _ = subscriber;
    /// # }
    /// ```
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + Send + Sync
    where
        S: tracing::Subscriber
            + for<'span> tracing_subscriber::registry::LookupSpan<'span>
            + Send
            + Sync,
    {
        use tracing_subscriber::Layer as _;
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_target(false)
            .with_level(false)
            .with_filter(tracing_subscriber::filter::filter_fn(exported))
    }

    /// The metrics recorder of the export: install it (alone, or beside
    /// another through `metrics_util::layers::FanoutBuilder`) before the
    /// guard records anything, then call
    /// [`describe`](refusal_guard::telemetry::metrics::describe).
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() {
    /// let otlp = refusal_guard_proxy::otlp::Otlp::from_env().unwrap();
    /// metrics::set_global_recorder(otlp.recorder()).unwrap();
    /// refusal_guard::telemetry::metrics::describe();
    /// # }
    /// ```
    pub fn recorder(&self) -> OtlpRecorder {
        use opentelemetry::metrics::MeterProvider as _;
        let scope = InstrumentationScope::builder("refusal-guard")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        OtlpRecorder::new(self.meter_provider.meter_with_scope(scope))
    }

    /// Sends what is still queued and the metrics' last values, waiting at
    /// most `timeout` (a dead collector does not hold the process up).
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() {
    /// let otlp = refusal_guard_proxy::otlp::Otlp::from_env().unwrap();
    /// otlp.shutdown(std::time::Duration::from_secs(2)).await;
    /// # }
    /// ```
    pub async fn shutdown(self, timeout: Duration) {
        self.publisher.abort();
        refusal_guard::telemetry::metrics::publish_held_bytes();
        let Otlp {
            tracer_provider,
            meter_provider,
            queue,
            ..
        } = self;
        let spans = queue.shutdown();
        let meters = tokio::task::spawn_blocking(move || {
            let _ = meter_provider.shutdown_with_timeout(timeout);
        });
        let _ = tokio::time::timeout(timeout, async {
            spans.await;
            let _ = meters.await;
        })
        .await;
        // The queue has sent what it had: the provider has nothing to wait for.
        let _ = tracer_provider.shutdown_with_timeout(Duration::ZERO);
    }
}

/// What the export's layer takes: the guard's spans down to `DEBUG`, its
/// events down to `INFO`, less the per-request settled event.
fn exported(metadata: &Metadata<'_>) -> bool {
    takes(metadata.target(), *metadata.level(), metadata.is_span())
}

fn takes(target: &str, level: Level, is_span: bool) -> bool {
    let ours = target == "refusal_guard"
        || target.starts_with("refusal_guard::")
        || target.starts_with("refusal_guard_proxy");
    let floor = if is_span { Level::DEBUG } else { Level::INFO };
    ours && target != refusal_guard::telemetry::metrics::SETTLED_TARGET && level <= floor
}

/// The resource of both providers: the environment's (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`), `refusal-guard` as the service unless it
/// names one, and this crate's version.
fn resource(var: &impl Fn(&str) -> Option<String>) -> Resource {
    let named = var("OTEL_SERVICE_NAME").is_some_and(|name| !name.trim().is_empty())
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes
                .split(',')
                .any(|pair| pair.trim_start().starts_with("service.name="))
        });
    let builder = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    let builder = match named {
        true => builder,
        false => builder.with_service_name(SERVICE_NAME),
    };
    builder.build()
}

/// The protocols this build sends: `grpc` and `http/protobuf`. The
/// exporters would take another value for their default without a word.
fn check_protocols(var: &impl Fn(&str) -> Option<String>) -> Result<(), OtlpError> {
    for name in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    ] {
        match var(name).as_deref().map(str::trim) {
            None | Some("" | "grpc" | "http/protobuf") => {}
            Some(other) => {
                return Err(OtlpError(format!(
                    "{name}={other}: this build exports over grpc or http/protobuf"
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |key| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        }
    }

    fn service(resource: &Resource) -> Option<String> {
        resource
            .get(&opentelemetry::Key::new("service.name"))
            .map(|value| value.to_string())
    }

    #[test]
    fn the_service_is_refusal_guard_unless_the_environment_names_one() {
        // The SDK's detectors read the process environment itself; these
        // tests only set what the lookup sees.
        let plain = resource(&vars(&[]));
        if std::env::var("OTEL_SERVICE_NAME").is_err() {
            assert_eq!(service(&plain).as_deref(), Some(SERVICE_NAME));
        }
        let version = plain.get(&opentelemetry::Key::new("service.version"));
        assert_eq!(
            version.map(|v| v.to_string()).as_deref(),
            Some(env!("CARGO_PKG_VERSION"))
        );
        let named = resource(&vars(&[("OTEL_RESOURCE_ATTRIBUTES", "service.name=edge")]));
        assert_ne!(service(&named).as_deref(), Some(SERVICE_NAME));
    }

    #[test]
    fn only_the_protocols_this_build_has_are_accepted() {
        assert!(check_protocols(&vars(&[])).is_ok());
        assert!(check_protocols(&vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])).is_ok());
        let json = [("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")];
        let error = check_protocols(&vars(&json)).unwrap_err();
        assert!(
            error.to_string().contains("TRACES_PROTOCOL=http/json"),
            "{error}"
        );
    }

    #[test]
    fn the_layer_takes_the_guards_spans_and_events() {
        let cases = [
            (
                Level::DEBUG,
                true,
                "refusal_guard::telemetry::metrics",
                true,
            ),
            (Level::INFO, true, "refusal_guard", true),
            (Level::TRACE, true, "refusal_guard::guard", false),
            (Level::INFO, false, "refusal_guard::guard::call", true),
            (Level::DEBUG, false, "refusal_guard::guard::call", false),
            (
                Level::INFO,
                false,
                refusal_guard::telemetry::metrics::SETTLED_TARGET,
                false,
            ),
            (Level::WARN, false, "hyper::proto", false),
            (Level::INFO, true, "refusal_guard_other", false),
        ];
        for (level, is_span, target, expected) in cases {
            assert_eq!(
                takes(target, level, is_span),
                expected,
                "{level} span={is_span} {target}"
            );
        }
    }
}
