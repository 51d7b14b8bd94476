//! The shared form of a translated request and answer, for a fallback
//! that crosses providers (the providers' readers and writers live in their
//! folders; `cross` picks them for a pair of APIs).
//!
//! Every API has one reader and one writer per direction, all through a
//! small shared form: a request becomes a [`Prompt`], a whole answer a
//! [`Reply`], a streamed answer a sequence of [`Event`]s. A fallback from API A to
//! API B reads the client's request with A's reader and writes it with B's
//! writer, then reads B's answer with B's reader and writes it with A's
//! writer: each API's JSON stays in its own file, and adding an API adds one
//! file rather than one per pair. OpenAI Responses is a client's API only
//! (a fallback to OpenAI is sent in Chat Completions): it has a request reader
//! and answer writers, and no request writer or answer readers.
//!
//! What the shared form carries: the system prompt, user and assistant turns
//! of text, images, tool calls and tool results, tool definitions and the
//! tool choice, `max_tokens`, stop sequences, temperature and top-p.
//! Thinking is dropped (it is the serving model's own). A request field the
//! form does not carry, or a value the target cannot take, is an
//! [`Untranslatable`] naming it: the fallback is not sent.
//!
//! A refusal translates too: the target's refusal (Anthropic `stop_reason:
//! "refusal"`, OpenAI `finish_reason: "content_filter"` or a `refusal`
//! field, a Gemini block or safety finish) becomes [`Stop::Refusal`], which
//! every writer expresses in its own API's refusal form, so the guard judges
//! the translated answer as it judges any other.

use bytes::BytesMut;
use serde_json::Value;

use crate::refusal::Usage;
use crate::sse::Frame;

/// A request the target API cannot express faithfully, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Untranslatable(pub(crate) String);

impl Untranslatable {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        Untranslatable(reason.into())
    }

    /// A request field the shared form does not carry.
    pub(crate) fn field(api: &str, key: &str) -> Self {
        Untranslatable(format!("{api} request field `{key}` has no translation"))
    }
}

impl std::fmt::Display for Untranslatable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Untranslatable {}

/// Who speaks a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    User,
    Assistant,
}

/// Where an image's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ImageSource {
    Base64 { media_type: String, data: String },
    Url(String),
}

/// One piece of a turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Part {
    Text(String),
    Image(ImageSource),
    /// A call the assistant made; `arguments` is the JSON text of its input.
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    /// The answer to the call `id` (named `name`, which Gemini needs).
    ToolResult {
        id: String,
        name: String,
        content: Vec<Part>,
        is_error: bool,
    },
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Turn {
    pub(crate) role: Role,
    pub(crate) parts: Vec<Part>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tool {
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    /// The JSON Schema of its input.
    pub(crate) parameters: Value,
}

impl Tool {
    /// The tool `definition` declares: its `name`, its `description`, and
    /// the input schema in its member `schema` (`default` when that is
    /// absent or null).
    pub(crate) fn read(
        definition: &Value,
        schema: &str,
        default: fn() -> Value,
    ) -> Result<Tool, Untranslatable> {
        Ok(Tool {
            name: definition
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| Untranslatable::new("a tool has no name"))?
                .to_owned(),
            description: definition
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            parameters: definition
                .get(schema)
                .filter(|p| !p.is_null())
                .cloned()
                .unwrap_or_else(default),
        })
    }
}

/// A request's `tools`, each read by `read`; none when absent or null.
pub(crate) fn read_tools(
    tools: Option<&Value>,
    read: impl Fn(&Value) -> Result<Tool, Untranslatable>,
) -> Result<Vec<Tool>, Untranslatable> {
    let Some(tools) = tools.filter(|t| !t.is_null()) else {
        return Ok(Vec::new());
    };
    let tools = tools
        .as_array()
        .ok_or_else(|| Untranslatable::new("`tools` is not a list"))?;
    tools.iter().map(read).collect()
}

/// Which tools the model must or may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToolChoice {
    Auto,
    /// Some tool, the model picks which.
    Any,
    None,
    /// This tool.
    Named(String),
}

/// A request in the shared form.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Prompt {
    pub(crate) system: Option<String>,
    pub(crate) turns: Vec<Turn>,
    pub(crate) tools: Vec<Tool>,
    pub(crate) tool_choice: Option<ToolChoice>,
    /// `Some(false)`: at most one tool call per turn.
    pub(crate) parallel_tool_calls: Option<bool>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) stop: Vec<String>,
    pub(crate) temperature: Option<f64>,
    pub(crate) top_p: Option<f64>,
    pub(crate) top_k: Option<u64>,
    pub(crate) stream: bool,
}

impl Prompt {
    /// Adds a part to the conversation, joining it to the last turn when
    /// the role is the same (Anthropic and Gemini take one turn per role
    /// change; Chat's tool messages become parts of one user turn).
    pub(crate) fn push(&mut self, role: Role, part: Part) {
        match self.turns.last_mut() {
            Some(turn) if turn.role == role => turn.parts.push(part),
            _ => self.turns.push(Turn {
                role,
                parts: vec![part],
            }),
        }
    }

    /// The name of the call `id` made earlier in the conversation.
    pub(crate) fn call_name(&self, id: &str) -> Option<String> {
        self.turns
            .iter()
            .flat_map(|t| &t.parts)
            .find_map(|p| match p {
                Part::ToolCall { id: call, name, .. } if call == id => Some(name.clone()),
                _ => None,
            })
    }

