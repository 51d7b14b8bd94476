//! [`ReplayBody`]: request bodies the guard can read and send again.

use std::convert::Infallible;

use bytes::Bytes;
use http_body::Body;
use http_body_util::{BodyExt, Full};

use crate::BoxError;

/// A request body type the guard can rebuild after reading it (and read
/// without pinning, hence `Unpin`).
///
/// The guard reads a guarded request's body (up to
/// [`max_request_body`](crate::RefusalGuardLayer::max_request_body)) to see
/// the model and to build recovery requests, then sends rebuilt bodies of the
/// same type to the inner service.
///
/// Implemented for [`Full<Bytes>`], the boxed bodies of `http-body-util`,
/// and (feature `reqwest`) `reqwest::Body`.
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use refusal_guard::ReplayBody;
///
/// let body = <Full<Bytes> as ReplayBody>::from_bytes(Bytes::from_static(b"{}"));
/// # let _ = body;
/// ```
pub trait ReplayBody: Body<Error: Into<BoxError>> + Sized + Send + Unpin + 'static {
    /// A body of exactly these bytes.
    fn from_bytes(bytes: Bytes) -> Self;

    /// The bytes already read, then whatever `rest` still yields. Used when a
    /// body of unknown length turns out larger than the buffer limit, so the
    /// request is forwarded whole and unguarded.
    fn prefixed(prefix: Bytes, rest: Self) -> Self;
}

impl ReplayBody for Full<Bytes> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
    }

    fn prefixed(prefix: Bytes, _rest: Self) -> Self {
        // A `Full` yields all its bytes in its one frame, so once read there
        // is no rest; its exact length also means the guard never reads one
        // past the limit.
        Full::new(prefix)
    }
}

/// The already-read bytes of a body, typed as that body's error.
pub(crate) type Head<E> = http_body_util::combinators::MapErr<Full<Bytes>, fn(Infallible) -> E>;

fn never<E>(never: Infallible) -> E {
    match never {}
}

/// `prefix`, then `rest`. A named type, so that it is `Sync` whenever `B` is.
pub(crate) fn chain<B>(prefix: Bytes, rest: B) -> Chain<Head<B::Error>, B>
where
    B: Body<Data = Bytes> + Send + 'static,
{
    let head = Full::new(prefix).map_err(never::<B::Error> as fn(Infallible) -> B::Error);
    Chain {
        head: Some(head),
        rest,
    }
}

pin_project_lite::pin_project! {
    /// Bytes already read (`H`), then the rest of the body (`B`).
    pub(crate) struct Chain<H, B> {
        #[pin]
        head: Option<H>,
        #[pin]
        rest: B,
    }
}

impl<H, B> Body for Chain<H, B>
where
    H: Body<Data = Bytes, Error = B::Error>,
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        if let Some(head) = this.head.as_mut().as_pin_mut() {
            match std::task::ready!(head.poll_frame(cx)) {
                Some(frame) => return std::task::Poll::Ready(Some(frame)),
                None => this.head.set(None),
            }
        }
        this.rest.poll_frame(cx)
    }
}

impl<E> ReplayBody for http_body_util::combinators::BoxBody<Bytes, E>
where
    E: Into<BoxError> + Send + 'static,
{
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes).map_err(|never| match never {}).boxed()
    }

    fn prefixed(prefix: Bytes, rest: Self) -> Self {
        chain(prefix, rest).boxed()
    }
}

impl<E> ReplayBody for http_body_util::combinators::UnsyncBoxBody<Bytes, E>
where
    E: Into<BoxError> + Send + 'static,
{
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
            .map_err(|never| match never {})
            .boxed_unsync()
    }

    fn prefixed(prefix: Bytes, rest: Self) -> Self {
        chain(prefix, rest).boxed_unsync()
    }
}
