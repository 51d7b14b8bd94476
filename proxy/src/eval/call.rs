//! One call: a prompt sent as one API and model through one variant's
//! proxy, tried again on a 429, a 5xx or a timeout (after the provider's
//! `retry-after`, else a growing backoff), and what the guard made of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use refusal_guard::refusal::{
    AttemptResult, AttemptStep, Outcome, RefusalHandle, RefusalKind, RefusalSignal,
};
use refusal_guard::telemetry::RefusalRecord;
use serde_json::Value;

use super::prompts::{Input, Prompt};
use super::results::{Row, RowRefusal, Shape, Step};
use super::stack::{Keys, Stack};
use super::variants::Variant;
use super::wire::Api;

/// The largest response read (answers are bounded by `--max-output-tokens`).
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The first backoff; it doubles with each try, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How calls are made.
#[derive(Debug, Clone)]
pub(crate) struct CallSettings {
    /// One try: the request, its recovery and reading the answer.
    pub(crate) timeout: Duration,
    /// Tries after the first.
    pub(crate) retries: u32,
    /// The longest `retry-after` waited for; a longer one ends the call.
    pub(crate) max_retry_wait: Duration,
    /// `max_tokens` (or the API's name for it) of a built request.
    pub(crate) max_output_tokens: u32,
    /// Whether built requests ask for a stream.
    pub(crate) stream: bool,
}

/// An API and a model a call is sent as.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SendAs {
    pub(crate) api: Api,
    pub(crate) model: String,
}

impl std::fmt::Display for SendAs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.api, self.model)
    }
}

impl std::str::FromStr for SendAs {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        let (api, model) = value
            .split_once('=')
            .ok_or("expected API=MODEL, e.g. anthropic=claude-sonnet-4-5")?;
        let model = model.trim();
        if model.is_empty() || model.contains(['/', '?', '#', ' ']) {
            return Err("expected a model name after API=".to_owned());
        }
        Ok(SendAs {
            api: api.parse()?,
            model: model.to_owned(),
        })
    }
}

/// Everything one call reads.
pub(crate) struct CallOf<'a> {
    pub(crate) stack: &'a Stack,
    pub(crate) variant: &'a Variant,
    pub(crate) prompt: &'a Prompt,
    pub(crate) send: &'a SendAs,
    /// The client's keys (`None`: the simulated providers).
    pub(crate) keys: Option<&'a Keys>,
    pub(crate) settings: &'a CallSettings,
}

/// What the client got.
struct Exchanged {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    /// The guard settled a refusal.
    refused: bool,
}

/// What one try came to.
enum Tried {
    /// The guard's decision, or an answer.
    Measured(Box<Row>),
    /// Worth trying again: why, and how long the provider asked to wait.
    Again {
        why: String,
        wait: Option<Duration>,
        requests: u32,
    },
    /// Not worth trying again.
    Failed { why: String, status: u16 },
}

