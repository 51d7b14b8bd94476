//! Adversarial, invariant-based tests through the public API.
//!
//! A deterministic generator (seeded [`Rng`], no extra dependencies) builds
//! random Anthropic event streams and message bodies; each case's expected
//! verdict is computed here, from the generated events and the rules of
//! DESIGN §2 (real output = non-whitespace text or any tool call; thinking,
//! signatures, pings, whitespace and unknown things are not output; a refusal
//! is empty when no real output came before it), independently of the
//! crate's own inspection code. Every case then goes through the guard under
//! several chunkings and the invariants below are checked:
//!
//! 1. no refusal: the body is byte-identical, one request, no record (a
//!    provider `fallback` block: one `fallback` record);
//! 2. partial refusal: byte-identical, one request, one `partial` record;
//! 3. empty refusal, rescue off: byte-identical, one `dead` / `rescue_off`;
//! 4. empty refusal, rescue on, continuation with output: exactly the
//!    continuation's bytes, two requests, the second ending with a user turn
//!    that carries the note, one `rescued` record;
//! 5. empty refusal, rescue on, continuation that fails in any way: the
//!    original bytes, one `dead` record with the matching reason;
//! 6. never a panic, never a hang.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use refusal_guard::refusal::DeadReason;
use refusal_guard::telemetry::{MemorySink, RefusalRecord};
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer, RefusalHandle};
use serde_json::{json, Value};
use support::events::{block_start, block_stop, message_start, message_stop, ping};
use support::*;
use tower::{Layer, Service, ServiceExt};

/// Small helpers over the shared PRNG.
trait Pick {
    fn below(&mut self, n: usize) -> usize;
    fn chance(&mut self, percent: u64) -> bool;
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T;
}

impl Pick for Rng {
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

// ---------------------------------------------------------------------------
// The model: what each generated event means under DESIGN §2.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Not output, not a refusal (thinking, pings, whitespace, unknown, ...).
    Nothing,
    /// Real output: non-whitespace text or a started tool call.
    Output,
    /// `stop_reason: "refusal"`.
    Refusal,
    /// A provider server-side `fallback` block.
    Fallback,
    /// A provider `error` event.
    Error,
}

/// What a whole response shows, by the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// No refusal. `output`: real output came before any error event;
    /// `errored`: an error event came before any output.
    Clean {
        fallback: bool,
        output: bool,
        errored: bool,
    },
    /// A refusal after real output.
    Partial,
    /// A refusal before any real output.
    Empty,
}

fn classify(effects: impl IntoIterator<Item = Effect>) -> Class {
    let (mut output, mut fallback, mut errored) = (false, false, false);
    for effect in effects {
        match effect {
            Effect::Nothing => {}
            Effect::Output => output |= !errored,
            Effect::Fallback => fallback = true,
            Effect::Error => errored |= !output,
            Effect::Refusal if errored => {}
            Effect::Refusal if output => return Class::Partial,
            Effect::Refusal => return Class::Empty,
        }
    }
    Class::Clean {
        fallback,
        output,
        errored,
    }
}

// ---------------------------------------------------------------------------
// The generator: logical events, then SSE bytes.
// ---------------------------------------------------------------------------

/// One SSE event: its `event:` name, its `data` text (JSON, or broken JSON),
/// and what it means.
#[derive(Debug, Clone)]
struct Event {
    name: Option<String>,
    data: String,
    effect: Effect,
}

fn event(value: Value, effect: Effect) -> Event {
    Event {
        name: value["type"].as_str().map(str::to_owned),
        data: value.to_string(),
        effect,
    }
}

const WHITESPACE: &[&str] = &[
    "",
    " ",
    "\n",
    "\n\n",
    "\t \r\n",
    "\u{a0}",
    "\u{3000} ",
    "  ",
];
const REAL_TEXT: &[&str] = &[
    "Hello",
    " world.",
    ".",
    "é",
    "0",
    "\u{1f600}",
    "Sure, here is the plan:",
    "\"quoted\" \\ backslash",
    "<b>x</b>",
    "data: not a frame\n\nevent: message_delta",
];
const CATEGORIES: &[Option<&str>] = &[
    Some("cyber"),
    Some("bio"),
    Some("frontier_llm"),
    Some("reasoning_extraction"),
    Some("general_harms"),
    Some("a_future_category"),
    None,
];

fn text_piece(rng: &mut Rng, quiet: bool) -> (&'static str, Effect) {
    if !quiet && rng.chance(45) {
        (*rng.pick(REAL_TEXT), Effect::Output)
    } else {
        (*rng.pick(WHITESPACE), Effect::Nothing)
    }
}

