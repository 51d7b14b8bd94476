//! Deciding what a held response becomes: the original as it is, or the
//! steps the [`RecoveryPolicy`] asks for, each sent and held in turn, until
//! one recovers or the policy or the budget says stop.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http::{HeaderValue, Request, Response};
use http_body::{Body, Frame};
use serde_json::Value;
use tower_service::Service;

use crate::body::{BoxError, GuardBody, Splice};
use crate::call::{millis, Call, Inner, Original, Template};
use crate::dialect::{Dialect, Handoff, RefusalInfo};
use crate::hold::{hold, Held, Verdict};
use crate::recovery::{NextStep, RecoveryPolicy, RecoveryState, Rescue};
use crate::refusal::{Attempt, AttemptResult, AttemptStep, DeadReason, Outcome, Refusal};
use crate::replay::ReplayBody;
use crate::respond::{
    judge_findings, serve, serve_settled, timed_out, ServedRecovery, Shape, Watched,
};
use crate::timeout::{IdleTimeout, TimeoutKind, UpstreamTimeout};

/// How long a fallback credit token stays redeemable after its refusal.
const CREDIT_TOKEN_LIFETIME: Duration = Duration::from_secs(5 * 60);

/// A guarded call once its original is sent: what deciding its response
/// needs, step after step.
pub(crate) struct Exchange<S> {
    pub(crate) upstream: Inner<S>,
    pub(crate) call: Call,
    /// The request as sent, before any recovery rewrite.
    pub(crate) template: Original,
    /// Whether the request asked for a stream.
    pub(crate) streaming: bool,
    /// When the original was sent.
    pub(crate) sent: Instant,
}

impl<S> Exchange<S> {
    /// Holds the original response, then serves it or climbs the ladder.
    pub(crate) async fn decide<B, R>(
        self,
        response: Response<IdleTimeout<R>>,
    ) -> Response<GuardBody<R>>
    where
        S: Service<Request<B>, Response = Response<R>> + Send,
        B: ReplayBody,
        R: Body + Send + 'static,
        R::Error: Into<BoxError>,
    {
        let call = &self.call;
        let held = hold(response, call.dialect, &call.config, self.streaming, None);
        // The recovery deadline bounds the original's hold too.
        let Ok(held) = tokio::time::timeout_at(call.deadline(), held).await else {
            let timeout = UpstreamTimeout::new(TimeoutKind::Hold, call.config.budget.deadline);
            call.handle.settle(None);
            return timed_out(Shape::Api(call.dialect.wire_api()), timeout);
        };
        self.conclude(held).await
    }

    /// Serves a held original as it is, or climbs the ladder on an empty refusal.
    pub(crate) async fn conclude<B, R>(self, held: Held<IdleTimeout<R>>) -> Response<GuardBody<R>>
    where
        S: Service<Request<B>, Response = Response<R>> + Send,
        B: ReplayBody,
        R: Body + Send + 'static,
        R::Error: Into<BoxError>,
    {
        let call = self.call.clone();
        let sent = self.sent;
        let dialect = call.dialect;
        let model = call.model.clone();
        let request_id = dialect.request_id(&held.parts.headers);
        let original_attempt = Attempt {
            step: AttemptStep::Original,
            model: model.clone(),
            result: AttemptResult::Served,
            status: Some(held.status()),
            latency_ms: millis(sent.elapsed()),
        };

        // The upstream went quiet before any output: nothing was sent yet, so
        // the client gets a 504 of its API, never the bytes read so far framed
        // as a response. (A broken connection is served as it came: what
        // arrived, then its error.)
        if matches!(held.verdict, Verdict::Errored) {
            if let Some(timeout) = held.error.as_ref().and_then(UpstreamTimeout::find) {
                call.handle.settle(None);
                return timed_out(Shape::Api(dialect.wire_api()), timeout);
            }
        }
        match held.verdict {
            Verdict::Refused { ref info, complete } if complete => {
                let info = info.clone();
                let original_attempt = Attempt {
                    result: AttemptResult::Refused,
                    ..original_attempt
                };
                self.recover(held, info, original_attempt, request_id).await
            }
            Verdict::Refused { ref info, .. } => {
                // Too much came before or after the refusal to keep it whole:
                // the client gets it as it is, and the log says why.
                let refusal = Refusal {
                    reason: Some(DeadReason::HoldLimit),
                    served_model: model.clone(),
                    request_id,
                    ..call.refusal(info, Outcome::Dead)
                };
                let attempts = vec![Attempt {
                    result: AttemptResult::Refused,
                    ..original_attempt
                }];
                call.emit(&refusal, attempts);
                let watch = None;
                let mut held = held;
                held.watch = watch;
                serve(held, &call, None, Some(&refusal), None)
            }
            Verdict::Pass => {
                call.handle.settle(None);
                serve(held, &call, None, None, None)
            }
            _ => serve_as_is(&call, held, original_attempt, request_id),
        }
    }

