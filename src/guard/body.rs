//! [`GuardBody`]: the response body the client reads.
//!
//! A guarded body first replays what the guard held back (byte-exact, in the
//! order it arrived), then streams the rest of the served attempt as it
//! arrives, still watching it, so that a refusal after real output is
//! recorded as partial.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};

use crate::dialect::{EventJudge, Finding, FrameRewrite, Iterations, RefusalInfo, ServerFallback};
use crate::guard::timeout::IdleTimeout;
use crate::refusal::FallbackCredit;
use crate::reserve::Share;
use crate::sse::{FrameSink, SseFramer};

use crate::BoxError;

/// What a response showed, event by event or from its whole JSON body.
#[derive(Debug, Clone, Default)]
pub(crate) struct Findings {
    /// Real output was seen.
    pub(crate) output: bool,
    /// A refusal before any real output.
    pub(crate) empty_refusal: Option<RefusalInfo>,
    /// A refusal after real output.
    pub(crate) partial_refusal: Option<RefusalInfo>,
    /// The provider's own fallback: the first hop's models and category,
    /// and the `to` of the last hop (the model that served).
    pub(crate) server_fallback: Option<ServerFallback>,
    /// A server-side chain's attempts, as the response listed them.
    pub(crate) iterations: Option<Iterations>,
    pub(crate) model: Option<String>,
    /// The response's message id.
    pub(crate) message_id: Option<String>,
    /// What became of a fallback credit token the request presented.
    pub(crate) fallback_credit: Option<FallbackCredit>,
    /// A stop reason the dialect does not know, as it came.
    pub(crate) unknown_stop: Option<String>,
    /// A provider error event arrived.
    pub(crate) error: bool,
    /// A tool call was started.
    pub(crate) tool_call: bool,
    /// The opening of the answer's text, up to `text_limit` bytes.
    pub(crate) text: String,
    /// How much text to keep: only the text detector reads it, so without
    /// it none is kept (a long answer's text would be memory for nothing).
    text_limit: usize,
}

impl Findings {
    /// Findings that keep the answer's opening (up to
    /// [`Findings::TEXT_KEPT`] bytes) when `for_text_detector`, else none.
    pub(crate) fn keeping_text(for_text_detector: bool) -> Self {
        Findings {
            text_limit: if for_text_detector {
                Self::TEXT_KEPT
            } else {
                0
            },
            ..Findings::default()
        }
    }

    /// Runs the text detector on an answer made of text alone, and records a
    /// prose refusal as an empty refusal of kind text.
    pub(crate) fn judge_text(&mut self) {
        if self.tool_call || self.empty_refusal.is_some() || self.partial_refusal.is_some() {
            return;
        }
        let detection = crate::text::detect(&self.text);
        if detection.is_refusal() {
            let span = detection.span.clone().unwrap_or(0..0);
            let said: String = self
                .text
                .get(span)
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect();
            self.empty_refusal = Some(RefusalInfo {
                signal: Some(crate::refusal::RefusalSignal::Text),
                category: Some("text_refusal".to_owned()),
                explanation: Some(match detection.reason {
                    Some(reason) => format!("{}: {said}", reason.as_str()),
                    None => said,
                }),
                credit_token: None,
                usage: None,
                ..RefusalInfo::default()
            });
            self.output = false;
        }
    }

    /// Most answer text kept for the text detector; it only ever reads the
    /// opening, so more would be memory for nothing.
    pub(crate) const TEXT_KEPT: usize = 64 << 10;

    pub(crate) fn absorb(&mut self, seen: Finding) {
        if self.text.is_empty() && seen.text.len() <= self.text_limit {
            // A whole JSON answer comes in one observation: keep its text
            // rather than copy it.
            self.text = seen.text;
        } else if self.text.len() < self.text_limit {
            let room = self.text_limit - self.text.len();
            let mut end = seen.text.len().min(room);
            while !seen.text.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&seen.text[..end]);
        }
        self.tool_call |= seen.tool_call;
        // Output inside the same event comes before a refusal in it.
        self.output |= seen.real_output;
        if let Some(refusal) = seen.refusal {
            if self.output {
                self.partial_refusal.get_or_insert(refusal);
            } else {
                self.empty_refusal.get_or_insert(refusal);
            }
        }
        // Usage reported after the refusal is its cost (a running total).
        if let Some(usage) = seen.usage {
            let refused = self
                .partial_refusal
                .as_mut()
                .or(self.empty_refusal.as_mut());
            if let Some(refused) = refused {
                refused
                    .usage
                    .get_or_insert_with(Default::default)
                    .update(usage);
            }
        }
        ServerFallback::merge(&mut self.server_fallback, seen.server_fallback);
        if seen.iterations.is_some() {
            self.iterations = seen.iterations;
        }
        if seen.fallback_credit.is_some() {
            self.fallback_credit = seen.fallback_credit;
        }
        if self.model.is_none() {
            self.model = seen.model;
        }
        if self.message_id.is_none() {
            self.message_id = seen.message_id;
        }
        if self.unknown_stop.is_none() {
            self.unknown_stop = seen.unknown_stop;
        }
        self.error |= seen.error;
    }
}

