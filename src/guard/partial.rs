//! Partial-refusal continuation (opt-in, where the dialect offers it): a response refused
//! after real text, whose refusal offers the prefill claim and a credit
//! token, is continued on the next model of the client model's fallback
//! chain, with the text already sent as an assistant prefill. In a stream
//! the refusal's closing events are held meanwhile and the continuation's
//! blocks follow in the same message (the live-thinking splice); a whole
//! JSON message gets the continuation's content appended. When the
//! continuation does not answer with output, the original goes out byte for
//! byte, as if the option were off.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{HeaderValue, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::dialect::{PartialContinuation, PrefillClaim};
use crate::guard::body::{GuardBody, Splice};
use crate::guard::call::millis;
use crate::guard::exchange::Exchange;
use crate::guard::findings::StreamJudge;
use crate::guard::hold::{hold, is_event_stream, is_json, Held, Verdict};
use crate::guard::respond::{
    mark_recovered, pump, serve_recovered, serve_settled, unless_gone, FrameSender,
};
use crate::guard::settle::{refusal_of, About, Ending, Settlement};
use crate::guard::upstream::{InnerBody, InnerService, UpstreamBody};
use crate::refusal::{
    Attempt, AttemptResult, AttemptStep, DeadReason, Outcome, Refusal, RefusalKind,
};
use crate::sse::SseFramer;
use crate::BoxError;

/// What the partial stage made of a judged original.
pub(crate) enum Continued<U: InnerService> {
    /// Answered: continued, or served so that it may be.
    Served(Response<GuardBody<U::Out>>),
    /// Nothing to continue (no output, or no claim in it): left to decide.
    Not(Box<Exchange<U>>, Box<Held<UpstreamBody<U::Out>>>),
}

impl<U: InnerService> Exchange<U> {
    /// The partial stage: a judged original with output is served so that a
    /// partial refusal in it can be continued as `plan` says; anything else
    /// goes on to be decided as without the option.
    pub(crate) async fn continue_partial(
        self,
        mut held: Held<UpstreamBody<U::Out>>,
        plan: Plan,
    ) -> Continued<U> {
        if !matches!(held.verdict, Verdict::Output) {
            return Continued::Not(Box::new(self), Box::new(held));
        }
        if held.judged.is_some() {
            // Boxed, like the ladder: only a continued answer needs its state.
            return Box::pin(continue_json(self, held, plan)).await;
        }
        match held.judge.take() {
            Some(judge) => Continued::Served(serve_continuable(self, held, judge, plan)),
            None => Continued::Not(Box::new(self), Box::new(held)),
        }
    }
}

/// A whole JSON body held back, parsed.
fn whole_json<R>(held: &Held<R>) -> Option<Value> {
    if held.rest.is_some() {
        return None;
    }
    let mut whole = Vec::new();
    for frame in &held.frames {
        whole.extend_from_slice(frame.data_ref()?);
    }
    serde_json::from_slice(&whole).ok()
}