fn delta(index: usize, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

fn stop_event(rng: &mut Rng) -> Event {
    let reason = if rng.chance(40) {
        "refusal"
    } else {
        *rng.pick(&["end_turn", "max_tokens", "tool_use", "stop_sequence"])
    };
    if reason != "refusal" {
        // A non-refusal stop; sometimes a refusal-looking detail on it
        // (only `stop_reason` decides).
        let mut value = json!({"type":"message_delta","delta":{"stop_reason":reason,"stop_sequence":null},"usage":{"output_tokens":7}});
        if rng.chance(10) {
            value["delta"]["stop_details"] = json!({"type":"refusal","category":"cyber"});
        }
        return event(value, Effect::Nothing);
    }
    let category = *rng.pick(CATEGORIES);
    let explanation = if rng.chance(50) {
        Some("Declined under the usage policy.")
    } else {
        None
    };
    let mut value = json!({"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null},"usage":{"output_tokens":3}});
    match rng.below(5) {
        0 => {} // an older model: no stop_details
        1 => value["delta"]["stop_details"] = Value::Null,
        _ => {
            value["delta"]["stop_details"] =
                json!({"type":"refusal","category":category,"explanation":explanation});
            if rng.chance(20) {
                value["delta"]["stop_details"]["fallback_has_prefill_claim"] = json!(false);
            }
        }
    }
    event(value, Effect::Refusal)
}

fn noise(rng: &mut Rng) -> Event {
    match rng.below(5) {
        0 | 1 => event(ping(), Effect::Nothing),
        2 => event(
            json!({"type":"future_event","payload":{"text":"Hello, real looking text","stop_reason":"refusal"}}),
            Effect::Nothing,
        ),
        3 => Event {
            // Broken JSON is passed through, never judged.
            name: Some(
                (*rng.pick(&["content_block_delta", "message_delta", "content_block_start"]))
                    .to_owned(),
            ),
            data: (*rng.pick(&[
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"#,
                r#"{"type":"message_delta","delta":{"stop_reason":"refusal""#,
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","#,
                "not json at all",
                "",
            ]))
            .to_owned(),
            effect: Effect::Nothing,
        },
        _ => Event {
            // A frame without an `event:` line.
            name: None,
            data: ping().to_string(),
            effect: Effect::Nothing,
        },
    }
}

/// A random Anthropic event sequence, with each event's meaning.
fn gen_events(rng: &mut Rng) -> Vec<Event> {
    let mut out = Vec::new();
    if rng.chance(95) {
        out.push(event(message_start("claude-opus-4-7"), Effect::Nothing));
        if rng.chance(3) {
            out.push(event(message_start("claude-opus-4-7"), Effect::Nothing));
        }
    }
    let blocks = rng.below(5);
    let mut index = 0usize;
    // A quiet stream has no real output: no tool calls, whitespace text.
    let quiet = rng.chance(35);
    for _ in 0..blocks {
        let i = index as u64;
        let mut kind = rng.below(9);
        if quiet && (kind == 5 || kind == 6) {
            kind = 3;
        }
        match kind {
            0 | 1 => {
                out.push(event(
                    block_start(i, json!({"type":"thinking","thinking":"","signature":""})),
                    Effect::Nothing,
                ));
                for _ in 0..rng.below(4) {
                    // Thinking is never output, whatever it says.
                    let (text, _) = text_piece(rng, false);
                    out.push(event(
                        delta(index, json!({"type":"thinking_delta","thinking":text})),
                        Effect::Nothing,
                    ));
                }
                if rng.chance(80) {
                    out.push(event(
                        delta(index, json!({"type":"signature_delta","signature":"EqQBCgIYAhIM"})),
                        Effect::Nothing,
                    ));
                }
            }
            2 => out.push(event(
                block_start(i, json!({"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"})),
                Effect::Nothing,
            )),
            3 | 4 => {
                let (start_text, start_effect) = if rng.chance(10) {
                    text_piece(rng, quiet)
                } else {
                    ("", Effect::Nothing)
                };
                out.push(event(
                    block_start(i, json!({"type":"text","text":start_text})),
                    start_effect,
                ));
                for _ in 0..rng.below(4) {
                    let (text, effect) = text_piece(rng, quiet);
                    out.push(event(
                        delta(index, json!({"type":"text_delta","text":text})),
                        effect,
                    ));
                }
            }
            5 => {
                out.push(event(
                    block_start(
                        i,
                        json!({"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}),
                    ),
                    Effect::Output,
                ));
                for piece in ["", "{\"loc", "ation\": \"Par", "is\"}"]
                    .iter()
                    .take(rng.below(5))
                {
                    out.push(event(
                        delta(index, json!({"type":"input_json_delta","partial_json":piece})),
                        Effect::Nothing,
                    ));
                }
            }
            6 => {
                let tool = json!({"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{}});
                let query = json!({"type":"input_json_delta","partial_json":"{\"query\": \"x\"}"});
                out.push(event(block_start(i, tool), Effect::Output));
                out.push(event(delta(index, query), Effect::Nothing));
                if rng.chance(50) {
                    out.push(event(block_stop(i), Effect::Nothing));
                    index += 1;
                    let result = json!({"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[]});
                    out.push(event(block_start(index as u64, result), Effect::Nothing));
                }
            }
            7 => out.push(event(
                block_start(
                    i,
                    json!({"type":"fallback","from":{"model":"claude-opus-4-7"},"to":{"model":"claude-sonnet-4-5"},"trigger":{"type":"refusal","category":rng.pick(CATEGORIES)}}),
                ),
                Effect::Fallback,
            )),
            _ => {
                let future = json!({"type":"future_block","payload":"Hello there"});
                out.push(event(block_start(i, future), Effect::Nothing));
                for _ in 0..rng.below(3) {
                    let text = json!({"type":"future_delta","text":"Visible looking text"});
                    out.push(event(delta(index, text), Effect::Nothing));
                }
            }
        }
        if rng.chance(90) {
            out.push(event(block_stop(index as u64), Effect::Nothing));
        }
        index += 1;
    }
    if rng.chance(85) {
        let stop = stop_event(rng);
        let at = if rng.chance(70) {
            out.len()
        } else {
            rng.below(out.len() + 1)
        };
        out.insert(at, stop);
    }
    if rng.chance(70) {
        out.push(event(message_stop(), Effect::Nothing));
    }
    // Noise anywhere.
    for _ in 0..rng.below(4) {
        let at = rng.below(out.len() + 1);
        let n = noise(rng);
        out.insert(at, n);
    }
    // A mid-stream error ends the stream.
    if rng.chance(8) {
        let at = rng.below(out.len() + 1);
        out.truncate(at);
        out.push(event(
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            Effect::Error,
        ));
    }
    out
}

/// A generated stream: its bytes and, for each event, the offset at which
/// its data is complete (the event counts only if the stream reaches it).
#[derive(Debug, Clone)]
struct Stream {
    bytes: Bytes,
    marks: Vec<(usize, Effect)>,
    /// An upper bound on the longest SSE frame, in bytes.
    max_frame: usize,
}

impl Stream {
    fn class(&self) -> Class {
        classify(self.marks.iter().map(|(_, e)| *e))
    }

    /// The stream cut at byte `at`: events whose data is incomplete vanish.
    fn truncated(&self, at: usize) -> Stream {
        Stream {
            bytes: self.bytes.slice(..at),
            marks: self
                .marks
                .iter()
                .copied()
                .filter(|(end, _)| *end <= at)
                .collect(),
            max_frame: self.max_frame,
        }
    }
}

/// The first comma at depth 1 outside strings: a safe place to split a JSON
/// object across two `data:` lines.
fn split_point(json: &str) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0i32, false, false);
    for (i, c) in json.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 1 => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// Line endings: LF, CRLF, CR, or a mix (never a lone LF right after a CR,
/// which would merge into one CRLF).
struct Eol {
    style: usize,
    after_cr: bool,
}

impl Eol {
    fn next(&mut self, rng: &mut Rng) -> &'static str {
        let eol = match self.style {
            0 => "\n",
            1 => "\r\n",
            2 => "\r",
            _ if self.after_cr => *rng.pick(&["\r\n", "\r"]),
            _ => *rng.pick(&["\n", "\r\n", "\r"]),
        };
        self.after_cr = eol == "\r";
        eol
    }
}

fn render(events: &[Event], rng: &mut Rng) -> Stream {
    let style = match rng.below(20) {
        0..=12 => 0,
        13..=16 => 1,
        17 => 2,
        _ => 3,
    };
    let mut eol = Eol {
        style,
        after_cr: false,
    };
    let mut out: Vec<u8> = Vec::new();
    let mut marks = Vec::new();
    let mut max_frame = 0;
    if rng.chance(2) {
        out.extend_from_slice("\u{feff}".as_bytes());
    }
    let mut start = 0;
    for event in events {
        if rng.chance(3) {
            // A comment-only frame.
            out.extend_from_slice(b": keep-alive");
            out.extend_from_slice(eol.next(rng).as_bytes());
            out.extend_from_slice(eol.next(rng).as_bytes());
        }
        if rng.chance(3) {
            out.extend_from_slice(b": a comment inside the frame");
            out.extend_from_slice(eol.next(rng).as_bytes());
        }
        if let Some(name) = &event.name {
            if rng.chance(95) {
                out.extend_from_slice(if rng.chance(5) { b"event:" } else { b"event: " });
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(eol.next(rng).as_bytes());
            }
        }
        if rng.chance(2) {
            out.extend_from_slice(b"id: 7");
            out.extend_from_slice(eol.next(rng).as_bytes());
        }
        let lines: Vec<&str> = match split_point(&event.data) {
            Some(at) if rng.chance(8) => vec![&event.data[..at], &event.data[at..]],
            _ => vec![&event.data],
        };
        let mut end = 0;
        for line in lines {
            out.extend_from_slice(if rng.chance(5) { b"data:" } else { b"data: " });
            out.extend_from_slice(line.as_bytes());
            end = out.len();
            out.extend_from_slice(eol.next(rng).as_bytes());
        }
        marks.push((end, event.effect));
        out.extend_from_slice(eol.next(rng).as_bytes());
        if rng.chance(3) {
            // A stray blank line: an empty dispatch.
            out.extend_from_slice(eol.next(rng).as_bytes());
        }
        max_frame = max_frame.max(out.len() - start);
        start = out.len();
    }
    Stream {
        bytes: Bytes::from(out),
        marks,
        max_frame,
    }
}

// ---------------------------------------------------------------------------
// Running a case through the guard.
// ---------------------------------------------------------------------------

/// What one call through the guard gave.
struct Ran {
    body: Bytes,
    seen: Vec<Seen>,
    records: Vec<RefusalRecord>,
    extension: Option<Refusal>,
    handle: RefusalHandle,
}

/// Drives a service once; the body must end cleanly.
async fn drive<S, B>(
    service: &mut S,
    request: http::Request<Full<Bytes>>,
) -> (http::response::Parts, Bytes)
where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let response = service
        .ready()
        .await
        .unwrap()
        .call(request)
        .await
        .expect("the guard answers");
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .expect("the body ends cleanly")
        .to_bytes();
    (parts, body)
}

/// Calls the guard once, with a deadline: a hang is a failure.
async fn run(
    layer: RefusalGuardLayer,
    sink: &MemorySink,
    replies: Vec<Reply>,
    request: Value,
) -> Ran {
    let upstream = Upstream::new(replies);
    let mut guard = layer.layer(upstream.service());
    let future = drive(&mut guard, post("/v1/messages", &request));
    let (parts, body) = tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .expect("the guard hung");
    let handle = parts
        .extensions
        .get::<RefusalHandle>()
        .cloned()
        .expect("every guarded response has a handle");
    Ran {
        body,
        seen: upstream.seen(),
        records: sink.records(),
        extension: parts.extensions.get::<Refusal>().cloned(),
        handle,
    }
}

/// The shown form of bytes in a failure message.
fn show(bytes: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(bytes))
}

/// Chunks for a stream: one of several chunkings.
fn chunking(bytes: &Bytes, rng: &mut Rng, which: usize) -> Vec<Bytes> {
    match which {
        0 => vec![bytes.clone()],
        1 => {
            let max = 1 + rng.below(64);
            let cuts = rng.cuts(bytes.len(), max);
            split_at(bytes, &cuts)
        }
        2 => {
            let max = 1 + rng.below(4);
            let cuts = rng.cuts(bytes.len(), max);
            split_at(bytes, &cuts)
        }
        _ => {
            let at = rng.below(bytes.len() + 1);
            split_at(bytes, &[at])
        }
    }
}

/// How the rescue continuation behaves, and what the guard should make of it.
enum Continuation {
    /// A stream; by the model it has real output first (rescued) or not.
    Stream(Stream),
    /// A whole JSON message.
    Json(Bytes, Class),
    Status500,
    Fail,
}

impl Continuation {
    fn reply(&self, rng: &mut Rng) -> Reply {
        match self {
            Continuation::Stream(s) => {
                let which = rng.below(4);
                Reply::Sse(chunking(&s.bytes, rng, which))
            }
            Continuation::Json(bytes, _) => Reply::Json(bytes.clone()),
            Continuation::Status500 => Reply::Status(
                500,
                Bytes::from_static(
                    br#"{"type":"error","error":{"type":"api_error","message":"Internal"}}"#,
                ),
            ),
            Continuation::Fail => Reply::Fail,
        }
    }

    fn class(&self) -> Option<Class> {
        match self {
            Continuation::Stream(s) => Some(s.class()),
            Continuation::Json(_, class) => Some(*class),
            _ => None,
        }
    }

    fn bytes(&self) -> Option<&Bytes> {
        match self {
            Continuation::Stream(s) => Some(&s.bytes),
            Continuation::Json(bytes, _) => Some(bytes),
            _ => None,
        }
    }

    /// What the guard should do after an empty refusal with this
    /// continuation: `Ok(())` served it (rescued), `Err(reason)` dead.
    fn expected(&self) -> Result<(), DeadReason> {
        match self.class() {
            None => Err(DeadReason::UpstreamError),
            Some(Class::Partial) => Ok(()),
            Some(Class::Empty) => Err(DeadReason::StillRefused),
            Some(Class::Clean { output: true, .. }) => Ok(()),
            Some(Class::Clean { errored: true, .. }) => Err(DeadReason::UpstreamError),
            Some(Class::Clean { .. }) => Err(DeadReason::NoOutput),
        }
    }
}

/// A random continuation: mostly a generated stream (whatever its class),
/// sometimes an error status or a transport failure.
fn gen_continuation(rng: &mut Rng) -> Continuation {
    match rng.below(10) {
        0 => Continuation::Status500,
        1 => Continuation::Fail,
        2 | 3 => Continuation::Stream(render(
            &support::events::text_answer("claude-opus-4-7", "Here is the checklist.")
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    event(
                        v,
                        if i == 2 {
                            Effect::Output
                        } else {
                            Effect::Nothing
                        },
                    )
                })
                .collect::<Vec<_>>(),
            rng,
        )),
        _ => {
            let events = gen_events(rng);
            Continuation::Stream(render(&events, rng))
        }
    }
}

/// Checks the second request of a rescue: everything as in the first, plus
/// a user turn at the end that carries the note.
fn check_rescue_request(first: &Value, seen: &Seen, context: &str) {
    let second = seen.json();
    let (Some(a), Some(b)) = (first.as_object(), second.as_object()) else {
        panic!("{context}: request bodies are objects");
    };
    for (key, value) in a {
        if key != "messages" {
            assert_eq!(b.get(key), Some(value), "{context}: `{key}` kept");
        }
    }
    let messages = b["messages"].as_array().expect("messages");
    let last = messages.last().expect("a last message");
    assert_eq!(last["role"], "user", "{context}: the note is a user turn");
    assert!(
        last.to_string().contains("[refusal-guard]"),
        "{context}: the last user turn carries the note: {last}"
    );
}

/// The rescue configuration of a run on an empty refusal.
enum Scenario {
    RescueOff,
    Rescue(Continuation),
}

/// Checks a run against the invariants for a case of class `class`.
fn check(
    class: Class,
    original: &Bytes,
    scenario: &Scenario,
    request: &Value,
    ran: &Ran,
    context: &str,
) {
    assert!(
        ran.handle.is_settled(),
        "{context}: handle settled once the body ended"
    );
    assert!(
        ran.records.len() <= 1,
        "{context}: at most one record: {:?}",
        ran.records
    );
    if let Some(record) = ran.records.first() {
        assert_eq!(
            ran.handle.get().map(|r| r.outcome),
            Some(record.outcome),
            "{context}: the handle agrees with the record"
        );
    } else {
        assert_eq!(
            ran.handle.get(),
            None,
            "{context}: no record, no refusal on the handle"
        );
    }
    let same = |what: &str| {
        assert!(
            ran.body == *original,
            "{context}: {what}: body must be byte-identical\n  sent {}\n   got {}",
            show(original),
            show(&ran.body)
        );
    };
    let outcome = ran.records.first().map(|r| (r.outcome, r.reason));
    match class {
        Class::Clean { fallback, .. } => {
            same("no refusal");
            assert_eq!(ran.seen.len(), 1, "{context}: one request");
            let want = fallback.then_some((Outcome::Fallback, None));
            assert_eq!(
                outcome, want,
                "{context}: records for a response without refusal"
            );
            assert!(
                ran.extension.is_none(),
                "{context}: nothing decided before serving"
            );
        }
        Class::Partial => {
            same("partial refusal");
            assert_eq!(ran.seen.len(), 1, "{context}: one request");
            assert_eq!(
                outcome,
                Some((Outcome::Partial, None)),
                "{context}: partial record"
            );
        }
        Class::Empty => {
            let extension = ran.extension.as_ref().map(|r| r.outcome);
            assert_eq!(
                extension,
                outcome.map(|o| o.0),
                "{context}: an empty refusal is known before serving"
            );
            match scenario {
                Scenario::RescueOff => {
                    same("rescue off");
                    assert_eq!(ran.seen.len(), 1, "{context}: one request");
                    assert_eq!(
                        outcome,
                        Some((Outcome::Dead, Some(DeadReason::RescueOff))),
                        "{context}"
                    );
                }
                Scenario::Rescue(continuation) => {
                    assert_eq!(ran.seen.len(), 2, "{context}: one continuation");
                    check_rescue_request(request, &ran.seen[1], context);
                    match continuation.expected() {
                        Ok(()) => {
                            let want = continuation.bytes().unwrap();
                            assert!(
                                ran.body == *want,
                                "{context}: the client gets exactly the continuation\n  want {}\n   got {}",
                                show(want),
                                show(&ran.body)
                            );
                            assert_eq!(outcome, Some((Outcome::Rescued, None)), "{context}");
                        }
                        Err(reason) => {
                            same("dead after the rescue");
                            assert_eq!(outcome, Some((Outcome::Dead, Some(reason))), "{context}");
                        }
                    }
                }
            }
        }
    }
}

fn describe(stream: &Stream, extra: &str) -> String {
    format!(
        "{extra}\n  class {:?}\n  stream {}",
        stream.class(),
        show(&stream.bytes)
    )
}

/// A generator seeded with `seed`, and the first stream it draws.
fn seeded_stream(seed: u64) -> (Rng, Stream) {
    let mut rng = Rng::new(seed);
    let stream = gen_stream(&mut rng);
    (rng, stream)
}

/// One generated stream case.
fn gen_stream(rng: &mut Rng) -> Stream {
    let events = gen_events(rng);
    let stream = render(&events, rng);
    if rng.chance(12) {
        let at = rng.below(stream.bytes.len() + 1);
        stream.truncated(at)
    } else {
        stream
    }
}

const STREAM_CASES: u64 = 4000;

/// Picks what follows the stream (for a quarter of the empty refusals,
/// rescue off; otherwise a random continuation) and runs the case.
async fn run_case(
    class: Class,
    chunks: &[Bytes],
    layer: RefusalGuardLayer,
    request: &Value,
    rng: &mut Rng,
) -> (Scenario, Ran) {
    let sink = MemorySink::new();
    let mut layer = layer.telemetry(sink.clone());
    let scenario = if class == Class::Empty && rng.chance(25) {
        layer = layer.rescue(false);
        Scenario::RescueOff
    } else {
        Scenario::Rescue(gen_continuation(rng))
    };
    let mut replies = vec![Reply::Sse(chunks.to_vec())];
    if let Scenario::Rescue(c) = &scenario {
        replies.push(c.reply(rng));
    }
    let ran = run(layer, &sink, replies, request.clone()).await;
    (scenario, ran)
}

#[tokio::test]
async fn random_streams_keep_the_invariants() {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for case in 0..STREAM_CASES {
        let seed = 0x5eed_0000 + case;
        let (mut rng, stream) = seeded_stream(seed);
        let class = stream.class();
        let request = messages_request("claude-opus-4-7", true, "Audit my firewall rules");
        for which in 0..4 {
            let chunks = chunking(&stream.bytes, &mut rng, which);
            let layer = RefusalGuardLayer::new();
            let (scenario, ran) = run_case(class, &chunks, layer, &request, &mut rng).await;
            let context = describe(
                &stream,
                &format!("seed {seed:#x} chunking {which} ({} chunks)", chunks.len()),
            );
            check(class, &stream.bytes, &scenario, &request, &ran, &context);
            let key = match (&class, &scenario) {
                (Class::Empty, Scenario::Rescue(c)) => format!("empty/{:?}", c.expected()),
                (Class::Empty, Scenario::RescueOff) => "empty/off".into(),
                (Class::Clean { fallback: true, .. }, _) => "clean/fallback".into(),
                (c, _) => format!("{c:?}").split(' ').next().unwrap().to_owned(),
            };
            *counts.entry(key).or_default() += 1;
        }
    }
    // The generator must reach every class often enough to mean something.
    for (key, n) in &counts {
        assert!(*n >= 40, "too few cases of {key}: {counts:?}");
    }
    assert!(counts.len() >= 8, "{counts:?}");
}

// ---------------------------------------------------------------------------
// Small hold limits: whatever the guard decides, nothing is lost.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn small_hold_limits_never_lose_a_response() {
    for case in 0..1500u64 {
        let seed = 0x11_0000 + case;
        let (mut rng, stream) = seeded_stream(seed);
        let class = stream.class();
        let request = messages_request("claude-opus-4-7", true, "Audit my firewall rules");
        let which = rng.below(4);
        let chunks = chunking(&stream.bytes, &mut rng, which);
        let mut layer = RefusalGuardLayer::new();
        let (bytes_limit, frames_limit) = match rng.below(3) {
            0 => (Some(1 + rng.below(300)), None),
            1 => (None, Some(rng.below(10))),
            _ => (Some(1 + rng.below(600)), Some(rng.below(12))),
        };
        if let Some(n) = bytes_limit {
            layer = layer.max_hold_bytes(n);
        }
        if let Some(n) = frames_limit {
            layer = layer.max_hold_frames(n);
        }
        let (scenario, ran) = run_case(class, &chunks, layer, &request, &mut rng).await;
        let context = describe(
            &stream,
            &format!(
                "seed {seed:#x} chunking {which} ({} chunks), max_hold_bytes {bytes_limit:?}, max_hold_frames {frames_limit:?}",
                chunks.len()
            ),
        );
        // Frames up to the framer's own limit (1 MiB) are still read after a
        // small hold limit commits the stream, so every refusal is recorded
        // (see `an_oversized_frame_does_not_hide_a_later_refusal`).
        let blind = stream.max_frame >= refusal_guard::sse::SseFramer::DEFAULT_MAX_FRAME_BYTES;
        check_limited(
            class,
            blind,
            &stream.bytes,
            &scenario,
            &request,
            &ran,
            &context,
        );
    }
}

/// The invariants that hold whatever the hold limits: the client gets one
/// whole attempt, byte-exact, and records never contradict the model.
fn check_limited(
    class: Class,
    blind: bool,
    original: &Bytes,
    scenario: &Scenario,
    request: &Value,
    ran: &Ran,
    context: &str,
) {
    assert!(ran.handle.is_settled(), "{context}: handle settled");
    assert!(
        ran.records.len() <= 1,
        "{context}: at most one record: {:?}",
        ran.records
    );
    let outcome = ran.records.first().map(|r| (r.outcome, r.reason));
    match ran.seen.len() {
        1 => {
            assert!(
                ran.body == *original,
                "{context}: not recovered, so byte-identical\n  sent {}\n   got {}",
                show(original),
                show(&ran.body)
            );
            match class {
                Class::Clean { fallback, .. } => assert!(
                    outcome.is_none() || (fallback && outcome == Some((Outcome::Fallback, None))),
                    "{context}: {outcome:?}"
                ),
                Class::Partial => assert!(
                    (blind && matches!(outcome, None | Some((Outcome::Fallback, _))))
                        || outcome == Some((Outcome::Partial, None)),
                    "{context}: {outcome:?}"
                ),
                // Blind before the refusal: at most what came before it.
                Class::Empty if blind && matches!(outcome, None | Some((Outcome::Fallback, _))) => {
                }
                Class::Empty => {
                    let allowed: &[DeadReason] = match scenario {
                        Scenario::RescueOff => &[DeadReason::RescueOff, DeadReason::HoldLimit],
                        Scenario::Rescue(_) => &[DeadReason::HoldLimit],
                    };
                    assert!(
                        matches!(outcome, Some((Outcome::Dead, Some(r))) if allowed.contains(&r)),
                        "{context}: an empty refusal let through is recorded dead: {outcome:?}"
                    );
                }
            }
        }
        2 => {
            let Scenario::Rescue(continuation) = scenario else {
                panic!("{context}: a second request with rescue off");
            };
            assert_eq!(
                class,
                Class::Empty,
                "{context}: only an empty refusal is retried"
            );
            check_rescue_request(request, &ran.seen[1], context);
            let served = continuation.bytes().is_some_and(|b| ran.body == *b);
            assert!(
                served || ran.body == *original,
                "{context}: the client gets one whole attempt\n   got {}",
                show(&ran.body)
            );
            match (served, continuation.expected()) {
                (true, Ok(())) => {
                    assert_eq!(outcome, Some((Outcome::Rescued, None)), "{context}")
                }
                (false, Ok(())) => panic!("{context}: a continuation with output was dropped"),
                (_, Err(_)) => assert!(
                    matches!(outcome, Some((Outcome::Dead, Some(_)))),
                    "{context}: {outcome:?}"
                ),
            }
        }
        n => panic!("{context}: {n} requests"),
    }
}

// ---------------------------------------------------------------------------
// A connection that breaks after the bytes: they all reach the client.
// ---------------------------------------------------------------------------

/// Drives a service once and hands back its response.
async fn respond<S, B>(service: &mut S, request: http::Request<Full<Bytes>>) -> http::Response<B>
where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
{
    service
        .ready()
        .await
        .unwrap()
        .call(request)
        .await
        .expect("the guard answers")
}

/// Collects a body up to its end or its first error.
async fn collect_until_error<B>(body: B) -> (Bytes, bool)
where
    B: http_body::Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    out.extend_from_slice(&data);
                }
            }
            Err(_) => return (Bytes::from(out), true),
        }
    }
    (Bytes::from(out), false)
}