impl CallOf<'_> {
    /// Makes the call, trying again as the settings allow. Always a row:
    /// one with an `error` measured nothing.
    pub(crate) async fn run(&self) -> Row {
        let (mut requests, mut retries) = (0u32, 0u32);
        loop {
            match self.try_once().await {
                Tried::Measured(mut row) => {
                    row.requests += requests;
                    row.retries = retries;
                    return *row;
                }
                Tried::Failed { why, status } => {
                    return self.failed(why, status, requests + 1, retries);
                }
                Tried::Again {
                    why,
                    wait,
                    requests: sent,
                } => {
                    requests += sent;
                    if retries >= self.settings.retries {
                        return self.failed(
                            format!("{why} (after {retries} retries)"),
                            0,
                            requests,
                            retries,
                        );
                    }
                    let wait = match wait {
                        Some(wait) if wait > self.settings.max_retry_wait => {
                            let why = format!(
                                "{why}: the provider asks to wait {} s (retry-after), longer than --max-retry-wait",
                                wait.as_secs()
                            );
                            return self.failed(why, 0, requests, retries);
                        }
                        Some(wait) => wait,
                        None => backoff(retries),
                    };
                    tokio::time::sleep(wait).await;
                    retries += 1;
                }
            }
        }
    }

    async fn try_once(&self) -> Tried {
        let name = conversation_name();
        let request = match self.request(&name) {
            Ok(request) => request,
            Err(why) => return Tried::Failed { why, status: 0 },
        };
        let started = Instant::now();
        let read = tokio::time::timeout(self.settings.timeout, self.exchange(request)).await;
        let record = self.stack.take_record(&name);
        let latency_ms = started.elapsed().as_millis() as u64;
        let Ok(read) = read else {
            return Tried::Again {
                why: format!("no answer within {} s", self.settings.timeout.as_secs_f64()),
                wait: None,
                requests: 1,
            };
        };
        let Exchanged {
            status,
            headers,
            body,
            refused,
        } = match read {
            Ok(read) => read,
            Err(why) => return Tried::Failed { why, status: 0 },
        };
        match (record, refused) {
            // A reroute only recorded was answered, by another model.
            (Some(record), _) if record.outcome == Outcome::Rerouted => {}
            (Some(record), _) => {
                return Tried::Measured(Box::new(self.refused(&record, status, latency_ms, &body)));
            }
            // Never counted as answered: a refusal measured wrong is worse
            // than one not measured.
            (None, true) => {
                let why = "the guard settled a refusal whose record was not found".to_owned();
                return Tried::Failed {
                    why,
                    status: status.as_u16(),
                };
            }
            (None, false) => {}
        }
        if status.is_success() {
            return Tried::Measured(Box::new(self.answered(status, latency_ms, &body)));
        }
        let why = format!("HTTP {}: {}", status.as_u16(), error_message(&body));
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            let wait = retry_after(&headers, SystemTime::now());
            return Tried::Again {
                why,
                wait,
                requests: 1,
            };
        }
        Tried::Failed {
            why,
            status: status.as_u16(),
        }
    }

    /// Sends `request` and reads the answer whole, then waits for the
    /// guard to settle it (its record is made by then).
    async fn exchange(&self, request: Request<Full<Bytes>>) -> Result<Exchanged, String> {
        let response = self.stack.send(request).await;
        let (parts, body) = response.into_parts();
        let handle = parts.extensions.get::<RefusalHandle>().cloned();
        let body = read_whole(body).await?;
        let refused = match handle {
            Some(handle) => handle.settled().await.is_some(),
            None => false,
        };
        Ok(Exchanged {
            status: parts.status,
            headers: parts.headers,
            body,
            refused,
        })
    }

    fn request(&self, name: &str) -> Result<Request<Full<Bytes>>, String> {
        let (api, path, body) = match &self.prompt.input {
            Input::Text(text) => {
                let (api, model, settings) = (self.send.api, &self.send.model, self.settings);
                let body = api.request(model, text, settings.stream, settings.max_output_tokens);
                (api, api.path(model, settings.stream), body)
            }
            Input::Body { api, model, body } => (
                *api,
                api.path(model, api.streams(body)),
                Value::Object(body.clone()),
            ),
        };
        let mut request = Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(refusal_guard::header::CONVERSATION, name)
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        let headers = request.headers_mut();
        let key = match self.keys {
            None => "sk-simulated-no-network",
            Some(keys) => keys.get(api.provider()).ok_or_else(|| {
                let variable = super::stack::key_variable(api.provider());
                format!("no {} key: set {variable}", api.provider())
            })?,
        };
        api.credentials(headers, key)?;
        if let Some(key) = &self.variant.client_key {
            let mut value =
                HeaderValue::from_str(key).map_err(|_| "the client key is no header value")?;
            value.set_sensitive(true);
            headers.insert(refusal_guard::header::CLIENT_KEY, value);
        }
        Ok(request)
    }

    fn row(&self, status: StatusCode, latency_ms: u64) -> Row {
        let (api, model) = match &self.prompt.input {
            Input::Text(_) => (self.send.api, self.send.model.clone()),
            Input::Body { api, model, .. } => (*api, model.clone()),
        };
        Row {
            variant: self.variant.name.clone(),
            variant_hash: self.variant.hash.clone(),
            prompt: self.prompt.id.clone(),
            prompt_hash: self.prompt.hash.clone(),
            api: api.as_str().to_owned(),
            model,
            provider: api.provider().as_str().to_owned(),
            label: self.prompt.label.clone(),
            status: status.as_u16(),
            answered: false,
            refusal: None,
            latency_ms,
            added_latency_ms: 0,
            added_tokens: 0,
            tokens: 0,
            requests: 1,
            retries: 0,
            error: None,
        }
    }

    fn api(&self) -> Api {
        match &self.prompt.input {
            Input::Text(_) => self.send.api,
            Input::Body { api, .. } => *api,
        }
    }

    fn answered(&self, status: StatusCode, latency_ms: u64, body: &[u8]) -> Row {
        Row {
            answered: true,
            tokens: self.api().reported_tokens(body).unwrap_or(0),
            ..self.row(status, latency_ms)
        }
    }

    fn refused(
        &self,
        record: &RefusalRecord,
        status: StatusCode,
        latency_ms: u64,
        body: &[u8],
    ) -> Row {
        let recovered = matches!(record.outcome, Outcome::Fallback | Outcome::Rescued);
        let added_tokens = record.usage.map_or(0, |u| u.total_tokens());
        // A served recovery is the client's to account; a refusal served as
        // it came is already in the record's usage.
        let served_tokens = if recovered {
            self.api().reported_tokens(body).unwrap_or(0)
        } else {
            0
        };
        let sent = record
            .attempts
            .iter()
            .filter(|a| a.result != AttemptResult::Skipped)
            .count();
        Row {
            answered: recovered,
            refusal: Some(RowRefusal {
                shape: shape(record),
                category: record.category.clone(),
                outcome: record.outcome,
                step: step(record),
                reason: record.reason,
                served_model: record.served_model.clone(),
                attempts: record.attempts.len(),
            }),
            added_latency_ms: record.attempts.iter().skip(1).map(|a| a.latency_ms).sum(),
            added_tokens,
            tokens: added_tokens + served_tokens,
            requests: sent.max(1) as u32,
            ..self.row(status, latency_ms)
        }
    }

    fn failed(&self, why: String, status: u16, requests: u32, retries: u32) -> Row {
        Row {
            status,
            requests,
            retries,
            error: Some(why),
            ..self.row(StatusCode::OK, 0)
        }
    }
}

