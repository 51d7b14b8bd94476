//! [`ReplayBody`]: request bodies the guard can read and send again.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};

use crate::BoxError;

pub(crate) mod chunks;
pub(crate) mod copy;
pub(crate) mod reserve;

use copy::RequestCopy;

/// A request body type the guard can rebuild after reading it (and read
/// without pinning, hence `Unpin`).
///
/// The guard keeps a guarded request's body (up to
/// [`max_request_body`](crate::RefusalGuardLayer::max_request_body)) to see
/// the model and to build recovery requests, and sends rebuilt bodies of the
/// same type to the inner service. A type that can carry another body
/// ([`forwarded`](ReplayBody::forwarded)) has its requests forwarded as they
/// arrive, a copy kept; any other is read whole first.
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

    /// `body` as this type, for a type that can carry another body (a boxed
    /// one can): the guard then sends a request upstream as it arrives,
    /// keeping a bounded copy for what recovery needs later. The default
    /// gives `body` back, and the guard reads such a body whole before it
    /// sends anything, as it does a [`Full`] (which has nothing to wait
    /// for).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http_body_util::{combinators::BoxBody, BodyExt};
    /// use refusal_guard::replay::ForwardedBody;
    /// use refusal_guard::ReplayBody;
    ///
    /// type BoxError = Box<dyn std::error::Error + Send + Sync>;
    ///
    /// /// An application's own request body: a boxed body under its name.
    /// struct AppBody(BoxBody<Bytes, BoxError>);
    /// # impl http_body::Body for AppBody {
    /// #     type Data = Bytes;
    /// #     type Error = BoxError;
    /// #     fn poll_frame(
    /// #         mut self: std::pin::Pin<&mut Self>,
    /// #         cx: &mut std::task::Context<'_>,
    /// #     ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
    /// #         std::pin::Pin::new(&mut self.0).poll_frame(cx)
    /// #     }
    /// # }
    ///
    /// impl ReplayBody for AppBody {
    ///     fn from_bytes(bytes: Bytes) -> Self {
    ///         AppBody(ReplayBody::from_bytes(bytes))
    ///     }
    ///     fn prefixed(prefix: Bytes, rest: Self) -> Self {
    ///         AppBody(ReplayBody::prefixed(prefix, rest.0))
    ///     }
    ///     // Streams requests upstream as they arrive.
    ///     fn forwarded(body: ForwardedBody<Self>) -> Result<Self, ForwardedBody<Self>> {
    ///         Ok(AppBody(body.boxed()))
    ///     }
    /// }
    /// ```
    fn forwarded(body: ForwardedBody<Self>) -> Result<Self, ForwardedBody<Self>> {
        Err(body)
    }
}

/// A request body on its way upstream while the guard copies it: the
/// client's frames, unchanged and as they arrive (their data as [`Bytes`]),
/// with the chunks themselves kept as the copy, not their bytes copied (up to
/// [`max_request_body`](crate::RefusalGuardLayer::max_request_body)) for
/// the recovery requests the guard may build later. An error of the
/// client's body is passed on as it is, so that the upstream request is
/// aborted, never ended as if it were complete.
///
/// Built by the guard and handed to [`ReplayBody::forwarded`]; see there.
pub struct ForwardedBody<B> {
    body: B,
    copy: RequestCopy,
}

impl<B> ForwardedBody<B> {
    pub(crate) fn new(body: B, copy: RequestCopy) -> Self {
        ForwardedBody { body, copy }
    }

    /// The client's body and the copy, for a body type that cannot carry it.
    pub(crate) fn into_parts(self) -> (B, RequestCopy) {
        (self.body, self.copy)
    }
}

impl<B> std::fmt::Debug for ForwardedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardedBody").finish_non_exhaustive()
    }
}

impl<B: Body + Unpin> Body for ForwardedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
            Some(Ok(frame)) => {
                // The chunk itself, kept for the copy: for `Bytes` (what
                // hyper and reqwest yield) taking it whole copies nothing.
                let frame = frame.map_data(|mut data| data.copy_to_bytes(data.remaining()));
                if let Some(data) = frame.data_ref() {
                    this.copy.take(data);
                }
                // A body that knows its end (a declared length) is not
                // polled again once it is sent whole.
                if this.body.is_end_stream() {
                    this.copy.end();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(error)) => {
                this.copy.fail();
                Poll::Ready(Some(Err(error)))
            }
            None => {
                this.copy.end();
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
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
type Head<E> = http_body_util::combinators::MapErr<Full<Bytes>, fn(Infallible) -> E>;

fn never<E>(never: Infallible) -> E {
    match never {}
}

/// `prefix`, then `rest`: what [`ReplayBody::prefixed`] returns for a body
/// type that can carry another body (a named type, so that it is `Sync`
/// whenever `B` is).
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, Full};
/// use refusal_guard::replay::prefixed;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let body = prefixed(Bytes::from("read "), Full::new(Bytes::from("rest")));
/// assert_eq!(body.collect().await.unwrap().to_bytes(), "read rest");
/// # }
/// ```
pub fn prefixed<B>(prefix: Bytes, rest: B) -> Prefixed<B>
where
    B: Body<Data = Bytes> + Send + 'static,
{
    let head = Full::new(prefix).map_err(never::<B::Error> as fn(Infallible) -> B::Error);
    Prefixed {
        head: Some(head),
        rest,
    }
}

pin_project_lite::pin_project! {
    /// Bytes already read, then the rest of a body: see [`prefixed`].
    pub struct Prefixed<B: Body> {
        #[pin]
        head: Option<Head<B::Error>>,
        #[pin]
        rest: B,
    }
}

impl<B> Body for Prefixed<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        if let Some(head) = this.head.as_mut().as_pin_mut() {
            match ready!(head.poll_frame(cx)) {
                Some(frame) => return Poll::Ready(Some(frame)),
                None => this.head.set(None),
            }
        }
        this.rest.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.head.as_ref().map_or(true, Head::is_end_stream) && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let head = self.head.as_ref().map_or(0, |h| h.size_hint().lower());
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(head + rest.lower());
        if let Some(upper) = rest.upper() {
            hint.set_upper(head + upper);
        }
        hint
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
        prefixed(prefix, rest).boxed()
    }

    fn forwarded(body: ForwardedBody<Self>) -> Result<Self, ForwardedBody<Self>> {
        Ok(body.boxed())
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
        prefixed(prefix, rest).boxed_unsync()
    }

    fn forwarded(body: ForwardedBody<Self>) -> Result<Self, ForwardedBody<Self>> {
        Ok(body.boxed_unsync())
    }
}