#[tokio::test]
async fn a_broken_connection_still_delivers_every_byte_then_the_error() {
    for case in 0..800u64 {
        let seed = 0xb20c_0000 + case;
        let (mut rng, stream) = seeded_stream(seed);
        let which = rng.below(4);
        let chunks = chunking(&stream.bytes, &mut rng, which);
        let sink = MemorySink::new();
        let layer = RefusalGuardLayer::new()
            .rescue(false)
            .telemetry(sink.clone());
        let upstream = Upstream::new(vec![Reply::SseThenError(chunks)]);
        let mut guard = layer.layer(upstream.service());
        let request = messages_request("claude-opus-4-7", true, "x");
        let future = async {
            let response = respond(&mut guard, post("/v1/messages", &request)).await;
            collect_until_error(response.into_body()).await
        };
        let (body, errored) = tokio::time::timeout(Duration::from_secs(10), future)
            .await
            .expect("the guard hung");
        let context = describe(&stream, &format!("seed {seed:#x} chunking {which}"));
        assert!(
            body == stream.bytes,
            "{context}: every byte before the break\n   got {}",
            show(&body)
        );
        assert!(errored, "{context}: the client sees the break");
        assert_eq!(upstream.seen().len(), 1, "{context}");
        let outcomes: Vec<_> = sink
            .records()
            .iter()
            .map(|r| (r.outcome, r.reason))
            .collect();
        let want = match stream.class() {
            Class::Clean { fallback, .. } => fallback
                .then_some((Outcome::Fallback, None))
                .into_iter()
                .collect(),
            Class::Partial => vec![(Outcome::Partial, None)],
            Class::Empty => vec![(Outcome::Dead, Some(DeadReason::RescueOff))],
        };
        assert_eq!(outcomes, want, "{context}");
    }
}

