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
use std::time::Duration;

use refusal_guard::env::{self, EnvConfig, LogSetting};
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
  --detect-text on|off   treat prose refusals (I can't help with that) as refusals (default off)
  --live-thinking on|off stream thinking before the decision; a recovered turn
                         continues the same message (default off)
  --keepalive SECS       after SECS of holding a stream, send the head and SSE
                         keep-alive comments until the guard decides (default off)
  --simulate             no upstream: a built-in provider that refuses each
                         conversation's first attempt (no network, no key)
  --quiet                no per-request line on stderr
  -h, --help             this help

Each option also reads REFUSAL_GUARD_<NAME> (LISTEN, UPSTREAM, LOG, RESCUE,
RETARGET or FALLBACKS, INJECT_FALLBACKS, CHAIN with `;` between chains,
DETECT_TEXT, LIVE_THINKING, KEEPALIVE, SIMULATE, QUIET). RESCUE, FALLBACKS and LOG are also read as pi-refusal-guard's
OMP_REFUSAL_* and PI_REFUSAL_*. An off value for LOG means no log.";

const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
const DEFAULT_UPSTREAM: &str = "https://api.anthropic.com";

#[derive(Debug)]
struct Options {
    listen: SocketAddr,
    upstream: Upstream,
    log: LogSetting,
    rescue: bool,
    retarget: Vec<String>,
    inject_fallbacks: bool,
    chains: FallbackChains,
    detect_text: bool,
    live_thinking: bool,
    keepalive: Option<Duration>,
    simulate: bool,
    quiet: bool,
}

fn flag(value: &str, name: &str) -> Result<bool, String> {
    env::parse_switch(name, value).map_err(|e| e.to_string())
}

fn seconds(value: &str, name: &str) -> Result<Duration, String> {
    match value.trim().parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs.is_finite() => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!(
            "{name}: expected a number of seconds, got `{value}`"
        )),
    }
}

fn models(value: &str, name: &str) -> Result<Vec<String>, String> {
    env::parse_models(name, value).map_err(|e| e.to_string())
}

