//! The SSE framer against real provider streams (see `tests/fixtures/sse/SOURCES.md`),
//! fed in every kind of chunking.

use bytes::Bytes;
use refusal_guard::sse::{Frame, FrameTooLarge, SseFramer};
use serde_json::Value;

const ANTHROPIC_REFUSAL: &[u8] = include_bytes!("../fixtures/sse/anthropic_refusal_response.txt");
const ANTHROPIC_TOOL_USE: &[u8] = include_bytes!("../fixtures/sse/anthropic_tool_use_response.txt");
const GEMINI_UTF8: &[u8] =
    include_bytes!("../fixtures/sse/gemini_vertexai_streaming_success_utf8.txt");
const GEMINI_SAFETY: &[u8] =
    include_bytes!("../fixtures/sse/gemini_vertexai_streaming_failure_finish_reason_safety.txt");
const OPENAI_REFUSAL: &[u8] = include_bytes!("../fixtures/sse/openai_chat_refusal_173417d5.bin");

/// Feeds `chunks` to a fresh framer, pulling frames after every push and
/// calling `finish` at the end. Asserts that nothing is left over and that
/// the raw bytes of the frames add up to the input.
fn parse_chunks(chunks: &[&[u8]]) -> Vec<Frame> {
    let mut framer = SseFramer::new();
    let mut frames = Vec::new();
    for chunk in chunks {
        framer
            .push(Bytes::copy_from_slice(chunk))
            .expect("fixture frames are far below the default limit");
        while let Some(frame) = framer.next_frame() {
            frames.push(frame);
        }
    }
    while let Some(frame) = framer.finish() {
        frames.push(frame);
    }
    assert_eq!(framer.pending_len(), 0);
    let joined: Vec<u8> = frames.iter().flat_map(|f| f.raw().to_vec()).collect();
    let input: Vec<u8> = chunks.concat();
    assert!(
        joined == input,
        "raw bytes of the frames differ from the input"
    );
    frames
}

fn parse(input: &[u8]) -> Vec<Frame> {
    parse_chunks(&[input])
}

/// Tiny xorshift64 generator, so chunkings are random-looking but fixed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Splits `input` into chunks of 1..=max_chunk bytes chosen by `rng`.
fn random_chunks<'a>(input: &'a [u8], rng: &mut XorShift, max_chunk: usize) -> Vec<&'a [u8]> {
    let mut chunks = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let n = 1 + (rng.next() % max_chunk as u64) as usize;
        let (chunk, tail) = rest.split_at(n.min(rest.len()));
        chunks.push(chunk);
        rest = tail;
    }
    chunks
}

