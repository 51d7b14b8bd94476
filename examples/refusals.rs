//! Reports on the refusal log, like pi-refusal-guard's `/refusals` command.
//!
//! ```text
//! cargo run --example refusals -- [--log PATH]... [--json | --html FILE] [clear]
//! ```
//!
//! The report counts refusals by outcome, category, model and dead reason,
//! adds up the tokens refused attempts cost (by the model that refused and
//! by category), and lists the five most recent.
//!
//! The log is `--log PATH`, else `$REFUSAL_GUARD_LOG`, else
//! `~/.refusal-guard/refusals.jsonl`. `--html FILE` writes the dashboard (one
//! self-contained page) of every `--log` given, read as one log. A missing log is not an error: it means
//! nothing was recorded yet, so the (empty) report is printed and the exit
//! status is 0. `clear` deletes the log. A bad argument exits with status 2.

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use refusal_guard::telemetry::{Dashboard, JsonlSink, Report};

const USAGE: &str = "usage: refusals [--log PATH]... [--json | --html FILE] [clear]";

struct Args {
    logs: Vec<PathBuf>,
    json: bool,
    html: Option<PathBuf>,
    clear: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut parsed = Args {
        logs: Vec::new(),
        json: false,
        html: None,
        clear: false,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => parsed.json = true,
            "clear" => parsed.clear = true,
            "--log" => match args.next() {
                Some(path) if !path.is_empty() => parsed.logs.push(path.into()),
                _ => return Err("--log needs a path".to_owned()),
            },
            "--html" => match args.next() {
                Some(path) if !path.is_empty() => parsed.html = Some(path.into()),
                _ => return Err("--html needs a file to write".to_owned()),
            },
            other => match other.split_once('=') {
                Some(("--log", path)) if !path.is_empty() => parsed.logs.push(path.into()),
                Some(("--html", path)) if !path.is_empty() => parsed.html = Some(path.into()),
                _ => return Err(format!("unknown argument `{other}`")),
            },
        }
    }
    if parsed.html.is_some() && (parsed.json || parsed.clear) {
        return Err("--html goes with neither --json nor clear".to_owned());
    }
    if parsed.clear && parsed.logs.len() > 1 {
        return Err("clear takes one log".to_owned());
    }
    Ok(Some(parsed))
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("refusals: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };

    if let Some(html) = &args.html {
        return write_html(&args.logs, html);
    }
    let path = args
        .logs
        .first()
        .cloned()
        .or_else(|| std::env::var_os("REFUSAL_GUARD_LOG").map(PathBuf::from))
        .filter(|path| !path.as_os_str().is_empty())
        .or_else(JsonlSink::default_path);
    let Some(path) = path else {
        eprintln!("refusals: no log path: pass --log PATH or set REFUSAL_GUARD_LOG or HOME");
        return ExitCode::from(2);
    };

    if args.logs.len() > 1 {
        eprintln!("refusals: several logs are read together only by --html");
        return ExitCode::from(2);
    }
    if args.clear {
        return match std::fs::remove_file(&path) {
            Ok(()) => {
                println!("Cleared the refusal log {}", path.display());
                ExitCode::SUCCESS
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                println!("No refusal log to clear at {}", path.display());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("refusals: cannot delete {}: {error}", path.display());
                ExitCode::FAILURE
            }
        };
    }

    let (report, skipped, missing) = match Report::read_path(&path) {
        Ok((report, skipped)) => (report, skipped, false),
        Err(error) if error.kind() == io::ErrorKind::NotFound => (Report::default(), 0, true),
        Err(error) => {
            eprintln!("refusals: cannot read {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    };

    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(error) => {
                eprintln!("refusals: cannot encode the report: {error}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        if missing {
            println!("No refusal log yet at {}", path.display());
        } else {
            println!("Log: {}", path.display());
        }
        print!("{report}");
    }
    if skipped > 0 {
        eprintln!(
            "refusals: skipped {skipped} unreadable line{} in {}",
            if skipped == 1 { "" } else { "s" },
            path.display()
        );
    }
    ExitCode::SUCCESS
}

/// Writes the dashboard of `logs` (or of the default log) to `out`.
fn write_html(logs: &[PathBuf], out: &PathBuf) -> ExitCode {
    let logs: Vec<PathBuf> = if logs.is_empty() {
        std::env::var_os("REFUSAL_GUARD_LOG")
            .map(PathBuf::from)
            .filter(|path| !path.as_os_str().is_empty())
            .or_else(JsonlSink::default_path)
            .into_iter()
            .collect()
    } else {
        logs.to_vec()
    };
    let dashboard = match Dashboard::from_logs(&logs, u64::MAX) {
        Ok(dashboard) => dashboard,
        Err(error) => {
            eprintln!("refusals: cannot read the logs: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(error) = std::fs::write(out, dashboard.to_html()) {
        eprintln!("refusals: cannot write {}: {error}", out.display());
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
