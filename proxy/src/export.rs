//! The proxy's metrics recorders and its OTLP export (`--otlp`): the
//! Prometheus recorder for `--admin`, the export's recorder for `--otlp`,
//! both at once through a fanout. Built without the `otlp` feature,
//! `--otlp` is an error that says how to get it.

use metrics_exporter_prometheus::PrometheusHandle;

use super::Options;

/// How long the export may take to send what is left at shutdown.
#[cfg(feature = "otlp")]
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(feature = "otlp")]
pub(crate) use crate::otlp::Otlp as Export;

/// No export without the `otlp` feature.
#[cfg(not(feature = "otlp"))]
pub(crate) enum Export {}

/// The export `--otlp` asks for, set up from the `OTEL_*` variables;
/// `None` without `--otlp`. Call it within the runtime.
pub(crate) fn start(options: &Options) -> Result<Option<Export>, String> {
    if !options.otlp {
        return Ok(None);
    }
    #[cfg(feature = "otlp")]
    return Export::from_env()
        .map(Some)
        .map_err(|e| format!("--otlp: {e}"));
    #[cfg(not(feature = "otlp"))]
    Err(
        "--otlp: this refusal-guard was built without the `otlp` feature \
         (cargo install refusal-guard-proxy --features otlp)"
            .to_owned(),
    )
}

/// Installs the process's metrics recorder: Prometheus's for `--admin`
/// (its handle returned, for `/metrics`), the export's for `--otlp`, or
/// both through a fanout; none when neither is asked for. Then registers
/// the metrics' descriptions.
pub(crate) fn install_metrics(
    options: &Options,
    export: Option<&Export>,
) -> Result<Option<PrometheusHandle>, String> {
    let failed = |e: &dyn std::fmt::Display| format!("cannot install the metrics recorder: {e}");
    let prometheus = match options.admin {
        Some(_) => Some(super::admin::prometheus_recorder().map_err(|e| failed(&e))?),
        None => None,
    };
    let handle = prometheus.as_ref().map(|recorder| recorder.handle());
    let installed = match (prometheus, export) {
        (None, None) => return Ok(None),
        (Some(prometheus), None) => {
            metrics::set_global_recorder(prometheus).map_err(|e| failed(&e))
        }
        #[cfg(feature = "otlp")]
        (prometheus, Some(export)) => {
            let mut fanout = metrics_util::layers::FanoutBuilder::default();
            if let Some(prometheus) = prometheus {
                fanout = fanout.add_recorder(prometheus);
            }
            let fanout = fanout.add_recorder(export.recorder()).build();
            metrics::set_global_recorder(fanout).map_err(|e| failed(&e))
        }
        #[cfg(not(feature = "otlp"))]
        (_, Some(export)) => match *export {},
    };
    installed?;
    refusal_guard::telemetry::metrics::describe();
    Ok(handle)
}

/// Sends what the export still holds, within a few seconds.
pub(crate) async fn finish(export: Option<Export>) {
    #[cfg(feature = "otlp")]
    if let Some(export) = export {
        export.shutdown(FLUSH_TIMEOUT).await;
    }
    #[cfg(not(feature = "otlp"))]
    if let Some(export) = export {
        match export {}
    }
}
