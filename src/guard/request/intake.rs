//! How a guardable request's body is taken in, decided once: read whole
//! before anything is sent when a rewrite of the first request may need
//! it (bounded, never forwarding a broken one), or else forwarded as it
//! arrives while a bounded copy fills alongside for any recovery.

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;

use crate::guard::request::Incoming;
use crate::replay::copy::{declared_length, room_for, Copied, CopyOutcome, RequestCopy};
use crate::replay::reserve::Share;
use crate::replay::{ForwardedBody, ReplayBody};
use crate::BoxError;

/// A guardable request's body, taken in.
pub(crate) enum Intake<B> {
    /// Read whole, before anything was sent, with the pool's part for it.
    Read { bytes: Bytes, share: Share },
    /// To forward as it arrives; its copy is told later.
    Forwarded { body: B, copy: CopyOutcome },
    /// Too large to guard: sent as it is, streaming, unguarded.
    Unguarded(B),
    /// The client's body failed before anything was sent.
    Failed(BoxError),
    /// The layer-wide bound on held bytes leaves no room for it.
    NoRoom,
}

/// Takes in `body`, the body of the request `parts` heads: the one place
/// that decides between reading it whole and forwarding it as it arrives.
/// A request forwarded as it arrives goes out with `parts` as they are
/// now: they get the first request's headers here.
pub(crate) async fn take_in<B: ReplayBody>(
    incoming: &Incoming,
    parts: &mut http::request::Parts,
    body: B,
) -> Intake<B> {
    let config = &incoming.config;
    let limit = config.max_request_body;
    let declared = declared_length(&parts.headers, &body);
    if declared.is_some_and(|len| len > limit as u64) {
        return Intake::Unguarded(body);
    }
    let share = config.held.share();
    if read_first(incoming, &parts.uri) {
        return read_whole(body, declared, limit, share).await;
    }
    let (copy, later) = RequestCopy::new(declared, limit, share);
    match B::forwarded(ForwardedBody::new(body, copy)) {
        Ok(body) => {
            incoming.first_headers(&mut parts.headers, incoming.path_model());
            forward(body, later).await
        }
        // The body type cannot carry a copying body.
        Err(forwarded) => {
            let (body, copy) = forwarded.into_parts();
            let share = copy.into_share().expect("nothing was copied yet");
            read_whole(body, declared, limit, share).await
        }
    }
}

/// Whether a request must be read whole before anything is sent: a rewrite
/// of its first request may depend on what it holds. That is a sticky
/// route (any wire API), server-side fallbacks to retarget or inject (only
/// where the wire API and the platform behind `uri` have them), or the
/// fallback credit beta when only the body names the model (the header
/// goes out before a body whose `model` may come after everything else).
/// Every other request, whatever the layer configures for other wire APIs,
/// is forwarded as it arrives.
fn read_first(incoming: &Incoming, uri: &http::Uri) -> bool {
    let config = &incoming.config;
    let sticky = config.sticky_ttl.is_some() && config.store.may_hold_any();
    let features = incoming.dialect.features();
    let fallbacks = !config.retarget.is_empty() && features.server_fallbacks_on(uri);
    let credit = incoming.path_model.is_none()
        && features.asks_fallback_credit()
        && config.fallback_credit
        && config.policy.is_none()
        && !config.ladder.chains().is_empty();
    sticky || fallbacks || credit
}

