//! Holding a response back until there is something to decide: real output,
//! a refusal, the end, an error, or a hold bound.

use std::collections::VecDeque;
use std::pin::Pin;

use bytes::{Buf, Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::dialect::{Dialect, LiveSplice, RefusalInfo};
use crate::guard::config::Config;
use crate::guard::exchange::Exchange;
use crate::guard::findings::{Findings, StreamJudge};
use crate::guard::timeout::{IdleTimeout, UpstreamTimeout};
use crate::guard::upstream::InnerService;
use crate::refusal::AttemptResult;
use crate::replay::chunks::unpinned;
use crate::replay::reserve::Share;
use crate::sse::SseFramer;
use crate::BoxError;

/// What holding a response back showed.
pub(crate) enum Verdict {
    /// Not something the guard judges (an error status, another content
    /// type): passed through as it is.
    Unjudged,
    /// Real output: commit.
    Output,
    /// A refusal before any real output. `complete` when the whole response
    /// was read, so it can still be delivered byte-exact.
    Refused { info: RefusalInfo, complete: bool },
    /// The response ended without real output and without a refusal.
    Ended,
    /// A provider error event arrived before any output.
    Errored,
    /// A hold bound was reached first.
    Limit,
}

/// A response held back: its head, what was read of its body, and the rest.
pub(crate) struct Held<R> {
    pub(crate) parts: http::response::Parts,
    pub(crate) frames: VecDeque<Frame<Bytes>>,
    /// The layer-wide pool's part for `frames`.
    pub(crate) share: Share,
    pub(crate) rest: Option<Pin<Box<R>>>,
    pub(crate) error: Option<BoxError>,
    /// For streams: the judge that goes on judging after commit.
    /// Boxed, as `judged` is: both are large and rarely both present, and
    /// the held response moves through every step of the decision.
    pub(crate) judge: Option<Box<StreamJudge>>,
    /// For whole JSON bodies: what the body showed.
    pub(crate) judged: Option<Box<Findings>>,
    pub(crate) verdict: Verdict,
}

impl<R> Held<R> {
    pub(crate) fn status(&self) -> u16 {
        self.parts.status.as_u16()
    }

    /// What the response showed so far: a whole body's findings, or the
    /// stream's up to where it is held.
    pub(crate) fn findings(&self) -> Option<&Findings> {
        self.judged
            .as_deref()
            .or_else(|| self.judge.as_deref().map(|w| &w.findings))
    }
}

pub(crate) fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// An SSE stream: what keep-alive comments and live splicing may write into.
pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    content_type(headers)
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("text/event-stream")
}

/// A stream the guard judges frame by frame: SSE, or an AWS event stream
/// (Bedrock), which nothing may be written into.
fn is_judged_stream(headers: &HeaderMap) -> bool {
    is_event_stream(headers)
        || content_type(headers)
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("application/vnd.amazon.eventstream")
}

pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    let kind = content_type(headers).to_ascii_lowercase();
    let essence = kind.split(';').next().unwrap_or("").trim();
    essence == "application/json" || essence.ends_with("+json")
}

/// Live thinking: the frames of a held stream that may go out before the
/// decision are sent as they complete; the rest wait in the [`Held`].
pub(crate) struct LiveForward {
    sender: tokio::sync::mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
    pub(crate) splice: Box<dyn LiveSplice>,
    framer: SseFramer,
    /// A frame had to wait, so every later one waits too.
    waiting: bool,
    /// The client went away: nothing is worth deciding any more.
    pub(crate) gone: bool,
}

impl LiveForward {
    pub(crate) fn new(
        sender: tokio::sync::mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
        splice: Box<dyn LiveSplice>,
        max_frame_bytes: usize,
    ) -> Self {
        LiveForward {
            sender,
            splice,
            framer: SseFramer::with_max_frame_bytes(max_frame_bytes),
            waiting: false,
            gone: false,
        }
    }

