//! The decide step: what a judged original becomes. Output, an end, an
//! error or a hold bound: the original as it is. An empty refusal: the
//! ladder the [`RecoveryPolicy`](crate::recovery::RecoveryPolicy) asks for,
//! each step built (`steps.rs`), sent, held and weighed (`climb.rs`) until
//! one recovers or the policy or the budget says stop. The answer is a
//! [`Decision`], a value: turning it into the client's response, the record
//! and the handle's settling is the respond step's work.

mod climb;
mod steps;

use crate::dialect::{Declined, Handoff, RefusalInfo};
use crate::guard::exchange::Exchange;
use crate::guard::hold::{Held, Verdict};
use crate::guard::timeout::{IdleTimeout, UpstreamTimeout};
use crate::guard::upstream::InnerService;
use crate::refusal::{Attempt, AttemptResult, DeadReason, Outcome, Refusal};
use climb::{routing_order, Climb, Prep, MAX_SKIPS};

/// What a held response becomes. Deciding records nothing and settles
/// nothing: the refusal and the attempts travel in the decision, and the
/// response, the record and the handle come from it afterwards.
pub(crate) enum Decision<B> {
    /// The upstream went quiet (or the deadline passed) before any output:
    /// nothing was sent yet, so the client gets a `504` of its API, never
    /// the bytes read so far framed as a response.
    TimedOut(UpstreamTimeout),
    /// Not a response the guard judges (an error status, another content
    /// type): served as it came, with nothing to record.
    Unjudged(Held<B>),
    /// Not an empty refusal (output, an end without output, a provider
    /// error, a hold bound): the original as sent; what it shows (a partial
    /// refusal, a server-side fallback) is recorded as it is seen.
    AsSent {
        original: Held<B>,
        request_id: Option<String>,
        /// The original's record last, after any request sent before it.
        attempts: Vec<Attempt>,
    },
    /// An empty refusal that was not recovered: the original as sent, and
    /// the refusal, dead with its reason.
    Dead {
        original: Held<B>,
        refusal: Refusal,
        attempts: Vec<Attempt>,
    },
    /// A recovery attempt with real output, served instead of the original.
    Recovered {
        attempt: Held<B>,
        refusal: Refusal,
        attempts: Vec<Attempt>,
        /// Set when the client should be told of a fallback's model change.
        handoff: Option<HandoffMark>,
    },
    /// A recovery attempt held as long as allowed without a decision: served,
    /// and the end of its stream decides the outcome.
    Committed {
        attempt: Held<B>,
        request_id: Option<String>,
        attempts: Vec<Attempt>,
        /// The original refusal, the outcome should the attempt produce
        /// output, and the model it was sent to.
        recovery: (RefusalInfo, Outcome, Option<String>),
    },
}

/// A fallback's change of model, to be marked in the response served.
pub(crate) struct HandoffMark {
    declined: Vec<Declined>,
    to: String,
    primary_id: Option<String>,
}

impl HandoffMark {
    /// The mark as the dialects write it.
    pub(crate) fn handoff(&self) -> Handoff<'_> {
        Handoff {
            declined: &self.declined,
            to: &self.to,
            primary_id: self.primary_id.as_deref(),
        }
    }
}