/// Reads flags, then fills what they left unset from `env`.
fn parse(
    args: impl IntoIterator<Item = String>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<Options>, String> {
    let mut listen = None;
    let mut upstream = None;
    let mut log = None;
    let mut rescue = None;
    let mut retarget = None;
    let mut inject = None;
    let mut chains: Option<FallbackChains> = None;
    let mut simulate = None;
    let mut quiet = None;
    let mut detect_text = None;
    let mut live_thinking = None;
    let mut keepalive = None;

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
            "--chain" => {
                let more = env::parse_chains("--chain", &value("MODEL=M1,M2")?)
                    .map_err(|e| e.to_string())?;
                chains = Some(chains.unwrap_or_default().extend(more));
            }
            "--inject-fallbacks" | "--simulate" | "--quiet" if inline.is_some() => {
                return Err(format!("{name} takes no value"))
            }
            "--detect-text" => detect_text = Some(flag(&value("on or off")?, "--detect-text")?),
            "--live-thinking" => {
                live_thinking = Some(flag(&value("on or off")?, "--live-thinking")?)
            }
            "--keepalive" => keepalive = Some(seconds(&value("seconds")?, "--keepalive")?),
            "--inject-fallbacks" => inject = Some(true),
            "--simulate" => simulate = Some(true),
            "--quiet" => quiet = Some(true),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }

    let var = |key: &str| lookup(&format!("REFUSAL_GUARD_{key}")).filter(|v| !v.trim().is_empty());
    // RESCUE, FALLBACKS, LOG and CHAIN, with pi-refusal-guard's OMP_ / PI_
    // names too, are read as the library reads them.
    let mut vars: Vec<(String, String)> = env::PREFIXES
        .iter()
        .flat_map(|prefix| env::NAMES.iter().map(move |name| format!("{prefix}{name}")))
        .chain(["HOME".to_owned()])
        .filter_map(|key| lookup(&key).map(|value| (key, value)))
        .collect();
    // `--retarget`'s own variable stands for FALLBACKS.
    if let Some(value) = var("RETARGET") {
        vars.retain(|(key, _)| !key.ends_with("_FALLBACKS"));
        vars.push(("REFUSAL_GUARD_FALLBACKS".to_owned(), value));
    }
    let from_env = EnvConfig::from_vars(vars).map_err(|e| e.to_string())?;
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
    let log = match log {
        Some(path) => LogSetting::Path(PathBuf::from(path)),
        None => from_env
            .log
            .unwrap_or_else(|| match JsonlSink::default_path() {
                Some(path) => LogSetting::Path(path),
                None => LogSetting::Off,
            }),
    };
    let rescue = rescue.or(from_env.rescue).unwrap_or(true);
    let retarget = retarget.or(from_env.retarget).unwrap_or_default();
    let inject_fallbacks = match inject {
        Some(on) => on,
        None => var("INJECT_FALLBACKS")
            .map_or(Ok(false), |v| flag(&v, "REFUSAL_GUARD_INJECT_FALLBACKS"))?,
    };
    let chains = chains.or(from_env.chains).unwrap_or_default();
    let detect_text = match detect_text {
        Some(on) => on,
        None => var("DETECT_TEXT").map_or(Ok(false), |v| flag(&v, "REFUSAL_GUARD_DETECT_TEXT"))?,
    };
    let live_thinking = match live_thinking {
        Some(on) => on,
        None => {
            var("LIVE_THINKING").map_or(Ok(false), |v| flag(&v, "REFUSAL_GUARD_LIVE_THINKING"))?
        }
    };
    let keepalive = match keepalive {
        Some(after) => Some(after),
        None => var("KEEPALIVE")
            .map(|v| seconds(&v, "REFUSAL_GUARD_KEEPALIVE"))
            .transpose()?,
    };
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
        detect_text,
        live_thinking,
        keepalive,
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
    let mut layer = RefusalGuardLayer::new()
        .rescue(options.rescue)
        .retarget_fallbacks(options.retarget.clone())
        .inject_server_fallbacks(options.inject_fallbacks)
        .fallback_chains(options.chains.clone())
        .detect_text_refusals(options.detect_text)
        .live_thinking(options.live_thinking);
    if let Some(after) = options.keepalive {
        layer = layer.keepalive_after(after);
    }
    let log_shown = match &options.log {
        LogSetting::Off => "off".to_owned(),
        LogSetting::Path(path) => match JsonlSink::open(path) {
            Ok(sink) => {
                layer = layer.telemetry(sink);
                path.display().to_string()
            }
            Err(error) => {
                eprintln!(
                    "proxy: cannot open the refusal log {}: {error}",
                    path.display()
                );
                return ExitCode::from(2);
            }
        },
    };

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
        log_shown
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
        assert_eq!(o.chains.for_model("a"), ["b", "c"]);
        assert_eq!(o.chains.for_model("d"), ["e"]);
    }

    #[test]
    fn pi_refusal_guard_variables_are_read() {
        let env = |key: &str| match key {
            "OMP_REFUSAL_RESCUE" => Some("off".to_owned()),
            "PI_REFUSAL_RESCUE" => Some("on".to_owned()),
            "PI_REFUSAL_FALLBACKS" => Some("m1,m2".to_owned()),
            "OMP_REFUSAL_LOG" => Some("no".to_owned()),
            _ => None,
        };
        let o = parse(args(&[]), env).unwrap().unwrap();
        assert!(!o.rescue, "OMP_ wins over PI_");
        assert_eq!(o.retarget, ["m1", "m2"]);
        assert_eq!(o.log, LogSetting::Off);
        let bad = |key: &str| (key == "OMP_REFUSAL_RESCUE").then(|| "perhaps".to_owned());
        let error = parse(args(&[]), bad).unwrap_err();
        assert!(error.contains("OMP_REFUSAL_RESCUE"), "{error}");
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
        assert!(parse(args(&["--keepalive", "soon"]), none).is_err());
        assert!(parse(args(&["--keepalive", "0"]), none).is_err());
        assert!(parse(args(&["--detect-text", "perhaps"]), none).is_err());
    }

    #[test]
    fn keepalive_and_text_detection() {
        let none = |_: &str| None;
        let o = parse(
            args(&[
                "--keepalive",
                "20",
                "--detect-text=on",
                "--live-thinking",
                "on",
            ]),
            none,
        )
        .unwrap()
        .unwrap();
        assert!(o.live_thinking);
        assert_eq!(o.keepalive, Some(Duration::from_secs(20)));
        assert!(o.detect_text);
        let env = |key: &str| (key == "REFUSAL_GUARD_KEEPALIVE").then(|| "1.5".to_owned());
        let o = parse(args(&[]), env).unwrap().unwrap();
        assert_eq!(o.keepalive, Some(Duration::from_millis(1500)));
        assert!(!o.detect_text);
    }
}