    async fn recover<B, R>(
        self,
        original: Held<IdleTimeout<R>>,
        info: RefusalInfo,
        original_attempt: Attempt,
        original_request_id: Option<String>,
    ) -> Response<GuardBody<R>>
    where
        S: Service<Request<B>, Response = Response<R>> + Send,
        B: ReplayBody,
        R: Body + Send + 'static,
        R::Error: Into<BoxError>,
    {
        let mut climb = Climb::new(&self.call, info, original_attempt);
        let Exchange {
            mut upstream,
            call,
            template,
            streaming,
            ..
        } = self;
        loop {
            let step = match climb.prepare(&call, &template).await {
                Prep::Send(step) => *step,
                Prep::Skip => continue,
                Prep::Stop => break,
            };
            let Some((held, record)) = climb.send(&mut upstream, &call, streaming, &step).await
            else {
                if climb.stopped {
                    break;
                }
                continue;
            };
            if let Some(served) = climb.judge(&call, held, record, step).await {
                return served;
            }
        }
        let reason = climb.reason.unwrap_or(DeadReason::StillRefused);
        let refusal = Refusal {
            reason: Some(reason),
            served_model: call.model.clone(),
            request_id: original_request_id,
            ..call.refusal(&climb.info, Outcome::Dead)
        };
        let attempts = climb.finish();
        serve_settled(original, &call, Some(refusal), attempts, None)
    }
}

/// A step's request, built.
struct Step {
    template: Template,
    kind: AttemptStep,
    model: Option<String>,
}

/// What preparing a step came to.
enum Prep {
    Send(Box<Step>),
    /// This step could not be built; ask the policy again.
    Skip,
    Stop,
}

/// The ladder's progress on one refusal: what was tried, and why the last
/// step did not recover.
struct Climb {
    /// The original refusal.
    info: RefusalInfo,
    /// The attempts so far; records the client leaving if dropped undecided.
    departure: Departure,
    /// An Anthropic fallback credit token and when it was minted.
    credit: Option<(String, Instant)>,
    /// The latest refusal, which the policy is asked about.
    last: RefusalInfo,
    reason: Option<DeadReason>,
    fallbacks: usize,
    rescues: usize,
    deadline: Instant,
    /// The budget ran out while an attempt was running.
    stopped: bool,
}

impl Climb {
    fn new(call: &Call, info: RefusalInfo, original: Attempt) -> Self {
        Climb {
            credit: info
                .credit_token
                .clone()
                .map(|token| (token, Instant::now())),
            last: info.clone(),
            departure: Departure {
                call: call.clone(),
                info: info.clone(),
                attempts: vec![original],
                decided: false,
            },
            info,
            reason: None,
            fallbacks: 0,
            rescues: 0,
            deadline: call.started + call.config.budget.deadline,
            stopped: false,
        }
    }

    /// The attempts, now that the call is decided.
    fn finish(&mut self) -> Vec<Attempt> {
        self.departure.decided = true;
        std::mem::take(&mut self.departure.attempts)
    }

