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
use crate::call::{millis, Call, Template, Upstream};
use crate::dialect::{Dialect, Handoff, RefusalInfo};
use crate::hold::{hold, Held, Verdict};
use crate::recovery::{NextStep, RecoveryPolicy, RecoveryState};
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
    pub(crate) upstream: Upstream<S>,
    pub(crate) call: Call,
    /// The request as sent, before any recovery rewrite.
    pub(crate) template: Template,
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
            // The upstream went quiet before anything was decided or sent.
            _ => {
                let output = matches!(held.verdict, Verdict::Output);
                if output {
                    call.record_output();
                }
                if let Some(findings) = held.judged.clone() {
                    let refusal = judge_findings(&call, &findings, request_id, false);
                    return serve_settled(held, &call, refusal, vec![original_attempt], None);
                }
                let settle = Watched {
                    call: call.clone(),
                    request_id,
                    attempts: vec![original_attempt],
                    recovery: None,
                };
                serve(held, &call, Some(settle), None, None)
            }
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
        let Exchange {
            mut upstream,
            call,
            template,
            streaming,
            ..
        } = self;
        let config = call.config.clone();
        let dialect = call.dialect;
        let refused_at = Instant::now();
        let mut departure = Departure {
            call: call.clone(),
            info: info.clone(),
            attempts: vec![original_attempt],
            decided: false,
        };
        let attempts = &mut departure.attempts;
        let mut credit = info.credit_token.clone().map(|token| (token, refused_at));
        let mut last_info = info.clone();
        let mut reason: Option<DeadReason> = None;
        let (mut fallbacks, mut rescues) = (0, 0);
        let deadline = call.started + config.budget.deadline;

        loop {
            let state = RecoveryState {
                provider: dialect.provider(),
                wire_api: dialect.wire_api(),
                refusal: &last_info,
                model: call.model.as_deref(),
                attempts: attempts.as_slice(),
                elapsed: call.started.elapsed(),
                fallbacks,
                rescues,
                last_failure: reason,
            };
            let step = next_step(config.policy(), &state);
            if let NextStep::Stop(why) = step {
                reason = Some(why);
                break;
            }
            if attempts.len() as u32 >= config.budget.max_attempts || Instant::now() >= deadline {
                reason = Some(DeadReason::BudgetExhausted);
                break;
            }
            let mut json = template.json.clone();
            let mut parts = template.parts.clone();
            let (kind, step_model) = match step {
                NextStep::Fallback(model) => {
                    fallbacks += 1;
                    if dialect
                        .swap_model(&mut parts.uri, &mut json, &model)
                        .is_err()
                    {
                        reason = Some(DeadReason::Unrecoverable);
                        continue;
                    }
                    // A token is redeemable once, within its lifetime.
                    if let Some((token, minted)) = credit.take() {
                        if minted.elapsed() < CREDIT_TOKEN_LIFETIME {
                            dialect.attach_credit_token(&mut parts.headers, &mut json, &token);
                        }
                    }
                    (AttemptStep::Fallback, Some(model))
                }
                NextStep::Rescue(rescue) => {
                    rescues += 1;
                    if !config.rescue.is_on() {
                        reason.get_or_insert(DeadReason::RescueOff);
                        break;
                    }
                    if let Some(key) = &call.conversation {
                        let reservation = config.store.reserve_rescue(key, config.rescue_cap);
                        if !call.ask_store(reservation, false).await {
                            reason = Some(DeadReason::RescueCap);
                            break;
                        }
                    }
                    let mut rescue_model = call.model.clone();
                    if let Some(model) = rescue.model() {
                        if dialect.swap_model(&mut parts.uri, &mut json, model).is_ok() {
                            rescue_model = Some(model.to_owned());
                        }
                    }
                    if dialect.append_note(&mut json, rescue.note()).is_err() {
                        reason = Some(DeadReason::Unrecoverable);
                        break;
                    }
                    (AttemptStep::Rescue, rescue_model)
                }
                NextStep::Stop(_) => break,
            };
            let template_for_step = Template {
                parts,
                json,
                _share: template._share.clone(),
            };
            let request: Request<B> = template_for_step.request(&template_for_step.json);
            let sent = Instant::now();
            let remaining = deadline.saturating_duration_since(sent);
            let attempt = tokio::time::timeout(remaining, async {
                match upstream.send(request).await {
                    Ok(response) => Ok(hold(response, dialect, &config, streaming, None).await),
                    Err(_) => Err(()),
                }
            })
            .await;
            let mut record = Attempt {
                step: kind,
                model: step_model.clone(),
                result: AttemptResult::TransportError,
                status: None,
                latency_ms: millis(sent.elapsed()),
            };
            let held = match attempt {
                Err(_elapsed) => {
                    attempts.push(record);
                    reason = Some(DeadReason::BudgetExhausted);
                    break;
                }
                Ok(Err(())) => {
                    attempts.push(record);
                    reason = Some(DeadReason::UpstreamError);
                    continue;
                }
                Ok(Ok(held)) => held,
            };
            record.status = Some(held.status());
            // An error status the dialect reads as a refusal (Azure's 400
            // `content_filter`) is a refusal of this attempt, not an upstream error.
            if !held.parts.status.is_success() && !matches!(held.verdict, Verdict::Refused { .. }) {
                record.result = AttemptResult::HttpError;
                attempts.push(record);
                reason = Some(DeadReason::UpstreamError);
                continue;
            }
            let success = match kind {
                AttemptStep::Fallback => Outcome::Fallback,
                _ => Outcome::Rescued,
            };
            let served_model = held
                .watch
                .as_ref()
                .and_then(|w| w.findings.model.clone())
                .or_else(|| held.judged.as_ref().and_then(|f| f.model.clone()))
                .or(step_model.clone());
            let request_id = dialect.request_id(&held.parts.headers);
            match &held.verdict {
                Verdict::Output => {
                    record.result = AttemptResult::Served;
                    attempts.push(record);
                    call.record_output();
                    if let (Some(ttl), Some(key), Outcome::Fallback, Some(model)) =
                        (config.sticky_ttl, &call.conversation, success, &step_model)
                    {
                        let route = config.store.set_sticky_route(key, model, ttl);
                        call.ask_store(route, ()).await;
                    }
                    let mut held = held;
                    let mut splice = None;
                    if let (true, Outcome::Fallback, Some(from), Some(to)) = (
                        config.handoff_marker,
                        success,
                        call.model.as_deref(),
                        step_model.as_deref(),
                    ) {
                        let handoff = Handoff {
                            from,
                            to,
                            category: info.category.as_deref(),
                        };
                        if held.watch.is_some() {
                            splice = dialect
                                .handoff_stream(&handoff)
                                .map(|rewrite| Splice::new(rewrite, config.max_hold_bytes.max(1)));
                            held.parts.headers.remove(CONTENT_LENGTH);
                        } else {
                            mark_json(&mut held, dialect, &handoff);
                        }
                    }
                    let refusal = Refusal {
                        served_model,
                        request_id,
                        ..call.refusal(&info, success)
                    };
                    departure.decided = true;
                    let attempts = std::mem::take(attempts);
                    let mut response = serve_settled(held, &call, Some(refusal), attempts, splice);
                    response.extensions_mut().insert(ServedRecovery);
                    return response;
                }
                Verdict::Limit => {
                    // Held as long as allowed without a decision: serve it and
                    // let the end of its stream decide the outcome.
                    record.result = AttemptResult::Served;
                    attempts.push(record);
                    departure.decided = true;
                    let settle = Watched {
                        call: call.clone(),
                        request_id,
                        attempts: std::mem::take(attempts),
                        recovery: Some((info.clone(), success, served_model)),
                    };
                    let mut response = serve(held, &call, Some(settle), None, None);
                    response.extensions_mut().insert(ServedRecovery);
                    return response;
                }
                Verdict::Refused { info: again, .. } => {
                    record.result = AttemptResult::Refused;
                    attempts.push(record);
                    credit = again.credit_token.clone().map(|t| (t, Instant::now()));
                    last_info = again.clone();
                    reason = Some(DeadReason::StillRefused);
                }
                Verdict::Ended => {
                    record.result = AttemptResult::NoOutput;
                    attempts.push(record);
                    reason = Some(DeadReason::NoOutput);
                }
                Verdict::Errored | Verdict::Pass => {
                    record.result = AttemptResult::HttpError;
                    attempts.push(record);
                    reason = Some(DeadReason::UpstreamError);
                }
            }
        }

        let refusal = Refusal {
            reason: Some(reason.unwrap_or(DeadReason::StillRefused)),
            served_model: call.model.clone(),
            request_id: original_request_id,
            ..call.refusal(&info, Outcome::Dead)
        };
        departure.decided = true;
        let attempts = std::mem::take(attempts);
        serve_settled(original, &call, Some(refusal), attempts, None)
    }
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
