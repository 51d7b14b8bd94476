//! The bounded copy a forwarded request body keeps of what it forwards, so
//! that a recovery can send the request again once the original went out
//! as it arrived.

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::HeaderMap;
use http_body::Body;
use tokio::sync::oneshot;

use crate::replay::chunks::Chunks;
use crate::replay::reserve::Share;

/// The length a request declares: its `content-length`, else its body's
/// exact size hint.
pub(crate) fn declared_length<B: Body>(headers: &HeaderMap, body: &B) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .or_else(|| body.size_hint().exact())
}

/// How many bytes a request's buffer or copy, holding `held`, needs to
/// take `more`: all the declared length (already checked to be within the
/// limit) once any byte came, and more only if the body runs past it.
/// Reserved only when bytes arrive, so a client that declares a length and
/// sends nothing holds nothing.
pub(crate) fn room_for(held: usize, more: usize, declared: Option<u64>) -> usize {
    let declared = declared.map_or(0, |len| len as usize);
    (held + more).max(if more > 0 { declared } else { 0 })
}

/// What became of the copy of a forwarded request body, told once.
pub(crate) enum Copied {
    /// The whole body as sent, and the pool's part for it.
    Whole(Chunks, Share),
    /// Past `max_request_body`: the copy was dropped, the request goes on.
    OverLimit,
    /// The layer-wide bound on held bytes left no room: the copy was
    /// dropped, the request goes on.
    NoRoom,
    /// The client's body failed: the error went upstream, aborting it.
    Failed,
}

/// The copy a [`ForwardedBody`](super::ForwardedBody) keeps of the bytes it forwards: the chunks
/// themselves, not their bytes copied (a short body's bytes copied as they
/// arrive, see [`Chunks::for_length`]), bounded by `max_request_body` and by
/// the layer-wide pool, told when the body ends, fails or is dropped.
pub(crate) struct RequestCopy {
    /// Boxed: a `ForwardedBody`, which holds the copy, is handed back by
    /// value when a body type cannot carry it.
    chunks: Box<Chunks>,
    declared: Option<u64>,
    limit: usize,
    /// Bytes of the copy already counted against the layer-wide bound.
    counted: usize,
    /// The pool's part while copying; gone once the copy was told.
    share: Option<Share>,
    told: Option<oneshot::Sender<Copied>>,
}

impl RequestCopy {
    pub(crate) fn new(
        declared: Option<u64>,
        limit: usize,
        share: Share,
    ) -> (Self, oneshot::Receiver<Copied>) {
        let (told, outcome) = oneshot::channel();
        let copy = RequestCopy {
            chunks: Box::new(Chunks::for_length(declared)),
            declared,
            limit,
            counted: 0,
            share: Some(share),
            told: Some(told),
        };
        (copy, outcome)
    }

    /// Keeps one frame's chunk as it goes past, and returns what to pass
    /// on in its place (see [`Chunks::take`]).
    pub(crate) fn take(&mut self, data: Bytes) -> Bytes {
        let Some(share) = self.share.as_mut() else {
            return data;
        };
        let held = self.chunks.len();
        if held + data.len() > self.limit {
            tracing::debug!(
                limit = self.limit,
                "request body over the limit: forwarded without a copy, nothing recovered"
            );
            self.drop_copy(Copied::OverLimit);
            return data;
        }
        let wanted = room_for(held, data.len(), self.declared);
        if wanted > self.counted {
            if !share.grow(wanted - self.counted) {
                tracing::warn!(
                    "the bound on bytes held across requests is reached: request forwarded without a copy, nothing recovered"
                );
                self.drop_copy(Copied::NoRoom);
                return data;
            }
            self.counted = wanted;
        }
        self.chunks.take(data)
    }

    /// The body ended: the copy is whole.
    pub(crate) fn end(&mut self) {
        if let Some(share) = self.share.take() {
            let chunks = std::mem::take(&mut *self.chunks).sealed();
            self.tell(Copied::Whole(chunks, share));
        }
    }

    /// The client's body failed.
    pub(crate) fn fail(&mut self) {
        self.drop_copy(Copied::Failed);
    }

    fn drop_copy(&mut self, why: Copied) {
        *self.chunks = Chunks::default();
        self.share = None;
        self.tell(why);
    }

    fn tell(&mut self, copied: Copied) {
        if let Some(told) = self.told.take() {
            let _ = told.send(copied);
        }
    }

    /// The pool's part, for a body type that cannot carry the copy.
    pub(crate) fn into_share(mut self) -> Option<Share> {
        self.told = None;
        self.share.take()
    }
}

impl Drop for RequestCopy {
    fn drop(&mut self) {
        // A body sent to its declared length is not polled for its end;
        // anything shorter was cut, and the dropped sender says so.
        if self.declared == Some(self.chunks.len() as u64) {
            self.end();
        }
    }
}

/// Where a forwarded body's copy will be told: already (a body that ended,
/// or failed, with its first frame), or later.
pub(crate) struct CopyOutcome {
    early: Option<Copied>,
    later: oneshot::Receiver<Copied>,
}