    fn ask(&self, call: &Call) -> NextStep {
        let state = RecoveryState {
            provider: call.dialect.provider(),
            wire_api: call.dialect.wire_api(),
            refusal: &self.last,
            model: call.model.as_deref(),
            attempts: &self.departure.attempts,
            elapsed: call.started.elapsed(),
            fallbacks: self.fallbacks,
            rescues: self.rescues,
            last_failure: self.reason,
        };
        next_step(call.config.policy(), &state)
    }

    /// Builds the request for the policy's next step, within the budget.
    async fn prepare(&mut self, call: &Call, template: &Original) -> Prep {
        let step = self.ask(call);
        if let NextStep::Stop(why) = step {
            self.reason = Some(why);
            return Prep::Stop;
        }
        let budget = call.config.budget;
        if self.departure.attempts.len() as u32 >= budget.max_attempts
            || Instant::now() >= self.deadline
        {
            self.reason = Some(DeadReason::BudgetExhausted);
            return Prep::Stop;
        }
        let Some(next) = template.draft() else {
            self.reason = Some(DeadReason::Unrecoverable);
            return Prep::Stop;
        };
        match step {
            NextStep::Fallback(model) => self.fallback(call, next, model),
            NextStep::Rescue(rescue) => self.rescue(call, next, rescue).await,
            NextStep::Stop(_) => Prep::Stop,
        }
    }

    fn fallback(&mut self, call: &Call, mut next: Template, model: String) -> Prep {
        self.fallbacks += 1;
        let dialect = call.dialect;
        if dialect
            .swap_model(&mut next.parts.uri, &mut next.json, &model)
            .is_err()
        {
            self.reason = Some(DeadReason::Unrecoverable);
            return Prep::Skip;
        }
        // A token is redeemable once, within its lifetime.
        if let Some((token, minted)) = self.credit.take() {
            if minted.elapsed() < CREDIT_TOKEN_LIFETIME {
                dialect.attach_credit_token(&mut next.parts.headers, &mut next.json, &token);
            }
        }
        Prep::Send(Box::new(Step {
            template: next,
            kind: AttemptStep::Fallback,
            model: Some(model),
        }))
    }

    async fn rescue(&mut self, call: &Call, mut next: Template, rescue: Rescue) -> Prep {
        self.rescues += 1;
        let config = &call.config;
        if !config.rescue.is_on() {
            self.reason.get_or_insert(DeadReason::RescueOff);
            return Prep::Stop;
        }
        if let Some(key) = call.conversation.key() {
            let reservation = config.store.reserve_rescue(key, config.rescue_cap);
            if !call.ask_store(reservation, false).await {
                self.reason = Some(DeadReason::RescueCap);
                return Prep::Stop;
            }
        }
        let dialect = call.dialect;
        let mut model = call.model.clone();
        if let Some(other) = rescue.model() {
            if dialect
                .swap_model(&mut next.parts.uri, &mut next.json, other)
                .is_ok()
            {
                model = Some(other.to_owned());
            }
        }
        if dialect.append_note(&mut next.json, rescue.note()).is_err() {
            self.reason = Some(DeadReason::Unrecoverable);
            return Prep::Stop;
        }
        Prep::Send(Box::new(Step {
            template: next,
            kind: AttemptStep::Rescue,
            model,
        }))
    }