/// Parses `input` in one chunk and asserts every other chunking gives the
/// same frames: a split at each byte position, byte at a time, and several
/// pseudo-random chunkings.
fn parse_every_way(name: &str, input: &[u8]) -> Vec<Frame> {
    let whole = parse(input);
    for at in 0..=input.len() {
        let (a, b) = input.split_at(at);
        let split = parse_chunks(&[a, b]);
        assert!(
            split == whole,
            "{name}: split at {at} gave different frames"
        );
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert!(
        parse_chunks(&bytes) == whole,
        "{name}: byte at a time gave different frames"
    );
    for seed in [1, 0x9E37_79B9_7F4A_7C15, 0xDEAD_BEEF, 42] {
        let mut rng = XorShift(seed);
        for max_chunk in [3, 17, 64, 500] {
            let chunks = random_chunks(input, &mut rng, max_chunk);
            assert!(
                parse_chunks(&chunks) == whole,
                "{name}: seed {seed:#x}, chunks up to {max_chunk} gave different frames"
            );
        }
    }
    whole
}

fn events(frames: &[Frame]) -> Vec<Option<&str>> {
    frames.iter().map(Frame::event).collect()
}

fn json(frame: &Frame) -> Value {
    serde_json::from_str(frame.data().expect("frame has data")).expect("data is JSON")
}

#[test]
fn anthropic_refusal_stream() {
    let frames = parse_every_way("anthropic refusal", ANTHROPIC_REFUSAL);
    assert_eq!(
        events(&frames),
        [
            Some("message_start"),
            Some("content_block_start"),
            Some("content_block_stop"),
            Some("message_delta"),
            Some("message_stop"),
        ]
    );
    for frame in &frames {
        // Each data payload repeats the event name in `type`.
        assert_eq!(json(frame)["type"].as_str(), frame.event());
        assert!(!frame.is_comment_only());
    }
    let delta = &frames[3];
    assert!(delta.data().unwrap().contains(r#""stop_reason":"refusal""#));
    let delta = json(delta);
    assert_eq!(delta["delta"]["stop_details"]["category"], "cyber");

    // The file ends with one newline and no blank line: the last frame is
    // the tail that `finish` returns.
    let mut framer = SseFramer::new();
    framer.push(Bytes::from_static(ANTHROPIC_REFUSAL)).unwrap();
    let mut complete = 0;
    while framer.next_frame().is_some() {
        complete += 1;
    }
    assert_eq!(complete, 4);
    let tail = framer.finish().unwrap();
    assert_eq!(
        tail.raw().as_ref(),
        b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n"
    );
    assert_eq!(tail.data(), Some(r#"{"type":"message_stop"}"#));
}

#[test]
fn anthropic_tool_use_stream() {
    let frames = parse_every_way("anthropic tool use", ANTHROPIC_TOOL_USE);
    assert_eq!(frames.len(), 15);
    assert_eq!(frames[0].event(), Some("message_start"));
    assert_eq!(frames[2].event(), Some("ping"));
    assert_eq!(frames[2].data(), Some(r#"{"type": "ping"}"#));
    assert_eq!(frames[13].event(), Some("message_delta"));
    assert_eq!(frames[14].event(), Some("message_stop"));
    let deltas = frames
        .iter()
        .filter(|f| f.event() == Some("content_block_delta"))
        .count();
    assert_eq!(deltas, 7);

    // The tool input, streamed in pieces, reassembles to valid JSON.
    let input: String = frames
        .iter()
        .map(json)
        .filter(|v| v["delta"]["type"] == "input_json_delta")
        .map(|v| v["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(input, r#"{"location": "Paris"}"#);

    // No final newline: the last frame's raw bytes stop at the closing brace.
    assert!(frames[14].raw().ends_with(b"\"message_stop\"}"));
}

#[test]
fn gemini_crlf_utf8_stream() {
    let frames = parse_every_way("gemini utf8", GEMINI_UTF8);
    assert_eq!(frames.len(), 4);
    let mut text = String::new();
    for frame in &frames {
        assert_eq!(frame.event(), None);
        assert!(frame.raw().ends_with(b"}\r\n\r\n"));
        assert!(!frame.data().unwrap().contains('\r'));
        let chunk = json(frame);
        assert_eq!(chunk["candidates"][0]["finishReason"], "STOP");
        text.push_str(
            chunk["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap(),
        );
    }
    // Multi-byte characters survive being split across chunks.
    assert!(text.starts_with("秋风瑟瑟，叶落纷纷，\n西风残照，寒霜渐浓。"));
    assert!(text.ends_with("领悟秋天的哲理。"));
}

#[test]
fn gemini_crlf_safety_stream() {
    let frames = parse_every_way("gemini safety", GEMINI_SAFETY);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].raw().as_ref(), GEMINI_SAFETY);
    let chunk = json(&frames[0]);
    assert_eq!(chunk["candidates"][0]["finishReason"], "SAFETY");
}

#[test]
fn openai_refusal_stream() {
    let frames = parse_every_way("openai refusal", OPENAI_REFUSAL);
    assert_eq!(frames.len(), 14);
    assert!(frames.iter().all(|f| f.event().is_none()));
    assert_eq!(frames[13].data(), Some("[DONE]"));
    assert_eq!(frames[13].raw().as_ref(), b"data: [DONE]\n\n");
    let refusal: String = frames[..13]
        .iter()
        .map(json)
        .filter_map(|v| {
            v["choices"][0]["delta"]["refusal"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(refusal, "I'm sorry, I can't assist with that request.");
    // The usage chunk has `choices: []`.
    assert_eq!(json(&frames[12])["choices"], serde_json::json!([]));

    // The stream ends with a blank line, so nothing is left for `finish`.
    let mut framer = SseFramer::new();
    framer.push(Bytes::from_static(OPENAI_REFUSAL)).unwrap();
    while framer.next_frame().is_some() {}
    assert!(framer.finish().is_none());
}

/// Replaces every LF in `input` with `eol`.
fn with_line_ends(input: &[u8], eol: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in input {
        if b == b'\n' {
            out.extend_from_slice(eol);
        } else {
            out.push(b);
        }
    }
    out
}

#[test]
fn line_end_style_does_not_change_the_fields() {
    let fields = |frames: &[Frame]| -> Vec<(Option<String>, Option<String>)> {
        frames
            .iter()
            .map(|f| (f.event().map(Into::into), f.data().map(Into::into)))
            .collect()
    };
    let lf = fields(&parse(ANTHROPIC_TOOL_USE));
    let crlf_input = with_line_ends(ANTHROPIC_TOOL_USE, b"\r\n");
    let cr_input = with_line_ends(ANTHROPIC_TOOL_USE, b"\r");
    assert_eq!(fields(&parse_every_way("crlf", &crlf_input)), lf);
    assert_eq!(fields(&parse_every_way("cr", &cr_input)), lf);
}

#[test]
fn bom_before_a_real_stream_is_ignored() {
    let mut input = b"\xEF\xBB\xBF".to_vec();
    input.extend_from_slice(ANTHROPIC_REFUSAL);
    let frames = parse_every_way("bom", &input);
    assert_eq!(frames[0].event(), Some("message_start"));
    assert!(frames[0]
        .raw()
        .starts_with(b"\xEF\xBB\xBFevent: message_start\n"));
    assert_eq!(frames[1..], parse(ANTHROPIC_REFUSAL)[1..]);
}

#[test]
fn frames_from_one_chunk_share_its_buffer() {
    let chunk = Bytes::from_static(OPENAI_REFUSAL);
    let range = chunk.as_ptr_range();
    let mut framer = SseFramer::new();
    framer.push(chunk.clone()).unwrap();
    let mut offset = 0;
    while let Some(frame) = framer.next_frame() {
        let raw = frame.into_raw();
        assert!(range.contains(&raw.as_ptr()));
        assert_eq!(raw.as_ptr(), chunk[offset..].as_ptr());
        offset += raw.len();
    }
    assert_eq!(offset, OPENAI_REFUSAL.len());
}

#[test]
fn frame_over_the_limit_is_reported_and_nothing_is_lost() {
    let unlimited = parse(ANTHROPIC_TOOL_USE);
    let largest = unlimited.iter().map(|f| f.raw().len()).max().unwrap();
    let limit = 200;
    assert!(largest > limit, "fixture needs a frame over {limit} bytes");

    let mut framer = SseFramer::with_max_frame_bytes(limit);
    let mut frames = Vec::new();
    let mut errors = 0;
    for chunk in ANTHROPIC_TOOL_USE.chunks(50) {
        match framer.push(Bytes::copy_from_slice(chunk)) {
            Ok(()) => {}
            Err(err) => {
                assert_eq!(err, FrameTooLarge { limit });
                errors += 1;
            }
        }
        while let Some(frame) = framer.next_frame() {
            frames.push(frame);
        }
    }
    while let Some(frame) = framer.finish() {
        frames.push(frame);
    }
    assert!(errors > 0);
    assert_eq!(frames, unlimited);
}

#[test]
fn limit_is_inclusive() {
    let frame = b"data: 0123456789\n\n"; // 18 bytes
    let mut at_limit = SseFramer::with_max_frame_bytes(frame.len());
    assert_eq!(at_limit.push(Bytes::from_static(frame)), Ok(()));
    assert_eq!(at_limit.next_frame().unwrap().data(), Some("0123456789"));

    let mut below = SseFramer::with_max_frame_bytes(frame.len() - 1);
    let err = below.push(Bytes::from_static(frame)).unwrap_err();
    assert_eq!(err.limit, frame.len() - 1);
    assert!(err.to_string().contains("17 bytes"), "{err}");
    assert_eq!(below.next_frame().unwrap().raw().as_ref(), frame);
}

#[test]
fn default_limit_is_one_mebibyte() {
    assert_eq!(SseFramer::DEFAULT_MAX_FRAME_BYTES, 1024 * 1024);
    let mut framer = SseFramer::default();
    let big = Bytes::from(vec![b'x'; SseFramer::DEFAULT_MAX_FRAME_BYTES + 1]);
    assert!(framer.push(big).is_err());
    assert_eq!(framer.pending_len(), SseFramer::DEFAULT_MAX_FRAME_BYTES + 1);
}