impl<U: InnerService> Exchange<U> {
    /// The decide step: a held original as it is, or, on an empty refusal,
    /// what the ladder comes to.
    pub(crate) async fn decide(
        mut self,
        held: Held<IdleTimeout<U::Out>>,
    ) -> Decision<IdleTimeout<U::Out>> {
        let call = self.call.clone();
        let request_id = call.dialect.request_id(&held.parts.headers);
        let original_attempt = self.original_attempt(held.status(), AttemptResult::Served);

        // A broken connection is served as it came: what arrived, then its
        // error. A quiet one before any output is a timeout.
        if matches!(held.verdict, Verdict::Errored) {
            if let Some(timeout) = held.error.as_ref().and_then(UpstreamTimeout::find) {
                let status = Some(held.status());
                self.attempt.end_with(AttemptResult::TransportError, status);
                return Decision::TimedOut(timeout);
            }
        }
        match held.verdict {
            Verdict::Refused { ref info, complete } if complete => {
                let info = info.clone();
                let original_attempt = Attempt {
                    result: AttemptResult::Refused,
                    usage: info.usage,
                    ..original_attempt
                };
                self.attempt.end(&original_attempt);
                // Boxed: the ladder's state is most of this future's size,
                // and only a refused answer needs it; every request in
                // flight would otherwise carry it.
                Box::pin(self.recover(held, info, original_attempt, request_id)).await
            }
            Verdict::Refused { ref info, .. } => {
                // Too much came before or after the refusal to keep it whole:
                // the client gets it as it is, and the log says why.
                let refusal = Refusal {
                    reason: Some(DeadReason::HoldLimit),
                    served_model: call.model.clone(),
                    request_id,
                    ..call.refusal(info, Outcome::Dead)
                };
                let attempts = self.opening(Attempt {
                    result: AttemptResult::Refused,
                    usage: info.usage,
                    ..original_attempt
                });
                if let Some(original) = attempts.last() {
                    self.attempt.end(original);
                }
                Decision::Dead {
                    original: held,
                    refusal,
                    attempts,
                }
            }
            Verdict::Unjudged => {
                let result = match held.parts.status.is_success() {
                    true => AttemptResult::Served,
                    false => AttemptResult::HttpError,
                };
                self.attempt.end_with(result, Some(held.status()));
                Decision::Unjudged(held)
            }
            _ => {
                if matches!(held.verdict, Verdict::Output) {
                    call.record_output();
                }
                self.attempt.end(&original_attempt);
                Decision::AsSent {
                    original: held,
                    request_id,
                    attempts: self.opening(original_attempt),
                }
            }
        }
    }