// ---------------------------------------------------------------------------
// Whole JSON bodies.
// ---------------------------------------------------------------------------

/// Writes `items` between the brackets, comma-separated, each with random
/// whitespace around it.
fn write_seq<T>(
    (open, close): (char, char),
    items: impl IntoIterator<Item = T>,
    rng: &mut Rng,
    out: &mut String,
    mut write: impl FnMut(T, &mut Rng, &mut String),
) {
    out.push(open);
    for (n, item) in items.into_iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        ws(rng, out);
        write(item, rng, out);
        ws(rng, out);
    }
    out.push(close);
}

/// Writes a JSON value with random whitespace, key order and escapes.
/// Random JSON whitespace, a quarter of the time.
fn ws(rng: &mut Rng, out: &mut String) {
    if rng.chance(25) {
        let space: &&str = rng.pick(&[" ", "\n", "\t", "\r\n  ", "   "]);
        out.push_str(space);
    }
}

fn write_json(value: &Value, rng: &mut Rng, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            for i in (1..keys.len()).rev() {
                let j = rng.below(i + 1);
                keys.swap(i, j);
            }
            write_seq(('{', '}'), keys, rng, out, |key, rng, out| {
                write_string(key, rng, out);
                ws(rng, out);
                out.push(':');
                ws(rng, out);
                write_json(&map[key.as_str()], rng, out);
            });
        }
        Value::Array(items) => {
            write_seq(('[', ']'), items, rng, out, write_json);
        }
        Value::String(s) => write_string(s, rng, out),
        other => out.push_str(&other.to_string()),
    }
}

