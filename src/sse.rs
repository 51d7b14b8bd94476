//! Incremental Server-Sent Events framing that keeps every frame's raw bytes.
//!
//! The guard has to do two things with a streamed response at once: read the
//! events (to spot a refusal) and forward the stream to the client
//! byte-for-byte, comments, odd line endings and all. Event-stream parsers
//! yield decoded events and throw the original bytes away, so a proxy built
//! on one would have to re-serialise the events and could not promise an
//! unchanged stream. No maintained crate hands back each frame's raw bytes
//! next to its parsed fields, so this module is written by hand.
//!
//! [`SseFramer`] follows the WHATWG `text/event-stream` parsing rules, with one
//! change: instead of dispatching only events that carry data, it cuts the
//! input into [`Frame`]s at every blank line, so that concatenating the
//! [`Frame::raw`] bytes of every frame (plus the tail returned by
//! [`SseFramer::finish`]) gives back exactly the bytes that were pushed, for
//! any split of the input into chunks.
//!
//! Parsing rules:
//! - Lines end in CRLF, LF or CR. A CR at the end of a chunk is a line end,
//!   but a frame is not cut there until the next byte shows whether it is
//!   half of a CRLF.
//! - A blank line ends a frame; the frame's raw bytes include it.
//! - A line starting with `:` is a comment. Otherwise the text before the
//!   first `:` is the field name and the rest is the value, with one leading
//!   space removed. A line without a colon is a field with an empty value.
//! - `data` lines are joined with `\n`; the last `event` and `id` win
//!   (an `id` containing NUL is ignored); `retry` counts only if it is all
//!   ASCII digits. Other field names are ignored.
//! - A UTF-8 byte order mark at the very start of the stream is ignored for
//!   parsing (it stays in the first frame's raw bytes).
//! - Invalid UTF-8 in a value is decoded lossily.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One event-stream frame: the raw bytes up to and including the blank line
/// that ended it, and the fields parsed from them.
///
/// A frame that holds only comments (or nothing but the blank line) is still
/// a frame, so that no byte of the stream is dropped; see
/// [`Frame::is_comment_only`].
///
/// ```
/// use bytes::Bytes;
/// use refusal_guard::sse::SseFramer;
///
/// let mut framer = SseFramer::new();
/// framer
///     .push(Bytes::from_static(b"event: ping\ndata: {}\n\n"))
///     .unwrap();
/// let frame = framer.next_frame().unwrap();
/// assert_eq!(frame.event(), Some("ping"));
/// assert_eq!(frame.data(), Some("{}"));
/// assert_eq!(frame.raw().as_ref(), b"event: ping\ndata: {}\n\n");
/// assert!(!frame.is_comment_only());
/// ```
#[derive(Clone)]
pub struct Frame {
    raw: Bytes,
    event: Text,
    data: Text,
    id: Text,
    retry: Option<u64>,
    has_fields: bool,
    /// The values of `event`, `data` and `id`, decoded lossily, made the
    /// first time one of them turns out not to be UTF-8 (almost never).
    lossy: OnceLock<Box<[Option<String>; 3]>>,
}

/// Where a value lies in a frame's `lossy` decodings.
const EVENT: usize = 0;
const DATA: usize = 1;
const ID: usize = 2;

/// A field value of a frame: most are one line, read in place from the raw
/// bytes; a value joined from several `data` lines is its own string.
#[derive(Debug, Clone)]
enum Text {
    Absent,
    /// The value is this range of the raw bytes, not yet checked to be
    /// UTF-8: it is checked when read, so a frame nobody reads a value of
    /// (most of a committed stream) costs no check at all.
    InRaw(Range<usize>),
    Owned(String),
}

impl Text {
    /// The value at `ranges` of `raw` (several `data` lines are joined with
    /// `\n`).
    fn of(raw: &Bytes, first: Option<Range<usize>>, more: &[Range<usize>]) -> Text {
        let Some(first) = first else {
            return Text::Absent;
        };
        if more.is_empty() {
            return Text::InRaw(first);
        }
        let bytes = |range: &Range<usize>| raw.get(range.clone()).unwrap_or_default();
        let mut text = lossy(bytes(&first));
        for range in more {
            text.push('\n');
            text.push_str(&String::from_utf8_lossy(bytes(range)));
        }
        Text::Owned(text)
    }

    /// The value decoded lossily (`None` when absent).
    fn decode(&self, raw: &Bytes) -> Option<String> {
        match self {
            Text::Absent => None,
            Text::InRaw(range) => Some(lossy(raw.get(range.clone()).unwrap_or_default())),
            Text::Owned(text) => Some(text.clone()),
        }
    }
}

impl PartialEq for Frame {
    /// Frames are equal when their bytes and their values are.
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
            && self.event() == other.event()
            && self.data() == other.data()
            && self.id() == other.id()
            && self.retry == other.retry
            && self.has_fields == other.has_fields
    }
}

impl Eq for Frame {}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frame")
            .field("raw", &self.raw)
            .field("event", &self.event())
            .field("data", &self.data())
            .field("id", &self.id())
            .field("retry", &self.retry)
            .field("has_fields", &self.has_fields)
            .finish()
    }
}

impl Frame {
    /// Every byte of input from the end of the previous frame up to and
    /// including the blank line that ended this one (for the frame returned
    /// by [`SseFramer::finish`]: exactly the trailing bytes).
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The value of the last `event:` field, if the frame had one. An
    /// `event:` line with an empty value gives `Some("")`.
    pub fn event(&self) -> Option<&str> {
        self.text(&self.event, EVENT)
    }

    /// The raw bytes of the last `event:` value, before any UTF-8 check.
    /// Equal to a name's bytes exactly when [`Frame::event`] is that name,
    /// for any name without a U+FFFD in it: equal bytes are valid UTF-8,
    /// and other bytes can only decode to it lossily.
    pub(crate) fn event_raw(&self) -> Option<&[u8]> {
        match &self.event {
            Text::Absent => None,
            Text::InRaw(range) => self.raw.get(range.clone()),
            Text::Owned(text) => Some(text.as_bytes()),
        }
    }

    /// The values of all `data:` lines joined with `\n`, or `None` if the
    /// frame had no `data` line. A single empty `data:` line gives `Some("")`.
    pub fn data(&self) -> Option<&str> {
        self.text(&self.data, DATA)
    }

    /// The value of the last `id:` field in this frame (not carried over from
    /// earlier frames), if any. An `id` whose value contains NUL is ignored.
    pub fn id(&self) -> Option<&str> {
        self.text(&self.id, ID)
    }

    /// The value of the last `retry:` field whose value was all ASCII digits
    /// (and fits in a `u64`), if any.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// `true` if the frame has no field lines at all: only comments and the
    /// blank line. A line with an unknown field name counts as a field.
    pub fn is_comment_only(&self) -> bool {
        !self.has_fields
    }