    async fn recover(
        self,
        refused: Held<IdleTimeout<U::Out>>,
        info: RefusalInfo,
        original_attempt: Attempt,
        original_request_id: Option<String>,
    ) -> Decision<IdleTimeout<U::Out>> {
        let primary_id = refused.findings().and_then(|f| f.message_id.clone());
        let order = routing_order(&self.call, &info).await;
        let opening = self.opening(original_attempt);
        let mut climb = Climb::new(&self.call, info, opening, primary_id);
        climb.order = order;
        let Exchange {
            mut inner,
            call,
            original: request,
            ..
        } = self;
        let streaming = request.streaming;
        let mut skips = 0;
        loop {
            let step = match climb.prepare(&call, &request).await {
                Prep::Send(step) => *step,
                Prep::Skip if skips < MAX_SKIPS => {
                    skips += 1;
                    continue;
                }
                Prep::Skip => {
                    climb.reason.get_or_insert(DeadReason::Unrecoverable);
                    break;
                }
                Prep::Stop => break,
            };
            skips = 0;
            let Some((held, record)) = climb.send(&mut *inner, &call, streaming, &step).await
            else {
                if climb.stopped {
                    break;
                }
                continue;
            };
            if let Some(decided) = climb.weigh(&call, held, record, step).await {
                return decided;
            }
        }
        let reason = climb.reason.unwrap_or(DeadReason::StillRefused);
        let refusal = Refusal {
            reason: Some(reason),
            served_model: call.model.clone(),
            request_id: original_request_id,
            ..call.refusal(&climb.info, Outcome::Dead)
        };
        Decision::Dead {
            original: refused,
            refusal,
            attempts: climb.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use bytes::{Bytes, BytesMut};
    use http::Method;
    use http_body_util::Full;

    use std::time::{Duration, Instant};

    use http::{Request, Response};

    use super::*;
    use crate::guard::call::Call;
    use crate::guard::request::original::Original;
    use crate::guard::upstream::{Inner, Timeouts};
    use crate::recovery::{NextStep, RecoveryState, Rescue};
    use crate::refusal::RefusalHandle;
    use crate::telemetry::metrics::AttemptSpan;
    use crate::telemetry::MemorySink;
    // The layer is the only builder of a configuration; tests reach it
    // through the crate's public re-export.
    use crate::RefusalGuardLayer;

    const URL: &str = "https://api.anthropic.com/v1/messages";
    const MODEL: &str = "claude-opus-4-7";
    /// An empty Anthropic refusal, as a whole JSON body.
    const REFUSAL: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-7","content":[],"stop_reason":"refusal","stop_sequence":null,"stop_details":{"type":"refusal","category":"cyber","explanation":"Declined."},"usage":{"input_tokens":9,"output_tokens":0}}"#;

    type Upstream =
        tower::util::BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible>;

    /// The ladder's side of one call: the guard as configured by `layer`, an
    /// inner service that counts what is sent to it, and the refusal above
    /// as the original's response.
    /// What shows whether deciding did more than decide.
    struct Witness {
        handle: RefusalHandle,
        sent: Arc<AtomicUsize>,
    }

    fn setup(layer: RefusalGuardLayer) -> (Exchange<Inner<Upstream, Full<Bytes>>>, Witness) {
        let config = layer.config();
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = sent.clone();
        let inner = tower::service_fn(move |_: Request<Full<Bytes>>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::new()))) }
        });
        let uri: http::Uri = URL.parse().unwrap();
        let dialect = crate::dialect::recognise(&Method::POST, &uri)
            .unwrap()
            .dialect;
        let handle = RefusalHandle::default();
        let model = Some(MODEL.to_owned());
        let call = Call {
            request: crate::telemetry::metrics::GuardedRequest::start(
                dialect.provider(),
                dialect.wire_api(),
                model.as_deref(),
                false,
                &handle,
                config.tenant.name(),
            ),
            route: None,
            config: config.clone(),
            dialect,
            model,
            conversation: crate::guard::request::conversation::Conversation::named(None),
            started: Instant::now(),
            handle: handle.clone(),
            caller: None,
        };
        let (parts, ()) = Request::post(uri).body(()).unwrap().into_parts();
        let json = serde_json::json!({"model": MODEL, "max_tokens": 64,
            "messages": [{"role": "user", "content": "Audit my SSH config"}]});
        let response = original();
        let original = Original {
            parts,
            body: crate::guard::request::original::JsonBody::new(
                Bytes::from(json.to_string()).into(),
            ),
            rewritten: false,
            composed: None,
            model: call.model.clone(),
            streaming: false,
            route: None,
            conversation: call.conversation.clone(),
            _share: Arc::new(config.held.share()),
        };
        let upstream = Inner::primed(Upstream::new(inner), Timeouts::of(&config));
        let attempt = AttemptSpan::default();
        let answered = crate::guard::send::SentOriginal {
            call,
            original,
            response,
            attempt,
            sent: Instant::now(),
        };
        let (exchange, _) = Exchange::new(answered, upstream);
        (exchange, Witness { handle, sent })
    }

    fn original() -> Response<IdleTimeout<Full<Bytes>>> {
        let body = IdleTimeout::new(Full::new(Bytes::from(REFUSAL)), Duration::from_secs(5));
        Response::builder()
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    }

    fn held_bytes<B>(held: &Held<B>) -> Bytes {
        let mut whole = BytesMut::new();
        for frame in &held.frames {
            whole.extend_from_slice(frame.data_ref().unwrap());
        }
        whole.freeze()
    }

    /// Asserts `decision` is the refusal left dead for `reason`, with the
    /// original as sent and nothing recorded or settled yet.
    fn assert_dead(
        decision: Decision<IdleTimeout<Full<Bytes>>>,
        witness: &Witness,
        reason: DeadReason,
    ) {
        let Decision::Dead {
            original,
            refusal,
            attempts,
        } = decision
        else {
            panic!("expected a dead refusal");
        };
        assert_eq!(refusal.reason, Some(reason));
        assert_eq!(refusal.outcome, Outcome::Dead);
        assert_eq!(refusal.category.as_deref(), Some("cyber"));
        assert_eq!(held_bytes(&original), REFUSAL.as_bytes());
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].result, AttemptResult::Refused);
        assert_eq!(
            witness.sent.load(Ordering::SeqCst),
            0,
            "nothing sent upstream"
        );
        assert!(!witness.handle.is_settled(), "deciding settles nothing");
    }

    #[tokio::test]
    async fn a_policy_that_stops_decides_dead_without_recording() {
        let sink = MemorySink::new();
        let stop = |_: &RecoveryState<'_>| NextStep::Stop(DeadReason::PolicyStop);
        let layer = RefusalGuardLayer::new().policy(stop);
        let (mut exchange, witness) = setup(layer.telemetry(sink.clone()));
        let held = exchange.judge(original(), None).await.ok().unwrap();
        let decision = exchange.decide(held).await;
        assert!(sink.is_empty(), "deciding records nothing");
        assert_dead(decision, &witness, DeadReason::PolicyStop);
    }

    #[tokio::test]
    async fn a_rescue_switched_off_decides_dead_before_sending() {
        let rescue = |_: &RecoveryState<'_>| NextStep::Rescue(Rescue::new("Say what you can do."));
        let (mut exchange, witness) = setup(RefusalGuardLayer::new().policy(rescue).rescue(false));
        let held = exchange.judge(original(), None).await.ok().unwrap();
        let decision = exchange.decide(held).await;
        assert_dead(decision, &witness, DeadReason::RescueOff);
    }
}
