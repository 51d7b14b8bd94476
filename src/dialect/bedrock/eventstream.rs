//! Incremental framing of AWS event streams (`application/vnd.amazon.eventstream`)
//! that keeps every frame's raw bytes.
//!
//! Bedrock streams binary frames: a 12-byte prelude (total length, headers
//! length, both big-endian `u32`, and the prelude's CRC32), the headers, the
//! payload, and the CRC32 of everything before it. The guard must read each
//! frame and still forward the stream byte for byte, split wherever the
//! network split it, so [`EventStreamFramer`] cuts the input at frame
//! boundaries itself (the AWS SDKs' decoders hand back decoded messages and
//! drop the bytes) and leaves decoding one cut frame, CRCs and header types
//! included, to smithy-rs's `aws-smithy-eventstream`.
//!
//! A prelude whose CRC does not match cannot be trusted to say where the
//! next frame starts: the framer then stops cutting, hands the rest of the
//! stream on as opaque frames, and reports the break once. A frame longer
//! than the limit is skipped by its declared length (its bytes still reach
//! the client) and reported as too large, so framing resumes at the next
//! frame.

use bytes::{Buf, Bytes, BytesMut};

use crate::sse::{Frame, FrameSink, FrameTooLarge};

/// The fixed part at the start of every frame.
const PRELUDE_BYTES: usize = 12;
/// The prelude and the trailing message CRC: the shortest possible frame.
const MIN_FRAME_BYTES: usize = PRELUDE_BYTES + 4;

