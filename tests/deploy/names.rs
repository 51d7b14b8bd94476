//! Every metric the shipped alert rules (deploy/prometheus/alerts.yaml) and
//! Grafana dashboard (deploy/grafana/refusal-guard.json) read is one the
//! proxy really exports: each name they use must be a series name in real
//! scrapes of `/metrics`, from three proxies that between them meet every
//! case the rules and panels watch (a working OTLP collector and a dead
//! one, Redis down, streams held, a tenant past its recovery cap, learned
//! routing exploring).

use std::collections::BTreeSet;
use std::time::Duration;

use refusal_guard_proxy::hash_key;

use support::otlp::OtlpReceiver;
use support::prometheus::sample;

use crate::{refused_as, refused_then_rescued, scrape, start, Proxy};

const TENANT_KEY: &str = "names-tenant-client-key-0001";

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The `refusal_guard_*` names in `text` (an expression, a rules file).
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("refusal_guard_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // A word that merely ends in the prefix (`my_refusal_guard_x`) is not one.
        let starts_word = rest[..at]
            .chars()
            .last()
            .map_or(true, |c| !(c.is_ascii_alphanumeric() || c == '_'));
        if starts_word {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The series names in a Prometheus text scrape.
fn series_in(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// What the rules' expressions and the dashboard's targets name.
fn names_used() -> (BTreeSet<String>, BTreeSet<String>) {
    let rules = std::fs::read_to_string(format!("{ROOT}/deploy/prometheus/alerts.yaml")).unwrap();
    let exprs: String = rules
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter(|line| !line.contains("summary:") && !line.contains("description:"))
        .collect::<Vec<_>>()
        .join("\n");
    let dashboard = std::fs::read_to_string(format!("{ROOT}/deploy/grafana/refusal-guard.json"));
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard.unwrap()).unwrap();
    let mut panels = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            panels.extend(names_in(target["expr"].as_str().unwrap()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["definition"].as_str() {
            panels.extend(names_in(query));
        }
    }
    (names_in(&exprs), panels)
}

#[test]
fn names_are_read_whole() {
    let found = names_in("rate(refusal_guard_refusals_total[5m]) / my_refusal_guard_x + refusal_guard_held_bytes_bucket");
    let found: Vec<_> = found.into_iter().collect();
    assert_eq!(
        found,
        [
            "refusal_guard_held_bytes_bucket",
            "refusal_guard_refusals_total"
        ]
    );
    let (rules, panels) = names_used();
    assert!(
        rules.contains("refusal_guard_store_fallbacks_total")
            && rules.contains("refusal_guard_store_up"),
        "{rules:?}"
    );
    assert!(
        panels.contains("refusal_guard_recovery_latency_seconds_bucket"),
        "{panels:?}"
    );
}

/// A proxy with a tenants file and learned routing that always explores:
/// its tenant's first refusal is recovered by a fallback drawn for
/// exploration (setting the routing gauges), its second is past the
/// tenant's one recovery attempt an hour (capped).
async fn tenants_and_learned_routing(endpoint: &str, tenants: &std::path::Path) -> Proxy {
    let file = format!(
        "[[tenant]]\nname = \"names\"\nkey_sha256 = [\"{}\"]\nrecovery_attempts_per_hour = 1\n",
        hash_key(TENANT_KEY)
    );
    std::fs::write(tenants, file).unwrap();
    let flags = [
        "--tenants",
        tenants.to_str().unwrap(),
        "--chain",
        "claude-opus-4-7=claude-sonnet-4-5,claude-haiku-4-5",
        "--route-by",
        "learned",
        "--route-explore",
        "1",
    ];
    let proxy = start(endpoint, "http/protobuf", &flags).await;
    let recovered = refused_as(&proxy.url, "names routed", false, Some(TENANT_KEY)).await;
    assert!(recovered.contains("Simulated answer"), "{recovered}");
    let capped = refused_as(&proxy.url, "names capped", false, Some(TENANT_KEY)).await;
    assert!(capped.contains("\"refusal\""), "{capped}");
    proxy
}

#[tokio::test]
async fn the_alert_rules_and_the_dashboard_read_metrics_the_proxy_exports() {
    let receiver = OtlpReceiver::start().await;
    let shared = start(&receiver.endpoint(), "http/protobuf", &[]).await;
    let dead_port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let dead = format!("http://127.0.0.1:{dead_port}");
    let redis = format!("redis://127.0.0.1:{dead_port}/0");
    let down = start(&dead, "http/protobuf", &["--state", &redis]).await;
    let tenants =
        std::env::temp_dir().join(format!("refusal-guard-names-{}.toml", std::process::id()));
    let routed = tenants_and_learned_routing(&receiver.endpoint(), &tenants).await;
    let routed_scrape = scrape(&routed.admin).await;
    let _ = std::fs::remove_file(&tenants);
    for (turn, stream) in [(0, false), (1, true)] {
        for proxy in [&shared, &down] {
            let answer = refused_then_rescued(&proxy.url, &format!("names {turn}"), stream).await;
            let whole = if stream {
                "event: message_stop"
            } else {
                "Simulated answer"
            };
            assert!(answer.contains(whole), "{answer}");
        }
    }
    // The span counters appear once a batch went out (or failed to), the
    // store's gauge once its first check got an answer or ran out of time.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (mut shared_scrape, mut down_scrape) = (String::new(), String::new());
    while tokio::time::Instant::now() < deadline {
        shared_scrape = scrape(&shared.admin).await;
        down_scrape = scrape(&down.admin).await;
        let exported = sample(
            &shared_scrape,
            "refusal_guard_otlp_exported_spans_total",
            &[],
        );
        let dropped = sample(&down_scrape, "refusal_guard_otlp_dropped_spans_total", &[]);
        let store_up = sample(&down_scrape, "refusal_guard_store_up", &[]);
        if exported.is_some() && dropped.is_some() && store_up.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let exported: BTreeSet<String> = [shared_scrape, down_scrape, routed_scrape]
        .iter()
        .flat_map(|scrape| series_in(scrape))
        .collect();
    let (rules, panels) = names_used();
    assert!(
        rules.len() >= 6 && panels.len() >= 15,
        "{rules:?} {panels:?}"
    );
    let unknown_rules: Vec<_> = rules.difference(&exported).collect();
    let unknown_panels: Vec<_> = panels.difference(&exported).collect();
    assert!(
        unknown_rules.is_empty() && unknown_panels.is_empty(),
        "the alert rules read {unknown_rules:?} and the dashboard {unknown_panels:?}, \
         which the proxy does not export; it exports {exported:#?}"
    );
}
