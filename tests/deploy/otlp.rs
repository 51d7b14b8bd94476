//! `refusal-guard --otlp` against a real OTLP receiver (tests/support's,
//! which decodes every export with the published protobufs): a rescued
//! refusal's trace over OTLP/HTTP and over gRPC (the request's span, one
//! child span per attempt, the attributes the docs name), its metrics; and,
//! with no collector listening, requests that still succeed while the drop
//! counter rises on `/metrics`.

use std::time::Duration;

use support::otlp::proto::tonic::trace::v1::span::SpanKind;
use support::otlp::proto::tonic::trace::v1::Span;
use support::otlp::{attribute, sum, OtlpReceiver, Transport};
use support::prometheus::sample;

use crate::{refused_then_rescued, scrape, start};

fn attr(span: &Span, key: &str) -> Option<String> {
    attribute(&span.attributes, key)
}

/// The trace of one rescued request: the request's span and its attempts.
fn assert_rescued_trace(spans: &[Span]) {
    let request = spans
        .iter()
        .find(|s| s.name == "guarded_request")
        .expect("the request's span");
    assert_eq!(
        attr(request, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(attr(request, "gen_ai.system").as_deref(), Some("anthropic"));
    assert_eq!(
        attr(request, "gen_ai.provider.name").as_deref(),
        Some("anthropic")
    );
    assert_eq!(
        attr(request, "gen_ai.request.model").as_deref(),
        Some("claude-opus-4-7")
    );
    assert_eq!(
        attr(request, "refusal_guard.outcome").as_deref(),
        Some("rescued")
    );
    assert_eq!(
        attr(request, "refusal_guard.category").as_deref(),
        Some("cyber")
    );
    assert_eq!(
        attr(request, "refusal_guard.attempts").as_deref(),
        Some("2")
    );
    assert_eq!(
        attr(request, "refusal_guard.wire_api").as_deref(),
        Some("anthropic_messages")
    );
    // The refusal's event, on the request's span.
    assert!(
        request.events.iter().any(|event| event.name == "refusal"),
        "{:?}",
        request.events
    );

    let mut attempts: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == request.span_id)
        .collect();
    attempts.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    for attempt in &attempts {
        assert_eq!(attempt.trace_id, request.trace_id);
        assert_eq!(attempt.kind, SpanKind::Client as i32);
        assert_eq!(attempt.name, "chat claude-opus-4-7");
        assert_eq!(
            attr(attempt, "gen_ai.operation.name").as_deref(),
            Some("chat")
        );
        assert_eq!(
            attr(attempt, "gen_ai.provider.name").as_deref(),
            Some("anthropic")
        );
        assert_eq!(
            attr(attempt, "gen_ai.request.model").as_deref(),
            Some("claude-opus-4-7")
        );
        assert_eq!(
            attr(attempt, "http.response.status_code").as_deref(),
            Some("200")
        );
        assert!(attempt.start_time_unix_nano >= request.start_time_unix_nano);
        assert!(attempt.end_time_unix_nano >= attempt.start_time_unix_nano);
    }
    let steps: Vec<_> = attempts
        .iter()
        .map(|a| {
            (
                attr(a, "refusal_guard.attempt.step").unwrap(),
                attr(a, "refusal_guard.attempt.result").unwrap(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("original".to_owned(), "refused".to_owned()),
            ("rescue".to_owned(), "served".to_owned())
        ]
    );
    // The original ended (was judged) before the rescue was sent.
    assert!(attempts[0].end_time_unix_nano <= attempts[1].start_time_unix_nano);
}

async fn exports_a_rescued_refusal_over(protocol: &str, transport: Transport) {
    let receiver = OtlpReceiver::start().await;
    let proxy = start(&receiver.endpoint(), protocol, &[]).await;
    let answer = refused_then_rescued(&proxy.url, protocol, false).await;
    assert!(answer.contains("Simulated answer"), "{answer}");

    let arrived = receiver
        .wait_for(Duration::from_secs(20), |r| {
            let spans = r.spans();
            spans.iter().any(|(_, s)| s.name == "guarded_request")
                && spans
                    .iter()
                    .filter(|(_, s)| s.name.starts_with("chat"))
                    .count()
                    >= 2
        })
        .await;
    assert!(arrived, "no trace arrived: {:#?}", receiver.spans());
    let spans = receiver.spans();
    assert!(spans.iter().all(|(t, _)| *t == transport), "{protocol}");
    let spans: Vec<Span> = spans.into_iter().map(|(_, s)| s).collect();
    assert_rescued_trace(&spans);
    let resource = receiver.resource();
    assert_eq!(
        attribute(&resource, "service.name").as_deref(),
        Some("refusal-guard")
    );
    assert_eq!(
        attribute(&resource, "deployment.environment").as_deref(),
        Some("test")
    );

    // The metrics arrive too, under their Prometheus names.
    let counted = receiver
        .wait_for(Duration::from_secs(20), |r| {
            r.metrics().iter().any(|(_, m)| {
                m.name == "refusal_guard_refusals_total"
                    && sum(m, &[("category", "cyber"), ("outcome", "rescued")]) >= Some(1.0)
            })
        })
        .await;
    assert!(counted, "{:#?}", receiver.metrics());
    let metrics = receiver.metrics();
    assert!(metrics.iter().all(|(t, _)| *t == transport));
    let requests = metrics
        .iter()
        .rev()
        .find(|(_, m)| m.name == "refusal_guard_requests_total")
        .map(|(_, m)| m)
        .expect("the requests counter");
    assert_eq!(sum(requests, &[("outcome", "rescued")]), Some(1.0));

    // What went out is counted as exported, on /metrics too.
    let text = scrape(&proxy.admin).await;
    assert!(
        sample(&text, "refusal_guard_otlp_exported_spans_total", &[]) >= Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "refusal_guard_otlp_dropped_spans_total", &[]),
        None
    );
}

#[tokio::test]
async fn a_rescued_refusal_arrives_over_otlp_http() {
    exports_a_rescued_refusal_over("http/protobuf", Transport::Http).await;
}

#[tokio::test]
async fn a_rescued_refusal_arrives_over_otlp_grpc() {
    exports_a_rescued_refusal_over("grpc", Transport::Grpc).await;
}

#[tokio::test]
async fn with_the_collector_down_requests_succeed_and_drops_are_counted() {
    // A port nobody listens on: every export is refused.
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    for protocol in ["http/protobuf", "grpc"] {
        let proxy = start(&format!("http://127.0.0.1:{port}"), protocol, &[]).await;
        for turn in 0..5 {
            let answer =
                refused_then_rescued(&proxy.url, &format!("{protocol} {turn}"), false).await;
            assert!(answer.contains("Simulated answer"), "{answer}");
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let dropped = loop {
            let text = scrape(&proxy.admin).await;
            let dropped = sample(&text, "refusal_guard_otlp_dropped_spans_total", &[]);
            if dropped.is_some() || tokio::time::Instant::now() > deadline {
                break (dropped, text);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let (count, text) = dropped;
        assert!(count >= Some(3.0), "{protocol}: {text}");
        assert_eq!(
            sample(&text, "refusal_guard_otlp_exported_spans_total", &[]),
            None,
            "{protocol}"
        );
        // The requests were served and counted all the same.
        assert_eq!(
            sample(
                &text,
                "refusal_guard_requests_total",
                &[("outcome", "rescued")]
            ),
            Some(5.0),
            "{protocol}: {text}"
        );
    }
}