/// Reads `body` whole, counting it against the pool as it comes (at the
/// first bytes, all that were `declared`).
async fn read_whole<B: ReplayBody>(
    mut body: B,
    declared: Option<u64>,
    limit: usize,
    mut share: Share,
) -> Intake<B> {
    let mut buffer = BytesMut::new();
    // Bytes of `buffer` already counted against the layer-wide bound.
    let mut counted = 0;
    loop {
        match body.frame().await {
            None => {
                return Intake::Read {
                    bytes: buffer.freeze(),
                    share,
                }
            }
            Some(Ok(frame)) => {
                if let Ok(mut data) = frame.into_data() {
                    let wanted = room_for(buffer.len(), data.remaining(), declared);
                    if wanted > counted {
                        if !share.grow(wanted - counted) {
                            tracing::warn!(
                                "the bound on bytes held across requests is reached: request refused"
                            );
                            return Intake::NoRoom;
                        }
                        counted = wanted;
                    }
                    // At the first bytes, room for all that were declared:
                    // one allocation, no copies as the buffer grows.
                    buffer.reserve(wanted - buffer.len());
                    while data.has_remaining() {
                        let chunk = data.chunk();
                        buffer.extend_from_slice(chunk);
                        let n = chunk.len();
                        data.advance(n);
                    }
                }
                if buffer.len() > limit {
                    tracing::debug!(limit, "request body over the limit: forwarded unguarded");
                    return Intake::Unguarded(B::prefixed(buffer.freeze(), body));
                }
            }
            Some(Err(error)) => {
                // A truncated request must never reach the upstream as if
                // it were complete.
                let error: BoxError = error.into();
                tracing::warn!(%error, "request body failed while read: not forwarded");
                return Intake::Failed(error);
            }
        }
    }
}

