//! [`GuardBody`]: the response body the client reads.
//!
//! A guarded body first replays what the guard held back (byte-exact, in the
//! order it arrived), then streams the rest of the served attempt as it
//! arrives, still judging it, so that a refusal after real output is
//! recorded as partial.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};

use crate::dialect::FrameRewrite;
use crate::guard::findings::StreamJudge;
use crate::guard::settle::{Ending, Settlement};
use crate::guard::timeout::IdleTimeout;
use crate::replay::reserve::Share;
use crate::sse::SseFramer;

use crate::BoxError;

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

pub(crate) struct Guarded<R> {
    held: VecDeque<Frame<Bytes>>,
    /// The layer-wide pool's part for `held`, given back frame by frame.
    share: Option<Share>,
    splice: Option<Splice>,
    rest: Option<Pin<Box<R>>>,
    error: Option<BoxError>,
    /// The record, made once the body ends or is dropped.
    settlement: Option<Box<Settlement>>,
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
            self.settle(Ending::Complete);
        }
    }

    fn settle(&mut self, ending: Ending) {
        if let Some(settlement) = self.settlement.as_mut() {
            settlement.settle(ending);
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
        mut judge: Option<Box<StreamJudge>>,
        settlement: Option<Settlement>,
        mut splice: Option<Splice>,
    ) -> Self {
        let output_before = judge.as_ref().is_some_and(|w| w.findings.output);
        if let Some(judge) = judge.as_mut() {
            judge.committed = true;
        }
        let settlement = settlement.map(|s| Box::new(s.judged_by(judge, output_before)));
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
                settlement,
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
                    g.settle(Ending::Broken);
                    return Poll::Ready(Some(Err(error)));
                }
                let Some(rest) = g.rest.as_mut() else {
                    if let Some(tail) = g.splice.take().map(|mut s| s.finish()) {
                        if !tail.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(tail))));
                        }
                    }
                    g.settle(Ending::Complete);
                    return Poll::Ready(None);
                };
                match ready!(rest.as_mut().poll_frame(cx)) {
                    Some(Ok(frame)) => {
                        let frame = frame.map_data(into_bytes);
                        let judge = g.settlement.as_mut().and_then(|s| s.judge.as_mut());
                        if let (Some(data), Some(judge)) = (frame.data_ref(), judge) {
                            judge.feed(data);
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
                        g.settle(Ending::Broken);
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

// A guarded body is `Send + Sync` whenever the inner body is, so that
// `reqwest::Body::wrap` (which asks for both) takes it as it is: every
// judge, translator and rewrite it carries is `Sync` too.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<GuardBody<http_body_util::Full<Bytes>>>();
};