    /// The raw bytes of the frame, consuming it.
    pub fn into_raw(self) -> Bytes {
        self.raw
    }

    /// A frame of another framing (an AWS event stream's binary frame) as
    /// the judges read one: its raw bytes, and the event name and data
    /// its dialect read from them.
    #[cfg(feature = "bedrock")]
    pub(crate) fn synthetic(raw: Bytes, event: Option<String>, data: Option<String>) -> Frame {
        let text = |value: Option<String>| value.map_or(Text::Absent, Text::Owned);
        Frame {
            raw,
            has_fields: event.is_some() || data.is_some(),
            event: text(event),
            data: text(data),
            id: Text::Absent,
            retry: None,
            lossy: OnceLock::new(),
        }
    }

    /// A value as text: in place when it is UTF-8, else its lossy decoding
    /// (made once, for all three values).
    fn text<'a>(&'a self, text: &'a Text, which: usize) -> Option<&'a str> {
        match text {
            Text::Absent => None,
            Text::Owned(text) => Some(text),
            Text::InRaw(range) => {
                let bytes = self.raw.get(range.clone()).unwrap_or_default();
                match std::str::from_utf8(bytes) {
                    Ok(text) => Some(text),
                    Err(_) => self.lossy.get_or_init(|| self.decode_all())[which].as_deref(),
                }
            }
        }
    }

    fn decode_all(&self) -> Box<[Option<String>; 3]> {
        Box::new([
            self.event.decode(&self.raw),
            self.data.decode(&self.raw),
            self.id.decode(&self.raw),
        ])
    }
}

/// The error returned by [`SseFramer::push`] when a frame grows past the
/// framer's byte limit.
///
/// The bytes are kept, so nothing is lost: the caller can keep pushing (the
/// frames still come out, and the error repeats while the oversized frame is
/// incomplete) or give up judging and pass the stream through.
///
/// ```
/// use bytes::Bytes;
/// use refusal_guard::sse::{FrameTooLarge, SseFramer};
///
/// let mut framer = SseFramer::with_max_frame_bytes(8);
/// let err = framer.push(Bytes::from_static(b"data: 0123456789")).unwrap_err();
/// assert_eq!(err, FrameTooLarge { limit: 8 });
/// assert_eq!(framer.pending_len(), 16);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameTooLarge {
    /// The limit, in bytes, that the frame exceeded.
    pub limit: usize,
}

impl fmt::Display for FrameTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "server-sent event frame larger than {} bytes (no blank line within the limit)",
            self.limit
        )
    }
}

impl std::error::Error for FrameTooLarge {}

/// Fields of the frame being parsed, as where their values lie in the
/// frame's raw bytes: the bytes are only put together when the frame is
/// cut, and most values need no copy at all.
#[derive(Debug, Default)]
struct Fields {
    event: Option<Range<usize>>,
    data: Option<Range<usize>>,
    /// The second and later `data` lines.
    more_data: Vec<Range<usize>>,
    id: Option<Range<usize>>,
    retry: Option<u64>,
    has_fields: bool,
}

impl Fields {
    /// Empties the fields for the next frame, in place: moving them out
    /// would copy the whole struct at every frame.
    fn clear(&mut self) {
        self.event = None;
        self.data = None;
        self.more_data.clear();
        self.id = None;
        self.retry = None;
        self.has_fields = false;
    }
}

/// Incremental event-stream framer: push network chunks in, pull [`Frame`]s
/// out.
///
/// Each pushed chunk is scanned once. A frame that lies wholly inside one
/// chunk is returned as a zero-copy slice of it; a frame that spans chunks is
/// copied into one buffer.
///
/// ```
/// use bytes::Bytes;
/// use refusal_guard::sse::SseFramer;
///
/// let mut framer = SseFramer::new();
/// // A frame split across chunks, with CRLF line ends and a trailing comment.
/// framer.push(Bytes::from_static(b"data: {\"a\":\r\ndata: 1}\r")).unwrap();
/// assert!(framer.next_frame().is_none());
/// framer.push(Bytes::from_static(b"\n\r\n: bye")).unwrap();
///
/// let frame = framer.next_frame().unwrap();
/// assert_eq!(frame.data(), Some("{\"a\":\n1}"));
/// assert_eq!(frame.raw().as_ref(), b"data: {\"a\":\r\ndata: 1}\r\n\r\n");
/// assert!(framer.next_frame().is_none());
///
/// // End of input: the bytes that never got a blank line.
/// let tail = framer.finish().unwrap();
/// assert!(tail.is_comment_only());
/// assert_eq!(tail.raw().as_ref(), b": bye");
/// assert!(framer.finish().is_none());
/// ```
#[derive(Debug)]
pub struct SseFramer {
    max_frame_bytes: usize,
    /// Complete frames not yet pulled.
    ready: VecDeque<Frame>,
    /// Bytes of the incomplete frame that came in earlier chunks.
    held: Vec<Bytes>,
    /// Total length of `held`.
    held_len: usize,
    /// Total length of the raw bytes of `ready`.
    ready_len: usize,
    /// Start of a line that began in an earlier chunk (a copy).
    line: Vec<u8>,
    /// Where `line` starts in the current frame's raw bytes.
    line_at: usize,
    fields: Fields,
    /// The last byte scanned was a CR: an LF right after it is part of the
    /// same line end.
    after_cr: bool,
    /// The current frame was ended by a blank line whose terminator is that
    /// CR; it is cut once the next byte (or the end of input) is known.
    cut_after_cr: bool,
    /// No line has ended yet in this stream (a BOM may start it).
    first_line: bool,
    /// The sink has already said it wants the frame being read (see
    /// [`SseFramer::skipped_whole`]): it is not asked again at its cut.
    wanted: bool,
}

impl Default for SseFramer {
    fn default() -> Self {
        Self::new()
    }
}

impl SseFramer {
    /// The default limit on the size of one frame: 1 MiB.
    ///
    /// Provider frames are usually well under a kilobyte; the largest seen in
    /// practice carry a whole tool input, or inline image data from image
    /// models, which can exceed this. The limit only bounds how much the
    /// framer buffers while looking for a blank line: going over it makes
    /// [`SseFramer::push`] return [`FrameTooLarge`] but drops nothing.
    pub const DEFAULT_MAX_FRAME_BYTES: usize = 1 << 20;

    /// A framer with [`SseFramer::DEFAULT_MAX_FRAME_BYTES`] as its limit.
    pub fn new() -> Self {
        Self::with_max_frame_bytes(Self::DEFAULT_MAX_FRAME_BYTES)
    }