impl CopyOutcome {
    /// The copy as told with the body's first frame (`early`), or as it
    /// will be.
    pub(crate) fn new(early: Option<Copied>, later: oneshot::Receiver<Copied>) -> Self {
        CopyOutcome { early, later }
    }

    /// What became of the copy; `None` when the body was dropped before its
    /// end (the upstream stopped reading it).
    pub(crate) async fn wait(self) -> Option<Copied> {
        match self.early {
            Some(copied) => Some(copied),
            None => self.later.await.ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use http_body::Frame;
    use http_body_util::BodyExt;

    use super::*;
    use crate::replay::reserve::BytePool;
    use crate::replay::ForwardedBody;

    /// A body of one chunk, then an error.
    struct Failing(Option<Bytes>);

    impl http_body::Body for Failing {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            Poll::Ready(Some(match self.0.take() {
                Some(chunk) => Ok(Frame::data(chunk)),
                None => Err(std::io::Error::other("the client left")),
            }))
        }
    }

    #[test]
    fn a_copy_past_the_limit_is_dropped_and_gives_its_bytes_back() {
        let pool = BytePool::new(1 << 20);
        let (mut copy, mut told) = RequestCopy::new(None, 8, pool.share());
        copy.take(Bytes::from_static(b"0123"));
        assert_eq!(pool.used(), 4);
        assert!(told.try_recv().is_err(), "nothing told yet");
        copy.take(Bytes::from_static(b"45678"));
        assert!(matches!(told.try_recv(), Ok(Copied::OverLimit)));
        assert_eq!(pool.used(), 0, "the dropped copy holds nothing");
        copy.take(Bytes::from_static(b"9"));
        copy.end();
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn a_copy_sent_to_its_declared_length_is_whole_though_never_polled_for_its_end() {
        let pool = BytePool::new(1 << 20);
        let (mut copy, mut told) = RequestCopy::new(Some(6), 1 << 20, pool.share());
        copy.take(Bytes::from_static(b"012"));
        assert_eq!(pool.used(), 6, "the declared length, at the first bytes");
        copy.take(Bytes::from_static(b"345"));
        drop(copy);
        match told.try_recv() {
            Ok(Copied::Whole(bytes, share)) => {
                assert_eq!(bytes.join(), "012345");
                assert_eq!(pool.used(), 6, "held until the call is decided");
                drop(share);
                assert_eq!(pool.used(), 0);
            }
            _ => panic!("the copy is whole"),
        }
    }

    #[test]
    fn a_copy_dropped_short_of_its_end_is_never_whole() {
        let pool = BytePool::new(1 << 20);
        let (mut copy, mut told) = RequestCopy::new(Some(6), 1 << 20, pool.share());
        copy.take(Bytes::from_static(b"012"));
        drop(copy);
        assert!(
            matches!(told.try_recv(), Err(oneshot::error::TryRecvError::Closed)),
            "cut: nothing to guard with"
        );
        assert_eq!(pool.used(), 0);
    }

    /// A body of the given chunks.
    struct Sent(std::collections::VecDeque<Bytes>);

    impl Body for Sent {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
        }
    }

    #[tokio::test]
    async fn a_short_declared_body_goes_on_as_its_copy_and_frees_the_read_buffer() {
        // A connection's read buffer, which the client's chunks are views of.
        let read = Bytes::from(vec![b'x'; 32 * 1024]);
        let sent = Sent([read.slice(..8192), read.slice(8192..20_000)].into());
        let pool = BytePool::new(1 << 20);
        let (copy, mut told) = RequestCopy::new(Some(20_000), 1 << 20, pool.share());
        let mut body = ForwardedBody::new(sent, copy);
        let mut forwarded = Vec::new();
        while let Some(frame) = body.frame().await {
            forwarded.push(frame.unwrap().into_data().unwrap());
        }
        assert!(
            read.is_unique(),
            "neither what went on nor the copy points into the read buffer"
        );
        assert_eq!(forwarded.concat(), &read[..20_000]);
        let Ok(Copied::Whole(copied, _share)) = told.try_recv() else {
            panic!("the copy is whole");
        };
        assert_eq!(copied.join(), &read[..20_000]);
        assert_eq!(
            copied.as_slice()[0].as_ptr(),
            forwarded[0].as_ptr(),
            "what went on is the copy itself, not a second one"
        );
    }

    #[tokio::test]
    async fn a_failing_body_passes_its_error_upstream_and_tells_the_copy() {
        let pool = BytePool::new(1 << 20);
        let (copy, mut told) = RequestCopy::new(None, 1 << 20, pool.share());
        let mut body = ForwardedBody::new(Failing(Some(Bytes::from_static(b"{\"a\""))), copy);
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "{\"a\"", "forwarded unchanged");
        assert!(body.frame().await.unwrap().is_err(), "the error goes on");
        assert!(matches!(told.try_recv(), Ok(Copied::Failed)));
        assert_eq!(pool.used(), 0);
    }
}
