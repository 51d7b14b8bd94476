//! One harness for the fixture tests: a guard with rescue off (so every body,
//! refused or not, must come out byte-identical) over a mock inner service
//! that serves one body, under every chunking, and the verdict it must reach.
//! A table's requests ask for the model its recorded response names
//! ([`answered_model`]): asked for another, the response is a reroute.

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use refusal_guard::refusal::{DeadReason, Provider, RefusalKind, RefusalSignal, WireApi};
use refusal_guard::telemetry::{MemorySink, RefusalRecord};
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer, RefusalHandle};
use tower::Layer;

use super::chunking::every_chunking;
use super::exchange::call;
use super::inner::{Reply, Upstream};

/// What a served body must be judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// No refusal: nothing recorded, the handle settles to `None`.
    None,
    /// An error body or event: passed through, nothing recorded.
    Error,
    /// A provider-served fallback: no refusal to recover, but one to record.
    ServerFallback,
    /// Nothing real was emitted: recorded dead (`rescue_off`, or the
    /// reason [`Refused::dead`] gives), the typed
    /// [`Refusal`] in the response extensions.
    Empty(Refused),
    /// Real output came first: recorded partial, not recovered.
    Partial(Refused),
}

/// What is checked of a recorded refusal; `None` fields are not checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Refused {
    pub signal: Option<RefusalSignal>,
    pub category: Option<Option<&'static str>>,
    /// Why an empty one is dead with rescue off: `rescue_off`, unless the
    /// category takes no rescue at all.
    pub dead: DeadReason,
}

impl Refused {
    /// Any signal, any category.
    pub const ANY: Refused = Refused {
        signal: None,
        category: None,
        dead: DeadReason::RescueOff,
    };

    /// This signal and this category.
    pub const fn by(signal: RefusalSignal, category: Option<&'static str>) -> Refused {
        Refused {
            signal: Some(signal),
            category: Some(category),
            dead: DeadReason::RescueOff,
        }
    }

    /// Any signal, this category.
    pub const fn category(category: Option<&'static str>) -> Refused {
        Refused {
            signal: None,
            category: Some(category),
            dead: DeadReason::RescueOff,
        }
    }

    /// Dead for `reason` when empty.
    pub const fn dead_for(self, reason: DeadReason) -> Refused {
        Refused {
            dead: reason,
            ..self
        }
    }
}

/// Who refused, as every record of one table must name it.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub provider: Provider,
    pub wire_api: WireApi,
    /// The model, where the table's requests name one the record must carry.
    pub model: Option<String>,
}

/// The first model a recorded response body names as the one that served
/// it (`"model"`, Gemini's `"modelVersion"`; an empty one, as Azure's
/// prompt-filter chunk carries, skipped): what a request must ask for for
/// the response to be no reroute.
pub fn answered_model(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let mut rest = text.as_ref();
    while let Some(at) = rest.find("\"model") {
        rest = &rest[at + "\"model".len()..];
        let after_key = rest
            .strip_prefix('"')
            .or_else(|| rest.strip_prefix("Version\""));
        let Some(value) = after_key.and_then(|r| r.trim_start().strip_prefix(':')) else {
            continue;
        };
        let Some(value) = value.trim_start().strip_prefix('"') else {
            continue;
        };
        let model = &value[..value.find('"').unwrap_or(0)];
        if !model.is_empty() {
            return Some(model.to_owned());
        }
    }
    None
}

/// How the body is served and what must come of it.
#[derive(Clone, Debug)]
pub struct Expected {
    pub status: u16,
    /// `application/json`, else `text/event-stream`.
    pub json: bool,
    pub verdict: Verdict,
    /// Checked on every record, when given.
    pub source: Option<Source>,
}

impl Expected {
    /// A 200 response, JSON or SSE.
    pub fn ok(json: bool, verdict: Verdict) -> Expected {
        Expected {
            status: 200,
            json,
            verdict,
            source: None,
        }
    }

    /// The content type the body is served with.
    pub fn content_type(&self) -> &'static str {
        if self.json {
            "application/json"
        } else {
            "text/event-stream"
        }
    }

    /// The same, served with `status`.
    pub fn with_status(self, status: u16) -> Expected {
        Expected { status, ..self }
    }

    /// The same, every record naming `source`.
    pub fn from(self, source: Source) -> Expected {
        Expected {
            source: Some(source),
            ..self
        }
    }
}

