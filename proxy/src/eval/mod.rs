//! `refusal-guard eval`: which policy and fallback chain recover your
//! refusals, measured before you deploy them.
//!
//! A prompt set (JSON lines) goes through the proxy once per *variant* (a
//! name and the proxy's own flags), each call through the guard exactly as
//! a proxied request would go: the variant's [`Options`](super::Options)
//! build the layer, the tenants file, the admission and the routes as
//! `refusal-guard` builds them, and each request is handed to the
//! [`Proxy`](super::Proxy) in process. The target is the providers
//! themselves (the client keys from `ANTHROPIC_API_KEY`, `OPENAI_API_KEY`,
//! `GEMINI_API_KEY`, as the proxy reads them) or, with `--simulate`, the
//! testkit's simulated providers scripted per model and category, seeded,
//! offline.
//!
//! Calls run a bounded number at once, each try bounded in time; a 429 or
//! a 5xx is tried again after the provider's `retry-after` (else a growing
//! backoff); a spend cap on requests and tokens stops the run cleanly.
//! Every result is appended to `results.jsonl` as it ends, so a run
//! stopped any way (the cap, Ctrl-C, a kill) leaves whole lines and the
//! same command resumes it. Keys are never written anywhere.
//!
//! The report, per variant × category (the prompt's label) × provider:
//! the refused share by shape, the recovered share by step, the dead share
//! by reason, the models that served, the latency and tokens recovery
//! added; for two variants, the difference of their shares with Newcombe's
//! 95% interval. It is written as `report.json`, `report.md` (also
//! printed) and `report.html` (one page that opens offline). See
//! `docs/eval.md`.
//!
//! ```no_run
//! use clap::Parser;
//! use refusal_guard_proxy::eval::{run, EvalArgs};
//!
//! let args = EvalArgs::try_parse_from(["eval", "--simulate", "--out", "/tmp/eval"])?;
//! let status = run(args);
//! # Ok::<(), clap::Error>(())
//! ```

mod call;
mod progress;
mod prompts;
mod report;
mod results;
mod runner;
mod simulated;
mod stack;
mod variants;
mod wire;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use call::{CallSettings, SendAs};
use progress::Progress;
use prompts::{Input, Prompt};
use report::{Report, RunInfo, VariantInfo};
use results::{ResultsFile, Row};
use runner::{Budget, Run, Stop};
use simulated::Script;
use stack::{Keys, Stack, Target};

pub use report::{newcombe, wilson, Interval};

/// The `--send`s when none are given.
const DEFAULT_SENDS: [&str; 2] = ["anthropic=claude-sonnet-4-5", "openai=gpt-5-mini"];

