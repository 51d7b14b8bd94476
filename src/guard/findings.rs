//! What judging a response found: [`Findings`], and the [`StreamJudge`]
//! that reads a stream event by event into them. Shared by the steps that
//! judge (`hold`), serve (`body`) and record (`settle`); it calls none of
//! them.

use bytes::Bytes;

use crate::dialect::{EventJudge, Finding, Iterations, RefusalInfo, ServerFallback};
use crate::refusal::FallbackCredit;
use crate::sse::{FrameSink, SseFramer};

/// What a response showed, event by event or from its whole JSON body.
#[derive(Debug, Clone, Default)]
pub(crate) struct Findings {
    /// Real output was seen.
    pub(crate) output: bool,
    /// A refusal before any real output.
    pub(crate) empty_refusal: Option<RefusalInfo>,
    /// A refusal after real output.
    pub(crate) partial_refusal: Option<RefusalInfo>,
    /// The provider's own fallback: the first fallback's models and category,
    /// and the `to` of the last fallback (the model that served).
    pub(crate) server_fallback: Option<ServerFallback>,
    /// A server-side chain's attempts, as the response listed them.
    pub(crate) iterations: Option<Iterations>,
    pub(crate) model: Option<String>,
    /// The response's message id.
    pub(crate) message_id: Option<String>,
    /// What became of a fallback credit token the request presented.
    pub(crate) fallback_credit: Option<FallbackCredit>,
    /// A stop reason the dialect does not know, as it came.
    pub(crate) unknown_stop: Option<String>,
    /// A provider error event arrived.
    pub(crate) error: bool,
    /// A tool call was started.
    pub(crate) tool_call: bool,
    /// The opening of the answer's text, up to `text_limit` bytes.
    pub(crate) text: String,
    /// How much text to keep: only the text detector reads it, so without
    /// it none is kept (a long answer's text would be memory for nothing).
    text_limit: usize,
}

impl Findings {
    /// Findings that keep the answer's opening (up to
    /// [`Findings::TEXT_KEPT`] bytes) when `for_text_detector`, else none.
    pub(crate) fn keeping_text(for_text_detector: bool) -> Self {
        Findings {
            text_limit: if for_text_detector {
                Self::TEXT_KEPT
            } else {
                0
            },
            ..Findings::default()
        }
    }

    /// Whether the answer's opening rules a prose refusal out (always, when
    /// the text detector is not compiled in).
    pub(crate) fn text_ruled_out(&self) -> bool {
        #[cfg(feature = "text")]
        return crate::text::prefix_verdict(&self.text) == crate::text::PrefixVerdict::RuledOut;
        #[cfg(not(feature = "text"))]
        return true;
    }

    /// Runs the text detector on an answer made of text alone, and records a
    /// prose refusal as an empty refusal of kind text.
    #[cfg(not(feature = "text"))]
    pub(crate) fn judge_text(&mut self) {}

    /// Runs the text detector on an answer made of text alone, and records a
    /// prose refusal as an empty refusal of kind text.
    #[cfg(feature = "text")]
    pub(crate) fn judge_text(&mut self) {
        if self.tool_call || self.empty_refusal.is_some() || self.partial_refusal.is_some() {
            return;
        }
        let detection = crate::text::detect(&self.text);
        if detection.is_refusal() {
            let span = detection.span.clone().unwrap_or(0..0);
            let said: String = self
                .text
                .get(span)
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect();
            self.empty_refusal = Some(RefusalInfo {
                signal: Some(crate::refusal::RefusalSignal::Text),
                category: Some("text_refusal".to_owned()),
                explanation: Some(match detection.reason {
                    Some(reason) => format!("{}: {said}", reason.as_str()),
                    None => said,
                }),
                credit_token: None,
                usage: None,
                ..RefusalInfo::default()
            });
            self.output = false;
        }
    }

    /// Most answer text kept for the text detector; it only ever reads the
    /// opening, so more would be memory for nothing.
    pub(crate) const TEXT_KEPT: usize = 64 << 10;

