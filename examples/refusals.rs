//! Reports on the refusal log, like pi-refusal-guard's `/refusals` command.
//!
//! ```text
//! cargo run --example refusals -- [--log PATH] [--json] [clear]
//! ```
//!
//! The log is `--log PATH`, else `$REFUSAL_GUARD_LOG`, else
//! `~/.refusal-guard/refusals.jsonl`. A missing log is not an error: it means
//! nothing was recorded yet, so the (empty) report is printed and the exit
//! status is 0. `clear` deletes the log. A bad argument exits with status 2.

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use refusal_guard::telemetry::{JsonlSink, Report};

const USAGE: &str = "usage: refusals [--log PATH] [--json] [clear]";

struct Args {
    log: Option<PathBuf>,
    json: bool,
    clear: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut parsed = Args {
        log: None,
        json: false,
        clear: false,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => parsed.json = true,
            "clear" => parsed.clear = true,
            "--log" => match args.next() {
                Some(path) if !path.is_empty() => parsed.log = Some(path.into()),
                _ => return Err("--log needs a path".to_owned()),
            },
            other => match other.strip_prefix("--log=") {
                Some(path) if !path.is_empty() => parsed.log = Some(path.into()),
                _ => return Err(format!("unknown argument `{other}`")),
            },
        }
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

    let path = args
        .log
        .or_else(|| std::env::var_os("REFUSAL_GUARD_LOG").map(PathBuf::from))
        .filter(|path| !path.as_os_str().is_empty())
        .or_else(JsonlSink::default_path);
    let Some(path) = path else {
        eprintln!("refusals: no log path: pass --log PATH or set REFUSAL_GUARD_LOG or HOME");
        return ExitCode::from(2);
    };

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
