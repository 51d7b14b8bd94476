//! Bounded waits on the upstream: the time to a response head, the longest
//! gap between body chunks, and the total hold (see
//! [`RefusalGuardLayer::upstream_head_timeout`](crate::RefusalGuardLayer::upstream_head_timeout),
//! [`upstream_idle_timeout`](crate::RefusalGuardLayer::upstream_idle_timeout)
//! and [`recovery_deadline`](crate::RefusalGuardLayer::recovery_deadline)).
//!
//! When one trips before anything was sent to the client, the client gets a
//! `504` in the API's own error shape; once the head has gone out, the
//! stream is cut with an [`UpstreamTimeout`] body error, never ended cleanly.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::BoxError;

/// Which bounded wait on the upstream ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimeoutKind {
    /// No response head within the head timeout.
    Head,
    /// No body chunk within the idle timeout.
    Idle,
    /// The hold (and any recovery) outlasted the recovery deadline.
    Hold,
}

/// The error a guarded body ends with when the upstream went quiet for too
/// long; also the reason behind a `504` the guard answers itself.
///
/// ```
/// use refusal_guard::timeout::{TimeoutKind, UpstreamTimeout};
///
/// let error = UpstreamTimeout::new(TimeoutKind::Idle, std::time::Duration::from_secs(300));
/// assert_eq!(error.kind(), TimeoutKind::Idle);
/// assert!(error.to_string().contains("300 s"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamTimeout {
    kind: TimeoutKind,
    after: Duration,
}

impl UpstreamTimeout {
    /// The timeout of `kind` that ran out after `after`.
    pub fn new(kind: TimeoutKind, after: Duration) -> Self {
        UpstreamTimeout { kind, after }
    }

    /// Which wait ran out.
    pub fn kind(&self) -> TimeoutKind {
        self.kind
    }

    /// How long the wait was allowed to be.
    pub fn after(&self) -> Duration {
        self.after
    }

    /// The short machine-readable name used in error responses.
    pub(crate) fn code(&self) -> &'static str {
        match self.kind {
            TimeoutKind::Head => "upstream_head_timeout",
            TimeoutKind::Idle => "upstream_idle_timeout",
            TimeoutKind::Hold => "recovery_deadline",
        }
    }

    /// Whether `error` (a body error) is an upstream timeout.
    pub(crate) fn find(error: &BoxError) -> Option<UpstreamTimeout> {
        error.downcast_ref::<UpstreamTimeout>().copied()
    }
}

impl fmt::Display for UpstreamTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            TimeoutKind::Head => "the upstream sent no response head",
            TimeoutKind::Idle => "the upstream sent nothing",
            TimeoutKind::Hold => "the upstream's response was not decided",
        };
        let secs = self.after.as_secs_f64();
        write!(f, "{what} within {secs} s")
    }
}

impl std::error::Error for UpstreamTimeout {}

pin_project_lite::pin_project! {
    /// An upstream body that fails with [`UpstreamTimeout`] when no frame
    /// arrives within `idle` of being asked for one.
    ///
    /// tower-http's `TimeoutBody` does the same but reports neither the
    /// inner body's size hint nor its end, which would turn every exact
    /// `content-length` passed through into a chunked body.
    pub(crate) struct IdleTimeout<B> {
        #[pin]
        body: B,
        #[pin]
        sleep: Option<Sleep>,
        idle: Duration,
        // When the wait for the next frame began (the first poll without
        // one). The timer is not re-armed on every frame (a timer-wheel
        // removal and insertion per chunk): once armed it stays, and is
        // pushed back to `waiting_since + idle` when it fires early.
        waiting_since: Option<Instant>,
        // The waker `sleep` was last polled with: while the body is polled
        // with the same one and the timer has not fired, the timer will
        // wake that task when it fires, and polling it again (a waker
        // registration per chunk) can be skipped.
        armed_for: Option<Waker>,
    }
}

impl<B> IdleTimeout<B> {
    pub(crate) fn new(body: B, idle: Duration) -> Self {
        IdleTimeout {
            body,
            sleep: None,
            idle,
            waiting_since: None,
            armed_for: None,
        }
    }
}

