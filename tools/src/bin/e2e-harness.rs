//! Test harness for clients in other languages (the Python SDK tests in
//! `tests/e2e/`): starts, on loopback, the scripted mock upstream, a proxy in
//! front of it, a proxy over the simulated provider and one whose upstream is
//! down, prints their URLs as
//! one JSON line on stdout, and runs until stdin closes or it gets SIGINT /
//! SIGTERM.
//!
//! ```text
//! cargo run -p refusal-guard-tools --bin e2e-harness -- [--log PATH]
//! {"mock":"http://127.0.0.1:…","proxy":"…","simulated":"…","unreachable":"…","log":"…"}
//! ```
//!
//! The proxy in front of the mock is configured as the tests expect: rescue
//! on, `--retarget claude-retarget-a,claude-retarget-b` and
//! `--chain claude-chain-source=claude-chain-target`. A second one in front
//! of the mock (`live`) streams thinking live; a third (`partial`)
//! continues partial refusals (`--continue-partial`, with the chain
//! `claude-opus-4-7=claude-sonnet-4-5`); a fourth (`marked`) marks its
//! fallbacks as the provider marks its own (`handoff_marker`, the chain
//! `claude-opus-4-7=claude-sonnet-4-5`, rescue off). Two admin listeners serve
//! metrics, health and the dashboard: `admin` for the proxy in front of the
//! mock (its log, its upstream), `admin_unreachable` for the one whose
//! upstream is down.
//!
//! It exits with status 1 when the mock or the strict simulator answered
//! any request with a contract error (a request the real API rejects),
//! whether or not `/__mock/violations` was asked for them meanwhile.
use support::mock_upstream as mock;

use std::io::Write;
use std::path::PathBuf;

use refusal_guard::recovery::FallbackChains;
use refusal_guard::telemetry::{JsonlSink, MetricsSink};
use refusal_guard::RefusalGuardLayer;
use refusal_guard_proxy::admin::{self, AdminState};
use refusal_guard_proxy::{Proxy, Upstream};
use refusal_guard_testkit::Simulator;
use tokio::io::AsyncReadExt;
use tower::Layer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut log =
        std::env::temp_dir().join(format!("refusal-guard-e2e-{}.jsonl", std::process::id()));
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--log" => log = PathBuf::from(args.next().ok_or("--log needs a path")?),
            other => {
                eprintln!("e2e-harness: unknown argument `{other}`");
                std::process::exit(2);
            }
        }
    }

    let mock = mock::MockUpstream::start().await?;
    let layer = RefusalGuardLayer::new()
        .telemetry((JsonlSink::open(&log)?, MetricsSink::new()))
        .retarget_fallbacks(["claude-retarget-a", "claude-retarget-b"])
        .fallback_chains(
            FallbackChains::new().chain("claude-chain-source", ["claude-chain-target"]),
        );
    let proxy = Proxy::new(Upstream::parse(&mock.url())?, &layer)?;
    let live = Proxy::new(
        Upstream::parse(&mock.url())?,
        &RefusalGuardLayer::new().live_thinking(true),
    )?;
    let partial = Proxy::new(
        Upstream::parse(&mock.url())?,
        &RefusalGuardLayer::new()
            .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["claude-sonnet-4-5"]))
            .continue_partial(true),
    )?;
    let marked = Proxy::new(
        Upstream::parse(&mock.url())?,
        &RefusalGuardLayer::new()
            .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["claude-sonnet-4-5"]))
            .handoff_marker(true)
            .rescue(false),
    )?;
    let metrics = admin::install_recorder()?;
    // Strict: what the SDKs send it, and the guard's rescues, keep the
    // providers' rules; what breaks one is reported with the mock's own.
    let simulator = Simulator::new();
    let reported = simulator.shared();
    let counted = simulator.shared();
    mock.report_also(move || {
        let taken = reported.take_violations();
        taken.iter().map(|v| format!("simulated: {v}")).collect()
    });
    let simulated = Proxy::with_service(
        Upstream::parse("http://simulated.invalid")?,
        RefusalGuardLayer::new().layer(simulator.shared()),
    );

    // A proxy whose upstream is a loopback port nothing listens on, held
    // for the harness's life so no listener below is handed the same port.
    let closed = support::socket::ClosedPort::new();
    let unreachable = Proxy::new(Upstream::parse(&closed.url())?, &RefusalGuardLayer::new())?;

    let admin_state = AdminState::new()
        .metrics(metrics.clone())
        .log(&log)
        .probe_upstream(proxy.upstream());
    let admin_down_state = AdminState::new()
        .metrics(metrics)
        .probe_upstream(unreachable.upstream());
    let admin_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let admin_down_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let down_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sim_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let live_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let partial_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let marked_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let line = serde_json::json!({
        "mock": mock.url(),
        "proxy": format!("http://{}", listener.local_addr()?),
        "simulated": format!("http://{}", sim_listener.local_addr()?),
        "unreachable": format!("http://{}", down_listener.local_addr()?),
        "live": format!("http://{}", live_listener.local_addr()?),
        "partial": format!("http://{}", partial_listener.local_addr()?),
        "marked": format!("http://{}", marked_listener.local_addr()?),
        "admin": format!("http://{}", admin_listener.local_addr()?),
        "admin_unreachable": format!("http://{}", admin_down_listener.local_addr()?),
        "log": log,
    });

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let servers = tokio::spawn(async move {
        let a = proxy.serve(listener, wait(stopped.clone()));
        let b = simulated.serve(sim_listener, wait(stopped.clone()));
        let c = unreachable.serve(down_listener, wait(stopped.clone()));
        let d = live.serve(live_listener, wait(stopped.clone()));
        let g = partial.serve(partial_listener, wait(stopped.clone()));
        let h = marked.serve(marked_listener, wait(stopped.clone()));
        let e = admin::serve(admin_listener, admin_state, wait(stopped.clone()));
        let f = admin::serve(admin_down_listener, admin_down_state, wait(stopped));
        let (a, b, c, d, e, f, g, h) = tokio::join!(a, b, c, d, e, f, g, h);
        a.and(b).and(c).and(d).and(e).and(f).and(g).and(h)
    });

    println!("{line}");
    std::io::stdout().flush()?;

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut stdin = tokio::io::stdin();
    let mut buffer = [0u8; 64];
    let stdin_closed = async {
        loop {
            match stdin.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    };
    tokio::select! {
        _ = stdin_closed => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let _ = stop.send(true);
    servers.await??;
    // The status says whether any request broke the providers' rules,
    // however often `/__mock/violations` was asked for (and emptied) meanwhile.
    let broken = mock.violations().count() as u64 + counted.violations();
    if broken > 0 {
        eprintln!(
            "e2e-harness: {broken} request(s) broke the providers' rules (contract violations): \
             exit status 1"
        );
        std::process::exit(1);
    }
    drop(mock);
    Ok(())
}