    /// A framer that reports [`FrameTooLarge`] once a frame is longer than
    /// `limit` bytes.
    pub fn with_max_frame_bytes(limit: usize) -> Self {
        SseFramer {
            max_frame_bytes: limit,
            ready: VecDeque::new(),
            held: Vec::new(),
            held_len: 0,
            ready_len: 0,
            line: Vec::new(),
            line_at: 0,
            fields: Fields::default(),
            after_cr: false,
            cut_after_cr: false,
            first_line: true,
            wanted: false,
        }
    }

    /// Appends a network chunk and frames as much of it as possible.
    ///
    /// Returns [`FrameTooLarge`] if a frame completed by this chunk, or the
    /// frame still incomplete after it, is longer than the limit. The bytes
    /// are kept either way: complete frames are still returned by
    /// [`SseFramer::next_frame`] and the rest by later pushes or
    /// [`SseFramer::finish`].
    pub fn push(&mut self, chunk: Bytes) -> Result<(), FrameTooLarge> {
        self.queueing(|framer, queue| framer.push_to(&chunk, queue))
    }

    /// Runs `work` with the queue of ready frames as its sink.
    fn queueing<R>(&mut self, work: impl FnOnce(&mut Self, &mut Queue) -> R) -> R {
        let mut queue = Queue {
            ready: std::mem::take(&mut self.ready),
            len: self.ready_len,
        };
        let result = work(self, &mut queue);
        self.ready = queue.ready;
        self.ready_len = queue.len;
        result
    }

    /// [`SseFramer::push`], with each frame handed to `sink` as it is cut
    /// instead of queued: the guard's event judge reads frames and keeps none,
    /// so a queue would only move them in and out again.
    pub(crate) fn push_to(
        &mut self,
        chunk: &Bytes,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameTooLarge> {
        let mut oversized = false;
        let len = chunk.len();
        // Start of the current frame's bytes in `chunk`.
        let mut frame_start = 0;
        // Start of the current line in `chunk`.
        let mut line_start = 0;

        if len > 0 && self.after_cr {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                line_start = 1;
            }
            if self.cut_after_cr {
                self.cut_after_cr = false;
                oversized |= self.cut(chunk, 0, line_start, sink);
                frame_start = line_start;
            }
        }

        let mut scan = line_start;
        loop {
            if line_start == frame_start && sink.may_skip() && self.at_frame_start() {
                if let Some(len) = self.skipped_whole(&chunk[frame_start..], sink) {
                    frame_start += len;
                    (line_start, scan) = (frame_start, frame_start);
                    continue;
                }
            }
            let Some(off) = line_end(&chunk[scan..]) else {
                break;
            };
            let eol = scan + off;
            let mut next = eol + 1;
            // A CR as the chunk's last byte may be half of a CRLF.
            let mut undecided_cr = false;
            if chunk[eol] == b'\r' {
                if next < len {
                    if chunk[next] == b'\n' {
                        next += 1;
                    }
                } else {
                    undecided_cr = true;
                }
            }
            let at = self.held_len + line_start - frame_start;
            let blank = self.end_line(&chunk[line_start..eol], at);
            line_start = next;
            scan = next;
            if undecided_cr {
                self.after_cr = true;
                self.cut_after_cr = blank;
            } else if blank {
                oversized |= self.cut(chunk, frame_start, next, sink);
                frame_start = next;
            }
        }

        if line_start < len {
            if self.line.is_empty() {
                self.line_at = self.held_len + line_start - frame_start;
            }
            self.line.extend_from_slice(&chunk[line_start..]);
        }
        if frame_start < len {
            self.held_len += len - frame_start;
            self.held.push(chunk.slice(frame_start..));
        }
        if oversized || self.held_len > self.max_frame_bytes {
            Err(FrameTooLarge {
                limit: self.max_frame_bytes,
            })
        } else {
            Ok(())
        }
    }

    /// Pulls the next complete frame, in input order, or `None` if no frame
    /// has been completed by a blank line yet.
    pub fn next_frame(&mut self) -> Option<Frame> {
        let frame = self.ready.pop_front()?;
        self.ready_len -= frame.raw.len();
        Some(frame)
    }

    /// Bytes pushed but not yet handed out by [`SseFramer::next_frame`] or
    /// [`SseFramer::finish`]: complete frames waiting to be pulled plus the
    /// incomplete frame.
    pub fn pending_len(&self) -> usize {
        self.ready_len + self.held_len
    }

    /// Ends the input: returns the trailing bytes that never got a blank line
    /// as a frame (its raw bytes are exactly those bytes, and a final line
    /// without a line end is parsed as a line), or `None` if nothing is
    /// pending. A CR at the very end counts as a line end.
    ///
    /// Call it once [`SseFramer::next_frame`] has returned `None`. If complete
    /// frames are still waiting, it returns the oldest of them instead (the
    /// tail is queued behind them), so calling it until `None` never reorders
    /// the stream. Afterwards the framer starts a new stream (a leading BOM is
    /// recognised again).
    pub fn finish(&mut self) -> Option<Frame> {
        self.after_cr = false;
        self.queueing(|framer, queue| {
            if std::mem::take(&mut framer.cut_after_cr) {
                framer.cut(&Bytes::new(), 0, 0, queue);
            }
            if framer.held_len > 0 {
                if !framer.line.is_empty() {
                    let line = std::mem::take(&mut framer.line);
                    let (fields, first) = (&mut framer.fields, &mut framer.first_line);
                    process_line(fields, first, &line, framer.line_at);
                }
                framer.cut(&Bytes::new(), 0, 0, queue);
            }
        });
        self.line.clear();
        self.fields.clear();
        self.first_line = true;
        self.wanted = false;
        self.next_frame()
    }

    /// Whether nothing of the next frame has been read yet (and the stream's
    /// first line, which may carry a BOM, is behind).
    fn at_frame_start(&self) -> bool {
        self.held.is_empty() && self.line.is_empty() && !self.first_line && !self.wanted
    }

    /// The length of the frame at the start of `rest` if the sink skips it
    /// and its shape lets that be known without reading it line by line:
    /// the frame lies whole in `rest`, within the limit, its lines end in
    /// LF alone, and its one `event` field is its first line. Most of a
    /// settled stream is such frames (`event: content_block_delta`, a data
    /// line, a blank line). Any other frame is read the usual way; when the
    /// sink was asked and wants it, it is not asked again.
    fn skipped_whole(&mut self, rest: &[u8], sink: &mut impl FrameSink) -> Option<usize> {
        let [b'e', b'v', b'e', b'n', b't', b':', ..] = rest else {
            return None;
        };
        let first = line_end(rest)?;
        let name = &rest[6..first];
        let name = name.strip_prefix(b" ").unwrap_or(name);
        let mut at = first;
        let end = loop {
            if rest[at] == b'\r' {
                return None;
            }
            let line = at + 1;
            let next = line + line_end(&rest[line..])?;
            if next == line {
                break next + 1;
            }
            if names_event(&rest[line..next]) {
                return None;
            }
            at = next;
        };
        if end > self.max_frame_bytes {
            return None;
        }
        if sink.skips(Some(name)) {
            return Some(end);
        }
        self.wanted = true;
        None
    }