/// A whole JSON message refused after text: continued with the same
/// prefill, answered as one message (the content arrays merged), or as it
/// is when the continuation does not answer with output.
async fn continue_json<U: InnerService>(
    mut exchange: Exchange<U>,
    mut held: Held<UpstreamBody<U::Out>>,
    mut plan: Plan,
) -> Continued<U> {
    let findings = held.judged.clone().unwrap_or_default();
    let claimed = findings
        .partial_refusal
        .as_ref()
        .and_then(|_| whole_json(&held))
        .and_then(|message| Some((plan.track.claim_json(&message)?, message)));
    let Some((claim, mut message)) = claimed else {
        return Continued::Not(Box::new(exchange), Box::new(held));
    };
    let call = exchange.call.clone();
    call.record_output();
    let original = exchange.original_attempt(held.status(), AttemptResult::Refused);
    exchange.attempt.end(&original);
    let request_id = call.dialect.request_id(&held.parts.headers);
    let mut continuation = Continuation { exchange, plan };
    let (attempt, answer) = continuation.attempt(&claim, call.deadline_from_now()).await;
    let served_model = answer
        .as_ref()
        .and_then(|a| a.judged.as_ref()?.model.clone());
    let merged = answer
        .as_ref()
        .and_then(whole_json)
        .and_then(|more| continuation.plan.track.merge_json(&mut message, &more).ok());
    let mut attempts = continuation.exchange.opening(original);
    attempts.push(attempt);
    let Some(()) = merged else {
        let refusal = refusal_of(&call, &findings, request_id, false);
        return Continued::Served(serve_settled(held, &call, refusal, attempts, None));
    };
    let bytes = Bytes::from(serde_json::to_vec(&message).unwrap_or_default());
    held.parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    held.frames = VecDeque::from([Frame::data(bytes)]);
    let info = findings.partial_refusal.clone().unwrap_or_default();
    let refusal = Refusal {
        kind: RefusalKind::Partial,
        served_model: served_model.or_else(|| attempts[1].model.clone()),
        request_id,
        ..call.refusal(&info, Outcome::Fallback)
    };
    // Head not sent yet: the client can be told this answer was recovered.
    let (category, served_by) = (refusal.category.clone(), refusal.served_model.clone());
    let mut response = serve_settled(held, &call, Some(refusal), attempts, None);
    let (category, served_by) = (category.as_deref(), served_by.as_deref());
    mark_recovered(&mut response, Outcome::Fallback, category, served_by);
    Continued::Served(response)
}

/// What continuing this call would take: the model to continue on and the
/// dialect's tracker of what the client has seen.
pub(crate) struct Plan {
    model: String,
    track: Box<dyn PartialContinuation>,
}

impl Plan {
    /// The plan when the call may continue a partial refusal in `response`.
    pub(crate) fn for_call<S, R>(exchange: &Exchange<S>, response: &Response<R>) -> Option<Plan> {
        let call = &exchange.call;
        let config = &call.config;
        // The provider offers the claim only with a credit token, which is
        // asked for and presented only with fallback credit on.
        if !(config.continue_partial && config.fallback_credit) {
            return None;
        }
        let headers = response.headers();
        let shape = match exchange.original.streaming {
            true => is_event_stream(headers),
            false => is_json(headers),
        };
        if !(response.status().is_success() && shape) {
            return None;
        }
        let model = config
            .ladder
            .chains()
            .for_model(call.model.as_deref()?)
            .first()
            // A fallback on the client's own API, to a model the tenant allows.
            .filter(|model| {
                let allow = config.tenant.allowlist();
                allow.allows(call.dialect.provider(), model)
            })?
            .clone();
        let features = call.dialect.features();
        let track = features.partial_continuation(config.max_request_body)?;
        Some(Plan { model, track })
    }
}

/// Answers with the original head and streams the original through a task
/// that may continue it.
fn serve_continuable<U: InnerService>(
    mut exchange: Exchange<U>,
    held: Held<UpstreamBody<U::Out>>,
    mut judge: Box<StreamJudge>,
    plan: Plan,
) -> Response<GuardBody<U::Out>> {
    let call = exchange.call.clone();
    call.record_output();
    let original = exchange.original_attempt(held.status(), AttemptResult::Served);
    exchange.attempt.end(&original);
    let request_id = call.dialect.request_id(&held.parts.headers);
    let Held {
        mut parts,
        frames,
        share,
        rest,
        error,
        ..
    } = held;
    judge.committed = true;
    // The body that follows may not be the one this length was for.
    parts.headers.remove(CONTENT_LENGTH);
    let seen = frames
        .iter()
        .filter_map(|f| f.data_ref())
        .map(Bytes::len)
        .sum();
    let original_body = GuardBody::guarded(frames, Some(share), rest, error, None, None, None);
    let (sender, receiver) = tokio::sync::mpsc::channel(64);
    let attempts = exchange.opening(original);
    let settlement = Settlement::new(call.clone(), request_id, attempts, About::Original);
    let tail = OriginalRest {
        settlement: settlement.judged_by(Some(judge), true),
        seen,
        broken: false,
    };
    let continuation = Continuation { exchange, plan };
    let continuer = Continuer::new(continuation, sender.clone(), tail);
    tokio::spawn(async move {
        // Everything, the continuation included, stops when the client goes.
        unless_gone(&sender, continuer.run(original_body)).await;
    });
    let mut response = Response::from_parts(parts, GuardBody::channel(receiver, None));
    call.mark(&mut response);
    response
}