/// Readies a copying `body` to be forwarded. Its first bytes are awaited
/// first, so that a body that fails at once, or that the layer-wide bound
/// has no room for, is answered before anything goes upstream (a client
/// that declares a length and sends nothing holds nothing).
async fn forward<B: ReplayBody>(
    mut body: B,
    mut later: tokio::sync::oneshot::Receiver<Copied>,
) -> Intake<B> {
    let first = body.frame().await;
    let early = later.try_recv().ok();
    match (first, early) {
        (Some(Err(error)), _) => {
            let error: BoxError = error.into();
            tracing::warn!(%error, "request body failed while read: not forwarded");
            Intake::Failed(error)
        }
        (_, Some(Copied::NoRoom)) => {
            tracing::warn!("the bound on bytes held across requests is reached: request refused");
            Intake::NoRoom
        }
        (first, early) => {
            let prefix = match first.map(|frame| frame.map(http_body::Frame::into_data)) {
                Some(Ok(Ok(mut data))) => data.copy_to_bytes(data.remaining()),
                _ => Bytes::new(),
            };
            Intake::Forwarded {
                body: B::prefixed(prefix, body),
                copy: CopyOutcome::new(early, later),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use http::header::CONTENT_LENGTH;
    use http::{HeaderMap, HeaderValue};
    use http_body::Frame;
    use http_body_util::combinators::BoxBody;

    use super::*;
    use crate::replay::reserve::BytePool;

    type Sent = BoxBody<Bytes, Infallible>;

    /// A body of `chunks` that then ends or, if `open`, never does.
    struct SentChunks {
        chunks: VecDeque<Bytes>,
        open: bool,
    }

    impl http_body::Body for SentChunks {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.chunks.pop_front() {
                Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
                None if self.open => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
    }

    fn body(chunks: &[&'static str], open: bool) -> Sent {
        let chunks = chunks.iter().map(|c| Bytes::from_static(c.as_bytes()));
        BoxBody::new(SentChunks {
            chunks: chunks.collect(),
            open,
        })
    }

    fn declaring(len: usize) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
        headers
    }

    /// `body`, sent under `headers`, read whole.
    fn reading(
        headers: &HeaderMap,
        body: Sent,
        pool: &Arc<BytePool>,
    ) -> impl Future<Output = Intake<Sent>> {
        let declared = declared_length(headers, &body);
        read_whole(body, declared, 1 << 20, pool.share())
    }

    async fn read(headers: &HeaderMap, body: Sent, pool: &Arc<BytePool>) -> Intake<Sent> {
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            reading(headers, body, pool),
        );
        read.await.expect("the read ended")
    }

    /// `body`, sent under `headers`, forwarded as it arrives.
    async fn forwarding(headers: &HeaderMap, body: Sent, pool: &Arc<BytePool>) -> Intake<Sent> {
        let declared = declared_length(headers, &body);
        let (copy, later) = RequestCopy::new(declared, 1 << 20, pool.share());
        let Ok(body) = Sent::forwarded(ForwardedBody::new(body, copy)) else {
            panic!("a boxed body carries a copy");
        };
        forward(body, later).await
    }

    #[tokio::test]
    async fn the_declared_length_is_counted_when_the_first_bytes_come() {
        let pool = BytePool::new(1 << 20);
        let read = read(&declaring(10), body(&["0123", "456789"], false), &pool).await;
        let Intake::Read { bytes, share } = read else {
            panic!("read whole");
        };
        assert_eq!(bytes, "0123456789");
        assert_eq!(pool.used(), 10, "counted once, as declared");
        drop(share);
        assert_eq!(pool.used(), 0);
    }

    #[tokio::test]
    async fn a_declared_length_the_pool_cannot_hold_is_refused_at_the_first_bytes() {
        // The client is still sending: the answer does not wait for it.
        let pool = BytePool::new(64);
        let read = read(&declaring(100), body(&["{"], true), &pool).await;
        assert!(matches!(read, Intake::NoRoom));
        assert_eq!(pool.used(), 0);
    }

    #[tokio::test]
    async fn a_declared_length_with_no_bytes_yet_holds_nothing() {
        let pool = BytePool::new(64);
        let reading = reading(&declaring(60), body(&[], true), &pool);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), reading).await;
        assert!(waited.is_err(), "still waiting for the body");
        assert_eq!(pool.used(), 0);
    }

    #[tokio::test]
    async fn a_body_longer_than_declared_is_read_whole_and_counted() {
        let pool = BytePool::new(1 << 20);
        let read = read(&declaring(4), body(&["01", "2345", "67"], false), &pool).await;
        let Intake::Read { bytes, share } = read else {
            panic!("read whole");
        };
        assert_eq!(bytes, "01234567");
        assert_eq!(pool.used(), 8);
        drop(share);
    }

    #[tokio::test]
    async fn without_a_declared_length_the_bytes_are_counted_as_they_come() {
        let pool = BytePool::new(1 << 20);
        let read = read(&HeaderMap::new(), body(&["01", "2345"], false), &pool).await;
        let Intake::Read { bytes, share } = read else {
            panic!("read whole");
        };
        assert_eq!(bytes, "012345");
        assert_eq!(pool.used(), 6);
        drop(share);
    }

    #[tokio::test]
    async fn a_forwarded_body_yields_what_the_client_sent_and_its_copy_is_whole() {
        let pool = BytePool::new(1 << 20);
        let long = Bytes::from(format!("\"{}\"}}", "m".repeat(70_000)));
        let sent = BoxBody::new(SentChunks {
            chunks: [Bytes::from_static(b"{\"model\":"), long.clone()].into(),
            open: false,
        });
        let Intake::Forwarded { body, copy } = forwarding(&HeaderMap::new(), sent, &pool).await
        else {
            panic!("a boxed body is forwarded as it arrives");
        };
        let forwarded = body.collect().await.unwrap().to_bytes();
        assert_eq!(forwarded, [&b"{\"model\":"[..], &long].concat());
        let Some(Copied::Whole(copied, _share)) = copy.wait().await else {
            panic!("the copy is whole");
        };
        assert_eq!(copied.join(), forwarded);
        // A long body's long chunk is kept itself, not its bytes again.
        assert_eq!(copied.as_slice()[1].as_ptr(), long.as_ptr());
    }

    #[tokio::test]
    async fn a_declared_length_the_pool_cannot_hold_is_refused_before_anything_is_sent() {
        let pool = BytePool::new(64);
        let headers = declaring(100);
        let forwarding = forwarding(&headers, body(&["{"], true), &pool);
        let forwarding = tokio::time::timeout(std::time::Duration::from_secs(5), forwarding)
            .await
            .expect("answered at the first bytes");
        assert!(matches!(forwarding, Intake::NoRoom));
        assert_eq!(pool.used(), 0);
    }
}