/// One frame cut from the stream: its raw bytes, decoded or not.
pub(crate) enum Cut<'a> {
    /// A whole frame whose CRCs match, decoded.
    Message(&'a aws_smithy_types::event_stream::Message),
    /// A frame (or the rest of a stream) that could not be decoded: a CRC
    /// mismatch, a malformed header, an impossible length. The text says why.
    Broken(&'static str),
    /// Bytes after a break, or a truncated frame at the end: no meaning.
    Opaque,
}

/// Turns a cut frame into the [`Frame`] the event judges read: the dialect's
/// reading of the frame (which header names the event, what the payload
/// holds), kept out of this module, which knows no provider's JSON.
pub(crate) type Translate = fn(raw: Bytes, cut: Cut<'_>) -> Frame;

/// Cuts an AWS event stream into frames, keeping their raw bytes: pushing
/// any split of a stream yields frames whose raw bytes, concatenated with
/// [`finish`](Self::finish)'s, are exactly the stream.
pub(crate) struct EventStreamFramer {
    pending: BytesMut,
    translate: Translate,
    max_frame_bytes: usize,
    /// Bytes still to pass of a frame over the limit.
    skipping: usize,
    /// A prelude failed its CRC: nothing more is cut.
    broken: bool,
}

impl EventStreamFramer {
    pub(crate) fn new(translate: Translate, max_frame_bytes: usize) -> Self {
        EventStreamFramer {
            pending: BytesMut::new(),
            translate,
            max_frame_bytes: max_frame_bytes.max(MIN_FRAME_BYTES),
            skipping: 0,
            broken: false,
        }
    }

    /// Feeds one network chunk, handing every whole frame to `sink`.
    /// `Err` when a frame is over the limit: its bytes are passed over
    /// unread and framing goes on after it.
    pub(crate) fn push_to(
        &mut self,
        chunk: &Bytes,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameTooLarge> {
        let mut chunk = chunk.clone();
        if self.skipping > 0 {
            let passed = self.skipping.min(chunk.len());
            self.skipping -= passed;
            chunk.advance(passed);
        }
        if self.broken {
            if !chunk.is_empty() {
                sink.take((self.translate)(chunk, Cut::Opaque));
            }
            return Ok(());
        }
        self.pending.extend_from_slice(&chunk);
        self.cut(sink)
    }

    fn cut(&mut self, sink: &mut impl FrameSink) -> Result<(), FrameTooLarge> {
        while self.pending.len() >= PRELUDE_BYTES {
            let total = u32::from_be_bytes(self.pending[0..4].try_into().unwrap_or_default());
            let prelude_crc =
                u32::from_be_bytes(self.pending[8..12].try_into().unwrap_or_default());
            let total = total as usize;
            if crc32fast::hash(&self.pending[..8]) != prelude_crc || total < MIN_FRAME_BYTES {
                self.broken = true;
                let rest = self.pending.split().freeze();
                sink.take((self.translate)(
                    rest,
                    Cut::Broken("event-stream prelude is corrupt"),
                ));
                return Ok(());
            }
            if total > self.max_frame_bytes {
                // Pass the frame over by its length, which the CRC vouches for.
                let held = self.pending.len().min(total);
                self.pending.advance(held);
                self.skipping = total - held;
                return Err(FrameTooLarge {
                    limit: self.max_frame_bytes,
                });
            }
            if self.pending.len() < total {
                self.pending.reserve(total - self.pending.len());
                return Ok(());
            }
            let raw = self.pending.split_to(total).freeze();
            let frame = match aws_smithy_eventstream::frame::read_message_from(raw.clone()) {
                Ok(message) => (self.translate)(raw, Cut::Message(&message)),
                Err(_) => (self.translate)(raw, Cut::Broken("event-stream frame is corrupt")),
            };
            if !sink.skips(frame.event_raw()) {
                sink.take(frame);
            }
        }
        Ok(())
    }

    /// Bytes held for a frame not yet complete.
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The stream ended: the bytes of an unfinished frame, if any, as one
    /// opaque frame (a truncated stream means nothing, but its bytes are the
    /// client's).
    pub(crate) fn finish(&mut self) -> Option<Frame> {
        if self.pending.is_empty() {
            return None;
        }
        let rest = self.pending.split().freeze();
        Some((self.translate)(rest, Cut::Opaque))
    }
}

#[cfg(test)]
mod tests {
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};

    use super::*;

    /// Frames as the dialect would see them: the event name is the
    /// `:event-type` header, the data the payload.
    fn translate(raw: Bytes, cut: Cut<'_>) -> Frame {
        match cut {
            Cut::Message(message) => {
                let event = message
                    .headers()
                    .iter()
                    .find(|h| h.name().as_str() == ":event-type")
                    .and_then(|h| h.value().as_string().ok())
                    .map(|s| s.as_str().to_owned());
                let data = String::from_utf8_lossy(message.payload()).into_owned();
                Frame::synthetic(raw, event, Some(data))
            }
            Cut::Broken(why) => Frame::synthetic(raw, Some("broken".into()), Some(why.into())),
            Cut::Opaque => Frame::synthetic(raw, None, None),
        }
    }

    fn message(event: &str, payload: &str) -> Bytes {
        let message = Message::new(Bytes::copy_from_slice(payload.as_bytes()))
            .add_header(Header::new(
                ":message-type",
                HeaderValue::String("event".into()),
            ))
            .add_header(Header::new(
                ":event-type",
                HeaderValue::String(event.to_owned().into()),
            ));
        let mut out = Vec::new();
        aws_smithy_eventstream::frame::write_message_to(&message, &mut out).unwrap();
        Bytes::from(out)
    }

    struct Collect(Vec<Frame>);

    impl FrameSink for Collect {
        fn take(&mut self, frame: Frame) {
            self.0.push(frame);
        }
    }

    fn frames_of(chunks: &[&[u8]], limit: usize) -> (Vec<Frame>, usize) {
        let mut framer = EventStreamFramer::new(translate, limit);
        let mut sink = Collect(Vec::new());
        let mut over = 0;
        for chunk in chunks {
            over += usize::from(
                framer
                    .push_to(&Bytes::copy_from_slice(chunk), &mut sink)
                    .is_err(),
            );
        }
        sink.0.extend(framer.finish());
        (sink.0, over)
    }

    #[test]
    fn every_split_of_a_stream_gives_the_same_frames_and_bytes() {
        let stream: Vec<u8> = [
            message("chunk", "{\"a\":1}"),
            message("chunk", ""),
            message("x", "é"),
        ]
        .concat();
        let (whole, _) = frames_of(&[&stream], 1 << 20);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[0].event(), Some("chunk"));
        assert_eq!(whole[2].data(), Some("é"));
        for a in 0..=stream.len() {
            for b in a..=stream.len() {
                let (split, _) = frames_of(&[&stream[..a], &stream[a..b], &stream[b..]], 1 << 20);
                assert_eq!(split, whole, "split at {a}, {b}");
            }
        }
    }

    #[test]
    fn a_bad_message_crc_is_a_broken_frame_and_framing_goes_on() {
        let mut bad = message("chunk", "{}").to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let good = message("chunk", "{\"b\":2}");
        let stream = [bad.clone(), good.to_vec()].concat();
        let (frames, _) = frames_of(&[&stream], 1 << 20);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].event(), Some("broken"));
        assert_eq!(frames[0].raw().as_ref(), bad.as_slice());
        assert_eq!(frames[1].data(), Some("{\"b\":2}"));
    }

    #[test]
    fn a_bad_prelude_stops_framing_and_keeps_every_byte() {
        let mut bad = message("chunk", "{}").to_vec();
        bad[9] ^= 1;
        let stream = [bad, message("chunk", "{}").to_vec()].concat();
        let (frames, _) = frames_of(&[&stream[..20], &stream[20..]], 1 << 20);
        assert_eq!(frames[0].event(), Some("broken"));
        assert!(frames[1..].iter().all(|f| f.event().is_none()));
        let bytes: Vec<u8> = frames.iter().flat_map(|f| f.raw().to_vec()).collect();
        assert_eq!(bytes, stream);
    }

    #[test]
    fn a_frame_over_the_limit_is_passed_over_and_the_next_is_read() {
        let big = message("chunk", &"x".repeat(200));
        let next = message("chunk", "{}");
        let stream = [big.to_vec(), next.to_vec()].concat();
        for at in 0..stream.len() {
            let (frames, over) = frames_of(&[&stream[..at], &stream[at..]], 100);
            assert_eq!(over, 1, "split at {at}");
            assert_eq!(frames.len(), 1, "split at {at}");
            assert_eq!(frames[0].raw(), &next, "split at {at}");
        }
    }

    #[test]
    fn a_truncated_stream_ends_in_one_opaque_frame() {
        let stream = message("chunk", "{}");
        let (frames, _) = frames_of(&[&stream[..stream.len() - 3]], 1 << 20);
        assert_eq!(frames.len(), 1);
        assert!(frames[0].event().is_none());
        assert_eq!(frames[0].raw().as_ref(), &stream[..stream.len() - 3]);
    }
}
