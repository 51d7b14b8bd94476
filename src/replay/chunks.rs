//! A body kept as the chunks it arrived in.
//!
//! A request forwarded as it arrives is copied for what a recovery may need
//! later. Keeping the chunks themselves (reference-counted views of the
//! buffers they were read into) costs no copy of their bytes; the few
//! readers that need the body in one piece (a parse for a recovery, or for
//! the conversation's key) join it when they need it, which a request that
//! needs nothing never does.
//!
//! Small chunks are copied instead: a body that trickles in a few bytes at a
//! time would otherwise cost a chunk's bookkeeping (and a pinned buffer) per
//! few bytes, far more than the bytes counted against the limits. And a
//! body that declares a short length is copied as it arrives into one
//! buffer of that length, and the copy is what goes on: kept for as long as
//! its response streams, or only until it is written upstream, its chunks
//! would keep the connection's read buffer from being reused, and the
//! connection would read into a new one beside it.

use bytes::{Bytes, BytesMut};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, HeaderValue, Uri};

/// Chunks shorter than this are copied into a run of their own, so that
/// every kept chunk is either this long or follows a long one: what the
/// list costs stays under 1 % of what it holds.
const COPIED_BELOW: usize = 4096;

/// A body declared up to this long is copied as it arrives (see
/// [`Chunks::for_length`]); a longer one found whole at this length or
/// less is copied into one piece when sealed. Its chunks are views of the
/// buffers the connection read them into, which they keep from being
/// reused: for a 20 KB request, a 32 KB buffer pinned and a new one read
/// into beside it. The copy of a body this short costs less than the
/// buffers it frees; a longer body fills most of the buffers it pins.
const COMPACTED_UP_TO: usize = 64 * 1024;

/// `chunk`, copied when it is short: kept for a while, a short view of a
/// connection's read buffer would pin the whole buffer, and the connection
/// would read into a new one.
pub(crate) fn unpinned(chunk: Bytes) -> Bytes {
    if chunk.len() < COPIED_BELOW {
        Bytes::copy_from_slice(&chunk)
    } else {
        chunk
    }
}

/// A request head kept beyond its request's body (a recovery sends it
/// again): its header values and its target copied out of the buffer hyper
/// parsed them from, which they would otherwise keep from being reused
/// for as long as the response streams (see [`unpin_headers`]).
pub(crate) fn unpin_request_head(parts: &mut http::request::Parts) {
    unpin_headers(&mut parts.headers);
    let mut target = parts.uri.clone().into_parts();
    // Each part parsed again from a copy of its text: a valid part stays
    // valid; should one not, the view is kept rather than the target lost.
    target.scheme = target
        .scheme
        .map(|scheme| Scheme::try_from(scheme.as_str()).unwrap_or(scheme));
    target.authority = target
        .authority
        .map(|authority| Authority::try_from(authority.as_str()).unwrap_or(authority));
    target.path_and_query = target
        .path_and_query
        .map(|path| PathAndQuery::try_from(path.as_str()).unwrap_or(path));
    if let Ok(uri) = Uri::from_parts(target) {
        parts.uri = uri;
    }
}

/// `headers` with every value copied out of the buffer it was parsed from.
/// hyper reads a message's header values as views of the connection's read
/// buffer: a head the guard keeps for as long as a response streams (the
/// request's, for a recovery; the upstream response's, while it is held)
/// would keep that buffer from being reused, and the connection would read
/// into a new one beside it at its next read.
pub(crate) fn unpin_headers(headers: &mut HeaderMap) {
    for value in headers.values_mut() {
        // A value hyper parsed is a valid one, so the copy never fails;
        // should it, the view is kept rather than the header lost.
        if let Ok(mut copy) = HeaderValue::from_bytes(value.as_bytes()) {
            copy.set_sensitive(value.is_sensitive());
            *value = copy;
        }
    }
}

/// A body as the chunks it arrived in, in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chunks {
    chunks: Vec<Bytes>,
    /// Small chunks copied together, not yet in `chunks`.
    run: BytesMut,
    len: usize,
    /// The declared length of a short body, copied as it arrives: every
    /// chunk goes into `run`, which takes this much at the first byte.
    copied: usize,
}

impl Chunks {
    /// The copy of a body that declares `declared` bytes: a short one (up
    /// to 64 KiB) is copied as it arrives into one buffer of its length,
    /// where [`push`](Self::push) would keep longer chunks as they are.
    pub(crate) fn for_length(declared: Option<u64>) -> Self {
        let copied = declared
            .and_then(|len| usize::try_from(len).ok())
            .filter(|len| *len <= COMPACTED_UP_TO)
            .unwrap_or(0);
        Chunks {
            copied,
            ..Chunks::default()
        }
    }

