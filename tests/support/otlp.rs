//! A real OTLP receiver on loopback: one port that takes OTLP/HTTP
//! (protobuf `POST /v1/traces` and `/v1/metrics`, HTTP/1.1) and OTLP/gRPC
//! (the collector's `TraceService` and `MetricsService`, HTTP/2), decodes
//! every export with the published OTLP protobufs (`opentelemetry-proto`)
//! and keeps what it decoded, as a collector would receive it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
pub use opentelemetry_proto as proto;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, Metric};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tower::Service;

/// Which transport an export came over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// OTLP/HTTP with protobuf bodies.
    Http,
    /// OTLP/gRPC.
    Grpc,
}

/// What the receiver decoded, in arrival order.
#[derive(Debug, Default)]
pub struct Received {
    pub traces: Vec<(Transport, ExportTraceServiceRequest)>,
    pub metrics: Vec<(Transport, ExportMetricsServiceRequest)>,
}

/// The receiver: its address and what it has received.
#[derive(Clone)]
pub struct OtlpReceiver {
    pub addr: SocketAddr,
    received: Arc<Mutex<Received>>,
}

#[derive(Clone)]
struct Keep(Arc<Mutex<Received>>);

#[tonic::async_trait]
impl TraceService for Keep {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let export = request.into_inner();
        self.0
            .lock()
            .unwrap()
            .traces
            .push((Transport::Grpc, export));
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Keep {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let export = request.into_inner();
        self.0
            .lock()
            .unwrap()
            .metrics
            .push((Transport::Grpc, export));
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

type Reply = http::Response<http_body_util::combinators::UnsyncBoxBody<Bytes, tonic::Status>>;

impl OtlpReceiver {
    /// Starts the receiver on a free loopback port.
    pub async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Received::default()));
        let keep = Keep(received.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let keep = keep.clone();
                let service = hyper::service::service_fn(move |request| {
                    let keep = keep.clone();
                    async move { Ok::<_, Infallible>(answer(keep, request).await) }
                });
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        OtlpReceiver { addr, received }
    }

    /// `http://127.0.0.1:PORT`, the value of `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, with the transport it came over.
    pub fn spans(&self) -> Vec<(Transport, Span)> {
        let received = self.received.lock().unwrap();
        received
            .traces
            .iter()
            .flat_map(|(transport, export)| {
                export
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .flat_map(|s| &s.spans)
                    .map(move |span| (*transport, span.clone()))
            })
            .collect()
    }

    /// The resource attributes of the first trace export.
    pub fn resource(&self) -> Vec<KeyValue> {
        let received = self.received.lock().unwrap();
        received
            .traces
            .first()
            .and_then(|(_, export)| export.resource_spans.first())
            .and_then(|r| r.resource.clone())
            .map(|resource| resource.attributes)
            .unwrap_or_default()
    }

    /// Every metric received so far, with the transport it came over.
    pub fn metrics(&self) -> Vec<(Transport, Metric)> {
        let received = self.received.lock().unwrap();
        received
            .metrics
            .iter()
            .flat_map(|(transport, export)| {
                export
                    .resource_metrics
                    .iter()
                    .flat_map(|r| &r.scope_metrics)
                    .flat_map(|s| &s.metrics)
                    .map(move |metric| (*transport, metric.clone()))
            })
            .collect()
    }

    /// Waits (at most `limit`) until `done` holds for what was received.
    pub async fn wait_for(&self, limit: Duration, done: impl Fn(&OtlpReceiver) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if done(self) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        done(self)
    }
}

/// Routes one request: gRPC by its service path, OTLP/HTTP by `/v1/...`.
async fn answer(keep: Keep, request: http::Request<hyper::body::Incoming>) -> Reply {
    let path = request.uri().path().to_owned();
    if path.starts_with("/opentelemetry.proto.collector.trace.v1.TraceService/") {
        let response = TraceServiceServer::new(keep).call(request).await;
        return boxed(response.unwrap_or_else(|never| match never {}));
    }
    if path.starts_with("/opentelemetry.proto.collector.metrics.v1.MetricsService/") {
        let response = MetricsServiceServer::new(keep).call(request).await;
        return boxed(response.unwrap_or_else(|never| match never {}));
    }
    let is_protobuf = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| value == "application/x-protobuf");
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let (Ok(body), true) = (body, is_protobuf) else {
        return status(http::StatusCode::BAD_REQUEST, Bytes::new());
    };
    match path.as_str() {
        "/v1/traces" => match ExportTraceServiceRequest::decode(body) {
            Ok(export) => {
                keep.0
                    .lock()
                    .unwrap()
                    .traces
                    .push((Transport::Http, export));
                let reply = ExportTraceServiceResponse::default().encode_to_vec();
                status(http::StatusCode::OK, reply.into())
            }
            Err(_) => status(http::StatusCode::BAD_REQUEST, Bytes::new()),
        },
        "/v1/metrics" => match ExportMetricsServiceRequest::decode(body) {
            Ok(export) => {
                keep.0
                    .lock()
                    .unwrap()
                    .metrics
                    .push((Transport::Http, export));
                let reply = ExportMetricsServiceResponse::default().encode_to_vec();
                status(http::StatusCode::OK, reply.into())
            }
            Err(_) => status(http::StatusCode::BAD_REQUEST, Bytes::new()),
        },
        _ => status(http::StatusCode::NOT_FOUND, Bytes::new()),
    }
}

fn boxed<B>(response: http::Response<B>) -> Reply
where
    B: http_body::Body<Data = Bytes, Error = tonic::Status> + Send + 'static,
{
    response.map(|body| body.boxed_unsync())
}

fn status(status: http::StatusCode, body: Bytes) -> Reply {
    let mut response = http::Response::new(
        Full::new(body)
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-protobuf"),
    );
    response
}

/// The value of attribute `key` in `attributes`, as text (strings as they
/// are, numbers and booleans written out); `None` when absent.
pub fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    text(value)
}

fn text(value: &AnyValue) -> Option<String> {
    Some(match value.value.as_ref()? {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::IntValue(i) => i.to_string(),
        any_value::Value::DoubleValue(d) => d.to_string(),
        any_value::Value::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

/// The sum of a counter's data points whose attributes include every pair
/// in `labels`; `None` when the metric is not a sum.
pub fn sum(metric: &Metric, labels: &[(&str, &str)]) -> Option<f64> {
    let metric::Data::Sum(sum) = metric.data.as_ref()? else {
        return None;
    };
    Some(
        sum.data_points
            .iter()
            .filter(|point| {
                labels
                    .iter()
                    .all(|(k, v)| attribute(&point.attributes, k).as_deref() == Some(*v))
            })
            .map(|point| match point.value {
                Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(
                    i,
                )) => i as f64,
                Some(
                    opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(d),
                ) => d,
                None => 0.0,
            })
            .sum(),
    )
}