/// What sending the continuation takes: the call's exchange (whose
/// original is the request as first sent) and the plan.
struct Continuation<U> {
    exchange: Exchange<U>,
    plan: Plan,
}

impl<U: InnerService> Continuation<U> {
    /// Sends the continuation and holds its answer, within the deadline, in
    /// the attempt's span. The attempt's record, and its held answer when
    /// it has output.
    async fn attempt(
        &mut self,
        claim: &PrefillClaim,
        deadline: tokio::time::Instant,
    ) -> (Attempt, Option<Held<UpstreamBody<U::Out>>>) {
        let model = Some(self.plan.model.as_str());
        let request = &self.exchange.call.request;
        let mut span = request.attempt(AttemptStep::Fallback, model, None);
        let (record, held) = self.send(claim, deadline).await;
        span.end(&record);
        (record, held)
    }

    async fn send(
        &mut self,
        claim: &PrefillClaim,
        deadline: tokio::time::Instant,
    ) -> (Attempt, Option<Held<UpstreamBody<U::Out>>>) {
        let Exchange {
            inner: upstream,
            call,
            original,
            ..
        } = &mut self.exchange;
        let streaming = &original.streaming;
        let mut record = Attempt::new(AttemptStep::Fallback, AttemptResult::TransportError)
            .model(self.plan.model.clone());
        let Some(mut next) = original.draft() else {
            tracing::warn!("the partial refusal could not be continued: the request is not JSON");
            return (record, None);
        };
        let built = call
            .dialect
            .swap_model(&mut next.parts.uri, &mut next.json, &self.plan.model)
            .and_then(|()| {
                let headers = &mut next.parts.headers;
                self.plan.track.prefill(headers, &mut next.json, claim)
            });
        if let Err(why) = built {
            tracing::warn!(reason = why.0, "the partial refusal could not be continued");
            return (record, None);
        }
        let tenant = &call.config.tenant;
        if !tenant.take_attempt() {
            tracing::info!(
                tenant = tenant.name(),
                "the tenant's recovery attempts for the hour are used: not continued"
            );
            crate::telemetry::metrics::recovery_capped(tenant.name());
            record.result = AttemptResult::Skipped;
            record.reason = Some(DeadReason::Capped);
            return (record, None);
        }
        let request: Request<U::Body> = next.request(&next.json);
        let sent = Instant::now();
        let (dialect, config, streaming) = (call.dialect, &call.config, *streaming);
        let answer = tokio::time::timeout_at(deadline, async move {
            let response = upstream.send(request).await.ok()?;
            Some(hold(response, dialect, config, (streaming, None), None).await)
        })
        .await;
        record.latency_ms = millis(sent.elapsed());
        let Ok(Some(held)) = answer else {
            return (record, None);
        };
        record.status = Some(held.status());
        record.fallback_credit = held.findings().and_then(|f| f.fallback_credit.clone());
        record.result = match (&held.verdict, held.parts.status.is_success()) {
            (_, false) => AttemptResult::HttpError,
            (Verdict::Output, true) => {
                return (
                    Attempt {
                        result: AttemptResult::Served,
                        ..record
                    },
                    Some(held),
                )
            }
            (Verdict::Refused { .. }, true) => AttemptResult::Refused,
            (Verdict::Ended, true) => AttemptResult::NoOutput,
            _ => AttemptResult::HttpError,
        };
        (record, None)
    }
}

/// The original's record as it streams: settled when it ends or when the
/// client goes, unless a continuation is recorded instead.
struct OriginalRest {
    /// Judges the rest of the original as it streams.
    settlement: Settlement,
    /// Bytes the judge saw while the original was held: the body replays
    /// them first, and they are not fed twice.
    seen: usize,
    /// The original's connection broke.
    broken: bool,
}