/// A response body, whole, up to [`MAX_RESPONSE_BYTES`].
async fn read_whole(mut body: super::super::ProxyBody) -> Result<Bytes, String> {
    let mut whole = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("the answer could not be read: {e}"))?;
        if let Ok(data) = frame.into_data() {
            if whole.len() + data.len() > MAX_RESPONSE_BYTES {
                return Err(format!(
                    "the answer is longer than {MAX_RESPONSE_BYTES} bytes"
                ));
            }
            whole.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(whole))
}

/// A conversation name no other call of this process has: the guard keeps
/// each call's conversation (its one rescue) apart, and its record is found
/// by it.
fn conversation_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "refusal-guard-eval-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// How the provider refused: with an error naming a policy (or a blocked
/// prompt), after output, or before any.
pub(crate) fn shape(record: &RefusalRecord) -> Shape {
    match (record.signal, record.kind) {
        (
            RefusalSignal::BlockedOutput
            | RefusalSignal::PolicyError
            | RefusalSignal::BlockedPrompt,
            _,
        ) => Shape::Error,
        (_, RefusalKind::Partial) => Shape::Partial,
        _ => Shape::Empty,
    }
}

/// The step that recovered the refusal: a continued partial refusal, the
/// rescue, a chain's fallback, else the provider's own fallback (the
/// original, or a retarget, served by another model).
pub(crate) fn step(record: &RefusalRecord) -> Option<Step> {
    match record.outcome {
        Outcome::Rescued => Some(Step::Rescue),
        Outcome::Fallback if record.kind == RefusalKind::Partial => Some(Step::Continuation),
        Outcome::Fallback => {
            let served = record
                .attempts
                .iter()
                .rev()
                .find(|a| matches!(a.result, AttemptResult::Served | AttemptResult::Cut));
            Some(match served.map(|a| a.step) {
                Some(AttemptStep::Fallback) => Step::Chain,
                _ => Step::ServerSide,
            })
        }
        _ => None,
    }
}