/// The framing of a watched stream: SSE, or (Bedrock) an AWS event stream.
enum Framer {
    Sse(SseFramer),
    #[cfg(feature = "bedrock")]
    EventStream(crate::dialect::bedrock::eventstream::EventStreamFramer),
}

impl Framer {
    fn for_inspector(inspector: &dyn EventJudge, max_frame_bytes: usize) -> Self {
        #[cfg(feature = "bedrock")]
        if let Some(translate) = inspector.eventstream() {
            return Framer::EventStream(
                crate::dialect::bedrock::eventstream::EventStreamFramer::new(
                    translate,
                    max_frame_bytes,
                ),
            );
        }
        let _ = inspector;
        Framer::Sse(SseFramer::with_max_frame_bytes(max_frame_bytes))
    }

    fn push_to(
        &mut self,
        chunk: &Bytes,
        sink: &mut impl FrameSink,
    ) -> Result<(), crate::sse::FrameTooLarge> {
        match self {
            Framer::Sse(framer) => framer.push_to(chunk, sink),
            #[cfg(feature = "bedrock")]
            Framer::EventStream(framer) => framer.push_to(chunk, sink),
        }
    }

    fn pending_len(&self) -> usize {
        match self {
            Framer::Sse(framer) => framer.pending_len(),
            #[cfg(feature = "bedrock")]
            Framer::EventStream(framer) => framer.pending_len(),
        }
    }

    fn finish(&mut self) -> Option<crate::sse::Frame> {
        match self {
            Framer::Sse(framer) => framer.finish(),
            #[cfg(feature = "bedrock")]
            Framer::EventStream(framer) => framer.finish(),
        }
    }
}

/// Reads a stream frame by frame and keeps its [`Findings`].
pub(crate) struct StreamJudge {
    framer: Framer,
    inspector: Box<dyn EventJudge>,
    pub(crate) findings: Findings,
    pub(crate) frames: usize,
    /// A frame outgrew the framer's limit and was not judged.
    pub(crate) overflowed: bool,
    max_frame_bytes: usize,
    /// The response is being let through: once it has also shown real
    /// output, only a later refusal still matters.
    pub(crate) committed: bool,
}

impl StreamJudge {
    /// `keep_text`: the answer's opening is kept for the text detector.
    pub(crate) fn new(
        inspector: Box<dyn EventJudge>,
        max_frame_bytes: usize,
        keep_text: bool,
    ) -> Self {
        StreamJudge {
            framer: Framer::for_inspector(&*inspector, max_frame_bytes),
            inspector,
            findings: Findings::keeping_text(keep_text),
            frames: 0,
            overflowed: false,
            max_frame_bytes,
            committed: false,
        }
    }

    /// Feeds one network chunk.
    pub(crate) fn feed(&mut self, chunk: &Bytes) {
        let (framer, mut judge) = self.split();
        let overflow = framer.push_to(chunk, &mut judge).is_err();
        if overflow {
            self.overflowed = true;
            if self.framer.pending_len() > self.max_frame_bytes {
                // An unfinished frame too large to keep: drop it (the client
                // still gets its bytes) and pick the stream up again at the
                // next blank line; its tail parses as fields nobody reads.
                self.framer = Framer::for_inspector(&*self.inspector, self.max_frame_bytes);
            }
        }
    }

    /// The stream ended: judge any bytes that never got their blank line.
    pub(crate) fn finish(&mut self) {
        loop {
            let (framer, mut judge) = self.split();
            let Some(frame) = framer.finish() else {
                return;
            };
            if !judge.skips(frame.event_raw()) {
                judge.take(frame);
            }
        }
    }