impl OriginalRest {
    fn feed(&mut self, data: &Bytes) {
        let skip = self.seen.min(data.len());
        self.seen -= skip;
        let judge = self.settlement.judge.as_mut();
        if let (true, Some(judge)) = (skip < data.len(), judge) {
            judge.feed(&data.slice(skip..));
        }
    }

    /// Settles the record; the client saw the original to its end unless
    /// `gone`.
    fn settle(&mut self, gone: bool) {
        let ending = match (gone, self.broken) {
            (true, _) => Ending::Dropped,
            (false, true) => Ending::Broken,
            (false, false) => Ending::Complete,
        };
        self.settlement.settle(ending);
    }
}

/// The refusal's closing frames, held back while a continuation is tried.
struct Closing {
    claim: PrefillClaim,
    frames: VecDeque<Frame<Bytes>>,
    bytes: usize,
    /// When holding and the continuation must be over.
    deadline: tokio::time::Instant,
}

/// The client went away: nothing more is worth doing.
struct Gone;

/// The task that streams the original to the client and, on a refusal that
/// may be continued, holds its closing frames and tries the continuation.
struct Continuer<U> {
    continuation: Continuation<U>,
    sender: FrameSender,
    tail: OriginalRest,
    framer: SseFramer,
    /// The largest frame read whole.
    frame_limit: usize,
    /// Whole frames of the original on their way to the client.
    pending: VecDeque<Frame<Bytes>>,
    closing: Option<Closing>,
}

impl<U: InnerService> Continuer<U> {
    fn new(continuation: Continuation<U>, sender: FrameSender, tail: OriginalRest) -> Self {
        // Frames as large as the hold allows, never less than the framer's
        // default (as the hold itself reads them).
        let frame_limit = continuation
            .exchange
            .call
            .config
            .max_hold_bytes
            .max(SseFramer::DEFAULT_MAX_FRAME_BYTES);
        Continuer {
            continuation,
            sender,
            tail,
            framer: SseFramer::with_max_frame_bytes(frame_limit),
            frame_limit,
            pending: VecDeque::new(),
            closing: None,
        }
    }

    async fn run(mut self, mut original: GuardBody<U::Out>) {
        let ended = self.read_original(&mut original).await;
        drop(original);
        let closing = match (ended, self.closing.take()) {
            (Ok(true), Some(closing)) => closing,
            (ended, _) => {
                self.tail.settle(ended.is_err());
                return;
            }
        };
        let (attempt, served) = self
            .continuation
            .attempt(&closing.claim, closing.deadline)
            .await;
        match served {
            Some(held) => self.splice(held, attempt).await,
            None => {
                let attempts = &mut self.tail.settlement.attempts;
                attempts[0].result = AttemptResult::Refused;
                attempts.push(attempt);
                self.pending = closing.frames;
                let gone = self.flush().await.is_err();
                self.tail.settle(gone);
            }
        }
    }

    /// Streams the original to the client frame by frame, holding back a
    /// continuable refusal's closing frames. `Ok(true)` when it ended cleanly
    /// with closing frames held; `Ok(false)` when all of it went out.
    async fn read_original<R>(&mut self, original: &mut GuardBody<R>) -> Result<bool, Gone>
    where
        R: Body,
        R::Error: Into<BoxError>,
    {
        loop {
            let next = match self.closing.as_ref().map(|c| c.deadline) {
                None => original.frame().await,
                Some(at) => {
                    match tokio::time::timeout_at(at, original.frame()).await {
                        Ok(next) => next,
                        Err(_elapsed) => {
                            tracing::warn!("the partial refusal's original did not end in time; served as it is");
                            return self.give_up(original).await;
                        }
                    }
                }
            };
            let data = match next {
                None => {
                    self.take_frames(true);
                    if self.closing.is_some() {
                        self.flush().await?;
                        return Ok(true);
                    }
                    self.flush().await?;
                    return Ok(false);
                }
                Some(Err(error)) => {
                    // A broken original is served as it came: no continuation.
                    self.tail.broken = true;
                    self.take_frames(true);
                    self.release();
                    self.flush().await?;
                    let _ = self.sender.send(Err(error)).await;
                    return Ok(false);
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(other) => {
                        // Not SSE data (trailers): what came before goes
                        // first, and nothing is held past it.
                        self.take_frames(true);
                        self.release();
                        self.pending.push_back(other);
                        self.flush().await?;
                        continue;
                    }
                },
            };
            self.tail.feed(&data);
            let overflow = self.framer.push(data).is_err();
            self.take_frames(overflow);
            let held = self.closing.as_ref().map_or(0, |c| c.bytes);
            if overflow || held > self.continuation.exchange.call.config.max_hold_bytes {
                tracing::warn!(
                    held_bytes = held,
                    oversized_frame = overflow,
                    "a partial refusal's closing frames outgrew the hold; served as they are"
                );
                return self.give_up(original).await;
            }
            self.flush().await?;
        }
    }

