//! `refusal-guard eval` as a user runs it: the binary, its files in a
//! scratch directory, against the testkit's simulated providers (offline,
//! scripted per model and category, seeded, strict) or a scripted upstream
//! on loopback that holds every request to the provider's contract.

mod contract;
mod input;
mod reroutes;
mod resume;
mod server_side;
mod shares;
mod spend;
mod tenants;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;
use support::binary::{arg, run_env, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_refusal-guard");

/// A key the scripted upstreams take as a provider would.
const KEY: &str = "sk-ant-eval-test-key";

/// An eval's scratch directory: its input files and its `out` folder.
pub struct Eval {
    dir: TempDir,
}

/// How a run ended.
pub struct Ended {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Eval {
    pub fn new(name: &str) -> Eval {
        Eval {
            dir: TempDir::new(&format!("eval-{name}")),
        }
    }

    /// Writes `name` with `text`; its path.
    pub fn file(&self, name: &str, text: &str) -> String {
        arg(&self.dir.write(name, text)).to_owned()
    }

    /// Writes `variants.toml` with one variant, `direct`, that sends to
    /// `upstream`; its path.
    pub fn direct_variant(&self, upstream: &str) -> String {
        let variants =
            format!("[[variant]]\nname = \"direct\"\nflags = [\"--upstream\", \"{upstream}\"]\n");
        self.file("variants.toml", &variants)
    }

    pub fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The arguments every run here starts with: `eval --out DIR`.
    pub fn args<'a>(&'a self, more: &[&'a str]) -> Vec<String> {
        let mut args = vec![
            "eval".to_owned(),
            "--out".to_owned(),
            arg(&self.out()).to_owned(),
        ];
        args.extend(more.iter().map(|a| (*a).to_owned()));
        args
    }

    /// Runs `refusal-guard eval --out DIR ARGS` to its end, with `env`.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Ended {
        let args = self.args(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ended(run_env(BIN, &args, env))
    }

    /// `report.json`.
    pub fn report(&self) -> Value {
        let text = std::fs::read_to_string(self.out().join("report.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// `results.jsonl`, a value per line; every line whole.
    pub fn rows(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.out().join("results.jsonl")).unwrap_or_default();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "a line cut short: {text}"
        );
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

fn ended(output: Output) -> Ended {
    Ended {
        status: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A prompt set of `n` prompts `p1`.. with `label`, each its own text.
pub fn prompts(n: usize, label: &str) -> String {
    (1..=n)
        .map(|i| format!("{{\"id\":\"p{i}\",\"prompt\":\"Question {i}: how do I audit my server?\",\"label\":\"{label}\"}}\n"))
        .collect()
}

/// A simulated providers' script that refuses the first request of every
/// conversation to one of `models` (empty), and answers everything else:
/// every call is refused once and any recovery step answers it.
pub fn refusing_first(models: &[&str]) -> String {
    models
        .iter()
        .map(|model| format!("[[rule]]\nmodel = \"{model}\"\nattempt = 1\nreply = \"refusal\"\n\n"))
        .collect()
}

/// Each row's (variant, prompt, api, model), checked to be unique.
pub fn unique_calls(rows: &[Value]) -> HashSet<(String, String, String, String)> {
    let mut seen = HashSet::new();
    for row in rows {
        let field = |f: &str| row[f].as_str().unwrap().to_owned();
        let key = (
            field("variant"),
            field("prompt"),
            field("api"),
            field("model"),
        );
        assert!(seen.insert(key.clone()), "measured twice: {key:?}");
    }
    seen
}

/// The cell of `report` for variant × category × provider.
pub fn cell<'a>(report: &'a Value, variant: &str, category: &str, provider: &str) -> &'a Value {
    let cells = report["cells"].as_array().unwrap();
    cells
        .iter()
        .find(|c| c["variant"] == variant && c["category"] == category && c["provider"] == provider)
        .unwrap_or_else(|| panic!("no cell {variant} × {category} × {provider} in {report:#}"))
}
