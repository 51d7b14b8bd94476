//! The prompt set: JSON lines, each a prompt (sent once per `--send` API and
//! model) or a whole request body for one wire API (sent as written).

use std::collections::HashSet;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::results::fingerprint;
use super::wire::Api;

/// The prompt set shipped with the binary: 36 XSTest v2 prompts (CC BY
/// 4.0; see `prompts/README.md` and `prompts/LICENSE` beside this file).
pub(crate) const SHIPPED: &str = include_str!("prompts/xstest-sample.jsonl");

/// Where the shipped set is said to come from, in the report.
pub(crate) const SHIPPED_NAME: &str = "the shipped XSTest v2 sample (CC BY 4.0)";

/// The label of a prompt that gave none.
pub(crate) const UNLABELLED: &str = "(unlabelled)";

/// Longest line read (a whole request body may be long; an agent's
/// conversation is rarely past a few hundred KB).
const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Most prompts in one set.
const MAX_PROMPTS: usize = 100_000;

/// One prompt of the set.
#[derive(Debug, Clone)]
pub(crate) struct Prompt {
    /// As the line names it; unique in the set.
    pub(crate) id: String,
    /// The category the user expects, or `should_answer`.
    pub(crate) label: String,
    pub(crate) input: Input,
    /// A hash of the line's content: a result of an edited prompt is not
    /// taken for the new one's.
    pub(crate) hash: String,
}

/// What a line gives to send.
#[derive(Debug, Clone)]
pub(crate) enum Input {
    /// A user turn, built into a request for every `--send` target.
    Text(String),
    /// A request body for one API, sent as written (for Gemini the model
    /// goes in the path, so the line names it).
    Body {
        api: Api,
        model: String,
        body: Map<String, Value>,
    },
}

impl Prompt {
    /// The text the simulated providers categorise: the prompt, or the
    /// first user turn's text of a body.
    pub(crate) fn text(&self) -> String {
        match &self.input {
            Input::Text(text) => text.clone(),
            Input::Body { api, body, .. } => api.first_user_text(body).unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: Value,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    body: Option<Map<String, Value>>,
    #[serde(default)]
    api: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    label: Option<String>,
}

/// Reads the set at `path`, or the shipped one.
pub(crate) fn load(path: Option<&Path>) -> Result<Vec<Prompt>, String> {
    match path {
        None => parse(SHIPPED),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the prompt set {}: {e}", path.display()))?;
            parse(&text).map_err(|e| format!("{}: {e}", path.display()))
        }
    }
}

/// Reads a prompt set's text: every line an object, ids unique; blank
/// lines are skipped.
pub(crate) fn parse(text: &str) -> Result<Vec<Prompt>, String> {
    let mut prompts = Vec::new();
    let mut ids = HashSet::new();
    for (number, line) in text.lines().enumerate() {
        let number = number + 1;
        if line.trim().is_empty() {
            continue;
        }
        if line.len() > MAX_LINE_BYTES {
            return Err(format!("line {number}: longer than {MAX_LINE_BYTES} bytes"));
        }
        let prompt = parse_line(line).map_err(|e| format!("line {number}: {e}"))?;
        if !ids.insert(prompt.id.clone()) {
            return Err(format!(
                "line {number}: the id `{}` is given twice",
                prompt.id
            ));
        }
        prompts.push(prompt);
        if prompts.len() > MAX_PROMPTS {
            return Err(format!("more than {MAX_PROMPTS} prompts"));
        }
    }
    if prompts.is_empty() {
        return Err("no prompts in the set".to_owned());
    }
    Ok(prompts)
}

fn parse_line(line: &str) -> Result<Prompt, String> {
    let parsed: Line = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let id = match parsed.id {
        Value::String(id) if !id.trim().is_empty() && !id.contains(['\t', '\n']) => id,
        Value::Number(n) => n.to_string(),
        _ => {
            return Err("`id` must be a non-empty string (no tabs or newlines) or a number".into())
        }
    };
    let label = match parsed.label {
        Some(label) if label.trim().is_empty() => return Err("`label` is empty".into()),
        Some(label) => label.trim().to_owned(),
        None => UNLABELLED.to_owned(),
    };
    let input = match (parsed.prompt, parsed.body) {
        (Some(_), Some(_)) => return Err("give `prompt` or `body`, not both".into()),
        (None, None) => return Err("give `prompt` (a user turn) or `body` (a request)".into()),
        (Some(text), None) => {
            if parsed.api.is_some() || parsed.model.is_some() {
                return Err(
                    "`api` and `model` go with `body`; a `prompt` is sent as every --send names"
                        .into(),
                );
            }
            if text.trim().is_empty() {
                return Err("`prompt` is empty".into());
            }
            Input::Text(text)
        }
        (None, Some(body)) => body_input(parsed.api, parsed.model, body)?,
    };
    let hash = fingerprint(line.trim().as_bytes());
    Ok(Prompt {
        id,
        label,
        input,
        hash,
    })
}

fn body_input(
    api: Option<String>,
    model: Option<String>,
    body: Map<String, Value>,
) -> Result<Input, String> {
    let api = api.ok_or("a `body` needs `api`: anthropic, openai, openai-responses or gemini")?;
    let api: Api = api.parse()?;
    let model = match (model, body.get("model").and_then(Value::as_str)) {
        (Some(model), _) => model,
        (None, Some(model)) => model.to_owned(),
        (None, None) => {
            return Err(format!(
                "a {api} `body` needs `model` (in the body, or beside it)"
            ))
        }
    };
    api.check_body(&body)?;
    Ok(Input::Body { api, model, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_set_parses_and_is_labelled() {
        let prompts = parse(SHIPPED).unwrap();
        assert_eq!(prompts.len(), 36);
        let answer = prompts
            .iter()
            .filter(|p| p.label == "should_answer")
            .count();
        assert_eq!(answer, 20);
        assert!(prompts.iter().all(|p| matches!(p.input, Input::Text(_))));
    }

    #[test]
    fn lines_are_prompts_or_bodies_and_bad_ones_say_where() {
        let text = concat!(
            r#"{"id":1,"prompt":"hi","label":"cyber"}"#,
            "\n\n",
            r#"{"id":"b","api":"openai","body":{"model":"gpt-5","messages":[{"role":"user","content":"x"}]}}"#,
            "\n"
        );
        let prompts = parse(text).unwrap();
        assert_eq!(prompts[0].id, "1");
        assert_eq!(prompts[1].label, UNLABELLED);
        assert!(matches!(&prompts[1].input, Input::Body { model, .. } if model == "gpt-5"));
        for (bad, says) in [
            (r#"{"id":"a"}"#, "give `prompt`"),
            (r#"{"id":"a","prompt":"x","body":{}}"#, "not both"),
            (r#"{"id":"a","body":{"model":"m"}}"#, "needs `api`"),
            (
                r#"{"id":"a","api":"x","body":{"model":"m"}}"#,
                "unknown API",
            ),
            (r#"{"id":"","prompt":"x"}"#, "`id`"),
            (r#"{"id":"a","prompt":"x","extra":1}"#, "unknown field"),
            (
                "{\"id\":\"a\",\"prompt\":\"x\"}\n{\"id\":\"a\",\"prompt\":\"y\"}",
                "twice",
            ),
        ] {
            let error = parse(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
            assert!(error.starts_with("line "), "{error}");
        }
    }
}