    /// Handles the end of a line whose bytes in the current chunk are `tail`,
    /// at `tail_at` in the frame's raw bytes (the line may have started in
    /// an earlier chunk). Returns `true` for a blank line.
    // Inlined, like `process_line` and `line_end`, into the per-line loop
    // of `push_to`: a call per line (three in a typical frame) cost more
    // than most lines' work.
    #[inline(always)]
    fn end_line(&mut self, tail: &[u8], tail_at: usize) -> bool {
        if self.line.is_empty() {
            process_line(&mut self.fields, &mut self.first_line, tail, tail_at)
        } else {
            self.line.extend_from_slice(tail);
            let at = self.line_at;
            let blank = process_line(&mut self.fields, &mut self.first_line, &self.line, at);
            self.line.clear();
            blank
        }
    }

    /// Ends the current frame: its raw bytes are `held` followed by
    /// `chunk[start..end]`. The frame goes to `sink`, or is never built if
    /// the sink skips it. Returns `true` if the frame is over the limit.
    fn cut(&mut self, chunk: &Bytes, start: usize, end: usize, sink: &mut impl FrameSink) -> bool {
        let oversized = self.held_len + (end - start) > self.max_frame_bytes;
        let raw = if self.held.is_empty() {
            // The frame lies in `chunk`: its event name can be read there,
            // before any slice of the chunk is taken.
            let event = self
                .fields
                .event
                .clone()
                .map(|r| &chunk[start + r.start..start + r.end]);
            if !std::mem::take(&mut self.wanted) && sink.skips(event) {
                self.fields.clear();
                return oversized;
            }
            chunk.slice(start..end)
        } else {
            // Most frames that span chunks are skipped whole by a settled
            // judge: ask before joining their pieces, when the event name
            // lies in one of them (`None`: it straddles two, ask after).
            let skipped = match self.fields.event.clone() {
                None => Some(sink.skips(None)),
                Some(range) => self
                    .in_one_piece(&chunk[start..end], range)
                    .map(|event| sink.skips(Some(event))),
            };
            if skipped == Some(true) {
                self.held.clear();
                self.held_len = 0;
                self.fields.clear();
                return oversized;
            }
            let raw = if self.held.len() == 1 && start == end {
                self.held.pop().unwrap_or_default()
            } else {
                let mut buf = BytesMut::with_capacity(self.held_len + (end - start));
                for piece in self.held.drain(..) {
                    buf.extend_from_slice(&piece);
                }
                buf.extend_from_slice(&chunk[start..end]);
                buf.freeze()
            };
            self.held.clear();
            self.held_len = 0;
            if skipped.is_none() && sink.skips(self.fields.event.clone().and_then(|r| raw.get(r))) {
                self.fields.clear();
                return oversized;
            }
            raw
        };
        let fields = &self.fields;
        let frame = Frame {
            event: Text::of(&raw, fields.event.clone(), &[]),
            data: Text::of(&raw, fields.data.clone(), &fields.more_data),
            id: Text::of(&raw, fields.id.clone(), &[]),
            raw,
            retry: fields.retry,
            has_fields: fields.has_fields,
            lossy: OnceLock::new(),
        };
        self.fields.clear();
        sink.take(frame);
        oversized
    }

    /// The bytes at `range` of the frame made of `held` then `tail`, if they
    /// lie within one of those pieces.
    fn in_one_piece<'a>(&'a self, tail: &'a [u8], range: Range<usize>) -> Option<&'a [u8]> {
        let mut at = 0;
        for piece in self.held.iter().map(|piece| &piece[..]).chain([tail]) {
            if range.start >= at && range.end <= at + piece.len() {
                return piece.get(range.start - at..range.end - at);
            }
            at += piece.len();
            if range.start < at {
                return None;
            }
        }
        None
    }
}

/// Where [`SseFramer::push_to`] hands the frames it cuts.
pub(crate) trait FrameSink {
    /// Whether the frame about to be cut, whose `event:` value has these raw
    /// bytes (see [`Frame::event_raw`]), can go unbuilt: asked once per
    /// frame, before [`FrameSink::take`], which a skipped frame never gets.
    fn skips(&mut self, _event: Option<&[u8]>) -> bool {
        false
    }

    /// Whether [`FrameSink::skips`] may say yes now. When it cannot (the
    /// public queue never skips; a judge skips only once settled), the
    /// framer does not look for a frame it could pass over whole, which
    /// would read a wanted frame twice.
    fn may_skip(&self) -> bool {
        false
    }

    /// A complete frame, in input order.
    fn take(&mut self, frame: Frame);
}

/// The public path's sink: the queue [`SseFramer::next_frame`] pulls from,
/// and the length of the raw bytes in it.
struct Queue {
    ready: VecDeque<Frame>,
    len: usize,
}

impl FrameSink for Queue {
    fn take(&mut self, frame: Frame) {
        self.len += frame.raw.len();
        self.ready.push_back(frame);
    }
}

/// Whether a line sets the `event` field: `event` alone, or before a colon.
fn names_event(line: &[u8]) -> bool {
    matches!(
        line,
        [b'e', b'v', b'e', b'n', b't'] | [b'e', b'v', b'e', b'n', b't', b':', ..]
    )
}

/// Applies one complete line (without its line end), found at `at` in the
/// frame's raw bytes, to `fields`. Returns `true` if the line is blank.
#[inline(always)] // See `SseFramer::end_line`.
fn process_line(fields: &mut Fields, first_line: &mut bool, whole: &[u8], at: usize) -> bool {
    let mut line = whole;
    if std::mem::take(first_line) {
        if let Some(rest) = line.strip_prefix(BOM) {
            line = rest;
        }
    }
    if line.is_empty() {
        return true;
    }
    if line[0] == b':' {
        return false;
    }
    // The field name is what comes before the first colon: a line that
    // starts `data:` or `event:` names that field, with no search for the
    // colon nor comparison of names. (Slice patterns: `starts_with` and
    // slice equality would call memcmp for these few bytes.)
    let (name, rest) = match line {
        [b'd', b'a', b't', b'a', b':', rest @ ..] => (Name::Data, rest),
        [b'e', b'v', b'e', b'n', b't', b':', rest @ ..] => (Name::Event, rest),
        _ => match memchr::memchr(b':', line) {
            Some(colon) => (Name::of(&line[..colon]), &line[colon + 1..]),
            None => (Name::of(line), &line[line.len()..]),
        },
    };
    let value = match rest {
        [b' ', value @ ..] => value,
        value => value,
    };
    // `value` is a part of `whole`: where it lies in the frame.
    let start = at + (value.as_ptr() as usize - whole.as_ptr() as usize);
    let range = start..start + value.len();
    fields.has_fields = true;
    match name {
        Name::Event => fields.event = Some(range),
        Name::Data if fields.data.is_none() => fields.data = Some(range),
        Name::Data => fields.more_data.push(range),
        Name::Id if !value.contains(&0) => fields.id = Some(range),
        Name::Retry if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
            // All digits, so this fails only on overflow.
            if let Ok(retry) = lossy(value).parse() {
                fields.retry = Some(retry);
            }
        }
        _ => {}
    }
    false
}