    /// Moves the framer's complete frames (all of them at `end`) to the
    /// client's queue or, from a continuable refusal on, to the held ones.
    fn take_frames(&mut self, end: bool) {
        loop {
            let frame = if end {
                self.framer.finish()
            } else {
                self.framer.next_frame()
            };
            let Some(frame) = frame else { break };
            if self.closing.is_none() {
                if let Some(claim) = self.continuation.plan.track.claim(&frame) {
                    let deadline = self.continuation.exchange.call.deadline_from_now();
                    self.closing = Some(Closing {
                        claim,
                        frames: VecDeque::new(),
                        bytes: 0,
                        deadline,
                    });
                }
            }
            let raw = frame.into_raw();
            match self.closing.as_mut() {
                Some(closing) => {
                    closing.bytes += raw.len();
                    closing.frames.push_back(Frame::data(raw));
                }
                None => self.pending.push_back(Frame::data(raw)),
            }
        }
    }

    /// Stops holding: the held frames join the client's queue, in order.
    fn release(&mut self) {
        if let Some(closing) = self.closing.take() {
            self.pending.extend(closing.frames);
        }
    }

    /// Sends the client's queue.
    async fn flush(&mut self) -> Result<(), Gone> {
        while let Some(frame) = self.pending.pop_front() {
            self.sender.send(Ok(frame)).await.map_err(|_| Gone)?;
        }
        Ok(())
    }

    /// Serves the rest of the original as it comes, as with the option off.
    async fn give_up<R>(&mut self, original: &mut GuardBody<R>) -> Result<bool, Gone>
    where
        R: Body,
        R::Error: Into<BoxError>,
    {
        self.take_frames(true);
        self.release();
        self.flush().await?;
        while let Some(frame) = original.frame().await {
            if let Ok(frame) = &frame {
                if let Some(data) = frame.data_ref() {
                    self.tail.feed(data);
                }
            }
            self.sender.send(frame).await.map_err(|_| Gone)?;
        }
        Ok(false)
    }

    /// Continues the client's message with the held continuation, and
    /// records the refusal as continued.
    async fn splice<R>(&mut self, held: Held<UpstreamBody<R>>, attempt: Attempt)
    where
        R: InnerBody,
    {
        let call = self.continuation.exchange.call.clone();
        let settlement = &mut self.tail.settlement;
        if settlement.is_settled() {
            return;
        }
        let info = settlement
            .finished_findings()
            .and_then(|f| f.partial_refusal.clone());
        let served_model = held
            .judge
            .as_ref()
            .and_then(|w| w.findings.model.clone())
            .or_else(|| attempt.model.clone());
        let refusal = Refusal {
            kind: RefusalKind::Partial,
            served_model,
            request_id: settlement.request_id.take(),
            ..call.refusal(&info.unwrap_or_default(), Outcome::Fallback)
        };
        // Recorded by the continuation's settlement instead.
        let mut attempts = settlement.take_attempts();
        attempts[0].result = AttemptResult::Refused;
        attempts.push(attempt);
        let splice = Splice::new(
            self.continuation.plan.track.continuation(),
            self.frame_limit,
        );
        // Recorded as the continuation's stream ends (or is cut short).
        pump(
            serve_recovered(held, &call, refusal, attempts, None),
            &self.sender,
            Some(splice),
        )
        .await;
    }
}