/// The wait before try `retries + 2`.
fn backoff(retries: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(2u32.saturating_pow(retries))
        .min(MAX_BACKOFF)
}

/// How long the provider asks to wait: OpenAI's `retry-after-ms`, else
/// `retry-after` in seconds or as an HTTP date (from `now`).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or_default())
}

/// An error response's message, short, for the results file.
fn error_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.get("error"))
        .and_then(|e| {
            e.get("message")
                .and_then(Value::as_str)
                .or_else(|| e.as_str())
        })
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    message.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_in_each_spelling() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers, now), None);
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(2)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        headers.insert("retry-after", HeaderValue::from_str(&later).unwrap());
        assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(7)));
        headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(
            retry_after(&headers, now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(backoff(0), FIRST_BACKOFF);
        assert_eq!(backoff(20), MAX_BACKOFF);
    }

    fn record(line: &str) -> RefusalRecord {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn the_step_and_shape_come_from_the_record() {
        let attempt = |step: &str, result: &str| {
            format!(r#"{{"step":"{step}","model":"m","result":"{result}","latency_ms":1}}"#)
        };
        let line = |outcome: &str, kind: &str, signal: &str, attempts: &[String]| {
            format!(
                r#"{{"ts":"2026-12-07T00:00:00.000Z","model":"m","category":"cyber","explanation":null,"outcome":"{outcome}","kind":"{kind}","signal":"{signal}","attempts":[{}]}}"#,
                attempts.join(",")
            )
        };
        let refused = attempt("original", "refused");
        for (outcome, kind, attempts, step) in [
            (
                "rescued",
                "empty",
                vec![refused.clone(), attempt("rescue", "served")],
                Some(Step::Rescue),
            ),
            (
                "fallback",
                "empty",
                vec![refused.clone(), attempt("fallback", "served")],
                Some(Step::Chain),
            ),
            (
                "fallback",
                "empty",
                vec![refused.clone(), attempt("fallback", "cut")],
                Some(Step::Chain),
            ),
            (
                "fallback",
                "empty",
                vec![refused.clone(), attempt("retarget", "served")],
                Some(Step::ServerSide),
            ),
            // The provider's own fallback served the original.
            (
                "fallback",
                "empty",
                vec![attempt("original", "served")],
                Some(Step::ServerSide),
            ),
            (
                "fallback",
                "partial",
                vec![refused.clone(), attempt("fallback", "served")],
                Some(Step::Continuation),
            ),
            (
                "partial",
                "partial",
                vec![attempt("original", "served")],
                None,
            ),
            (
                "dead",
                "empty",
                vec![refused.clone(), attempt("rescue", "refused")],
                None,
            ),
        ] {
            let record = record(&line(outcome, kind, "stop_reason", &attempts));
            assert_eq!(super::step(&record), step, "{outcome} {kind} {attempts:?}");
        }
        for (kind, signal, expected) in [
            ("empty", "stop_reason", Shape::Empty),
            ("partial", "stop_reason", Shape::Partial),
            ("empty", "policy_error", Shape::Error),
            ("empty", "blocked_output", Shape::Error),
            ("empty", "blocked_prompt", Shape::Error),
            ("empty", "model_refusal", Shape::Empty),
        ] {
            let record = record(&line("dead", kind, signal, std::slice::from_ref(&refused)));
            assert_eq!(shape(&record), expected, "{kind} {signal}");
        }
    }

    #[test]
    fn send_targets_parse() {
        let send: SendAs = "openai=gpt-5".parse().unwrap();
        assert_eq!((send.api, send.model.as_str()), (Api::OpenAi, "gpt-5"));
        assert!("gpt-5".parse::<SendAs>().is_err());
        assert!("openai=".parse::<SendAs>().is_err());
    }
}
