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

use crate::dialect::{Observation, RefusalInfo, ServerFallback, StreamInspector};
use crate::sse::SseFramer;

/// The error type of [`GuardBody`]: the inner body's error, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a response showed, event by event or from its whole JSON body.
#[derive(Debug, Clone, Default)]
pub(crate) struct Findings {
    /// Real output was seen.
    pub(crate) output: bool,
    /// A refusal before any real output.
    pub(crate) empty_refusal: Option<RefusalInfo>,
    /// A refusal after real output.
    pub(crate) partial_refusal: Option<RefusalInfo>,
    pub(crate) server_fallback: Option<ServerFallback>,
    pub(crate) model: Option<String>,
    /// A provider error event arrived.
    pub(crate) error: bool,
}

impl Findings {
    pub(crate) fn absorb(&mut self, seen: Observation) {
        // Output inside the same event comes before a refusal in it.
        self.output |= seen.real_output;
        if let Some(refusal) = seen.refusal {
            if self.output {
                self.partial_refusal.get_or_insert(refusal);
            } else {
                self.empty_refusal.get_or_insert(refusal);
            }
        }
        if self.server_fallback.is_none() {
            self.server_fallback = seen.server_fallback;
        }
        if self.model.is_none() {
            self.model = seen.model;
        }
        self.error |= seen.error;
    }
}

/// Reads a stream frame by frame and keeps its [`Findings`].
pub(crate) struct StreamWatch {
    framer: SseFramer,
    inspector: Box<dyn StreamInspector>,
    pub(crate) findings: Findings,
    pub(crate) frames: usize,
    /// The framer gave up (a frame over its limit): nothing more is judged.
    pub(crate) blind: bool,
}

impl StreamWatch {
    pub(crate) fn new(inspector: Box<dyn StreamInspector>, max_frame_bytes: usize) -> Self {
        StreamWatch {
            framer: SseFramer::with_max_frame_bytes(max_frame_bytes),
            inspector,
            findings: Findings::default(),
            frames: 0,
            blind: false,
        }
    }

    /// Feeds one network chunk.
    pub(crate) fn feed(&mut self, chunk: &Bytes) {
        if self.blind {
            return;
        }
        if self.framer.push(chunk.clone()).is_err() {
            self.blind = true;
            return;
        }
        while let Some(frame) = self.framer.next_frame() {
            self.frames += 1;
            let seen = self.inspector.observe(&frame);
            self.findings.absorb(seen);
        }
    }

    /// The stream ended: judge any bytes that never got their blank line.
    pub(crate) fn finish(&mut self) {
        if self.blind {
            return;
        }
        while let Some(frame) = self.framer.finish() {
            self.frames += 1;
            let seen = self.inspector.observe(&frame);
            self.findings.absorb(seen);
        }
    }
}

/// Called once when a guarded body ends or is dropped, with what the
/// stream showed after the guard let it through.
pub(crate) trait Settle: Send + 'static {
    fn settle(self: Box<Self>, watch: Option<&StreamWatch>, output_before: bool);
}

/// The part of a guarded body that must run exactly once.
struct Finish {
    watch: Option<StreamWatch>,
    output_before: bool,
    settle: Option<Box<dyn Settle>>,
}

impl Finish {
    fn run(&mut self) {
        if let Some(settle) = self.settle.take() {
            if let Some(watch) = self.watch.as_mut() {
                watch.finish();
            }
            settle.settle(self.watch.as_ref(), self.output_before);
        }
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.run();
    }
}

pub(crate) struct Guarded<R> {
    held: VecDeque<Frame<Bytes>>,
    rest: Option<Pin<Box<R>>>,
    error: Option<BoxError>,
    finish: Finish,
}

// One body per response; boxing the guarded state would cost an allocation
// on every response for no gain.
#[allow(clippy::large_enum_variant)]
enum Kind<R> {
    Passthrough(Pin<Box<R>>),
    Guarded(Guarded<R>),
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
        };
        f.debug_struct("GuardBody").field("kind", &kind).finish()
    }
}

impl<R> GuardBody<R> {
    pub(crate) fn passthrough(body: R) -> Self {
        GuardBody {
            kind: Kind::Passthrough(Box::pin(body)),
        }
    }

    /// `held` first, then `error` if reading stopped on one, else `rest`.
    pub(crate) fn guarded(
        held: VecDeque<Frame<Bytes>>,
        rest: Option<Pin<Box<R>>>,
        error: Option<BoxError>,
        watch: Option<StreamWatch>,
        settle: Option<Box<dyn Settle>>,
    ) -> Self {
        let output_before = watch.as_ref().is_some_and(|w| w.findings.output);
        GuardBody {
            kind: Kind::Guarded(Guarded {
                held,
                rest,
                error,
                finish: Finish {
                    watch,
                    output_before,
                    settle,
                },
            }),
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
                Poll::Ready(frame.map(|r| r.map(|f| f.map_data(into_bytes)).map_err(Into::into)))
            }
            Kind::Guarded(g) => {
                if let Some(frame) = g.held.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                if let Some(error) = g.error.take() {
                    g.finish.run();
                    return Poll::Ready(Some(Err(error)));
                }
                let Some(rest) = g.rest.as_mut() else {
                    g.finish.run();
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
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Some(Err(error)) => {
                        g.rest = None;
                        g.finish.run();
                        Poll::Ready(Some(Err(error.into())))
                    }
                    None => {
                        g.rest = None;
                        g.finish.run();
                        Poll::Ready(None)
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Passthrough(body) => body.is_end_stream(),
            Kind::Guarded(g) => {
                g.held.is_empty()
                    && g.error.is_none()
                    && g.rest.as_ref().map_or(true, |r| r.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passthrough(body) => body.size_hint(),
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
