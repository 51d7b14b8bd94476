//! How a judged stream is cut into frames: SSE, or the binary framing a
//! dialect's event judge asks for (an AWS event stream, whose frames the
//! dialect turns into SSE-like ones). The guard frames every judged stream
//! through [`StreamFramer`] and never learns which it is.

use super::EventJudge;
use crate::sse::{Frame, FrameSink, FrameTooLarge, SseFramer};
use bytes::Bytes;

/// The framer of one judged stream.
pub(crate) enum StreamFramer {
    Sse(SseFramer),
    #[cfg(feature = "bedrock")]
    EventStream(super::bedrock::eventstream::EventStreamFramer),
}

impl StreamFramer {
    /// The framing `event_judge` reads, with frames of at most
    /// `max_frame_bytes`.
    pub(crate) fn for_event_judge(event_judge: &dyn EventJudge, max_frame_bytes: usize) -> Self {
        #[cfg(feature = "bedrock")]
        if let Some(translate) = event_judge.eventstream() {
            return StreamFramer::EventStream(super::bedrock::eventstream::EventStreamFramer::new(
                translate,
                max_frame_bytes,
            ));
        }
        let _ = event_judge;
        StreamFramer::Sse(SseFramer::with_max_frame_bytes(max_frame_bytes))
    }

    /// Cuts the frames `chunk` completes and hands them to `sink`.
    pub(crate) fn push_to(
        &mut self,
        chunk: &Bytes,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameTooLarge> {
        match self {
            StreamFramer::Sse(framer) => framer.push_to(chunk, sink),
            #[cfg(feature = "bedrock")]
            StreamFramer::EventStream(framer) => framer.push_to(chunk, sink),
        }
    }

    /// Bytes of a frame not yet complete.
    pub(crate) fn pending_len(&self) -> usize {
        match self {
            StreamFramer::Sse(framer) => framer.pending_len(),
            #[cfg(feature = "bedrock")]
            StreamFramer::EventStream(framer) => framer.pending_len(),
        }
    }

    /// The last frames, at the stream's end.
    pub(crate) fn finish(&mut self) -> Option<Frame> {
        match self {
            StreamFramer::Sse(framer) => framer.finish(),
            #[cfg(feature = "bedrock")]
            StreamFramer::EventStream(framer) => framer.finish(),
        }
    }
}

/// The content types of the streams a dialect frames itself: an AWS
/// event stream (Amazon Bedrock's responses).
const BINARY_STREAM_TYPES: &[&str] = &["application/vnd.amazon.eventstream"];

/// Whether `content_type` is that of a stream a dialect frames itself,
/// rather than SSE: judged frame by frame all the same, but nothing may be
/// written into it.
pub(crate) fn is_binary_stream(content_type: &str) -> bool {
    let kind = content_type.trim_start().to_ascii_lowercase();
    BINARY_STREAM_TYPES.iter().any(|k| kind.starts_with(k))
}