    /// Fails when a request must start with a user turn and this one does
    /// not, or carries no turn at all.
    pub(crate) fn check_turns(&self) -> Result<(), Untranslatable> {
        match self.turns.first() {
            Some(turn) if turn.role == Role::User => Ok(()),
            Some(_) => Err(Untranslatable::new(
                "the conversation starts with an assistant turn",
            )),
            None => Err(Untranslatable::new("the conversation has no turns")),
        }
    }
}

/// A refusal, as the API that refused named it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RefusalStop {
    pub(crate) category: Option<String>,
    pub(crate) explanation: Option<String>,
}

/// Why an answer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    EndTurn,
    MaxTokens,
    /// A stop sequence matched (which one, when the API says).
    Sequence(Option<String>),
    ToolUse,
    Refusal(RefusalStop),
}

/// A whole answer in the shared form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    pub(crate) id: Option<String>,
    pub(crate) model: Option<String>,
    /// Text and tool calls, in order.
    pub(crate) parts: Vec<Part>,
    pub(crate) stop: Stop,
    pub(crate) usage: Usage,
}

/// One step of a streamed answer in the shared form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// The answer began (id and model, when the API says them first).
    Start {
        id: Option<String>,
        model: Option<String>,
    },
    Text(String),
    /// A tool call began; its argument fragments follow.
    ToolStart {
        id: String,
        name: String,
    },
    /// A fragment of the current tool call's JSON arguments.
    ToolArgs(String),
    /// How the answer ended (the end itself is [`Event::Done`]).
    Stop(Stop),
    /// The counts so far: each replaces the last, field by field.
    Usage(Usage),
    /// A provider error inside the stream.
    Error(String),
    /// The stream is complete.
    Done,
}

/// Reads one API's streamed answer into events.
pub(crate) trait ReadStream: Send + Sync {
    /// The events of one frame.
    fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), Untranslatable>;
    /// The events the end of the input implies (Gemini streams end without
    /// a closing event).
    fn end(&mut self, _out: &mut Vec<Event>) {}
}

/// Writes events as one API's streamed answer.
pub(crate) trait WriteStream: Send + Sync {
    /// Appends the SSE bytes of one event.
    fn event(&mut self, event: Event, out: &mut BytesMut) -> Result<(), Untranslatable>;
}

/// Updates kept counts with later ones, field by field.
pub(crate) fn merge_usage(kept: &mut Usage, later: &Usage) {
    let fields = [
        (&mut kept.input_tokens, later.input_tokens),
        (&mut kept.output_tokens, later.output_tokens),
        (&mut kept.cache_read_tokens, later.cache_read_tokens),
        (&mut kept.cache_write_tokens, later.cache_write_tokens),
    ];
    for (kept, later) in fields {
        if later.is_some() {
            *kept = later;
        }
    }
}

/// One SSE frame: an optional `event:` line and one `data:` line.
pub(crate) fn sse(out: &mut BytesMut, event: Option<&str>, data: &Value) {
    if let Some(name) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\n");
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// The most of a tool call's arguments, or of a refusal's text, a
/// translator keeps while it waits for the rest.
pub(crate) const MAX_HELD_BYTES: usize = 1 << 20;

/// Splits a `data:` URL into its media type and base64 data.
pub(crate) fn parse_data_url(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("data:")?;
    let (head, data) = rest.split_once(',')?;
    let media_type = head.strip_suffix(";base64")?;
    Some((media_type.to_owned(), data.to_owned()))
}

/// Text of a tool result's parts, for APIs whose tool results are text.
pub(crate) fn result_text(content: &[Part]) -> Result<String, Untranslatable> {
    let mut text = String::new();
    for part in content {
        match part {
            Part::Text(piece) => text.push_str(piece),
            _ => return Err(Untranslatable::new("a tool result carries an image")),
        }
    }
    Ok(text)
}

/// A number field, failing on a value of another type.
pub(crate) fn number(body: &Value, key: &str) -> Result<Option<f64>, Untranslatable> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_f64()
            .map(Some)
            .ok_or_else(|| Untranslatable::new(format!("`{key}` is not a number"))),
    }
}

/// A non-negative integer field, failing on a value of another type.
pub(crate) fn integer(body: &Value, key: &str) -> Result<Option<u64>, Untranslatable> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| Untranslatable::new(format!("`{key}` is not a count"))),
    }
}

/// Stop sequences given as a string or a list of strings.
pub(crate) fn strings(value: Option<&Value>) -> Result<Vec<String>, Untranslatable> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(one)) => Ok(vec![one.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| Untranslatable::new("a stop sequence is not a string"))
            })
            .collect(),
        Some(_) => Err(Untranslatable::new("stop sequences are not strings")),
    }
}

/// Fails on any top-level field of `body` that is neither read by the
/// reader (`read`) nor safe to drop (`dropped`): a field nobody translates
/// would silently change what the request asks.
pub(crate) fn only_known_fields(
    api: &str,
    body: &Value,
    read: &[&str],
    dropped: &[&str],
) -> Result<(), Untranslatable> {
    let Some(object) = body.as_object() else {
        return Err(Untranslatable::new("the request is not a JSON object"));
    };
    for (key, value) in object {
        if value.is_null() || read.contains(&key.as_str()) || dropped.contains(&key.as_str()) {
            continue;
        }
        return Err(Untranslatable::field(api, key));
    }
    Ok(())
}