/// `refusal-guard eval`'s arguments.
///
/// ```
/// use clap::Parser;
/// use refusal_guard_proxy::eval::EvalArgs;
///
/// let args = EvalArgs::try_parse_from(["eval", "--simulate", "--concurrency", "8"])?;
/// assert!(args.simulate);
/// assert_eq!(args.concurrency, 8);
/// # Ok::<(), clap::Error>(())
/// ```
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "eval",
    long_about = None,
    about = "Measure which policy and fallback chain recover your refusals: a prompt set through the proxy once per variant",
    after_help = "Results go to DIR/results.jsonl as they come (the same command resumes a stopped run), the report to DIR/report.{json,md,html}. Exit status: 0 every call measured; 3 stopped before the end (the spend cap, calls that failed); 130 interrupted; 1 an error (a request broke the providers' rules, a file could not be written); 2 bad arguments or input. See docs/eval.md."
)]
#[non_exhaustive]
pub struct EvalArgs {
    /// The prompt set, JSON lines: {"id", "prompt" | "api"+"body", "label"} [default: the shipped XSTest sample]
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// The variants, TOML or JSON: `[[variant]]` tables of name, flags (the proxy's), client_key_env [default: `rescue` against `chain`]
    #[arg(long, value_name = "FILE")]
    pub variants: Option<PathBuf>,
    /// Send each prompt as this API and model (repeatable): anthropic, openai, openai-responses or gemini [default: anthropic=claude-sonnet-4-5, openai=gpt-5-mini]
    #[arg(long = "send", value_name = "API=MODEL")]
    pub sends: Vec<String>,
    /// Whether the requests built from prompts ask for a stream
    #[arg(long, value_name = "on|off", default_value = "on", action = clap::ArgAction::Set, value_parser = on_off)]
    pub stream: bool,
    /// The output limit of the requests built from prompts
    #[arg(long, value_name = "N", default_value = "512", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_output_tokens: u32,
    /// No network, no key: the testkit's simulated providers, as the script says
    #[arg(long)]
    pub simulate: bool,
    /// With --simulate: the simulated providers' script (TOML: seed, `[[rule]]` tables) [default: the built-in one]
    #[arg(long, value_name = "FILE", requires = "simulate")]
    pub script: Option<PathBuf>,
    /// With --simulate: the draws' seed, over the script's
    #[arg(long, value_name = "N", requires = "simulate")]
    pub seed: Option<u64>,
    /// Where the results and the report go
    #[arg(long, value_name = "DIR", default_value = "refusal-guard-eval")]
    pub out: PathBuf,
    /// Calls at once
    #[arg(long, value_name = "N", default_value = "4", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub concurrency: u32,
    /// Longest time one try of a call takes, recovery included
    #[arg(long, value_name = "SECS", default_value = "300", value_parser = seconds)]
    pub timeout: Duration,
    /// Tries after the first, on a 429, a 5xx or a timeout
    #[arg(long, value_name = "N", default_value = "3")]
    pub retries: u32,
    /// The longest `retry-after` waited for; a call asked to wait longer fails
    #[arg(long, value_name = "SECS", default_value = "120", value_parser = seconds)]
    pub max_retry_wait: Duration,
    /// Stop starting calls once this run has sent this many requests upstream
    #[arg(long, value_name = "N")]
    pub cap_requests: Option<u64>,
    /// Stop starting calls once this run's answers and refusals reported this many tokens
    #[arg(long, value_name = "N")]
    pub cap_tokens: Option<u64>,
    /// The two variants to compare, A,B (B − A) [default: the first two]
    #[arg(long, value_name = "A,B")]
    pub compare: Option<String>,
    /// Forget the results of earlier runs in DIR and measure everything again
    #[arg(long)]
    pub restart: bool,
}

fn on_off(value: &str) -> Result<bool, String> {
    refusal_guard::env::parse_switch("value", value).map_err(|e| format!("expected {}", e.expected))
}

fn seconds(value: &str) -> Result<Duration, String> {
    match value.trim().parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs.is_finite() && secs < 1e9 => {
            Ok(Duration::from_secs_f64(secs))
        }
        _ => Err("expected a positive number of seconds".to_owned()),
    }
}