    /// The framer, and the judging of the frames it cuts, borrowed apart.
    fn split(&mut self) -> (&mut Framer, FrameJudge<'_>) {
        let judge = FrameJudge {
            inspector: &mut *self.inspector,
            findings: &mut self.findings,
            frames: &mut self.frames,
            committed: self.committed,
        };
        (&mut self.framer, judge)
    }
}

/// A [`StreamJudge`]'s judging, borrowed apart from its framer so that the
/// framer can hand it frames as it cuts them.
struct FrameJudge<'a> {
    inspector: &'a mut dyn EventJudge,
    findings: &'a mut Findings,
    frames: &'a mut usize,
    committed: bool,
}

impl FrameJudge<'_> {
    /// Committed with real output seen: only a later refusal still matters.
    fn settled(&self) -> bool {
        self.committed && self.findings.output
    }
}

impl FrameSink for FrameJudge<'_> {
    fn skips(&mut self, event: Option<&[u8]>) -> bool {
        // A skipped frame has nothing to absorb: an empty observation
        // changes no finding.
        let skip = self.settled() && self.inspector.skips_committed(event);
        *self.frames += usize::from(skip);
        skip
    }

    fn may_skip(&self) -> bool {
        self.settled()
    }

    fn take(&mut self, frame: crate::sse::Frame) {
        *self.frames += 1;
        let seen = self.inspector.observe(&frame, self.settled());
        self.findings.absorb(seen);
    }
}

/// Rewrites the served stream frame by frame (splicing).
pub(crate) struct Splice {
    framer: SseFramer,
    rewrite: Box<dyn FrameRewrite>,
    /// A frame outgrew the framer: the rest goes out as it comes.
    raw: bool,
}

impl Splice {
    pub(crate) fn new(rewrite: Box<dyn FrameRewrite>, max_frame_bytes: usize) -> Self {
        Splice {
            framer: SseFramer::with_max_frame_bytes(max_frame_bytes),
            rewrite,
            raw: false,
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>, end: bool) {
        loop {
            let frame = if end {
                self.framer.finish()
            } else {
                self.framer.next_frame()
            };
            let Some(frame) = frame else { break };
            match (self.raw, self.rewrite.rewrite(&frame)) {
                (false, Some(bytes)) => out.extend_from_slice(&bytes),
                _ => out.extend_from_slice(frame.raw()),
            }
        }
    }

    pub(crate) fn push(&mut self, chunk: Bytes) -> Bytes {
        let mut out = Vec::new();
        if self.framer.push(chunk).is_err() {
            // Hand out everything held, unchanged, and stop rewriting.
            self.raw = true;
            self.emit(&mut out, true);
            return Bytes::from(out);
        }
        self.emit(&mut out, self.raw);
        Bytes::from(out)
    }

    pub(crate) fn finish(&mut self) -> Bytes {
        let mut out = Vec::new();
        self.emit(&mut out, true);
        Bytes::from(out)
    }
}

/// How a served stream came to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// It ended as the upstream ended it.
    Complete,
    /// The upstream connection broke.
    Broken,
    /// The client went away before the end.
    Dropped,
}

/// Called once when a guarded body ends or is dropped, with what the
/// stream showed after the guard let it through and how it ended.
pub(crate) trait Settle: Send + 'static {
    fn settle(self: Box<Self>, watch: Option<&StreamJudge>, output_before: bool, ending: Ending);
}

/// The part of a guarded body that must run exactly once.
struct Finish {
    watch: Option<Box<StreamJudge>>,
    output_before: bool,
    settle: Option<Box<dyn Settle>>,
}

impl Finish {
    fn run(&mut self, ending: Ending) {
        if let Some(settle) = self.settle.take() {
            if let Some(watch) = self.watch.as_mut() {
                watch.finish();
            }
            settle.settle(self.watch.as_deref(), self.output_before, ending);
        }
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.run(Ending::Dropped);
    }
}

pub(crate) struct Guarded<R> {
    held: VecDeque<Frame<Bytes>>,
    /// The layer-wide pool's part for `held`, given back frame by frame.
    share: Option<Share>,
    splice: Option<Splice>,
    rest: Option<Pin<Box<R>>>,
    error: Option<BoxError>,
    finish: Finish,
}