/// The field names the framer reads; any other is ignored.
enum Name {
    Event,
    Data,
    Id,
    Retry,
    Other,
}

impl Name {
    fn of(name: &[u8]) -> Name {
        match name {
            b"event" => Name::Event,
            b"data" => Name::Data,
            b"id" => Name::Id,
            b"retry" => Name::Retry,
            _ => Name::Other,
        }
    }
}

/// Where the first line end (CR or LF) in `bytes` is.
///
/// Besides data, a stream's lines are short (an event name, a blank line),
/// shorter than memchr's setup is worth: the first few words are looked
/// at here, eight bytes at a time, before memchr takes the rest.
#[inline(always)] // See `SseFramer::end_line`.
fn line_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::MAX / 255;
    const HIGHS: u64 = ONES << 7;
    let mut at = 0;
    while at < 32 {
        let Some(word) = bytes.get(at..at + 8) else {
            break;
        };
        let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
        // A byte equal to LF or CR becomes zero; the lowest flagged byte
        // of `zero(x)` is the first zero byte of `x` (later flags may be
        // false, never earlier ones).
        let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
        let found = zero(word ^ (ONES * u64::from(b'\n'))) | zero(word ^ (ONES * u64::from(b'\r')));
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    let rest = &bytes[at..];
    if rest.len() < 8 {
        // A chunk's last few bytes (often just the blank line's LF, or
        // nothing): cheaper looked at one by one than through memchr.
        return rest
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
            .map(|off| at + off);
    }
    memchr::memchr2(b'\n', b'\r', rest).map(|off| at + off)
}

