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
//! few bytes, far more than the bytes counted against the limits.

use bytes::{Bytes, BytesMut};

/// Chunks shorter than this are copied into a run of their own, so that
/// every kept chunk is either this long or follows a long one: what the
/// list costs stays under 1 % of what it holds.
const COPIED_BELOW: usize = 4096;

/// A body as the chunks it arrived in, in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chunks {
    chunks: Vec<Bytes>,
    /// Small chunks copied together, not yet in `chunks`.
    run: BytesMut,
    len: usize,
}

impl Chunks {
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

    /// The body is whole: its last run of small chunks joins the list.
    pub(crate) fn sealed(mut self) -> Self {
        self.close_run();
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
        let long = Bytes::from(vec![b'a'; COPIED_BELOW]);
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
        assert_eq!(sizes, [COPIED_BELOW, COPIED_BELOW, 1, COPIED_BELOW, 1]);
        assert_eq!(chunks.as_slice()[3].as_ptr(), long.as_ptr());
        let joined = chunks.join();
        assert_eq!(joined.len(), chunks.len());
        assert_eq!(chunks.len(), 3 * COPIED_BELOW + 2);
        let expected = [&long[..], &[b'b'; COPIED_BELOW + 1], &long, b"c"].concat();
        assert_eq!(joined, expected);
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