    /// Sends the whole frames of `chunk` that may go now; the others join
    /// `waiting`, in order.
    async fn take(&mut self, chunk: Bytes, waiting: &mut VecDeque<Frame<Bytes>>) {
        if self.framer.push(chunk).is_err() {
            // A frame too large to judge: it and all after it wait.
            self.waiting = true;
        }
        while let Some(frame) = self.framer.next_frame() {
            if !self.waiting && self.splice.forward(&frame) {
                if self
                    .sender
                    .send(Ok(Frame::data(frame.into_raw())))
                    .await
                    .is_err()
                {
                    self.gone = true;
                }
            } else {
                self.waiting = true;
                waiting.push_back(Frame::data(unpinned(frame.into_raw())));
            }
        }
    }

    /// The hold is over: bytes of a frame still incomplete wait as well.
    fn close(&mut self, waiting: &mut VecDeque<Frame<Bytes>>) {
        while let Some(frame) = self.framer.finish() {
            waiting.push_back(Frame::data(unpinned(frame.into_raw())));
        }
    }
}

impl<U: InnerService> Exchange<U> {
    /// The judge step: holds the original `response` back (its thinking
    /// forwarded through `live` meanwhile, when live thinking is on) until
    /// there is something to decide, within the call's recovery deadline.
    pub(crate) async fn judge(
        &mut self,
        response: Response<IdleTimeout<U::Out>>,
        live: Option<&mut LiveForward>,
    ) -> Result<Held<IdleTimeout<U::Out>>, UpstreamTimeout> {
        self.hold_original(response, live).await
    }

    /// Holds the original `response` within the call's recovery deadline,
    /// whichever step reads it (the judge step, or `rejected` before it
    /// knows which response is the original). Past the deadline, the
    /// original's attempt ends as a transport error and the timeout is what
    /// is left to answer.
    pub(crate) async fn hold_original(
        &mut self,
        response: Response<IdleTimeout<U::Out>>,
        live: Option<&mut LiveForward>,
    ) -> Result<Held<IdleTimeout<U::Out>>, UpstreamTimeout> {
        let call = &self.call;
        let status = response.status().as_u16();
        let held = hold(
            response,
            call.dialect,
            &call.config,
            self.original.streaming,
            live,
        );
        let timeout = match call.within_deadline(held).await {
            Ok(held) => return Ok(held),
            Err(timeout) => timeout,
        };
        self.attempt
            .end_with(AttemptResult::TransportError, Some(status));
        Err(timeout)
    }
}

/// Holds `response` back: a stream until it shows output, a refusal, its
/// end or a bound; a JSON body whole; anything else not at all.
pub(crate) async fn hold<R>(
    response: Response<R>,
    dialect: &'static dyn Dialect,
    config: &Config,
    streaming: bool,
    forward: Option<&mut LiveForward>,
) -> Held<R>
where
    R: Body,
    R::Error: Into<BoxError>,
{
    let started = std::time::Instant::now();
    let (mut parts, body) = response.into_parts();
    // Kept until the decision, while the upstream connection reads on.
    crate::replay::chunks::unpin_headers(&mut parts.headers);
    let mut held = Held {
        parts,
        frames: VecDeque::new(),
        share: config.held.share(),
        rest: Some(Box::pin(body)),
        error: None,
        judge: None,
        judged: None,
        verdict: Verdict::Unjudged,
    };
    let success = held.parts.status.is_success();
    // A stream sent without a content type is still judged as the stream the
    // request asked for.
    let untyped = held.parts.headers.get(CONTENT_TYPE).is_none();
    if success && (is_judged_stream(&held.parts.headers) || (untyped && streaming)) {
        hold_stream(&mut held, dialect, config, forward).await;
    } else if (success || dialect.refuses_with_errors())
        && (is_json(&held.parts.headers) || (untyped && !streaming))
    {
        hold_json(&mut held, dialect, config, success).await;
    }
    crate::telemetry::metrics::record_hold(dialect.wire_api(), started.elapsed(), &held.frames);
    held
}