/// The bytes as text, invalid sequences replaced. Valid UTF-8 (nearly
/// always) takes `from_utf8`'s fast path, which is several times quicker
/// than the lossy decoder's.
fn lossy(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames from pushing `chunks` in order, then `finish`.
    fn frames_of(chunks: &[&[u8]]) -> Vec<Frame> {
        let mut framer = SseFramer::new();
        let mut frames = Vec::new();
        for chunk in chunks {
            framer
                .push(Bytes::copy_from_slice(chunk))
                .expect("within limit");
            while let Some(frame) = framer.next_frame() {
                frames.push(frame);
            }
        }
        while let Some(frame) = framer.finish() {
            frames.push(frame);
        }
        assert_eq!(framer.pending_len(), 0);
        frames
    }

    fn frames(input: &[u8]) -> Vec<Frame> {
        frames_of(&[input])
    }

    /// Parses `input` whole, then split at every position and byte at a time,
    /// asserting the results are identical and the raw bytes add up.
    fn frames_any_split(input: &[u8]) -> Vec<Frame> {
        let whole = frames(input);
        let joined: Vec<u8> = whole.iter().flat_map(|f| f.raw().to_vec()).collect();
        assert_eq!(joined, input);
        for at in 0..=input.len() {
            let (a, b) = input.split_at(at);
            assert_eq!(frames_of(&[a, b]), whole, "split at {at}");
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(frames_of(&bytes), whole, "byte at a time");
        whole
    }

    fn raws(frames: &[Frame]) -> Vec<&[u8]> {
        frames.iter().map(|f| f.raw().as_ref()).collect()
    }

    #[test]
    fn lf_line_ends() {
        let f = frames_any_split(b"event: a\ndata: 1\n\ndata: 2\n\n");
        assert_eq!(raws(&f), [&b"event: a\ndata: 1\n\n"[..], b"data: 2\n\n"]);
        assert_eq!(f[0].event(), Some("a"));
        assert_eq!(f[0].data(), Some("1"));
        assert_eq!(f[1].event(), None);
        assert_eq!(f[1].data(), Some("2"));
    }

    #[test]
    fn crlf_line_ends() {
        let f = frames_any_split(b"event: a\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n");
        assert_eq!(
            raws(&f),
            [&b"event: a\r\ndata: 1\r\n\r\n"[..], b"data: 2\r\n\r\n"]
        );
        assert_eq!(f[0].event(), Some("a"));
        assert_eq!(f[0].data(), Some("1"));
        assert_eq!(f[1].data(), Some("2"));
    }

    #[test]
    fn cr_line_ends() {
        let f = frames_any_split(b"event: a\rdata: 1\r\rdata: 2\r\r");
        assert_eq!(raws(&f), [&b"event: a\rdata: 1\r\r"[..], b"data: 2\r\r"]);
        assert_eq!(f[0].event(), Some("a"));
        assert_eq!(f[0].data(), Some("1"));
        assert_eq!(f[1].data(), Some("2"));
    }

    #[test]
    fn mixed_line_ends() {
        // LF CR is two line ends (a blank line), CR LF is one.
        let f = frames_any_split(b"data: a\n\rdata: b\r\n\ndata: c\r\r\n");
        assert_eq!(
            raws(&f),
            [&b"data: a\n\r"[..], b"data: b\r\n\n", b"data: c\r\r\n"]
        );
        assert_eq!(f[0].data(), Some("a"));
        assert_eq!(f[1].data(), Some("b"));
        assert_eq!(f[2].data(), Some("c"));
    }

    #[test]
    fn cr_at_chunk_end_waits_for_next_byte() {
        let mut framer = SseFramer::new();
        framer.push(Bytes::from_static(b"data: x\r\n\r")).unwrap();
        // The blank line's CR may be the first half of a CRLF: no cut yet.
        assert!(framer.next_frame().is_none());
        framer.push(Bytes::new()).unwrap();
        assert!(framer.next_frame().is_none());
        framer.push(Bytes::from_static(b"\ndata: y\n\n")).unwrap();
        let first = framer.next_frame().unwrap();
        assert_eq!(first.raw().as_ref(), b"data: x\r\n\r\n");
        assert_eq!(first.data(), Some("x"));
        let second = framer.next_frame().unwrap();
        assert_eq!(second.raw().as_ref(), b"data: y\n\n");
        assert!(framer.next_frame().is_none());
        assert!(framer.finish().is_none());
    }

    #[test]
    fn cr_at_chunk_end_then_other_byte_cuts_before_it() {
        let mut framer = SseFramer::new();
        framer.push(Bytes::from_static(b"data: x\r\r")).unwrap();
        assert!(framer.next_frame().is_none());
        framer.push(Bytes::from_static(b"data: y\r\r")).unwrap();
        assert_eq!(framer.next_frame().unwrap().raw().as_ref(), b"data: x\r\r");
        assert!(framer.next_frame().is_none());
        // At the end of input the trailing CR is a line end.
        let last = framer.finish().unwrap();
        assert_eq!(last.raw().as_ref(), b"data: y\r\r");
        assert_eq!(last.data(), Some("y"));
    }

    #[test]
    fn crlf_split_inside_a_line_is_one_line_end() {
        // If the LF after a chunk-final CR were taken as a second line end,
        // it would be a blank line and cut the frame after `event: a`.
        let f = frames_of(&[b"event: a\r", b"\ndata: 1\r", b"\n\r\n"]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].event(), Some("a"));
        assert_eq!(f[0].data(), Some("1"));
        assert_eq!(f[0].raw().as_ref(), b"event: a\r\ndata: 1\r\n\r\n");
    }

    #[test]
    fn bom_at_stream_start_is_ignored() {
        let f = frames_any_split(b"\xEF\xBB\xBFevent: a\ndata: 1\n\n");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].event(), Some("a"));
        assert_eq!(f[0].raw().as_ref(), b"\xEF\xBB\xBFevent: a\ndata: 1\n\n");
    }

    #[test]
    fn bom_alone_on_first_line_is_a_blank_line() {
        let f = frames_any_split(b"\xEF\xBB\xBF\ndata: 1\n\n");
        assert_eq!(raws(&f), [&b"\xEF\xBB\xBF\n"[..], b"data: 1\n\n"]);
        assert!(f[0].is_comment_only());
    }

    #[test]
    fn bom_later_in_stream_is_not_ignored() {
        // Only the first line may start with the BOM; later it is part of the
        // field name, so `\u{feff}data` is an unknown field.
        let f = frames_any_split(b"data: 1\n\n\xEF\xBB\xBFdata: 2\n\n");
        assert_eq!(f.len(), 2);
        assert_eq!(f[1].data(), None);
        assert!(!f[1].is_comment_only());
    }

    #[test]
    fn bom_recognised_again_after_finish() {
        let mut framer = SseFramer::new();
        framer.push(Bytes::from_static(b"data: 1")).unwrap();
        assert_eq!(framer.finish().unwrap().data(), Some("1"));
        framer
            .push(Bytes::from_static(b"\xEF\xBB\xBFdata: 2\n\n"))
            .unwrap();
        assert_eq!(framer.next_frame().unwrap().data(), Some("2"));
    }

    #[test]
    fn comments_are_not_fields() {
        let f = frames_any_split(b": hello\n:\n\n: keep-alive\ndata: x\n: trailing\n\n");
        assert_eq!(f.len(), 2);
        assert!(f[0].is_comment_only());
        assert_eq!(f[0].raw().as_ref(), b": hello\n:\n\n");
        assert_eq!(f[0].data(), None);
        assert!(!f[1].is_comment_only());
        assert_eq!(f[1].data(), Some("x"));
    }

    #[test]
    fn every_blank_line_ends_a_frame() {
        let f = frames_any_split(b"data: x\n\n\n\r\n");
        assert_eq!(raws(&f), [&b"data: x\n\n"[..], b"\n", b"\r\n"]);
        assert!(f[1].is_comment_only() && f[2].is_comment_only());
    }

    #[test]
    fn line_without_colon_is_field_with_empty_value() {
        let f = frames_any_split(b"data\n\nevent\ndata\ndata\n\n");
        assert_eq!(f[0].data(), Some(""));
        assert_eq!(f[1].event(), Some(""));
        assert_eq!(f[1].data(), Some("\n"));
    }

    #[test]
    fn only_one_leading_space_is_stripped() {
        let f = frames_any_split(b"data:  two\nevent:none\n\ndata:\t tab\n\n");
        assert_eq!(f[0].data(), Some(" two"));
        assert_eq!(f[0].event(), Some("none"));
        assert_eq!(f[1].data(), Some("\t tab"));
    }

    #[test]
    fn value_keeps_later_colons_and_trailing_spaces() {
        let f = frames_any_split(b"data: {\"a\": \"b:c\"}  \n\n");
        assert_eq!(f[0].data(), Some("{\"a\": \"b:c\"}  "));
    }

    #[test]
    fn multiple_data_lines_join_with_newline() {
        let f = frames_any_split(b"data: a\ndata:\ndata: c\n\n");
        assert_eq!(f[0].data(), Some("a\n\nc"));
    }

    #[test]
    fn last_event_and_id_win() {
        let f = frames_any_split(b"event: a\nevent: b\nid: 1\nid: 2\ndata: x\n\n");
        assert_eq!(f[0].event(), Some("b"));
        assert_eq!(f[0].id(), Some("2"));
    }

    #[test]
    fn id_is_per_frame_and_ignores_nul() {
        let f = frames_any_split(b"id: 7\n\ndata: x\n\nid: 8\nid: a\0b\n\n");
        assert_eq!(f[0].id(), Some("7"));
        assert_eq!(f[1].id(), None);
        assert_eq!(f[2].id(), Some("8"));
    }

    #[test]
    fn retry_only_if_all_ascii_digits() {
        let f = frames_any_split(
            b"retry: 1500\n\nretry: 15s\n\nretry: -1\n\nretry:\n\nretry: 99999999999999999999999\n\nretry: 10\nretry: x\n\n",
        );
        assert_eq!(f[0].retry(), Some(1500));
        assert_eq!(f[1].retry(), None);
        assert_eq!(f[2].retry(), None);
        assert_eq!(f[3].retry(), None);
        assert_eq!(f[4].retry(), None, "overflows u64");
        assert_eq!(f[5].retry(), Some(10), "invalid later value is ignored");
    }

    #[test]
    fn unknown_fields_are_ignored_but_kept_in_raw() {
        let input = b"foo: bar\nDATA: upper\nevent: e\n\n";
        let f = frames_any_split(input);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].event(), Some("e"));
        assert_eq!(f[0].data(), None, "field names are case-sensitive");
        assert_eq!(f[0].raw().as_ref(), input);

        let f = frames_any_split(b"foo: bar\n\n");
        assert_eq!(f[0].event(), None);
        assert_eq!(f[0].data(), None);
        assert!(!f[0].is_comment_only());
    }

    #[test]
    fn empty_data_frame() {
        let f = frames_any_split(b"data:\n\ndata: \n\n");
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].data(), Some(""));
        assert_eq!(f[1].data(), Some(""));
        assert!(!f[0].is_comment_only());
    }

    #[test]
    fn finish_returns_tail_without_blank_line() {
        let mut framer = SseFramer::new();
        framer
            .push(Bytes::from_static(b"data: 1\n\nevent: end\ndata: 2"))
            .unwrap();
        assert_eq!(framer.next_frame().unwrap().data(), Some("1"));
        assert!(framer.next_frame().is_none());
        assert_eq!(framer.pending_len(), b"event: end\ndata: 2".len());
        let tail = framer.finish().unwrap();
        assert_eq!(tail.raw().as_ref(), b"event: end\ndata: 2");
        assert_eq!(tail.event(), Some("end"));
        assert_eq!(tail.data(), Some("2"), "unterminated last line is parsed");
        assert_eq!(framer.pending_len(), 0);
        assert!(framer.finish().is_none());
    }

    #[test]
    fn finish_with_single_line_end_tail() {
        let f = frames_any_split(b"data: 1\n\ndata: 2\n");
        assert_eq!(raws(&f), [&b"data: 1\n\n"[..], b"data: 2\n"]);
        assert_eq!(f[1].data(), Some("2"));
    }

    #[test]
    fn finish_with_nothing_pending() {
        let mut framer = SseFramer::new();
        assert!(framer.finish().is_none());
        framer.push(Bytes::from_static(b"data: 1\n\n")).unwrap();
        assert!(framer.next_frame().is_some());
        assert!(framer.finish().is_none());
    }

    #[test]
    fn finish_does_not_reorder_queued_frames() {
        let mut framer = SseFramer::new();
        framer
            .push(Bytes::from_static(b"data: 1\n\ndata: 2"))
            .unwrap();
        assert_eq!(framer.finish().unwrap().data(), Some("1"));
        assert_eq!(framer.finish().unwrap().data(), Some("2"));
        assert!(framer.finish().is_none());
    }

    #[test]
    fn invalid_utf8_is_lossy() {
        let f = frames_any_split(b"event: \xFF\ndata: a\xC3\ndata: \xE2\x82\xAC\n\n");
        assert_eq!(f[0].event(), Some("\u{FFFD}"));
        assert_eq!(f[0].data(), Some("a\u{FFFD}\n\u{20AC}"));
    }

    #[test]
    fn single_chunk_frames_are_zero_copy() {
        let chunk = Bytes::from_static(b"data: 1\n\ndata: 2\n\n");
        let mut framer = SseFramer::new();
        framer.push(chunk.clone()).unwrap();
        let first = framer.next_frame().unwrap();
        let second = framer.next_frame().unwrap();
        assert_eq!(first.raw().as_ptr(), chunk.as_ptr());
        assert_eq!(second.raw().as_ptr(), chunk[9..].as_ptr());
    }

    #[test]
    fn pending_len_counts_queued_and_incomplete_bytes() {
        let mut framer = SseFramer::new();
        framer.push(Bytes::from_static(b"data: 1\n\ndata")).unwrap();
        assert_eq!(framer.pending_len(), 13);
        framer.next_frame().unwrap();
        assert_eq!(framer.pending_len(), 4);
        framer.push(Bytes::from_static(b": 2\r")).unwrap();
        assert_eq!(framer.pending_len(), 8);
        framer.push(Bytes::from_static(b"\r")).unwrap();
        assert_eq!(framer.pending_len(), 9);
        assert!(framer.next_frame().is_none());
        framer.push(Bytes::from_static(b"\n")).unwrap();
        assert_eq!(
            framer.next_frame().unwrap().raw().as_ref(),
            b"data: 2\r\r\n"
        );
        assert_eq!(framer.pending_len(), 0);
    }

    #[test]
    fn over_limit_is_reported_and_nothing_is_lost() {
        let mut framer = SseFramer::with_max_frame_bytes(10);
        assert_eq!(framer.push(Bytes::from_static(b"data: 12")), Ok(()));
        assert_eq!(
            framer.push(Bytes::from_static(b"345")),
            Err(FrameTooLarge { limit: 10 })
        );
        assert_eq!(framer.pending_len(), 11);
        // The frame completes in this push and is still too large.
        assert_eq!(
            framer.push(Bytes::from_static(b"\n\ndata: 6\n\n")),
            Err(FrameTooLarge { limit: 10 })
        );
        assert_eq!(framer.next_frame().unwrap().data(), Some("12345"));
        assert_eq!(framer.next_frame().unwrap().data(), Some("6"));
        assert_eq!(framer.push(Bytes::from_static(b"data: 7\n\n")), Ok(()));
    }

    #[test]
    fn line_end_finds_the_first_cr_or_lf() {
        for len in 0..80 {
            for at in 0..=len {
                for end in [b'\n', b'\r'] {
                    // Bytes next to the line end values, and a later one.
                    let mut bytes: Vec<u8> = (0..len)
                        .map(|i| [0x0B, 0x0C, 0x09, 0x8A, b'a'][i % 5])
                        .collect();
                    let expected = (at < len).then(|| {
                        bytes[at] = end;
                        bytes[len - 1] = b'\n';
                        at
                    });
                    assert_eq!(line_end(&bytes), expected, "{len} {at} {end}");
                }
            }
        }
    }

    #[test]
    fn event_raw_is_a_name_exactly_when_event_is() {
        let f = frames(b"event: ping\n\nevent: \xFF\n\ndata: x\n\nevent: a\nevent: b\n\n");
        // Names without U+FFFD: the ones a raw comparison is used for.
        for name in ["ping", "pin", "", "b", "a"] {
            for frame in &f {
                assert_eq!(
                    frame.event_raw() == Some(name.as_bytes()),
                    frame.event() == Some(name),
                    "{name:?}"
                );
            }
        }
        assert_eq!(f[1].event_raw(), Some(&b"\xFF"[..]));
        assert_eq!(f[1].event(), Some("\u{FFFD}"));
        assert_eq!(f[2].event_raw(), None);
    }

    /// A sink that keeps every frame but those named in `skip`, and counts
    /// how often it was asked.
    struct Collect {
        skip: &'static [&'static [u8]],
        asked: usize,
        frames: Vec<Frame>,
    }

    impl FrameSink for Collect {
        fn skips(&mut self, event: Option<&[u8]>) -> bool {
            self.asked += 1;
            event.is_some_and(|event| self.skip.contains(&event))
        }

        fn may_skip(&self) -> bool {
            true
        }

        fn take(&mut self, frame: Frame) {
            self.frames.push(frame);
        }
    }

    /// Frames from `push_to` of `chunks` (then `finish`, whose frames skip
    /// nothing), and how many frames the sink was asked about.
    fn frames_pushed_to(chunks: &[&[u8]], skip: &'static [&'static [u8]]) -> (Vec<Frame>, usize) {
        let mut framer = SseFramer::new();
        let mut sink = Collect {
            skip,
            asked: 0,
            frames: Vec::new(),
        };
        for chunk in chunks {
            framer
                .push_to(&Bytes::copy_from_slice(chunk), &mut sink)
                .expect("within limit");
            assert!(framer.next_frame().is_none(), "nothing is queued");
        }
        while let Some(frame) = framer.finish() {
            sink.frames.push(frame);
        }
        assert_eq!(framer.pending_len(), 0);
        (sink.frames, sink.asked)
    }

    /// Every kind of line end, split CRLFs, a BOM, comments, several data
    /// lines, an invalid name, and the names a judge skips.
    const MIXED: &[u8] = b"\xEF\xBB\xBFevent: ping\r\ndata: {}\r\n\r\n: c\n\nevent: content_block_delta\rdata: a\rdata: b\r\revent: \xFF\ndata: x\n\nid: 1\nevent: message_delta\ndata: {\"a\":1}\n\r\nevent: ping\n\nevent: pin\ndata: y\r\n\r\ndata: tail";

    #[test]
    fn push_to_yields_the_frames_push_does_for_any_split() {
        let whole = frames(MIXED);
        assert_eq!(whole.len(), 8);
        for at in 0..=MIXED.len() {
            let (a, b) = MIXED.split_at(at);
            let (got, asked) = frames_pushed_to(&[a, b], &[]);
            assert_eq!(got, whole, "split at {at}");
            assert_eq!(
                asked,
                whole.len() - 1,
                "all but finish's tail, split at {at}"
            );
        }
        let bytes: Vec<&[u8]> = MIXED.chunks(1).collect();
        assert_eq!(frames_pushed_to(&bytes, &[]).0, whole, "byte at a time");
    }

    #[test]
    fn push_to_builds_no_skipped_frame_for_any_split() {
        const SKIP: &[&[u8]] = &[b"ping", b"content_block_delta"];
        let whole = frames(MIXED);
        let kept: Vec<Frame> = whole
            .iter()
            .filter(|f| !f.event_raw().is_some_and(|e| SKIP.contains(&e)))
            .cloned()
            .collect();
        assert_eq!(kept.len(), whole.len() - 3);
        for at in 0..=MIXED.len() {
            let (a, b) = MIXED.split_at(at);
            let (got, asked) = frames_pushed_to(&[a, b], SKIP);
            assert_eq!(got, kept, "split at {at}");
            assert_eq!(asked, whole.len() - 1, "split at {at}");
        }
        let bytes: Vec<&[u8]> = MIXED.chunks(1).collect();
        assert_eq!(frames_pushed_to(&bytes, SKIP).0, kept, "byte at a time");
    }

    /// Frames a whole-frame skip must read exactly as the line-by-line
    /// path does: several `event` fields (the last wins), `event` with no
    /// colon, names with odd spacing, CR line ends, a leading comment, and
    /// other fields after the name.
    const SHAPES: &[u8] = b"data: start\n\nevent: ping\n\nevent: ping\nevent: message_delta\ndata: x\n\nevent: ping\ndata: y\nevent\n\nevent:ping\n\nevent: ping \n\nevent:  ping\n\nevent: content_block_delta\ndata: {\"a\":1}\n\nevent: content_block_delta\r\ndata: z\r\n\r\n: c\nevent: ping\n\nevent: ping\nevent :x\n\nevent: ping\ndata: a\ndata: b\nid: 7\nretry: 5\n\nevent: ping\n: note\n\nevent: message_stop\ndata: {}\n\nevent: ping\n\ndata: tail";

    #[test]
    fn whole_frames_are_skipped_as_line_by_line_reading_would_for_any_split() {
        const SKIP: &[&[u8]] = &[b"ping", b"content_block_delta"];
        let whole = frames(SHAPES);
        assert_eq!(whole.len(), 16);
        let kept: Vec<Frame> = whole
            .iter()
            .filter(|f| !f.event_raw().is_some_and(|e| SKIP.contains(&e)))
            .cloned()
            .collect();
        let names: Vec<_> = kept.iter().map(|f| f.event()).collect();
        let expected = [
            None,
            Some("message_delta"),
            Some(""),
            Some("ping "),
            Some(" ping"),
            Some("message_stop"),
            None,
        ];
        assert_eq!(names, expected);
        for at in 0..=SHAPES.len() {
            let (a, b) = SHAPES.split_at(at);
            assert_eq!(frames_pushed_to(&[a, b], &[]).0, whole, "split at {at}");
            let (got, asked) = frames_pushed_to(&[a, b], SKIP);
            assert_eq!(got, kept, "split at {at}");
            assert_eq!(asked, whole.len() - 1, "asked once a frame, split at {at}");
        }
        let bytes: Vec<&[u8]> = SHAPES.chunks(1).collect();
        assert_eq!(frames_pushed_to(&bytes, SKIP).0, kept, "byte at a time");
    }

    #[test]
    fn a_skipped_frame_over_the_limit_is_reported_in_one_chunk_too() {
        struct SkipAll;
        impl FrameSink for SkipAll {
            fn skips(&mut self, _event: Option<&[u8]>) -> bool {
                true
            }
            fn may_skip(&self) -> bool {
                true
            }
            fn take(&mut self, _frame: Frame) {
                panic!("a skipped frame was built");
            }
        }
        let mut framer = SseFramer::with_max_frame_bytes(20);
        let first = Bytes::from_static(b"data: 1\n\nevent: a\n\n");
        assert_eq!(framer.push_to(&first, &mut SkipAll), Ok(()));
        let long = Bytes::from_static(b"event: a\ndata: 0123456789\n\nevent: a\n\n");
        assert_eq!(
            framer.push_to(&long, &mut SkipAll),
            Err(FrameTooLarge { limit: 20 })
        );
        assert_eq!(framer.pending_len(), 0);
    }

    #[test]
    fn push_to_reports_a_skipped_frame_over_the_limit() {
        struct SkipAll;
        impl FrameSink for SkipAll {
            fn skips(&mut self, _event: Option<&[u8]>) -> bool {
                true
            }
            fn take(&mut self, _frame: Frame) {
                panic!("a skipped frame was built");
            }
        }
        let mut framer = SseFramer::with_max_frame_bytes(10);
        assert_eq!(
            framer.push_to(&Bytes::from_static(b"data: 1\n\n"), &mut SkipAll),
            Ok(())
        );
        assert_eq!(
            framer.push_to(&Bytes::from_static(b"data: 12345\n\n"), &mut SkipAll),
            Err(FrameTooLarge { limit: 10 })
        );
        assert_eq!(framer.pending_len(), 0);
    }

    #[test]
    fn error_message_names_the_limit() {
        let msg = FrameTooLarge { limit: 4096 }.to_string();
        assert!(msg.contains("4096"), "{msg}");
    }
}