    pub(crate) fn absorb(&mut self, seen: Finding) {
        if self.text.is_empty() && seen.text.len() <= self.text_limit {
            // A whole JSON answer comes in one finding: keep its text
            // rather than copy it.
            self.text = seen.text;
        } else if self.text.len() < self.text_limit {
            let room = self.text_limit - self.text.len();
            let mut end = seen.text.len().min(room);
            while !seen.text.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&seen.text[..end]);
        }
        self.tool_call |= seen.tool_call;
        // Output inside the same event comes before a refusal in it.
        self.output |= seen.real_output;
        if let Some(refusal) = seen.refusal {
            if self.output {
                self.partial_refusal.get_or_insert(refusal);
            } else {
                self.empty_refusal.get_or_insert(refusal);
            }
        }
        // Usage reported after the refusal is its cost (a running total).
        if let Some(usage) = seen.usage {
            let refused = self
                .partial_refusal
                .as_mut()
                .or(self.empty_refusal.as_mut());
            if let Some(refused) = refused {
                refused
                    .usage
                    .get_or_insert_with(Default::default)
                    .update(usage);
            }
        }
        ServerFallback::merge(&mut self.server_fallback, seen.server_fallback);
        if seen.iterations.is_some() {
            self.iterations = seen.iterations;
        }
        if seen.fallback_credit.is_some() {
            self.fallback_credit = seen.fallback_credit;
        }
        if self.model.is_none() {
            self.model = seen.model;
        }
        if self.message_id.is_none() {
            self.message_id = seen.message_id;
        }
        if self.unknown_stop.is_none() {
            self.unknown_stop = seen.unknown_stop;
        }
        self.error |= seen.error;
    }
}

/// The framing of a judged stream: SSE, or (Bedrock) an AWS event stream.
enum Framer {
    Sse(SseFramer),
    #[cfg(feature = "bedrock")]
    EventStream(crate::dialect::bedrock::eventstream::EventStreamFramer),
}

impl Framer {
    fn for_event_judge(event_judge: &dyn EventJudge, max_frame_bytes: usize) -> Self {
        #[cfg(feature = "bedrock")]
        if let Some(translate) = event_judge.eventstream() {
            return Framer::EventStream(
                crate::dialect::bedrock::eventstream::EventStreamFramer::new(
                    translate,
                    max_frame_bytes,
                ),
            );
        }
        let _ = event_judge;
        Framer::Sse(SseFramer::with_max_frame_bytes(max_frame_bytes))
    }

    fn push_to(
        &mut self,
        chunk: &Bytes,
        sink: &mut impl FrameSink,
    ) -> Result<(), crate::sse::FrameTooLarge> {
        match self {
            Framer::Sse(framer) => framer.push_to(chunk, sink),
            #[cfg(feature = "bedrock")]
            Framer::EventStream(framer) => framer.push_to(chunk, sink),
        }
    }

    fn pending_len(&self) -> usize {
        match self {
            Framer::Sse(framer) => framer.pending_len(),
            #[cfg(feature = "bedrock")]
            Framer::EventStream(framer) => framer.pending_len(),
        }
    }

    fn finish(&mut self) -> Option<crate::sse::Frame> {
        match self {
            Framer::Sse(framer) => framer.finish(),
            #[cfg(feature = "bedrock")]
            Framer::EventStream(framer) => framer.finish(),
        }
    }
}

/// Reads a stream frame by frame and keeps its [`Findings`].
pub(crate) struct StreamJudge {
    framer: Framer,
    event_judge: Box<dyn EventJudge>,
    pub(crate) findings: Findings,
    pub(crate) frames: usize,
    /// A frame outgrew the framer's limit and was not judged.
    pub(crate) overflowed: bool,
    max_frame_bytes: usize,
    /// The response is being let through: once it has also shown real
    /// output, only a later refusal still matters.
    pub(crate) committed: bool,
}

