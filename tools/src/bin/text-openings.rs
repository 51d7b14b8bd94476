//! Reads JSON lines `{"text": ...}` on stdin and writes, for each, one JSON
//! line with what the text detector's rules make of it: `rules` (whether
//! the rules alone find a refusal), `opening` (the text the classifier
//! scores, or null) and `detect` (the shipped detector's verdict).
//! `tools/train_text_classifier.py` runs it to get the openings it learns
//! from, so the sentence reading is the crate's own.
//!
//! Run with `cargo run -q -p refusal-guard-tools --bin text-openings < texts.jsonl`.

use std::io::{BufRead, BufWriter, Write};

use refusal_guard::text::{detect, read_rules_only};
use serde_json::{json, Value};

fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut out = BufWriter::new(std::io::stdout().lock());
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&line)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let text = value["text"].as_str().unwrap_or_default();
        let reading = read_rules_only(text);
        let row = json!({
            "rules": reading.rules.is_refusal(),
            "opening": reading.opening,
            "detect": detect(text).is_refusal(),
        });
        writeln!(out, "{row}")?;
    }
    out.flush()
}
