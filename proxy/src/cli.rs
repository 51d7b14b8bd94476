//! The `refusal-guard` command line: the proxy, and reports on its refusal
//! log. The binary's `main` is [`main`]; it lives here so that the command
//! is a library function other binaries (and the tests' own build of the
//! binary) call as it is.
//!
//! ```text
//! cargo install refusal-guard-proxy                 # or: --path proxy
//! refusal-guard --simulate                      # no network, no key: see a rescue
//! refusal-guard                                 # in front of api.anthropic.com
//! ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude
//! refusal-guard report [--log PATH] [--json]    # the refusals so far
//! refusal-guard report --html refusals.html     # the dashboard, one page
//! refusal-guard report clear                    # delete the log
//! refusal-guard report --by tenant              # refusals per tenant
//! refusal-guard report --routing                # the fallback order learned from the log
//! refusal-guard report --routing --log a.jsonl --log b.jsonl   # from every replica's log
//! refusal-guard tenants hash-key < key.txt      # a client key's hash for the tenants file
//! refusal-guard tenants check tenants.toml      # is this tenants file good?
//! refusal-guard eval --simulate                 # which ladder recovers what, offline
//! refusal-guard eval --variants v.toml          # the same against the providers
//! refusal-guard --help                          # every flag and its variable
//! ```
//!
//! Without a subcommand it runs the proxy ([`crate::run`]); every flag
//! can also be set as `REFUSAL_GUARD_<NAME>`, a flag winning over its
//! variable. Bad arguments exit with status 2.

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::eval::EvalArgs;
use crate::{eval, hash_key, run, Options, Tenants};
use crate::{Dashboard, Report};
use clap::{Args, CommandFactory, FromArgMatches, Subcommand};
use refusal_guard::routing::{LearnedRouting, RouteTable};
use refusal_guard::telemetry::JsonlSink;

const REPORT_ABOUT: &str = "Report on the refusal log: refusals by outcome, category, model and \
dead reason, the tokens refused attempts cost, the five most recent";

const REPORT_AFTER: &str = "The log is --log PATH, else $REFUSAL_GUARD_LOG, else \
~/.refusal-guard/refusals.jsonl. A missing log is no error: nothing was recorded yet, so the \
empty report is printed (status 0).";

/// `refusal-guard report`'s arguments.
#[derive(Debug, Args)]
struct ReportArgs {
    /// The refusal log (JSON lines); several only with --html or --routing, read as one
    #[arg(long = "log", value_name = "PATH", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    logs: Vec<String>,
    /// The report as JSON
    #[arg(long, conflicts_with = "html")]
    json: bool,
    /// Write the dashboard (one self-contained page) to FILE
    #[arg(long, value_name = "FILE", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    html: Option<String>,
    /// `clear`: delete the log
    #[arg(value_name = "clear", value_parser = ["clear"], conflicts_with = "html")]
    clear: Option<String>,
    /// Refusals per tenant: how many, how many recovered, why the others stayed dead
    #[arg(long, value_name = "tenant", value_parser = ["tenant"], conflicts_with_all = ["html", "clear"])]
    by: Option<String>,
    /// The fallback order learned routing draws from the log's fallbacks (or several logs', one per replica): per category and requested model, each candidate's decayed counts, best first
    #[arg(long, conflicts_with_all = ["html", "clear", "by"])]
    routing: bool,
    /// With --routing: the time in which a count halves, as --route-half-life
    #[arg(
        long,
        value_name = "SECS",
        default_value = "86400",
        requires = "routing"
    )]
    half_life: f64,
}

const TENANTS_ABOUT: &str = "The tenants file: a client key's hash for it, or a check of a file";

/// `refusal-guard tenants`'s subcommands.
#[derive(Debug, clap::Subcommand)]
enum TenantsCommand {
    /// Reads a client key on standard input (one line) and prints its SHA-256, for `key_sha256`
    HashKey,
    /// Reads a tenants file and says whether the proxy would serve it: status 0 and its tenants on stdout, or status 1 and the first error (naming the tenant) on stderr
    Check {
        /// The tenants file
        path: PathBuf,
    },
}

/// The `refusal-guard` command: parses the process's arguments and runs
/// what they ask for, returning the exit status (2 for bad arguments).
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     refusal_guard_proxy::cli::main()
/// }
/// ```
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let report = ReportArgs::augment_args(clap::Command::new("report"))
        .about(REPORT_ABOUT)
        .after_help(REPORT_AFTER);
    let tenants = TenantsCommand::augment_subcommands(clap::Command::new("tenants"))
        .about(TENANTS_ABOUT)
        .subcommand_required(true);
    let command = Options::command()
        .subcommand(report)
        .subcommand(tenants)
        .subcommand(EvalArgs::command())
        .args_conflicts_with_subcommands(true);
    let vars = |key: &str| std::env::var(key).ok();
    let matches = match Options::matches_from(command, &args) {
        Ok(matches) => matches,
        Err(error) => error.exit(),
    };
    match matches.subcommand() {
        Some(("report", report)) => match ReportArgs::from_arg_matches(report) {
            Ok(args) => report_command(args),
            Err(error) => error.exit(),
        },
        Some(("tenants", tenants)) => match TenantsCommand::from_arg_matches(tenants) {
            Ok(command) => tenants_command(command),
            Err(error) => error.exit(),
        },
        Some(("eval", args)) => match EvalArgs::from_arg_matches(args) {
            Ok(args) => eval::run(args),
            Err(error) => error.exit(),
        },
        _ => match Options::from_matches(&matches, vars) {
            Ok(options) => run(options),
            Err(error) => error.exit(),
        },
    }
}

