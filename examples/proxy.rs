//! The standalone refusal-guard proxy: point any agent at it.
//!
//! ```text
//! cargo run --example proxy -- --simulate          # no network, no key: see a rescue
//! cargo run --example proxy                        # in front of api.anthropic.com
//! ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude  # Claude Code through it
//! ```
//!
//! Every flag can also be set in the environment as `REFUSAL_GUARD_<NAME>`
//! (`--inject-fallbacks` is `REFUSAL_GUARD_INJECT_FALLBACKS=1`; several
//! `--chain`s in `REFUSAL_GUARD_CHAIN` are separated by `;`). A flag wins
//! over its variable. Bad flags exit with status 2.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use refusal_guard::proxy::{Proxy, Upstream};
use refusal_guard::recovery::FallbackChains;
use refusal_guard::simulate::Simulator;
use refusal_guard::telemetry::JsonlSink;
use refusal_guard::RefusalGuardLayer;
use tower::Layer;

const USAGE: &str = "\
usage: proxy [OPTIONS]

  --listen ADDR          address to listen on (default 127.0.0.1:8787)
  --upstream URL         base URL to forward to (default https://api.anthropic.com)
  --log PATH             refusal log, JSON lines (default ~/.refusal-guard/refusals.jsonl)
  --rescue on|off        the reframed rescue continuation (default on)
  --retarget M1,M2       rewrite Anthropic server-side `fallbacks` to these models
  --inject-fallbacks     also add them to requests that carry no `fallbacks`
  --chain MODEL=M1,M2    client-side fallback chain for MODEL (repeatable)
  --simulate             no upstream: a built-in provider that refuses each
                         conversation's first attempt (no network, no key)
  --quiet                no per-request line on stderr
  -h, --help             this help

Each option also reads REFUSAL_GUARD_<NAME> (LISTEN, UPSTREAM, LOG, RESCUE,
RETARGET, INJECT_FALLBACKS, CHAIN with `;` between chains, SIMULATE, QUIET).";

const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
const DEFAULT_UPSTREAM: &str = "https://api.anthropic.com";

#[derive(Debug)]
struct Options {
    listen: SocketAddr,
    upstream: Upstream,
    log: Option<PathBuf>,
    rescue: bool,
    retarget: Vec<String>,
    inject_fallbacks: bool,
    chains: Vec<(String, Vec<String>)>,
    simulate: bool,
    quiet: bool,
}

fn flag(value: &str, name: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Ok(true),
        "0" | "off" | "false" | "no" | "" => Ok(false),
        other => Err(format!("{name}: expected on or off, got `{other}`")),
    }
}

fn models(value: &str, name: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .collect();
    if list.is_empty() {
        return Err(format!("{name}: expected a comma-separated list of models"));
    }
    Ok(list)
}

fn chain(value: &str) -> Result<(String, Vec<String>), String> {
    let (model, fallbacks) = value
        .split_once('=')
        .ok_or_else(|| format!("--chain: expected MODEL=M1,M2, got `{value}`"))?;
    let model = model.trim();
    if model.is_empty() {
        return Err(format!("--chain: no model before `=` in `{value}`"));
    }
    Ok((model.to_owned(), models(fallbacks, "--chain")?))
}

