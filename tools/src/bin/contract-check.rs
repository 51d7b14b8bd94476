//! Checks requests against the crate's request contract
//! (`refusal_guard_testkit::contract`) for mocks in other languages, so
//! that they keep exactly the rules the Rust upstreams keep (the Python
//! Bedrock runtime of `tests/e2e/test_bedrock.py`).
//!
//! Reads one JSON line per request on stdin, `{"method": "POST", "path":
//! "/model/m/invoke", "headers": [["name", "value"], ...], "body": "...",
//! "bedrock": true}` (`bedrock`: the upstream is Amazon Bedrock), and writes
//! one JSON line per request: `{"ok": true}`, or `{"ok": false, "rule":
//! "B1", "violation": "...", "status": 400, "headers": [[...]], "body":
//! "..."}`, the provider's answer to send back.
//!
//! ```text
//! cargo run -q -p refusal-guard-tools --bin contract-check < requests.jsonl
//! ```

use std::io::{BufRead, BufWriter, Write};

use refusal_guard_testkit::contract::{Contract, Violation};
use serde_json::{json, Value};

fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut out = BufWriter::new(std::io::stdout().lock());
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let request: Value = serde_json::from_str(&line)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        writeln!(out, "{}", verdict(&request))?;
        out.flush()?;
    }
    Ok(())
}

/// The contract's verdict on one request line.
fn verdict(request: &Value) -> Value {
    let contract = if request["bedrock"].as_bool().unwrap_or(false) {
        Contract::new().bedrock()
    } else {
        Contract::new()
    };
    let text = |key: &str| request[key].as_str().unwrap_or_default();
    let pairs: Vec<(String, String)> = request["headers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pair| Some((pair[0].as_str()?.to_owned(), pair[1].as_str()?.to_owned())))
        .collect();
    let headers = support::contract::header_map(&pairs);
    match contract.check(
        text("method"),
        text("path"),
        &headers,
        text("body").as_bytes(),
    ) {
        Ok(()) => json!({"ok": true}),
        Err(violation) => answer(&violation),
    }
}

fn answer(violation: &Violation) -> Value {
    let response = violation.response();
    let headers: Vec<Value> = response
        .headers()
        .iter()
        .map(|(name, value)| json!([name.as_str(), String::from_utf8_lossy(value.as_bytes())]))
        .collect();
    json!({
        "ok": false,
        "rule": violation.rule,
        "violation": violation.to_string(),
        "status": response.status().as_u16(),
        "headers": headers,
        "body": String::from_utf8_lossy(response.body()),
    })
}