/// `$REFUSAL_GUARD_LOG`, else the default log.
fn default_log() -> Option<PathBuf> {
    std::env::var_os("REFUSAL_GUARD_LOG")
        .map(PathBuf::from)
        .filter(|path| !path.as_os_str().is_empty())
        .or_else(JsonlSink::default_path)
}

const NO_LOG: &str = "no log path: pass --log PATH or set REFUSAL_GUARD_LOG or HOME";

fn usage_error(message: &str) -> ExitCode {
    eprintln!("refusal-guard report: {message}");
    ExitCode::from(2)
}

fn report_command(args: ReportArgs) -> ExitCode {
    let logs: Vec<PathBuf> = args.logs.iter().map(PathBuf::from).collect();
    if let Some(html) = &args.html {
        let logs = if logs.is_empty() {
            default_log().into_iter().collect()
        } else {
            logs
        };
        return write_html(&logs, Path::new(html));
    }
    if args.routing {
        let logs = if logs.is_empty() {
            default_log().into_iter().collect()
        } else {
            logs
        };
        if logs.is_empty() {
            return usage_error(NO_LOG);
        }
        return print_routing(&logs, args.json, args.half_life);
    }
    if logs.len() > 1 {
        return usage_error("several logs are read together only by --html and --routing");
    }
    let Some(path) = logs.into_iter().next().or_else(default_log) else {
        return usage_error(NO_LOG);
    };
    if args.clear.is_some() {
        return clear(&path);
    }
    print_report(&path, args.json, args.by.is_some())
}

fn tenants_command(command: TenantsCommand) -> ExitCode {
    match command {
        TenantsCommand::HashKey => {
            let mut key = String::new();
            if let Err(error) = io::stdin().read_line(&mut key) {
                eprintln!("refusal-guard tenants: cannot read the key: {error}");
                return ExitCode::FAILURE;
            }
            let key = key.trim_end_matches(['\n', '\r']);
            if key.is_empty() {
                eprintln!("refusal-guard tenants: no key on standard input");
                return ExitCode::from(2);
            }
            println!("{}", hash_key(key));
            ExitCode::SUCCESS
        }
        TenantsCommand::Check { path } => {
            // Read as the proxy reads it at start (bounded, the same errors).
            match Tenants::load(&path) {
                Ok(tenants) => {
                    let table = tenants.table();
                    let names = table.names();
                    println!(
                        "{}: {} tenants ({})",
                        path.display(),
                        names.len(),
                        names.join(", ")
                    );
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("refusal-guard tenants: {error}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `report --routing`: what learned routing makes of the logs' fallbacks.
fn print_routing(logs: &[PathBuf], json: bool, half_life: f64) -> ExitCode {
    let half_life = std::time::Duration::try_from_secs_f64(half_life)
        .unwrap_or(LearnedRouting::DEFAULT_HALF_LIFE);
    let table = match RouteTable::from_logs(logs, half_life) {
        Ok(table) => table,
        Err(error) => {
            eprintln!("refusal-guard report: cannot read the logs: {error}");
            return ExitCode::FAILURE;
        }
    };
    if json {
        let rows: Vec<serde_json::Value> = table
            .rows
            .iter()
            .map(|row| {
                let candidates: Vec<serde_json::Value> = row
                    .candidates
                    .iter()
                    .map(|c| serde_json::json!({"candidate": c.candidate, "served": c.served, "refused": c.refused, "score": c.score()}))
                    .collect();
                serde_json::json!({"category": row.key.category(), "model": row.key.model(), "candidates": candidates})
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
    } else {
        print!("{table}");
    }
    ExitCode::SUCCESS
}

fn clear(path: &Path) -> ExitCode {
    match std::fs::remove_file(path) {
        Ok(()) => {
            println!("Cleared the refusal log {}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            println!("No refusal log to clear at {}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "refusal-guard report: cannot delete {}: {error}",
                path.display()
            );
            ExitCode::FAILURE
        }
    }
}

fn print_report(path: &Path, json: bool, by_tenant: bool) -> ExitCode {
    let (report, skipped, missing) = match Report::read_path(path) {
        Ok((report, skipped)) => (report, skipped, false),
        Err(error) if error.kind() == io::ErrorKind::NotFound => (Report::default(), 0, true),
        Err(error) => {
            eprintln!(
                "refusal-guard report: cannot read {}: {error}",
                path.display()
            );
            return ExitCode::FAILURE;
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(error) => {
                eprintln!("refusal-guard report: cannot encode the report: {error}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        if missing {
            println!("No refusal log yet at {}", path.display());
        } else {
            println!("Log: {}", path.display());
        }
        if by_tenant {
            print!("{}", report.tenants_table());
        } else {
            print!("{report}");
        }
    }
    if skipped > 0 {
        eprintln!(
            "refusal-guard report: skipped {skipped} unreadable line{} in {}",
            if skipped == 1 { "" } else { "s" },
            path.display()
        );
    }
    ExitCode::SUCCESS
}

/// Writes the dashboard of `logs`, read as one log, to `out`.
fn write_html(logs: &[PathBuf], out: &Path) -> ExitCode {
    let dashboard = match Dashboard::from_logs(logs, u64::MAX) {
        Ok(dashboard) => dashboard,
        Err(error) => {
            eprintln!("refusal-guard report: cannot read the logs: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(error) = std::fs::write(out, dashboard.to_html()) {
        eprintln!(
            "refusal-guard report: cannot write {}: {error}",
            out.display()
        );
        return ExitCode::FAILURE;
    }
    println!(
        "Wrote the dashboard of {} refusal{} to {}",
        dashboard.total(),
        if dashboard.total() == 1 { "" } else { "s" },
        out.display()
    );
    ExitCode::SUCCESS
}
