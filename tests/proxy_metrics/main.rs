//! Operating the guard, in-process: the metrics the Prometheus recorder
//! renders and the guarded-request span as JSON log lines, with the proxy on
//! loopback in front of the scripted mock upstream.
//!
//! The recorder and the subscriber are process-wide, so everything that
//! counts guarded requests is one test function; the admin routes test
//! beside it sends none.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

use refusal_guard::telemetry::{MemorySink, MetricsSink, RefusalRecord, TelemetrySink};
use refusal_guard::RefusalGuardLayer;
use serde_json::{json, Value};
use support::log_capture::SharedBuffer;
use support::mock_upstream::MockUpstream;
use support::prometheus::sample;
use support::proxy::bind_proxy;

const TEXT: &str = "anthropic/anthropic-sdk-python/basic_response.txt";
const EMPTY_REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";

/// Log lines written by the JSON subscriber.
#[derive(Clone, Default)]
struct Lines(SharedBuffer);

impl Lines {
    fn json(&self) -> Vec<Value> {
        let bytes = self.0 .0.lock().unwrap().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).expect("every log line is one JSON object"))
            .collect()
    }
}

async fn post(base: &str, model: &str, script: &str) -> reqwest::Response {
    let body = json!({
        "model": model, "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": format!("audit {model} {script}")}],
    });
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{base}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-mock-script", script)
        .header("x-mock-id", format!("{model}-{script}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

async fn serve(upstream: &str, layer: RefusalGuardLayer) -> String {
    let (proxy, listener, url) = bind_proxy(upstream, &layer).await;
    tokio::spawn(proxy.serve(listener, std::future::pending()));
    url
}

#[tokio::test]
async fn metrics_and_the_request_span() {
    let handle = PrometheusBuilder::new().install_recorder().unwrap();
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.0.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let mock = MockUpstream::start().await.unwrap();
    let log = MemorySink::new();
    let proxy = serve(
        &mock.url(),
        RefusalGuardLayer::new().telemetry((log.clone(), MetricsSink::new())),
    )
    .await;

    // A rescue and a normal answer, read to the end.
    let rescued = post(
        &proxy,
        "claude-span-test",
        &format!("{EMPTY_REFUSAL},{TEXT}"),
    )
    .await;
    assert_eq!(rescued.status(), 200);
    rescued.bytes().await.unwrap();
    let normal = post(&proxy, "claude-plain-test", TEXT).await;
    normal.bytes().await.unwrap();

    // A stream the client abandons after its head: it leaves the streams in
    // flight and is counted once it is gone.
    let abandoned = post(&proxy, "claude-abandon-test", "marker").await;
    assert_eq!(abandoned.status(), 200);
    drop(abandoned);

    // An upstream that is down: the request never settles.
    let closed = support::socket::ClosedPort::new();
    let down = closed.url();
    let down_proxy = serve(&down, RefusalGuardLayer::new()).await;
    assert_eq!(
        post(&down_proxy, "claude-down-test", TEXT).await.status(),
        502
    );

    // Settling runs as the bodies end; give it a bounded moment.
    let mut text = String::new();
    for _ in 0..100 {
        text = handle.render();
        let requests = sample(&text, "refusal_guard_requests_total", &[]).unwrap_or(0.0);
        let in_flight = sample(&text, "refusal_guard_streams_in_flight", &[]).unwrap_or(-1.0);
        if requests >= 4.0 && in_flight == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let total = |labels: &[(&str, &str)]| sample(&text, "refusal_guard_requests_total", labels);
    assert_eq!(total(&[("outcome", "rescued")]), Some(1.0), "{text}");
    assert_eq!(total(&[("outcome", "ok")]), Some(2.0), "{text}");
    assert_eq!(total(&[("outcome", "unsettled")]), Some(1.0), "{text}");
    assert_eq!(
        sample(&text, "refusal_guard_streams_in_flight", &[]),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "refusal_guard_refusals_total",
            &[
                ("provider", "anthropic"),
                ("wire_api", "anthropic_messages"),
                ("category", "cyber"),
                ("kind", "empty"),
                ("outcome", "rescued"),
            ]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "refusal_guard_recovery_attempts_total",
            &[("step", "rescue"), ("result", "served")]
        ),
        Some(1.0)
    );
    assert_eq!(log.records().len(), 1);

    // The span of the rescued request, as the JSON log shows it.
    let settled: Vec<Value> = lines
        .json()
        .into_iter()
        .filter(|line| line["fields"]["message"] == "guarded request settled")
        .collect();
    let span_of = |model: &str| {
        settled
            .iter()
            .find(|line| line["span"]["gen_ai.request.model"] == model)
            .unwrap_or_else(|| panic!("no settled line for {model} in {settled:#?}"))["span"]
            .clone()
    };
    let span = span_of("claude-span-test");
    assert_eq!(span["name"], "guarded_request");
    assert_eq!(span["gen_ai.system"], "anthropic");
    assert_eq!(span["gen_ai.operation.name"], "chat");
    assert_eq!(span["gen_ai.response.finish_reasons"], "refusal");
    assert_eq!(span["refusal_guard.outcome"], "rescued");
    assert_eq!(span["refusal_guard.attempts"], 2);
    assert_eq!(span["refusal_guard.category"], "cyber");
    assert!(span["gen_ai.response.model"].is_string());
    let plain = span_of("claude-plain-test");
    assert_eq!(plain["refusal_guard.outcome"], "ok");
    assert_eq!(plain["refusal_guard.attempts"], 1);
    // Nothing of the prompt reaches the log.
    let all = String::from_utf8(lines.0 .0.lock().unwrap().clone()).unwrap();
    assert!(!all.contains("audit claude"));

    // Categories past the bound are folded into `other`.
    let sink = MetricsSink::new();
    for i in 0..40 {
        let record: RefusalRecord = serde_json::from_value(json!({
            "ts": "2026-11-29T17:00:00.000Z", "category": format!("flood_{i}"), "outcome": "dead",
        }))
        .unwrap();
        sink.record(&record);
    }
    let text = handle.render();
    let distinct: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("refusal_guard_refusals_total{"))
        .filter_map(|l| l.split("category=\"").nth(1)?.split('"').next())
        .collect();
    assert!(distinct.contains("other"), "{distinct:?}");
    assert!(distinct.len() <= refusal_guard::telemetry::metrics::MAX_CATEGORIES + 1);

    routed_requests_are_counted_by_route(&handle).await;
    tenants_and_learned_routing_are_counted(&handle).await;
}

/// A tenant's refusal counts under its name, and the counts learned
/// routing keeps are gauges per category, model and candidate.
async fn tenants_and_learned_routing_are_counted(
    handle: &metrics_exporter_prometheus::PrometheusHandle,
) {
    use refusal_guard::recovery::FallbackChains;
    use refusal_guard::routing::LearnedRouting;
    use refusal_guard::tenant::FromExtensions;
    use refusal_guard_proxy::{hash_key, Tenants};

    let dir = std::env::temp_dir().join(format!("rg-metrics-tenants-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tenants.toml");
    let key = "metrics-team-client-key-01";
    let file = format!(
        "[[tenant]]\nname = \"metrics-team\"\nkey_sha256 = [\"{}\"]\nrescue = false\n",
        hash_key(key)
    );
    std::fs::write(&path, file).unwrap();
    let tenants = Tenants::load(&path).unwrap();
    let mock = MockUpstream::start().await.unwrap();
    let chain = ["claude-metrics-haiku", "claude-metrics-sonnet"];
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("claude-metrics-opus", chain))
        .route_by(LearnedRouting::new().random(|| 0.99))
        .telemetry(MetricsSink::new())
        .tenants(FromExtensions);
    let url = support::proxy::serve_tenants_proxy(&mock.url(), &layer, tenants).await;
    let body = json!({
        "model": "claude-metrics-opus", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "audit my host"}],
    });
    let script = format!("{EMPTY_REFUSAL},{EMPTY_REFUSAL},{TEXT}");
    let response = support::proxy::post_messages(&url, &script, "metrics-tenant", &body)
        .header("x-refusal-guard-key", key)
        .send()
        .await
        .unwrap();
    assert!(response.text().await.unwrap().contains("end_turn"));

    let mut text = String::new();
    let tenant = [("tenant", "metrics-team")];
    for _ in 0..100 {
        text = handle.render();
        if sample(&text, "refusal_guard_requests_total", &tenant).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refusals = [("tenant", "metrics-team"), ("outcome", "fallback")];
    assert_eq!(
        sample(&text, "refusal_guard_refusals_total", &refusals),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "refusal_guard_requests_total", &refusals),
        Some(1.0)
    );
    // The record's latency is the tenant's too.
    assert_eq!(
        sample(
            &text,
            "refusal_guard_recovery_latency_seconds_count",
            &refusals
        ),
        Some(1.0),
        "{text}"
    );
    let route = |candidate| {
        [
            ("category", "cyber"),
            ("model", "claude-metrics-opus"),
            ("candidate", candidate),
        ]
    };
    let served = |candidate| sample(&text, "refusal_guard_route_served", &route(candidate));
    let refused = |candidate| sample(&text, "refusal_guard_route_refused", &route(candidate));
    assert_eq!(served("claude-metrics-sonnet"), Some(1.0), "{text}");
    assert_eq!(refused("claude-metrics-haiku"), Some(1.0), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// With routing on, each request counts under the route it took; a proxy
/// with one upstream counts none.
async fn routed_requests_are_counted_by_route(
    handle: &metrics_exporter_prometheus::PrometheusHandle,
) {
    use refusal_guard_proxy::{Proxy, Route, Routes, Upstream};
    const ROUTED: &str = "refusal_guard_proxy_requests_total";
    assert_eq!(
        sample(&handle.render(), ROUTED, &[]),
        None,
        "one upstream: not counted"
    );
    let (openai, default) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let loopback = |mock: &MockUpstream| Upstream::parse(&mock.url()).unwrap();
    let routes = Routes::single(loopback(&default))
        .route(Route::Anthropic, loopback(&default))
        .route(Route::Gemini, loopback(&default))
        .route(Route::OpenAi, loopback(&openai));
    let proxy = Proxy::new(routes, &RefusalGuardLayer::new())
        .unwrap()
        .access_log(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(proxy.serve(listener, std::future::pending()));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    for path in ["/v1/models", "/v1/models", "/v1/unknown"] {
        let response = client
            .get(format!("{base}{path}"))
            .header("authorization", "Bearer sk-test")
            .header("x-mock-script", "usage/responses-answer.json")
            .header("x-mock-id", format!("routed-{path}-{}", rand_suffix()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    let text = handle.render();
    assert_eq!(
        sample(&text, ROUTED, &[("route", "openai")]),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, ROUTED, &[("route", "default")]),
        Some(1.0),
        "{text}"
    );
    assert_eq!((openai.seen().len(), default.seen().len()), (2, 1));
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::test]
async fn readiness_probes_each_routes_upstream() {
    use refusal_guard_proxy::admin::{self, AdminState};
    use refusal_guard_proxy::{Route, Routes, Upstream};

    let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open_url = format!("http://{}", open.local_addr().unwrap());
    let closed = support::socket::ClosedPort::new();
    let closed_url = closed.url();
    let at = |url: &str| Upstream::parse(url).unwrap();
    let routes = Routes::single(at(&open_url))
        .route(Route::Anthropic, at(&open_url))
        .route(Route::OpenAi, at(&open_url))
        .route(Route::Gemini, at(&closed_url));
    let state = AdminState::new()
        .probe_routes(&routes)
        .probe_timeout(Duration::from_secs(2));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(admin::serve(listener, state, std::future::pending()));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let ready = tokio::time::timeout(
        Duration::from_secs(10),
        client.get(format!("{base}/readyz")).send(),
    )
    .await
    .expect("readyz answers")
    .unwrap();
    assert_eq!(ready.status(), 503);
    let text = ready.text().await.unwrap();
    let open_host = open_url.trim_start_matches("http://");
    let closed_host = closed_url.trim_start_matches("http://");
    for route in ["anthropic", "openai", "default"] {
        let line = format!("upstream {route} {open_host}: ok");
        assert!(text.contains(&line), "{line} in {text}");
    }
    assert!(
        text.contains(&format!("upstream gemini {closed_host}: FAIL")),
        "{text}"
    );
    drop(open);
}

/// A readiness check that never answers.
struct Hangs;

impl refusal_guard_proxy::admin::Probe for Hangs {
    fn name(&self) -> String {
        "hangs".to_owned()
    }
    fn check(
        &self,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = refusal_guard_proxy::admin::ProbeResult> + Send + '_>,
    > {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn admin_routes_answer_within_their_bounds() {
    use refusal_guard_proxy::admin::{self, AdminState};

    let dir = std::env::temp_dir().join(format!("rg-ops-admin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("refusals.jsonl");
    std::fs::write(
        &log,
        "{\"ts\":\"2026-11-29T17:00:00.000Z\",\"model\":\"m\",\"category\":\"cyber\",\"outcome\":\"dead\"}\n",
    )
    .unwrap();
    let state = AdminState::new()
        .log(&log)
        .probe(Hangs)
        .probe_timeout(Duration::from_millis(200));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(admin::serve(listener, state, async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let get = |path: &str| client.get(format!("{base}{path}")).send();

    // A probe that never answers fails readiness after the probe timeout
    // (asserted generously: well within the client's 10 s).
    let ready = tokio::time::timeout(Duration::from_secs(10), get("/readyz"))
        .await
        .expect("readyz answers though a probe hangs")
        .unwrap();
    assert_eq!(ready.status(), 503);
    let text = ready.text().await.unwrap();
    assert!(text.contains("hangs: FAIL no answer within"), "{text}");
    assert!(text.contains("store memory: ok"), "{text}");

    let page = get("/").await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.starts_with("default-src 'none'"));
    let html = page.text().await.unwrap();
    assert!(html.contains(r#""total":1"#));

    // No recorder was given: /metrics says so rather than answering empty.
    assert_eq!(get("/metrics").await.unwrap().status(), 404);
    assert_eq!(get("/v1/messages").await.unwrap().status(), 404);
    let post = client
        .post(format!("{base}/healthz"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405);

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the admin listener stops")
        .unwrap()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