    /// Sends a step and holds its response, within the deadline. `None`
    /// when it failed (recorded, with the reason set).
    async fn send<S, B, R>(
        &mut self,
        upstream: &mut Inner<S>,
        call: &Call,
        streaming: bool,
        step: &Step,
    ) -> Option<(Held<IdleTimeout<R>>, Attempt)>
    where
        S: Service<Request<B>, Response = Response<R>> + Send,
        B: ReplayBody,
        R: Body + Send + 'static,
        R::Error: Into<BoxError>,
    {
        let request: Request<B> = step.template.request(&step.template.json);
        let sent = Instant::now();
        let remaining = self.deadline.saturating_duration_since(sent);
        let (dialect, config) = (call.dialect, &call.config);
        let attempt = tokio::time::timeout(remaining, async {
            match upstream.send(request).await {
                Ok(response) => Ok(hold(response, dialect, config, streaming, None).await),
                Err(_) => Err(()),
            }
        })
        .await;
        let mut record = Attempt {
            step: step.kind,
            model: step.model.clone(),
            result: AttemptResult::TransportError,
            status: None,
            latency_ms: millis(sent.elapsed()),
        };
        let held = match attempt {
            Err(_elapsed) => {
                self.stopped = true;
                self.fail(record, DeadReason::BudgetExhausted);
                return None;
            }
            Ok(Err(())) => {
                self.fail(record, DeadReason::UpstreamError);
                return None;
            }
            Ok(Ok(held)) => held,
        };
        record.status = Some(held.status());
        // An error status the dialect reads as a refusal (Azure's 400
        // `content_filter`) is a refusal of this attempt, not an upstream error.
        if !held.parts.status.is_success() && !matches!(held.verdict, Verdict::Refused { .. }) {
            record.result = AttemptResult::HttpError;
            self.fail(record, DeadReason::UpstreamError);
            return None;
        }
        Some((held, record))
    }

    fn fail(&mut self, record: Attempt, reason: DeadReason) {
        self.departure.attempts.push(record);
        self.reason = Some(reason);
    }

    /// What a held attempt decides: the response to serve, or `None` to go
    /// on climbing.
    async fn judge<R>(
        &mut self,
        call: &Call,
        held: Held<IdleTimeout<R>>,
        mut record: Attempt,
        step: Step,
    ) -> Option<Response<GuardBody<R>>>
    where
        R: Body + Send + 'static,
        R::Error: Into<BoxError>,
    {
        let outcome = match step.kind {
            AttemptStep::Fallback => Outcome::Fallback,
            _ => Outcome::Rescued,
        };
        let served_model = held
            .watch
            .as_ref()
            .and_then(|w| w.findings.model.clone())
            .or_else(|| held.judged.as_ref().and_then(|f| f.model.clone()))
            .or(step.model.clone());
        let request_id = call.dialect.request_id(&held.parts.headers);
        let (result, reason) = match &held.verdict {
            Verdict::Output => {
                record.result = AttemptResult::Served;
                self.departure.attempts.push(record);
                let refusal = Refusal {
                    served_model,
                    request_id,
                    ..call.refusal(&self.info, outcome)
                };
                return Some(self.serve_output(call, held, refusal, step).await);
            }
            Verdict::Limit => {
                // Held as long as allowed without a decision: serve it and
                // let the end of its stream decide the outcome.
                record.result = AttemptResult::Served;
                self.departure.attempts.push(record);
                let settle = Watched {
                    call: call.clone(),
                    request_id,
                    attempts: self.finish(),
                    recovery: Some((self.info.clone(), outcome, served_model)),
                };
                let mut response = serve(held, call, Some(settle), None, None);
                response.extensions_mut().insert(ServedRecovery);
                return Some(response);
            }
            Verdict::Refused { info: again, .. } => {
                self.credit = again.credit_token.clone().map(|t| (t, Instant::now()));
                self.last = again.clone();
                (AttemptResult::Refused, DeadReason::StillRefused)
            }
            Verdict::Ended => (AttemptResult::NoOutput, DeadReason::NoOutput),
            Verdict::Errored | Verdict::Pass => {
                (AttemptResult::HttpError, DeadReason::UpstreamError)
            }
        };
        record.result = result;
        self.fail(record, reason);
        None
    }