/// Serves `bytes` under every chunking (see
/// [`every_chunking`](super::chunking::every_chunking)) and judges each.
pub async fn judge_every_chunking(
    name: &str,
    request: &dyn Fn() -> Request<Full<Bytes>>,
    bytes: &Bytes,
    expected: &Expected,
) {
    judge_chunkings(name, request, bytes, every_chunking(bytes), expected).await;
}

/// Serves `bytes` under each of `chunkings` and judges each.
pub async fn judge_chunkings(
    name: &str,
    request: &dyn Fn() -> Request<Full<Bytes>>,
    bytes: &Bytes,
    chunkings: Vec<Vec<Bytes>>,
    expected: &Expected,
) {
    for (i, chunks) in chunkings.into_iter().enumerate() {
        judge(
            &format!("{name} chunking {i}"),
            request(),
            bytes,
            chunks,
            expected,
        )
        .await;
    }
}

/// One guarded exchange: the body comes out byte-identical, with one
/// upstream request, and gets its verdict.
pub async fn judge(
    name: &str,
    request: Request<Full<Bytes>>,
    bytes: &Bytes,
    chunks: Vec<Bytes>,
    expected: &Expected,
) {
    let reply = Reply::raw(expected.status, expected.content_type(), chunks);
    let upstream = Upstream::new(vec![reply]);
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .rescue(false)
        .telemetry(sink.clone())
        .layer(upstream.service());
    let (parts, body) = call(&mut guard, request).await;
    assert_eq!(parts.status.as_u16(), expected.status, "{name}: status");
    assert!(body == *bytes, "{name}: body must be byte-identical");
    assert_eq!(upstream.seen().len(), 1, "{name}: no extra request");
    let handle = parts
        .extensions
        .get::<RefusalHandle>()
        .unwrap_or_else(|| panic!("{name}: a guarded response carries a handle"));
    assert!(handle.is_settled(), "{name}: settled once the body ended");
    let typed = parts.extensions.get::<Refusal>();
    let records = sink.records();
    let refused = match expected.verdict {
        Verdict::None | Verdict::Error => {
            assert!(records.is_empty(), "{name}: no record, got {records:?}");
            assert_eq!(handle.get(), None, "{name}");
            assert!(typed.is_none(), "{name}");
            return;
        }
        Verdict::ServerFallback => {
            assert_eq!(records.len(), 1, "{name}: {records:?}");
            assert_eq!(records[0].outcome, Outcome::Fallback, "{name}");
            assert!(records[0].served_model.is_some(), "{name}: fallback target");
            assert!(handle.get().is_some(), "{name}: handle");
            return;
        }
        Verdict::Empty(refused) | Verdict::Partial(refused) => refused,
    };
    assert_eq!(records.len(), 1, "{name}: one record, got {records:?}");
    let record = &records[0];
    check_record(name, record, &refused, expected.source.as_ref());
    let refusal = record.refusal();
    assert_eq!(handle.get().as_ref(), Some(&refusal), "{name}: handle");
    if let Verdict::Empty(_) = expected.verdict {
        assert_eq!(record.kind, RefusalKind::Empty, "{name}");
        assert_eq!(record.outcome, Outcome::Dead, "{name}");
        assert_eq!(record.reason, Some(refused.dead), "{name}");
        assert_eq!(typed, Some(&refusal), "{name}: typed refusal in extensions");
    } else {
        assert_eq!(record.kind, RefusalKind::Partial, "{name}");
        assert_eq!(record.outcome, Outcome::Partial, "{name}");
        if expected.json {
            // A whole JSON body is judged before the response is returned.
            let typed = typed.unwrap_or_else(|| panic!("{name}: no typed Refusal"));
            assert_eq!(typed.kind, RefusalKind::Partial, "{name}");
        } else {
            // A stream is served at its first output; the partial refusal
            // is only known once its body has been read.
            assert!(typed.is_none(), "{name}: only known once the body ended");
        }
    }
}

fn check_record(name: &str, record: &RefusalRecord, refused: &Refused, source: Option<&Source>) {
    if let Some(signal) = refused.signal {
        assert_eq!(record.signal, signal, "{name}: signal");
    }
    if let Some(category) = refused.category {
        assert_eq!(record.category.as_deref(), category, "{name}: category");
    }
    if let Some(source) = source {
        assert_eq!(record.provider, source.provider, "{name}: provider");
        assert_eq!(record.wire_api, source.wire_api, "{name}: wire API");
        if let Some(model) = &source.model {
            assert_eq!(record.model.as_ref(), Some(model), "{name}: model");
        }
    }
}