impl StreamJudge {
    /// `keep_text`: the answer's opening is kept for the text detector.
    pub(crate) fn new(
        event_judge: Box<dyn EventJudge>,
        max_frame_bytes: usize,
        keep_text: bool,
    ) -> Self {
        StreamJudge {
            framer: Framer::for_event_judge(&*event_judge, max_frame_bytes),
            event_judge,
            findings: Findings::keeping_text(keep_text),
            frames: 0,
            overflowed: false,
            max_frame_bytes,
            committed: false,
        }
    }

    /// Feeds one network chunk.
    pub(crate) fn feed(&mut self, chunk: &Bytes) {
        let (framer, mut judge) = self.split();
        let overflow = framer.push_to(chunk, &mut judge).is_err();
        if overflow {
            self.overflowed = true;
            if self.framer.pending_len() > self.max_frame_bytes {
                // An unfinished frame too large to keep: drop it (the client
                // still gets its bytes) and pick the stream up again at the
                // next blank line; its tail parses as fields nobody reads.
                self.framer = Framer::for_event_judge(&*self.event_judge, self.max_frame_bytes);
            }
        }
    }

    /// The stream ended: judge any bytes that never got their blank line.
    pub(crate) fn finish(&mut self) {
        loop {
            let (framer, mut judge) = self.split();
            let Some(frame) = framer.finish() else {
                return;
            };
            if !judge.skips(frame.event_raw()) {
                judge.take(frame);
            }
        }
    }

    /// The framer, and the judging of the frames it cuts, borrowed apart.
    fn split(&mut self) -> (&mut Framer, FrameJudge<'_>) {
        let judge = FrameJudge {
            event_judge: &mut *self.event_judge,
            findings: &mut self.findings,
            frames: &mut self.frames,
            committed: self.committed,
        };
        (&mut self.framer, judge)
    }
}

/// A [`StreamJudge`]'s judging, borrowed apart from its framer so that the
/// framer can hand it frames as it cuts them.
struct FrameJudge<'a> {
    event_judge: &'a mut dyn EventJudge,
    findings: &'a mut Findings,
    frames: &'a mut usize,
    committed: bool,
}

impl FrameJudge<'_> {
    /// Committed with real output seen: only a later refusal still matters.
    fn settled(&self) -> bool {
        self.committed && self.findings.output
    }
}

impl FrameSink for FrameJudge<'_> {
    fn skips(&mut self, event: Option<&[u8]>) -> bool {
        // A skipped frame has nothing to absorb: an empty finding
        // changes no finding.
        let skip = self.settled() && self.event_judge.skips_committed(event);
        *self.frames += usize::from(skip);
        skip
    }

    fn may_skip(&self) -> bool {
        self.settled()
    }

    fn take(&mut self, frame: crate::sse::Frame) {
        *self.frames += 1;
        let seen = self.event_judge.judge(&frame, self.settled());
        self.findings.absorb(seen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorded Anthropic stream whose answer is "Hello there!".
    const STREAM: &[u8] =
        include_bytes!("../../tests/fixtures/anthropic/anthropic-sdk-python/basic_response.txt");

    fn findings_of(keep_text: bool) -> Findings {
        let dialect =
            crate::dialect::recognise(&http::Method::POST, &"/v1/messages".parse().unwrap())
                .unwrap()
                .dialect;
        let mut judge = StreamJudge::new(dialect.event_judge(), 1 << 20, keep_text);
        judge.feed(&Bytes::from_static(STREAM));
        judge.finish();
        judge.findings
    }

    #[test]
    fn the_answer_text_is_kept_only_for_the_text_detector() {
        let detecting = findings_of(true);
        assert_eq!(detecting.text, "Hello there!");
        assert!(detecting.output);
        let not_detecting = findings_of(false);
        assert_eq!(not_detecting.text, "");
        assert!(
            not_detecting.output,
            "the rest of the findings are the same"
        );
    }
}