    /// Adds the next chunk, and returns the bytes to pass on in its place:
    /// of a short declared body, its copy (so that nothing still points
    /// into the buffer it was read into); otherwise the chunk itself, kept
    /// as it is when long, copied when short. An empty one is left out.
    pub(crate) fn take(&mut self, chunk: Bytes) -> Bytes {
        if self.copied == 0 {
            self.push(chunk.clone());
            return chunk;
        }
        if chunk.is_empty() {
            return chunk;
        }
        // The declared length at the first byte (so that a client that
        // declares a length and sends nothing holds nothing); past it,
        // what comes.
        if self.run.capacity() < chunk.len() {
            let first = self.len == 0;
            self.run.reserve(if first {
                self.copied.max(chunk.len())
            } else {
                chunk.len()
            });
        }
        self.len += chunk.len();
        self.run.extend_from_slice(&chunk);
        let copy = self.run.split().freeze();
        self.chunks.push(copy.clone());
        copy
    }

    /// Adds the next chunk: kept as it is when long, copied when short; an
    /// empty one is left out.
    pub(crate) fn push(&mut self, chunk: Bytes) {
        self.len += chunk.len();
        if chunk.len() < COPIED_BELOW {
            self.run.extend_from_slice(&chunk);
            if self.run.len() >= COPIED_BELOW {
                self.close_run();
            }
        } else {
            self.close_run();
            self.chunks.push(chunk);
        }
    }

    /// The body is whole: its last run of small chunks joins the list, and
    /// a short body becomes one piece of its own.
    pub(crate) fn sealed(mut self) -> Self {
        self.close_run();
        // A body copied as it arrived is already the guard's own.
        if self.copied == 0 && (1..=COMPACTED_UP_TO).contains(&self.len) {
            let whole = match self.chunks.as_slice() {
                [only] => Bytes::copy_from_slice(only),
                _ => self.join(),
            };
            self.chunks = vec![whole];
        }
        self
    }

    fn close_run(&mut self) {
        if !self.run.is_empty() {
            self.chunks.push(self.run.split().freeze());
        }
    }

    /// How many bytes the chunks hold together.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The chunks, in order: all of them once [`sealed`](Self::sealed).
    pub(crate) fn as_slice(&self) -> &[Bytes] {
        debug_assert!(self.run.is_empty(), "read before sealed");
        &self.chunks
    }

    /// The body in one piece: the one chunk itself when there is one,
    /// otherwise the chunks copied into one buffer.
    pub(crate) fn join(&self) -> Bytes {
        match (self.chunks.as_slice(), self.run.is_empty()) {
            ([], true) => Bytes::new(),
            ([only], true) => only.clone(),
            (chunks, _) => {
                let mut joined = BytesMut::with_capacity(self.len);
                chunks
                    .iter()
                    .for_each(|chunk| joined.extend_from_slice(chunk));
                joined.extend_from_slice(&self.run);
                joined.freeze()
            }
        }
    }
}