/// Reads flags, then fills what they left unset from `env`.
fn parse(
    args: impl IntoIterator<Item = String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Options>, String> {
    let mut listen = None;
    let mut upstream = None;
    let mut log = None;
    let mut rescue = None;
    let mut retarget = None;
    let mut inject = None;
    let mut chains: Vec<(String, Vec<String>)> = Vec::new();
    let mut simulate = None;
    let mut quiet = None;

    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => {
                (name.to_owned(), Some(value.to_owned()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            match inline.clone().or_else(|| args.next()) {
                Some(v) if !v.is_empty() => Ok(v),
                _ => Err(format!("{name} needs {what}")),
            }
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(None),
            "--listen" => listen = Some(value("an address like 127.0.0.1:8787")?),
            "--upstream" => upstream = Some(value("a URL")?),
            "--log" => log = Some(value("a path")?),
            "--rescue" => rescue = Some(flag(&value("on or off")?, "--rescue")?),
            "--retarget" => retarget = Some(models(&value("models")?, "--retarget")?),
            "--chain" => chains.push(chain(&value("MODEL=M1,M2")?)?),
            "--inject-fallbacks" | "--simulate" | "--quiet" if inline.is_some() => {
                return Err(format!("{name} takes no value"))
            }
            "--inject-fallbacks" => inject = Some(true),
            "--simulate" => simulate = Some(true),
            "--quiet" => quiet = Some(true),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }

    let var = |key: &str| env(&format!("REFUSAL_GUARD_{key}")).filter(|v| !v.trim().is_empty());
    let listen = listen
        .or_else(|| var("LISTEN"))
        .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let listen: SocketAddr = listen
        .parse()
        .map_err(|_| format!("--listen: `{listen}` is not an address like 127.0.0.1:8787"))?;
    let upstream = upstream
        .or_else(|| var("UPSTREAM"))
        .unwrap_or_else(|| DEFAULT_UPSTREAM.to_owned());
    let upstream = Upstream::parse(&upstream).map_err(|e| format!("--upstream: {e}"))?;
    let log = log.or_else(|| var("LOG")).map(PathBuf::from);
    let rescue = match rescue {
        Some(on) => on,
        None => var("RESCUE").map_or(Ok(true), |v| flag(&v, "REFUSAL_GUARD_RESCUE"))?,
    };
    let retarget = match retarget {
        Some(list) => list,
        None => var("RETARGET")
            .map(|v| models(&v, "REFUSAL_GUARD_RETARGET"))
            .transpose()?
            .unwrap_or_default(),
    };
    let inject_fallbacks = match inject {
        Some(on) => on,
        None => var("INJECT_FALLBACKS")
            .map_or(Ok(false), |v| flag(&v, "REFUSAL_GUARD_INJECT_FALLBACKS"))?,
    };
    if chains.is_empty() {
        if let Some(value) = var("CHAIN") {
            for one in value.split(';').filter(|c| !c.trim().is_empty()) {
                chains.push(chain(one.trim())?);
            }
        }
    }
    let simulate = match simulate {
        Some(on) => on,
        None => var("SIMULATE").map_or(Ok(false), |v| flag(&v, "REFUSAL_GUARD_SIMULATE"))?,
    };
    let quiet = match quiet {
        Some(on) => on,
        None => var("QUIET").map_or(Ok(false), |v| flag(&v, "REFUSAL_GUARD_QUIET"))?,
    };
    if inject_fallbacks && retarget.is_empty() {
        return Err("--inject-fallbacks needs --retarget M1,M2 (the models to inject)".to_owned());
    }
    Ok(Some(Options {
        listen,
        upstream,
        log,
        rescue,
        retarget,
        inject_fallbacks,
        chains,
        simulate,
        quiet,
    }))
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1), |key| std::env::var(key).ok()) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("proxy: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("proxy: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(options))
}

async fn run(options: Options) -> ExitCode {
    let log_path = options.log.clone().or_else(JsonlSink::default_path);
    let Some(log_path) = log_path else {
        eprintln!("proxy: no refusal log path: pass --log PATH or set HOME");
        return ExitCode::from(2);
    };
    let sink = match JsonlSink::open(&log_path) {
        Ok(sink) => sink,
        Err(error) => {
            eprintln!(
                "proxy: cannot open the refusal log {}: {error}",
                log_path.display()
            );
            return ExitCode::from(2);
        }
    };
    let mut chains = FallbackChains::new();
    for (model, fallbacks) in &options.chains {
        chains = chains.chain(model.clone(), fallbacks.clone());
    }
    let layer = RefusalGuardLayer::new()
        .rescue(options.rescue)
        .telemetry(sink)
        .retarget_fallbacks(options.retarget.clone())
        .inject_server_fallbacks(options.inject_fallbacks)
        .fallback_chains(chains);

    let listener = match tokio::net::TcpListener::bind(options.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("proxy: cannot listen on {}: {error}", options.listen);
            return ExitCode::FAILURE;
        }
    };
    let local = listener.local_addr().unwrap_or(options.listen);
    if !local.ip().is_loopback() {
        eprintln!(
            "proxy: warning: listening on {local}, reachable from other machines; \
             anyone who can reach it can spend your API key"
        );
    }
    let target = if options.simulate {
        "the built-in simulated provider (no network)".to_owned()
    } else {
        options.upstream.to_string()
    };
    eprintln!(
        "refusal-guard proxy listening on http://{local} -> {target} \
         (rescue {}, log {})",
        if options.rescue { "on" } else { "off" },
        log_path.display()
    );

    let shutdown = async {
        shutdown_signal().await;
        eprintln!("proxy: shutting down; finishing requests in flight (signal again to quit now)");
        tokio::spawn(async {
            shutdown_signal().await;
            eprintln!("proxy: quitting now");
            std::process::exit(130);
        });
    };
    let served = if options.simulate {
        let upstream = Upstream::parse("http://simulated.invalid").expect("a valid URL");
        Proxy::with_service(upstream, layer.layer(Simulator::new()))
            .access_log(!options.quiet)
            .serve(listener, shutdown)
            .await
    } else {
        let proxy = match Proxy::new(options.upstream.clone(), &layer) {
            Ok(proxy) => proxy,
            Err(error) => {
                eprintln!("proxy: cannot build the HTTP client: {error}");
                return ExitCode::FAILURE;
            }
        };
        proxy
            .access_log(!options.quiet)
            .serve(listener, shutdown)
            .await
    };
    match served {
        Ok(()) => {
            eprintln!("proxy: stopped");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("proxy: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_win_over_env() {
        let env = |key: &str| match key {
            "REFUSAL_GUARD_LISTEN" => Some("127.0.0.1:1".to_owned()),
            "REFUSAL_GUARD_RESCUE" => Some("off".to_owned()),
            "REFUSAL_GUARD_CHAIN" => Some("a=b,c;d=e".to_owned()),
            _ => None,
        };
        let o = parse(args(&["--listen", "127.0.0.1:2", "--retarget=x,y"]), env)
            .unwrap()
            .unwrap();
        assert_eq!(o.listen.port(), 2);
        assert!(!o.rescue);
        assert_eq!(o.retarget, ["x", "y"]);
        assert_eq!(o.chains.len(), 2);
    }

    #[test]
    fn bad_flags_are_errors() {
        let none = |_: &str| None;
        assert!(parse(args(&["--bogus"]), none).is_err());
        assert!(parse(args(&["--rescue", "maybe"]), none).is_err());
        assert!(parse(args(&["--chain", "nomodels"]), none).is_err());
        assert!(parse(args(&["--listen"]), none).is_err());
        assert!(parse(args(&["--upstream", "ftp://x"]), none).is_err());
        assert!(parse(args(&["--inject-fallbacks"]), none).is_err());
        assert!(parse(args(&["--help"]), none).unwrap().is_none());
    }
}