impl<R: Body> Guarded<R> {
    /// Nothing is left to send: the upstream ended and nothing is held.
    fn is_ended(&self) -> bool {
        self.held.is_empty()
            && self.error.is_none()
            && self.splice.is_none()
            && self.rest.as_ref().map_or(true, |r| r.is_end_stream())
    }

    /// Settles as complete with the last frame once nothing is left: a
    /// server that reads `is_end_stream` polls no further and drops the
    /// body, which would otherwise settle it as cut short.
    fn settle_if_ended(&mut self) {
        if self.is_ended() {
            self.finish.run(Ending::Complete);
        }
    }
}

/// A body answered before its decision: frames arrive from the task that
/// decides; keep-alive comments, if asked for, fill the wait before the first.
pub(crate) struct Channel {
    frames: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
    tick: Option<tokio::time::Interval>,
    started: bool,
}

/// An SSE comment line: every SSE parser skips it.
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

enum Kind<R> {
    Passthrough(Pin<Box<IdleTimeout<R>>>),
    Guarded(Box<Guarded<IdleTimeout<R>>>),
    Channel(Box<Channel>),
    /// An answer the guard made itself (an error in the API's shape).
    Full(Option<Bytes>),
}

/// The response body of a [`RefusalGuard`](crate::RefusalGuard).
///
/// For responses the guard does not guard, it is the inner body, frame for
/// frame. For guarded ones it replays what was held back, then streams the
/// rest of the attempt the client is served.
pub struct GuardBody<R> {
    kind: Kind<R>,
}

impl<R> std::fmt::Debug for GuardBody<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Passthrough(_) => "passthrough",
            Kind::Guarded(_) => "guarded",
            Kind::Channel(_) => "channel",
            Kind::Full(_) => "full",
        };
        f.debug_struct("GuardBody").field("kind", &kind).finish()
    }
}

impl<R> GuardBody<R> {
    pub(crate) fn passthrough(body: IdleTimeout<R>) -> Self {
        GuardBody {
            kind: Kind::Passthrough(Box::pin(body)),
        }
    }

    /// Exactly `bytes`: an answer the guard makes itself.
    pub(crate) fn full(bytes: Bytes) -> Self {
        GuardBody {
            kind: Kind::Full(Some(bytes)),
        }
    }

    /// The frames that arrive on `frames`; before the first, a keep-alive
    /// comment every `keepalive` (the first at once) when given.
    pub(crate) fn channel(
        frames: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
        keepalive: Option<std::time::Duration>,
    ) -> Self {
        let tick = keepalive.map(|interval| {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick
        });
        GuardBody {
            kind: Kind::Channel(Box::new(Channel {
                frames,
                tick,
                started: false,
            })),
        }
    }

    /// `held` first, then `error` if reading stopped on one, else `rest`.
    pub(crate) fn guarded(
        held: VecDeque<Frame<Bytes>>,
        share: Option<Share>,
        rest: Option<Pin<Box<IdleTimeout<R>>>>,
        error: Option<BoxError>,
        mut watch: Option<Box<StreamJudge>>,
        settle: Option<Box<dyn Settle>>,
        mut splice: Option<Splice>,
    ) -> Self {
        let output_before = watch.as_ref().is_some_and(|w| w.findings.output);
        if let Some(watch) = watch.as_mut() {
            watch.committed = true;
        }
        let held = match splice.as_mut() {
            None => held,
            Some(splice) => held
                .into_iter()
                .map(|frame| match frame.into_data() {
                    Ok(data) => Frame::data(splice.push(data)),
                    Err(frame) => frame,
                })
                .collect(),
        };
        GuardBody {
            kind: Kind::Guarded(Box::new(Guarded {
                held,
                share,
                splice,
                rest,
                error,
                finish: Finish {
                    watch,
                    output_before,
                    settle,
                },
            })),
        }
    }
}

fn into_bytes<D: Buf>(mut data: D) -> Bytes {
    data.copy_to_bytes(data.remaining())
}

