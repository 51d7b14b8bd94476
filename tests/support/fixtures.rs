//! Recorded fixtures under `tests/fixtures/` and the formats they come in.

use bytes::Bytes;
use serde_json::Value;

pub use super::mock_upstream::{fixture, fixtures_dir};

/// The text of `docs/NAME` (a test that runs a documented example reads it
/// from the page, so that the page and the test cannot part).
pub fn doc(name: &str) -> String {
    let path = fixtures_dir().join("../../docs").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The code blocks of a Markdown page fenced as `lang` (```` ```toml ````),
/// in order, each without its fences.
pub fn code_blocks(page: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}");
    let mut blocks = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() == open {
            let block: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.starts_with("```"))
                .collect();
            blocks.push(block.join("\n") + "\n");
        }
    }
    blocks
}

/// How a recorded response is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Each event is a `data:` line only (OpenAI Chat Completions, Gemini).
    Data,
    /// Each event is named by its `type` in an `event:` line first
    /// (Anthropic Messages, OpenAI Responses).
    Named,
}

/// vercel/ai `*.chunks.txt`: one event payload a line, as the SSE body the
/// provider sends, `framing` as that provider frames it, and with `done`
/// the closing `data: [DONE]`.
pub fn json_lines_as_sse(lines: &[u8], framing: Framing, done: bool) -> Bytes {
    let text = std::str::from_utf8(lines).expect("JSON lines are UTF-8");
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if framing == Framing::Named {
            let kind = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|v| v["type"].as_str().map(str::to_owned))
                .unwrap_or_default();
            out.push_str(&format!("event: {kind}\n"));
        }
        out.push_str(&format!("data: {line}\n\n"));
    }
    if done {
        out.push_str("data: [DONE]\n\n");
    }
    Bytes::from(out)
}

/// One recorded response: status, whether it is JSON (else SSE), body.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub status: u16,
    pub json: bool,
    pub body: Bytes,
}

/// Python inline-snapshot cassettes: a list of exchanges whose response body
/// is a string (SSE) or an object (JSON).
pub fn cassette(name: &str) -> Vec<Recorded> {
    let all: Value = serde_json::from_slice(&fixture(name)).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .map(|exchange| {
            let response = &exchange["response"];
            let status = response["status_code"].as_u64().unwrap() as u16;
            match &response["body"] {
                Value::String(text) => Recorded {
                    status,
                    json: false,
                    body: Bytes::from(text.clone()),
                },
                other => Recorded {
                    status,
                    json: true,
                    body: Bytes::from(serde_json::to_vec(other).unwrap()),
                },
            }
        })
        .collect()
}