/// Runs the eval the arguments describe, on a runtime of its own, and
/// prints the summary; the exit status says how far it got (see
/// [`EvalArgs`]'s help).
///
/// ```no_run
/// use clap::Parser;
/// use refusal_guard_proxy::eval::{run, EvalArgs};
///
/// let status = run(EvalArgs::try_parse_from(["eval", "--simulate"]).unwrap());
/// ```
pub fn run(args: EvalArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("refusal-guard eval: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(evaluate(args)) {
        Ok(code) => code,
        Err(Failure::Input(message)) => {
            eprintln!("refusal-guard eval: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Run(message)) => {
            eprintln!("refusal-guard eval: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Why an eval could not run.
enum Failure {
    /// Bad arguments or input: status 2.
    Input(String),
    /// Something else: status 1.
    Run(String),
}

/// What the eval reads before it makes any call.
struct Setup {
    prompts: Vec<Prompt>,
    prompts_shown: String,
    variants: Vec<variants::Variant>,
    sends: Vec<SendAs>,
    flag_sends: usize,
    target: Target,
    compare: Option<(String, String)>,
}

fn setup(args: &EvalArgs) -> Result<Setup, String> {
    let env = |key: &str| std::env::var(key).ok();
    let prompts = prompts::load(args.prompts.as_deref())?;
    let prompts_shown = args.prompts.as_ref().map_or_else(
        || prompts::SHIPPED_NAME.to_owned(),
        |p| p.display().to_string(),
    );
    let variants = variants::load(args.variants.as_deref(), &env)?;
    let given: Vec<&str> = if args.sends.is_empty() {
        DEFAULT_SENDS.to_vec()
    } else {
        args.sends.iter().map(String::as_str).collect()
    };
    let mut sends: Vec<SendAs> = Vec::new();
    for send in given {
        let send: SendAs = send.parse().map_err(|e| format!("--send {send}: {e}"))?;
        if !sends.contains(&send) {
            sends.push(send);
        }
    }
    let flag_sends = sends.len();
    for prompt in &prompts {
        if let Input::Body { api, model, .. } = &prompt.input {
            let send = SendAs {
                api: *api,
                model: model.clone(),
            };
            if !sends.contains(&send) {
                sends.push(send);
            }
        }
    }
    let target = target(args, &prompts, &sends, flag_sends, &env)?;
    let compare = compare(args.compare.as_deref(), &variants)?;
    Ok(Setup {
        prompts,
        prompts_shown,
        variants,
        sends,
        flag_sends,
        target,
        compare,
    })
}

/// The simulated providers, or the providers with a key for each one a
/// call goes to.
fn target(
    args: &EvalArgs,
    prompts: &[Prompt],
    sends: &[SendAs],
    flag_sends: usize,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Target, String> {
    if args.simulate {
        let mut script = Script::load(args.script.as_deref())?;
        if let Some(seed) = args.seed {
            script.seed = seed;
        }
        return Ok(Target::Simulated(script));
    }
    let keys = Keys::from_env(env);
    // A text goes to every `--send`, a body to its own API.
    let apis = prompts.iter().flat_map(|prompt| match &prompt.input {
        Input::Text(_) => sends[..flag_sends].iter().map(|s| s.api).collect(),
        Input::Body { api, .. } => vec![*api],
    });
    let used: BTreeSet<String> = apis
        .map(|api| api.provider())
        .filter(|provider| keys.get(*provider).is_none())
        .map(stack::key_variable)
        .collect();
    if !used.is_empty() {
        let missing: Vec<String> = used.into_iter().collect();
        return Err(format!(
            "calls go to providers with no key: set {} (keys are read as the proxy reads them), or add --simulate",
            missing.join(", ")
        ));
    }
    Ok(Target::Providers(keys))
}

fn compare(
    value: Option<&str>,
    variants: &[variants::Variant],
) -> Result<Option<(String, String)>, String> {
    let named = |name: &str| variants.iter().any(|v| v.name == name);
    match value {
        None => {
            Ok((variants.len() >= 2).then(|| (variants[0].name.clone(), variants[1].name.clone())))
        }
        Some(pair) => {
            let (a, b) = pair
                .split_once(',')
                .map(|(a, b)| (a.trim(), b.trim()))
                .filter(|(a, b)| named(a) && named(b) && a != b)
                .ok_or_else(|| {
                    format!("--compare {pair}: expected A,B, two variants of the run")
                })?;
            Ok(Some((a.to_owned(), b.to_owned())))
        }
    }
}

async fn evaluate(args: EvalArgs) -> Result<ExitCode, Failure> {
    let setup = setup(&args).map_err(Failure::Input)?;
    let (results, latest) = open_results(&args).map_err(Failure::Run)?;
    let run = Arc::new(build_run(&setup, &args).map_err(Failure::Input)?);
    let jobs = run.jobs();
    let todo: Vec<_> = jobs
        .iter()
        .copied()
        .filter(|job| {
            !latest
                .get(&run.key(*job))
                .is_some_and(|row| run.measured(*job, row))
        })
        .collect();
    eprintln!(
        "refusal-guard eval: {} calls ({} prompts × {} variants over {}), {} measured earlier, {} to make; results in {}",
        jobs.len(),
        setup.prompts.len(),
        setup.variants.len(),
        target_shown(&setup.target),
        jobs.len() - todo.len(),
        todo.len(),
        args.out.join(RESULTS).display()
    );
    let budget = Budget {
        max_requests: args.cap_requests,
        max_tokens: args.cap_tokens,
        ..Budget::default()
    };
    let progress = Progress::new(todo.len() as u64);
    let concurrency = args.concurrency as usize;
    let ran = runner::drive(
        run.clone(),
        todo,
        concurrency,
        budget,
        &results,
        &progress,
        interrupted(),
    )
    .await;
    progress.finish();
    let violations = violations(&run);
    let mut latest = latest;
    for row in ran.rows {
        latest.insert(row.key(), row);
    }
    let ended = Ended {
        stop: &ran.stop,
        budget: &ran.budget,
        violations: violations.len(),
    };
    let report = report(&setup, &run, &jobs, &latest, ended);
    write_report(&report, &args.out).map_err(Failure::Run)?;
    print!("{}", report.to_markdown());
    Ok(finish(&report, &ran.stop, &violations, &args.out))
}

/// The results file's name in `--out`.
const RESULTS: &str = "results.jsonl";

/// The results file, emptied first with `--restart`, and the last row of
/// each call it holds.
fn open_results(args: &EvalArgs) -> Result<(ResultsFile, HashMap<results::Key, Row>), String> {
    let path = args.out.join(RESULTS);
    if args.restart {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("cannot remove {}: {e}", path.display()))
            }
            _ => {}
        }
    }
    let (results, earlier) = ResultsFile::open(&path)?;
    if earlier.cut_bytes > 0 {
        eprintln!(
            "refusal-guard eval: {}: removed a last line cut short ({} bytes; that call is measured again)",
            path.display(),
            earlier.cut_bytes
        );
    }
    if earlier.unreadable > 0 {
        eprintln!(
            "refusal-guard eval: {}: {} lines could not be read (kept, not counted)",
            path.display(),
            earlier.unreadable
        );
    }
    let latest = earlier
        .rows
        .into_iter()
        .map(|row| (row.key(), row))
        .collect();
    Ok((results, latest))
}

fn build_run(setup: &Setup, args: &EvalArgs) -> Result<Run, String> {
    let categories: HashMap<String, String> = setup
        .prompts
        .iter()
        .filter(|p| p.label != prompts::UNLABELLED)
        .map(|p| (p.text(), p.label.clone()))
        .collect();
    let mut stacks = Vec::new();
    for variant in &setup.variants {
        let of_variant = setup
            .sends
            .iter()
            .map(|_| Stack::build(variant, &setup.target, &categories))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("variant `{}`: {e}", variant.name))?;
        stacks.push(of_variant);
    }
    let keys = match &setup.target {
        Target::Providers(keys) => Some(keys.clone()),
        Target::Simulated(_) => None,
    };
    Ok(Run {
        variants: setup.variants.clone(),
        prompts: setup.prompts.clone(),
        sends: setup.sends.clone(),
        flag_sends: setup.flag_sends,
        stacks,
        keys,
        settings: CallSettings {
            timeout: args.timeout,
            retries: args.retries,
            max_retry_wait: args.max_retry_wait,
            max_output_tokens: args.max_output_tokens,
            stream: args.stream,
        },
    })
}

fn target_shown(target: &Target) -> String {
    match target {
        Target::Simulated(script) => {
            format!(
                "the simulated providers ({}, seed {})",
                script.source, script.seed
            )
        }
        Target::Providers(keys) => format!("the providers (client keys for {keys:?})"),
    }
}

/// What the simulated providers answered with a contract error, each a
/// line.
fn violations(run: &Run) -> Vec<String> {
    run.stacks
        .iter()
        .flatten()
        .filter_map(|stack| stack.simulated.as_ref())
        .flat_map(|simulated| simulated.violations())
        .collect()
}

/// How the run's calls ended: why it stopped early, what it spent, how
/// many requests broke the providers' rules.
struct Ended<'a> {
    stop: &'a Option<Stop>,
    budget: &'a Budget,
    violations: usize,
}

fn report(
    setup: &Setup,
    run: &Run,
    jobs: &[runner::Job],
    latest: &HashMap<results::Key, Row>,
    ended: Ended<'_>,
) -> Report {
    let Ended {
        stop,
        budget,
        violations,
    } = ended;
    let mut rows = Vec::new();
    let mut errors = 0;
    for job in jobs {
        match latest.get(&run.key(*job)) {
            Some(row) if run.measured(*job, row) => rows.push(row.clone()),
            Some(row) if row.error.is_some() => errors += 1,
            _ => {}
        }
    }
    let info = RunInfo {
        prompts: setup.prompts_shown.clone(),
        prompt_count: setup.prompts.len(),
        sends: setup.sends[..setup.flag_sends]
            .iter()
            .map(ToString::to_string)
            .collect(),
        target: target_shown(&setup.target),
        variants: setup
            .variants
            .iter()
            .map(|v| VariantInfo {
                name: v.name.clone(),
                flags: v.flags.clone(),
            })
            .collect(),
        calls_planned: jobs.len(),
        calls_measured: rows.len(),
        errors,
        complete: rows.len() == jobs.len(),
        stopped: stop.as_ref().map(stop_shown),
        contract_violations: violations,
        requests: budget.requests,
        tokens: budget.tokens,
    };
    let compare = setup
        .compare
        .as_ref()
        .map(|(a, b)| (a.as_str(), b.as_str()));
    Report::build(info, &rows, compare)
}

fn stop_shown(stop: &Stop) -> String {
    match stop {
        Stop::Cap(spent) => format!("the spend cap was reached: {spent}"),
        Stop::Interrupted => "interrupted (the calls in flight were dropped)".to_owned(),
        Stop::Failed(error) => error.clone(),
    }
}

fn write_report(report: &Report, out: &Path) -> Result<(), String> {
    for (name, text) in [
        ("report.json", report.to_json()),
        ("report.md", report.to_markdown()),
        ("report.html", report.to_html()),
    ] {
        let path = out.join(name);
        // Written beside, then renamed over: a reader never sees half a report.
        let next = out.join(format!(".{name}.next"));
        std::fs::write(&next, text)
            .and_then(|()| std::fs::rename(&next, &path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Says how the run ended, on stderr, and its exit status.
fn finish(report: &Report, stop: &Option<Stop>, violations: &[String], out: &Path) -> ExitCode {
    let run = &report.run;
    eprintln!(
        "refusal-guard eval: {} of {} calls measured; the report is {}",
        run.calls_measured,
        run.calls_planned,
        out.join("report.html").display()
    );
    if !violations.is_empty() {
        for violation in violations.iter().take(10) {
            eprintln!("refusal-guard eval: contract violation: {violation}");
        }
        eprintln!(
            "refusal-guard eval: {} requests broke the providers' rules: the measurement is not to be trusted",
            violations.len()
        );
        return ExitCode::FAILURE;
    }
    match stop {
        Some(Stop::Interrupted) => {
            eprintln!("refusal-guard eval: interrupted; run the same command again to resume");
            ExitCode::from(130)
        }
        Some(Stop::Failed(error)) => {
            eprintln!("refusal-guard eval: stopped: {error}");
            ExitCode::FAILURE
        }
        Some(Stop::Cap(spent)) => {
            eprintln!(
                "refusal-guard eval: stopped: the spend cap was reached ({spent}); run the same command again, with a higher cap, to measure the rest"
            );
            ExitCode::from(3)
        }
        None if run.errors > 0 => {
            eprintln!(
                "refusal-guard eval: {} calls failed (see `error` in results.jsonl); run the same command again to try them again",
                run.errors
            );
            ExitCode::from(3)
        }
        None => ExitCode::SUCCESS,
    }
}

/// Completes at the first SIGINT or SIGTERM; a second one exits at once
/// (the results file holds whole lines either way).
async fn interrupted() {
    super::run::signal().await;
    eprintln!(
        "refusal-guard eval: stopping; the calls in flight are dropped (signal again to quit now)"
    );
    tokio::spawn(async {
        super::run::signal().await;
        std::process::exit(130);
    });
}