    /// Serves a recovery attempt that produced real output.
    async fn serve_output<R>(
        &mut self,
        call: &Call,
        mut held: Held<IdleTimeout<R>>,
        refusal: Refusal,
        step: Step,
    ) -> Response<GuardBody<R>>
    where
        R: Body + Send + 'static,
        R::Error: Into<BoxError>,
    {
        call.record_output();
        let config = &call.config;
        let fallback = step.kind == AttemptStep::Fallback;
        if let (Some(ttl), Some(key), true, Some(model)) = (
            config.sticky_ttl,
            call.conversation.key(),
            fallback,
            &step.model,
        ) {
            let route = config.store.set_sticky_route(key, model, ttl);
            call.ask_store(route, ()).await;
        }
        let mut splice = None;
        if let (true, true, Some(from), Some(to)) = (
            config.handoff_marker,
            fallback,
            call.model.as_deref(),
            step.model.as_deref(),
        ) {
            let handoff = Handoff {
                from,
                to,
                category: self.info.category.as_deref(),
            };
            if held.watch.is_some() {
                splice = call
                    .dialect
                    .handoff_stream(&handoff)
                    .map(|rewrite| Splice::new(rewrite, config.max_hold_bytes.max(1)));
                held.parts.headers.remove(CONTENT_LENGTH);
            } else {
                mark_json(&mut held, call.dialect, &handoff);
            }
        }
        let attempts = self.finish();
        let mut response = serve_settled(held, call, Some(refusal), attempts, splice);
        response.extensions_mut().insert(ServedRecovery);
        response
    }
}

/// Serves an original that was not an empty refusal: output, an end
/// without output, a provider error or a hold bound. A whole JSON body is
/// settled now; a stream is settled by what the rest of it shows.
fn serve_as_is<R>(
    call: &Call,
    held: Held<IdleTimeout<R>>,
    original: Attempt,
    request_id: Option<String>,
) -> Response<GuardBody<R>>
where
    R: Body + Send + 'static,
    R::Error: Into<BoxError>,
{
    if matches!(held.verdict, Verdict::Output) {
        call.record_output();
    }
    if let Some(findings) = held.judged.clone() {
        let refusal = judge_findings(call, &findings, request_id, false);
        return serve_settled(held, call, refusal, vec![original], None);
    }
    let settle = Watched {
        call: call.clone(),
        request_id,
        attempts: vec![original],
        recovery: None,
    };
    serve(held, call, Some(settle), None, None)
}

/// Marks a handoff inside a whole (already read) JSON body.
fn mark_json<R>(
    held: &mut Held<IdleTimeout<R>>,
    dialect: &'static dyn Dialect,
    handoff: &Handoff<'_>,
) {
    if held.rest.is_some() {
        return;
    }
    let mut whole = BytesMut::new();
    for frame in &held.frames {
        if let Some(data) = frame.data_ref() {
            whole.extend_from_slice(data);
        }
    }
    let Ok(mut json) = serde_json::from_slice::<Value>(&whole) else {
        return;
    };
    if dialect.handoff_json(&mut json, handoff) {
        let bytes = Bytes::from(serde_json::to_vec(&json).unwrap_or_default());
        held.parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        held.frames = VecDeque::from([Frame::data(bytes)]);
    }
}

/// Asks the policy, which must not take the call down if it panics.
fn next_step(policy: &dyn RecoveryPolicy, state: &RecoveryState<'_>) -> NextStep {
    let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| policy.next_step(state)));
    asked.unwrap_or_else(|_| {
        tracing::warn!("recovery policy panicked; recovering no further");
        NextStep::Stop(DeadReason::Unrecoverable)
    })
}

/// A refusal on the ladder: if the ladder is dropped before it decides (the
/// client went away), the record says so.
struct Departure {
    call: Call,
    info: RefusalInfo,
    attempts: Vec<Attempt>,
    decided: bool,
}

impl Drop for Departure {
    fn drop(&mut self) {
        if self.decided {
            return;
        }
        let call = &self.call;
        let refusal = Refusal {
            reason: Some(DeadReason::ClientGone),
            served_model: call.model.clone(),
            ..call.refusal(&self.info, Outcome::Dead)
        };
        call.emit(&refusal, std::mem::take(&mut self.attempts));
    }
}