fn write_string(s: &str, rng: &mut Rng, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if rng.chance(30) => out.push_str("\\/"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if !c.is_ascii() && rng.chance(40) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A random non-streaming message and its class by the model.
fn gen_message(rng: &mut Rng) -> (Value, Class) {
    let quiet = rng.chance(40);
    let (mut output, mut fallback) = (false, false);
    let mut content = Vec::new();
    for _ in 0..rng.below(4) {
        let mut kind = rng.below(8);
        if quiet && (kind == 3 || kind == 4) {
            kind = 0;
        }
        content.push(match kind {
            0 | 1 => {
                let (text, effect) = text_piece(rng, quiet);
                output |= effect == Effect::Output;
                json!({"type":"text","text":text})
            }
            2 => {
                let (text, _) = text_piece(rng, false);
                json!({"type":"thinking","thinking":text,"signature":"EqQBCgIYAhIM"})
            }
            3 => {
                output = true;
                json!({"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"location":"Paris"}})
            }
            4 => {
                output = true;
                json!({"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"x"}})
            }
            5 => {
                fallback = true;
                json!({"type":"fallback","from":{"model":"claude-opus-4-7"},"to":{"model":"claude-sonnet-4-5"},"trigger":{"type":"refusal","category":rng.pick(CATEGORIES)}})
            }
            6 => json!({"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"}),
            _ => json!({"type":"future_block","text":"Looks like an answer"}),
        });
    }
    let refused = rng.chance(45);
    let mut message = json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-opus-4-7",
        "content": content, "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 3},
    });
    if refused {
        message["stop_reason"] = json!("refusal");
        match rng.below(4) {
            0 => {}
            1 => message["stop_details"] = Value::Null,
            _ => {
                message["stop_details"] =
                    json!({"type":"refusal","category":rng.pick(CATEGORIES),"explanation":null})
            }
        }
    } else {
        message["stop_reason"] = json!(rng.pick(&["end_turn", "max_tokens", "tool_use"]));
    }
    let class = match (refused, output) {
        (true, true) => Class::Partial,
        (true, false) => Class::Empty,
        (false, _) => Class::Clean {
            fallback,
            output,
            errored: false,
        },
    };
    (message, class)
}

fn json_text(value: &Value, rng: &mut Rng) -> Bytes {
    let text = match rng.below(3) {
        0 => value.to_string(),
        1 => serde_json::to_string_pretty(value).unwrap(),
        _ => {
            let mut out = String::new();
            write_json(value, rng, &mut out);
            out
        }
    };
    assert_eq!(&serde_json::from_str::<Value>(&text).unwrap(), value);
    Bytes::from(text)
}

#[tokio::test]
async fn random_json_bodies_keep_the_invariants() {
    for case in 0..1500u64 {
        let seed = 0x15_0000 + case;
        let mut rng = Rng::new(seed);
        let (message, class) = gen_message(&mut rng);
        let bytes = json_text(&message, &mut rng);
        let which = rng.below(4);
        let chunks = chunking(&bytes, &mut rng, which);
        let content_type = *rng.pick(&["application/json", "application/json; charset=utf-8"]);
        let request = messages_request("claude-opus-4-7", false, "Audit my firewall rules");
        let sink = MemorySink::new();
        let mut layer = RefusalGuardLayer::new().telemetry(sink.clone());
        let scenario = if class == Class::Empty && rng.chance(25) {
            layer = layer.rescue(false);
            Scenario::RescueOff
        } else {
            Scenario::Rescue(match rng.below(8) {
                0 => Continuation::Status500,
                1 => Continuation::Fail,
                _ => {
                    let (answer, answer_class) = gen_message(&mut rng);
                    Continuation::Json(json_text(&answer, &mut rng), answer_class)
                }
            })
        };
        let mut replies = vec![Reply::raw(200, content_type, chunks)];
        if let Scenario::Rescue(c) = &scenario {
            replies.push(c.reply(&mut rng));
        }
        let ran = run(layer, &sink, replies, request.clone()).await;
        let context = format!(
            "seed {seed:#x} chunking {which}\n  class {class:?}\n  body {}",
            show(&bytes)
        );
        // Everything in a whole body is known before it is served.
        assert_eq!(
            ran.extension.as_ref().map(|r| r.outcome),
            ran.records.first().map(|r| r.outcome),
            "{context}: the typed refusal is in the extensions"
        );
        let ran = Ran {
            extension: None,
            ..ran
        };
        match class {
            Class::Empty => {
                // `check` wants the extension for an empty refusal.
                let ran = Ran {
                    extension: ran.handle.get(),
                    ..ran
                };
                check(class, &bytes, &scenario, &request, &ran, &context);
            }
            _ => check(class, &bytes, &scenario, &request, &ran, &context),
        }
    }
}

// ---------------------------------------------------------------------------
// Requests: nothing rewrites them, so they go upstream byte for byte.
// ---------------------------------------------------------------------------

const UNICODE: &[&str] = &[
    "héllo wörld",
    "日本語のテキスト",
    "emoji \u{1f600}\u{1f3f3}\u{fe0f}\u{200d}\u{1f308}",
    "quote \" backslash \\ slash / tab \t newline \n",
    "\u{0}\u{1f}\u{7f}",
    "",
    "   ",
    "\u{2028}\u{2029}",
];

fn gen_request(rng: &mut Rng, stream: bool) -> Value {
    let mut messages = Vec::new();
    for turn in 0..(1 + rng.below(3)) * 2 - 1 {
        let role = if turn % 2 == 0 { "user" } else { "assistant" };
        // The API takes no empty message (nor an empty text block).
        let text = match *rng.pick(UNICODE) {
            "" => "x",
            text => text,
        };
        let content = if rng.chance(50) {
            json!(text)
        } else {
            json!([{"type":"text","text":text}])
        };
        messages.push(json!({"role": role, "content": content}));
    }
    let mut body = json!({
        "model": "claude-opus-4-7",
        "max_tokens": 1 + rng.below(64000),
        "stream": stream,
        "messages": messages,
    });
    if rng.chance(60) {
        body["system"] = json!(rng.pick(UNICODE));
    }
    if rng.chance(30) {
        body["temperature"] = json!(0.25);
        body["metadata"] = json!({"user_id": rng.pick(UNICODE)});
    }
    if rng.chance(30) {
        body["tools"] = json!([{"name":"get_weather","description":rng.pick(UNICODE),"input_schema":{"type":"object","properties":{}}}]);
    }
    if rng.chance(20) {
        body["fallbacks"] = json!([{"model":"claude-sonnet-4-5"}]);
    }
    if rng.chance(20) {
        body["thinking"] = json!({"type":"enabled","budget_tokens":1024});
    }
    body
}

#[tokio::test]
async fn requests_go_upstream_byte_for_byte() {
    for case in 0..600u64 {
        let seed = 0x2e9_0000 + case;
        let mut rng = Rng::new(seed);
        let stream = rng.chance(50);
        let value = gen_request(&mut rng, stream);
        let bytes = json_text(&value, &mut rng);
        let mut builder = http::Request::post("https://api.anthropic.com/v1/messages")
            .header("content-type", "application/json")
            .header("x-api-key", "sk-test");
        if rng.chance(70) {
            builder = builder.header("content-length", bytes.len());
        }
        // The API takes `fallbacks` only with its beta.
        if value.get("fallbacks").is_some() {
            builder = builder.header("anthropic-beta", "server-side-fallback-2026-07-01");
        }
        let named = rng.chance(30);
        if named {
            builder = builder.header("x-refusal-guard-conversation", "conv-7");
        }
        let request = builder.body(Full::new(bytes.clone())).unwrap();
        let answer = if stream {
            Reply::sse(&anthropic_stream(&support::events::text_answer(
                "claude-opus-4-7",
                "Fine.",
            )))
        } else {
            Reply::Json(Bytes::from(
                json!({"id":"msg_01","type":"message","role":"assistant","model":"claude-opus-4-7","content":[{"type":"text","text":"Fine."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}).to_string(),
            ))
        };
        let upstream = Upstream::new(vec![answer]);
        let mut guard = RefusalGuardLayer::new().layer(upstream.service());
        tokio::time::timeout(Duration::from_secs(10), drive(&mut guard, request))
            .await
            .expect("the guard hung");
        let seen = upstream.seen();
        let context = format!("seed {seed:#x}\n  body {}", show(&bytes));
        assert_eq!(seen.len(), 1, "{context}");
        assert!(
            seen[0].body == bytes,
            "{context}: the request body is forwarded byte for byte\n   got {}",
            show(&seen[0].body)
        );
        assert!(
            seen[0]
                .headers
                .get("x-refusal-guard-conversation")
                .is_none(),
            "{context}: the guard's own header never goes upstream"
        );
    }
}

// ---------------------------------------------------------------------------
// Smallest cases of what the properties found.
// ---------------------------------------------------------------------------

/// A connection that breaks right after a refusal whose blank line is a lone
/// CR (the framer waits for a possible LF): the refusal was complete, so it
/// is an empty refusal like any other, and the ladder applies. It used to be
/// judged only after serving (the hold did not flush the framer on a body
/// error), so it was let through and logged as `hold_limit`.
#[tokio::test]
async fn a_refusal_right_before_a_broken_connection_is_still_recovered() {
    let refusal = Bytes::from_static(
        b"event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-4-7\"}}\r\n\r\n\
event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"refusal\"}}\r\n\r",
    );
    let answer = anthropic_stream(&support::events::text_answer("claude-opus-4-7", "Here."));
    let sink = MemorySink::new();
    let ran = run(
        RefusalGuardLayer::new().telemetry(sink.clone()),
        &sink,
        vec![Reply::SseThenError(vec![refusal]), Reply::sse(&answer)],
        messages_request("claude-opus-4-7", true, "x"),
    )
    .await;
    assert_eq!(ran.body, answer);
    assert_eq!(ran.seen.len(), 2);
    assert_eq!(ran.records.len(), 1);
    assert_eq!(ran.records[0].outcome, Outcome::Rescued);
}

/// A frame longer than `max_hold_bytes` makes the guard commit, and the
/// stream is still read frame by frame afterwards, so a later refusal is
/// recorded (once, as dead for the hold limit). This once went unrecorded:
/// the watch stopped reading after the first frame over the hold limit.
#[tokio::test]
async fn an_oversized_frame_does_not_hide_a_later_refusal() {
    let refusal = anthropic_stream(&support::events::think_then_refuse(
        "claude-opus-4-7",
        "cyber",
    ));
    let sink = MemorySink::new();
    let ran = run(
        RefusalGuardLayer::new()
            .rescue(false)
            .max_hold_bytes(64)
            .telemetry(sink.clone()),
        &sink,
        vec![Reply::sse(&refusal)],
        messages_request("claude-opus-4-7", true, "x"),
    )
    .await;
    assert_eq!(ran.body, refusal, "never lost");
    let outcomes: Vec<_> = ran.records.iter().map(|r| (r.outcome, r.reason)).collect();
    assert_eq!(outcomes, [(Outcome::Dead, Some(DeadReason::HoldLimit))]);
}