impl<B> IdleTimeout<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    /// The next frame of the inner body, within the idle timeout.
    fn poll_timed(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let mut this = self.project();
        if let Poll::Ready(frame) = this.body.poll_frame(cx) {
            *this.waiting_since = None;
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        let deadline = *this.waiting_since.get_or_insert_with(Instant::now) + *this.idle;
        let same_task = this
            .armed_for
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()));
        match this.sleep.as_ref().as_pin_ref() {
            None => this.sleep.set(Some(tokio::time::sleep_until(deadline))),
            Some(sleep) if same_task && !sleep.is_elapsed() => return Poll::Pending,
            Some(_) => {}
        }
        if !same_task {
            *this.armed_for = Some(cx.waker().clone());
        }
        while let Some(mut sleep) = this.sleep.as_mut().as_pin_mut() {
            ready!(sleep.as_mut().poll(cx));
            if sleep.deadline() >= deadline {
                break;
            }
            // Armed for an earlier wait, which a chunk ended: move it on
            // only now, once per idle period, rather than at every chunk
            // (a reset takes the timer wheel's lock).
            sleep.as_mut().reset(deadline);
        }
        this.sleep.set(None);
        *this.armed_for = None;
        let error = UpstreamTimeout::new(TimeoutKind::Idle, *this.idle);
        Poll::Ready(Some(Err(Box::new(error))))
    }
}

impl<B> Body for IdleTimeout<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let frame = ready!(self.poll_timed(cx));
        Poll::Ready(frame.map(|r| r.map(|f| f.map_data(|mut d| d.copy_to_bytes(d.remaining())))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};

    /// A body that never yields.
    struct Silent;

    impl Body for Silent {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_quiet_body_fails_with_the_idle_timeout() {
        let mut body = Box::pin(IdleTimeout::new(Silent, Duration::from_millis(20)));
        let error = body.frame().await.unwrap().unwrap_err();
        let timeout = UpstreamTimeout::find(&error).unwrap();
        assert_eq!(timeout.kind(), TimeoutKind::Idle);
    }

    #[tokio::test]
    async fn a_body_keeps_its_exact_length() {
        let body = IdleTimeout::new(
            Full::new(Bytes::from_static(b"abc")),
            Duration::from_secs(1),
        );
        assert_eq!(body.size_hint().exact(), Some(3));
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"abc");
    }

    /// A chunk every `gap`, `count` of them, then silence.
    struct Paced {
        gap: Duration,
        count: usize,
        next: Option<Pin<Box<tokio::time::Sleep>>>,
    }

    impl Body for Paced {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            if self.count == 0 {
                return Poll::Pending;
            }
            let gap = self.gap;
            let next = self
                .next
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
            ready!(next.as_mut().poll(cx));
            self.next = None;
            self.count -= 1;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_bound_runs_from_the_last_chunk() {
        let idle = Duration::from_millis(50);
        let paced = Paced {
            gap: Duration::from_millis(30),
            count: 10,
            next: None,
        };
        let mut body = Box::pin(IdleTimeout::new(paced, idle));
        let started = tokio::time::Instant::now();
        for _ in 0..10 {
            // 300 ms of chunks 30 ms apart: never 50 ms without one.
            assert!(body.frame().await.unwrap().is_ok());
        }
        let last = tokio::time::Instant::now();
        assert_eq!(last - started, Duration::from_millis(300));
        let error = body.frame().await.unwrap().unwrap_err();
        assert_eq!(
            UpstreamTimeout::find(&error).unwrap().kind(),
            TimeoutKind::Idle
        );
        assert_eq!(
            tokio::time::Instant::now() - last,
            idle,
            "50 ms after the last chunk"
        );
    }

    /// A waker that counts its wake-ups.
    struct Counting(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counting {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_wakes_the_task_that_polled_last() {
        use std::sync::{atomic::Ordering, Arc};
        let idle = Duration::from_millis(50);
        let mut body = Box::pin(IdleTimeout::new(Silent, idle));
        let (first, second) = (Arc::new(Counting(0.into())), Arc::new(Counting(0.into())));
        // Armed while polled by one task, then polled by another (a body
        // handed on): the timer must now wake the second.
        for counting in [&first, &second] {
            let waker = Waker::from(counting.clone());
            let poll = body.as_mut().poll_frame(&mut Context::from_waker(&waker));
            assert!(poll.is_pending());
        }
        tokio::time::sleep(idle).await;
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(
            second.0.load(Ordering::SeqCst),
            1,
            "the second task is woken"
        );
        let waker = Waker::from(second.clone());
        let poll = body.as_mut().poll_frame(&mut Context::from_waker(&waker));
        let Poll::Ready(Some(Err(error))) = poll else {
            panic!("the idle bound fires once the timer has: {poll:?}");
        };
        assert_eq!(
            UpstreamTimeout::find(&error).unwrap().kind(),
            TimeoutKind::Idle
        );
    }
}