impl<R> Body for GuardBody<R>
where
    R: Body,
    R::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // Every field is boxed or Unpin, so the body itself is Unpin.
        let this = self.get_mut();
        match &mut this.kind {
            Kind::Passthrough(body) => {
                let frame = ready!(body.as_mut().poll_frame(cx));
                Poll::Ready(frame.map(|r| r.map(|f| f.map_data(into_bytes))))
            }
            Kind::Channel(k) => {
                if let Poll::Ready(frame) = k.frames.poll_recv(cx) {
                    k.started = true;
                    return Poll::Ready(frame);
                }
                // Comments only before the first byte of the served stream,
                // so they never land inside one of its frames.
                let tick = if k.started { None } else { k.tick.as_mut() };
                if tick.is_some_and(|tick| tick.poll_tick(cx).is_ready()) {
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(KEEP_ALIVE)))));
                }
                Poll::Pending
            }
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Guarded(g) => loop {
                if let Some(frame) = g.held.pop_front() {
                    if let (Some(share), Some(data)) = (g.share.as_mut(), frame.data_ref()) {
                        share.shrink(data.len());
                    }
                    g.settle_if_ended();
                    return Poll::Ready(Some(Ok(frame)));
                }
                g.share = None;
                if let Some(error) = g.error.take() {
                    g.finish.run(Ending::Broken);
                    return Poll::Ready(Some(Err(error)));
                }
                let Some(rest) = g.rest.as_mut() else {
                    if let Some(tail) = g.splice.take().map(|mut s| s.finish()) {
                        if !tail.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(tail))));
                        }
                    }
                    g.finish.run(Ending::Complete);
                    return Poll::Ready(None);
                };
                match ready!(rest.as_mut().poll_frame(cx)) {
                    Some(Ok(frame)) => {
                        let frame = frame.map_data(into_bytes);
                        if let (Some(data), Some(watch)) =
                            (frame.data_ref(), g.finish.watch.as_mut())
                        {
                            watch.feed(data);
                        }
                        let frame = match (g.splice.as_mut(), frame.into_data()) {
                            (Some(splice), Ok(data)) => {
                                let out = splice.push(data);
                                if out.is_empty() {
                                    // The frame is not complete yet.
                                    continue;
                                }
                                Frame::data(out)
                            }
                            (_, Ok(data)) => Frame::data(data),
                            (_, Err(frame)) => frame,
                        };
                        g.settle_if_ended();
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    Some(Err(error)) => {
                        g.rest = None;
                        g.finish.run(Ending::Broken);
                        return Poll::Ready(Some(Err(error)));
                    }
                    // Emit any spliced tail, then end.
                    None => g.rest = None,
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Channel(_) => false,
            Kind::Full(bytes) => bytes.is_none(),
            Kind::Passthrough(body) => body.is_end_stream(),
            Kind::Guarded(g) => g.is_ended(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Channel(_) => SizeHint::new(),
            Kind::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Passthrough(body) => body.size_hint(),
            // A rewritten stream's length is not known ahead, and a body
            // that will end in an error must not announce an exact length:
            // the client would take the bytes before the error as complete.
            Kind::Guarded(g) if g.splice.is_some() || g.error.is_some() => SizeHint::new(),
            Kind::Guarded(g) => {
                let held: u64 = g
                    .held
                    .iter()
                    .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
                    .sum();
                let rest = g
                    .rest
                    .as_ref()
                    .map(|r| r.size_hint())
                    .unwrap_or_else(|| SizeHint::with_exact(0));
                let mut hint = SizeHint::new();
                hint.set_lower(held + rest.lower());
                if let Some(upper) = rest.upper() {
                    hint.set_upper(held + upper);
                }
                hint
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorded Anthropic stream whose answer is "Hello there!".
    const STREAM: &[u8] =
        include_bytes!("../../tests/fixtures/anthropic/anthropic-sdk-python/basic_response.txt");

    fn watched(keep_text: bool) -> Findings {
        let dialect =
            crate::dialect::recognise(&http::Method::POST, &"/v1/messages".parse().unwrap())
                .unwrap()
                .dialect;
        let mut watch = StreamJudge::new(dialect.event_judge(), 1 << 20, keep_text);
        watch.feed(&Bytes::from_static(STREAM));
        watch.finish();
        watch.findings
    }

    #[test]
    fn the_answer_text_is_kept_only_for_the_text_detector() {
        let detecting = watched(true);
        assert_eq!(detecting.text, "Hello there!");
        assert!(detecting.output);
        let not_detecting = watched(false);
        assert_eq!(not_detecting.text, "");
        assert!(
            not_detecting.output,
            "the rest of the findings are the same"
        );
    }
}