pub(crate) async fn hold_stream<R>(
    held: &mut Held<R>,
    dialect: &'static dyn Dialect,
    config: &Config,
    mut forward: Option<&mut LiveForward>,
) where
    R: Body,
    R::Error: Into<BoxError>,
{
    let mut stream = HeldStream::new(dialect, config);
    let Some(body) = held.rest.as_mut() else {
        return;
    };
    let verdict = loop {
        // Into `Bytes` and `BoxError` at once: nothing of the inner body's
        // own types is kept across the awaits below.
        let next = body.frame().await.map(|r| {
            r.map(|f| f.map_data(|mut d| d.copy_to_bytes(d.remaining())))
                .map_err(Into::<BoxError>::into)
        });
        let frame = match next {
            None => {
                held.rest = None;
                break stream.at_end();
            }
            Some(Err(error)) => {
                // Reading stops here; the client will see this error after
                // what was read, as the provider's connection delivered it.
                held.rest = None;
                held.error = Some(error);
                break stream.at_error();
            }
            Some(Ok(frame)) => frame,
        };
        let mut pool_full = false;
        if let Some(data) = frame.data_ref() {
            pool_full = !held.share.grow(data.len());
            stream.feed(data);
        }
        match (forward.as_deref_mut(), frame.into_data()) {
            (Some(forward), Ok(data)) => {
                forward.take(data, &mut held.frames).await;
                if forward.gone {
                    break Verdict::Unjudged;
                }
            }
            // Held until the decision: a short chunk is copied rather than
            // left pinning the upstream connection's read buffer.
            (_, Ok(data)) => held.frames.push_back(Frame::data(unpinned(data))),
            (_, Err(frame)) => held.frames.push_back(frame),
        }
        if let Some(verdict) = stream.after_chunk(pool_full) {
            break verdict;
        }
    };
    if let Some(forward) = forward {
        forward.close(&mut held.frames);
    }
    held.verdict = verdict;
    held.judge = Some(stream.judge);
}

/// What a held stream has shown so far, and whether that decides it.
struct HeldStream<'a> {
    dialect: &'static dyn Dialect,
    config: &'a Config,
    judge: Box<StreamJudge>,
    /// Bytes held so far.
    bytes: usize,
    /// Whether the text detector still has to rule on this answer.
    text_pending: bool,
}

impl<'a> HeldStream<'a> {
    fn new(dialect: &'static dyn Dialect, config: &'a Config) -> Self {
        // One frame may be as large as the hold allows, and never less than
        // the framer's default, so that a small hold limit still lets a
        // committed stream be read frame by frame for a later refusal.
        let frame_limit = config
            .max_hold_bytes
            .max(crate::sse::SseFramer::DEFAULT_MAX_FRAME_BYTES);
        HeldStream {
            dialect,
            config,
            judge: Box::new(StreamJudge::new(
                dialect.event_judge(),
                frame_limit,
                config.text_detection,
            )),
            bytes: 0,
            text_pending: config.text_detection,
        }
    }

    fn feed(&mut self, data: &Bytes) {
        self.bytes += data.len();
        self.judge.feed(data);
    }

    /// The stream ended.
    fn at_end(&mut self) -> Verdict {
        self.judge.finish();
        if self.text_pending {
            self.judge.findings.judge_text();
        }
        match &self.judge.findings.empty_refusal {
            Some(info) => Verdict::Refused {
                info: info.clone(),
                complete: true,
            },
            None if self.judge.findings.output => Verdict::Output,
            None if self.judge.findings.error => Verdict::Errored,
            None => Verdict::Ended,
        }
    }

    /// The connection broke: judge what arrived before the break, as at a
    /// clean end (a frame may be complete but not yet dispatched, its blank
    /// line a lone CR, or missing).
    fn at_error(&mut self) -> Verdict {
        self.judge.finish();
        match &self.judge.findings.empty_refusal {
            Some(info) => Verdict::Refused {
                info: info.clone(),
                complete: true,
            },
            // Output held for the text detector: the client gets it, then
            // the error.
            None if self.judge.findings.output => Verdict::Output,
            None => Verdict::Errored,
        }
    }