impl From<Bytes> for Chunks {
    /// A body read whole: one chunk, however long.
    fn from(bytes: Bytes) -> Self {
        let len = bytes.len();
        let chunks = if bytes.is_empty() {
            vec![]
        } else {
            vec![bytes]
        };
        Chunks {
            chunks,
            run: BytesMut::new(),
            len,
            copied: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_chunks_are_kept_as_they_are_and_short_ones_copied_in_runs() {
        let mut chunks = Chunks::default();
        assert_eq!(chunks.join(), "");
        let long = Bytes::from(vec![b'a'; COMPACTED_UP_TO]);
        chunks.push(long.clone());
        chunks.push(Bytes::new());
        assert_eq!(chunks.join().as_ptr(), long.as_ptr(), "one chunk: no copy");
        for _ in 0..COPIED_BELOW + 1 {
            chunks.push(Bytes::from_static(b"b"));
        }
        chunks.push(long.clone());
        chunks.push(Bytes::from_static(b"c"));
        let chunks = chunks.sealed();
        let sizes: Vec<usize> = chunks.as_slice().iter().map(Bytes::len).collect();
        assert_eq!(
            sizes,
            [COMPACTED_UP_TO, COPIED_BELOW, 1, COMPACTED_UP_TO, 1]
        );
        assert_eq!(chunks.as_slice()[3].as_ptr(), long.as_ptr());
        let joined = chunks.join();
        assert_eq!(joined.len(), chunks.len());
        assert_eq!(chunks.len(), 2 * COMPACTED_UP_TO + COPIED_BELOW + 2);
        let expected = [&long[..], &[b'b'; COPIED_BELOW + 1], &long, b"c"].concat();
        assert_eq!(joined, expected);
    }

    #[test]
    fn a_short_body_is_sealed_into_a_piece_of_its_own() {
        // A connection's read buffer, which the body's chunks are views of.
        let read = Bytes::from(vec![b'x'; 32 * 1024]);
        let mut chunks = Chunks::default();
        chunks.push(read.slice(..COPIED_BELOW));
        chunks.push(read.slice(COPIED_BELOW..20_000));
        chunks.push(Bytes::from_static(b"tail"));
        assert!(!read.is_unique(), "the kept chunks share the read buffer");
        let chunks = chunks.sealed();
        assert!(read.is_unique(), "sealed, the body no longer pins it");
        assert_eq!(chunks.as_slice().len(), 1);
        assert_eq!(chunks.len(), 20_004);
        assert_eq!(chunks.join(), [&read[..20_000], b"tail"].concat());
        let mut alone = Chunks::default();
        alone.push(read.slice(..20_000));
        let alone = alone.sealed();
        assert!(read.is_unique(), "one chunk is copied too");
        assert_eq!(alone.join(), &read[..20_000]);
        let empty = Chunks::default().sealed();
        assert!(
            empty.as_slice().is_empty(),
            "an empty body stays without chunks"
        );
    }

    #[test]
    fn a_short_declared_body_is_copied_as_it_arrives_into_one_buffer() {
        // A connection's read buffer, which the body's chunks are views of.
        let read = Bytes::from(vec![b'x'; 32 * 1024]);
        let mut chunks = Chunks::for_length(Some(20_000));
        let first = chunks.take(read.slice(..8192));
        let rest = chunks.take(read.slice(8192..20_000));
        assert!(chunks.take(Bytes::new()).is_empty());
        assert!(
            read.is_unique(),
            "the copy, not the read buffer, is what is kept and passed on"
        );
        assert_eq!([&first[..], &rest[..]].concat(), &read[..20_000]);
        assert_eq!(
            rest.as_ptr(),
            first.as_ptr().wrapping_add(8192),
            "one buffer of the declared length"
        );
        let chunks = chunks.sealed();
        assert_eq!(chunks.len(), 20_000);
        assert_eq!(chunks.join(), &read[..20_000]);
        let mut long = Chunks::for_length(Some(COMPACTED_UP_TO as u64 + 1));
        let kept = long.take(read.slice(..8192));
        assert_eq!(
            kept.as_ptr(),
            read.as_ptr(),
            "a long body's chunks are passed on as they came"
        );
    }

    #[test]
    fn a_kept_request_head_no_longer_pins_the_buffer_it_was_read_from() {
        // A connection's read buffer, which hyper parses the head from.
        let read =
            Bytes::from(b"/v1/messages?beta=true http://example.com/v1 sk-ant-secret".to_vec());
        let (mut origin, ()) = http::Request::new(()).into_parts();
        origin.uri = Uri::from_maybe_shared(read.slice(..22)).unwrap();
        let key = HeaderValue::from_maybe_shared(read.slice(45..)).unwrap();
        origin.headers.insert("x-api-key", key);
        let (mut absolute, ()) = http::Request::new(()).into_parts();
        absolute.uri = Uri::from_maybe_shared(read.slice(23..44)).unwrap();
        assert!(!read.is_unique(), "parsed, the head is views of the buffer");
        unpin_request_head(&mut origin);
        unpin_request_head(&mut absolute);
        assert!(read.is_unique(), "copied, it no longer pins it");
        assert_eq!(origin.uri, "/v1/messages?beta=true");
        assert_eq!(origin.headers["x-api-key"], "sk-ant-secret");
        assert_eq!(absolute.uri, "http://example.com/v1");
    }

    #[test]
    fn kept_header_values_no_longer_pin_the_buffer_they_were_read_from() {
        // A connection's read buffer, which hyper parses header values from.
        let read = Bytes::from(b"sk-ant-secret application/json".to_vec());
        let mut headers = HeaderMap::new();
        let mut key = HeaderValue::from_maybe_shared(read.slice(..13)).unwrap();
        key.set_sensitive(true);
        headers.insert("x-api-key", key);
        headers.append(
            "accept",
            HeaderValue::from_maybe_shared(read.slice(14..)).unwrap(),
        );
        headers.append("accept", HeaderValue::from_static("text/event-stream"));
        assert!(!read.is_unique(), "parsed values are views of the buffer");
        unpin_headers(&mut headers);
        assert!(read.is_unique(), "copied, they no longer pin it");
        assert_eq!(headers["x-api-key"], "sk-ant-secret");
        assert!(
            headers["x-api-key"].is_sensitive(),
            "still kept out of logs"
        );
        let accept: Vec<_> = headers.get_all("accept").iter().collect();
        assert_eq!(accept, ["application/json", "text/event-stream"]);
    }

    #[test]
    fn short_chunks_are_unpinned_and_long_ones_kept() {
        let read = Bytes::from(vec![b'y'; 16 * 1024]);
        let short = unpinned(read.slice(..COPIED_BELOW - 1));
        assert!(read.is_unique());
        assert_eq!(short, &read[..COPIED_BELOW - 1]);
        let long = unpinned(read.slice(..COPIED_BELOW));
        assert_eq!(long.as_ptr(), read.as_ptr());
    }

    #[test]
    fn a_body_in_one_byte_chunks_is_kept_in_few_pieces() {
        let mut chunks = Chunks::default();
        for byte in (0..100_000u32).map(|i| Bytes::from(vec![i as u8])) {
            chunks.push(byte);
        }
        let chunks = chunks.sealed();
        assert_eq!(chunks.as_slice().len(), 100_000usize.div_ceil(COPIED_BELOW));
        assert_eq!(chunks.join().len(), 100_000);
    }
}