    /// After a chunk: the verdict, once there is one. `pool_full` when the
    /// layer-wide bound on held bytes is reached.
    fn after_chunk(&mut self, pool_full: bool) -> Option<Verdict> {
        self.rule_on_text();
        let findings = &self.judge.findings;
        if findings.empty_refusal.is_none() {
            if findings.output && !self.text_pending {
                return Some(Verdict::Output);
            }
            if findings.error {
                return Some(Verdict::Errored);
            }
        }
        let config = self.config;
        if !(self.judge.overflowed
            || pool_full
            || self.bytes > config.max_hold_bytes
            || self.judge.frames > config.max_hold_frames)
        {
            return None;
        }
        // Committing blind: say why, since a refusal that comes later can no
        // longer be recovered.
        tracing::warn!(
            wire_api = %self.dialect.wire_api(),
            held_bytes = self.bytes,
            held_frames = self.judge.frames,
            oversized_frame = self.judge.overflowed,
            total_held_limit = pool_full,
            "hold limit reached before a decision; letting the response through"
        );
        Some(match &findings.empty_refusal {
            Some(info) => Verdict::Refused {
                info: info.clone(),
                complete: false,
            },
            None => Verdict::Limit,
        })
    }

    /// The text detector: commit as soon as the answer's opening rules a
    /// prose refusal out, else hold up to the cap.
    fn rule_on_text(&mut self) {
        if !self.text_pending {
            return;
        }
        let findings = &mut self.judge.findings;
        if findings.tool_call || findings.empty_refusal.is_some() {
            self.text_pending = false;
        } else if findings.output {
            if findings.text_ruled_out() {
                self.text_pending = false;
            } else if findings.text.len() >= self.config.text_hold_bytes {
                self.text_pending = false;
                findings.judge_text();
            }
        }
    }
}

pub(crate) async fn hold_json<R>(
    held: &mut Held<R>,
    dialect: &'static dyn Dialect,
    config: &Config,
    success: bool,
) where
    R: Body,
    R::Error: Into<BoxError>,
{
    let Some(body) = held.rest.as_mut() else {
        return;
    };
    // Bytes read so far; the body is joined into one buffer only if it came
    // in more than one frame.
    let mut len = 0;
    loop {
        match body.frame().await {
            None => break,
            Some(Err(error)) => {
                held.rest = None;
                held.error = Some(error.into());
                held.verdict = Verdict::Errored;
                return;
            }
            Some(Ok(frame)) => {
                let frame = frame.map_data(|mut d| d.copy_to_bytes(d.remaining()));
                let mut pool_full = false;
                if let Some(data) = frame.data_ref() {
                    len += data.len();
                    pool_full = !held.share.grow(data.len());
                }
                held.frames.push_back(frame);
                if pool_full {
                    tracing::warn!(
                        held_bytes = len,
                        "the bound on bytes held across responses is reached; letting the response through"
                    );
                }
                if pool_full || len > config.max_response_body {
                    held.verdict = Verdict::Limit;
                    return;
                }
            }
        }
    }
    held.rest = None;
    let whole = joined(&held.frames, len);
    if !success {
        // Not JSON after all: pass it on as it came.
        let info = serde_json::from_slice::<Value>(&whole)
            .ok()
            .and_then(|json| dialect.judge_error(held.parts.status, &json));
        held.verdict = match info {
            Some(info) => Verdict::Refused {
                info,
                complete: true,
            },
            None => Verdict::Unjudged,
        };
        return;
    }
    let Some(seen) = dialect.judge_json_bytes(&whole, config.text_detection) else {
        // Not JSON after all: pass it on as it came.
        held.verdict = Verdict::Ended;
        return;
    };
    let mut findings = Findings::keeping_text(config.text_detection);
    findings.absorb(seen);
    if config.text_detection {
        findings.judge_text();
    }
    held.verdict = match &findings.empty_refusal {
        Some(info) => Verdict::Refused {
            info: info.clone(),
            complete: true,
        },
        None if findings.output => Verdict::Output,
        None if findings.error => Verdict::Errored,
        None => Verdict::Ended,
    };
    held.judged = Some(Box::new(findings));
}

/// The data of `frames` (`len` bytes in all) as one buffer: the frame
/// itself when there is only one, which is how most bodies arrive.
fn joined(frames: &VecDeque<Frame<Bytes>>, len: usize) -> Bytes {
    let mut data = frames.iter().filter_map(Frame::data_ref);
    match (data.next(), data.next()) {
        (None, _) => Bytes::new(),
        (Some(only), None) => only.clone(),
        _ => {
            let mut whole = BytesMut::with_capacity(len);
            for piece in frames.iter().filter_map(Frame::data_ref) {
                whole.extend_from_slice(piece);
            }
            whole.freeze()
        }
    }
}
