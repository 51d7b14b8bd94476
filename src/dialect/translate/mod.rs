//! Translation between wire APIs, for a fallback hop that crosses providers.
//!
//! Every API has one reader and one writer per direction, all through a
//! small shared form: a request becomes a [`Conversation`], a whole answer a
//! [`Reply`], a streamed answer a sequence of [`Event`]s. A hop from API A to
//! API B reads the client's request with A's reader and writes it with B's
//! writer, then reads B's answer with B's reader and writes it with A's
//! writer: each API's JSON stays in its own file, and adding an API adds one
//! file rather than one per pair. OpenAI Responses is a client's API only
//! (a hop to OpenAI is sent in Chat Completions): it has a request reader
//! and answer writers, and no request writer or answer readers.
//!
//! What the shared form carries: the system prompt, user and assistant turns
//! of text, images, tool calls and tool results, tool definitions and the
//! tool choice, `max_tokens`, stop sequences, temperature and top-p.
//! Thinking is dropped (it is the serving model's own). A request field the
//! form does not carry, or a value the target cannot take, is an
//! [`Untranslatable`] naming it: the hop is not sent.
//!
//! A refusal translates too: the target's refusal (Anthropic `stop_reason:
//! "refusal"`, OpenAI `finish_reason: "content_filter"` or a `refusal`
//! field, a Gemini block or safety finish) becomes [`Stop::Refusal`], which
//! every writer expresses in its own API's refusal form, so the guard judges
//! the translated answer as it judges any other.

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use crate::refusal::{Usage, WireApi};
use crate::sse::{Frame, SseFramer};

pub(crate) mod anthropic;
pub(crate) mod gemini;
pub(crate) mod openai_chat;
pub(crate) mod openai_responses;

#[cfg(test)]
mod tests;

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
pub(crate) struct Conversation {
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

impl Conversation {
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
pub(crate) trait ReadStream: Send {
    /// The events of one frame.
    fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), Untranslatable>;
    /// The events the end of the input implies (Gemini streams end without
    /// a closing event).
    fn end(&mut self, _out: &mut Vec<Event>) {}
}

/// Writes events as one API's streamed answer.
pub(crate) trait WriteStream: Send {
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

/// An API a translated hop can serve a client in: its request is read,
/// and the hop's answer written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientApi {
    Anthropic,
    Chat,
    Gemini,
    Responses,
}

impl ClientApi {
    fn of(api: WireApi) -> Result<Self, Untranslatable> {
        match api {
            WireApi::AnthropicMessages => Ok(ClientApi::Anthropic),
            WireApi::OpenAiChatCompletions => Ok(ClientApi::Chat),
            WireApi::GeminiGenerateContent => Ok(ClientApi::Gemini),
            WireApi::OpenAiResponses => Ok(ClientApi::Responses),
            other => Err(Untranslatable::new(format!("{other} has no translation"))),
        }
    }
}

/// An API a translated hop can be sent in: its request is written, and its
/// answer read. A hop to OpenAI speaks Chat Completions (see `hop_api`), so
/// Responses is a client's API only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TargetApi {
    Anthropic,
    Chat,
    Gemini,
}

impl TargetApi {
    fn of(api: WireApi) -> Result<Self, Untranslatable> {
        match api {
            WireApi::AnthropicMessages => Ok(TargetApi::Anthropic),
            WireApi::OpenAiChatCompletions => Ok(TargetApi::Chat),
            WireApi::GeminiGenerateContent => Ok(TargetApi::Gemini),
            WireApi::OpenAiResponses => Err(Untranslatable::new(
                "openai_responses is a client's API only: a hop to OpenAI is sent in Chat Completions",
            )),
            other => Err(Untranslatable::new(format!("{other} has no translation"))),
        }
    }
}

/// Reads a request of `api`. `stream` is whether it asks for a stream
/// (Gemini says so in the path, not the body).
pub(crate) fn read_request(
    api: WireApi,
    body: &Value,
    stream: bool,
) -> Result<Conversation, Untranslatable> {
    let mut conversation = match ClientApi::of(api)? {
        ClientApi::Anthropic => anthropic::read_request(body)?,
        ClientApi::Chat => openai_chat::read_request(body)?,
        ClientApi::Gemini => gemini::read_request(body)?,
        ClientApi::Responses => openai_responses::read_request(body)?,
    };
    conversation.stream = stream;
    conversation.check_turns()?;
    Ok(conversation)
}

/// Writes a request of `api` for `model`: its path (and query) and body.
pub(crate) fn write_request(
    api: WireApi,
    conversation: &Conversation,
    model: &str,
) -> Result<(String, Value), Untranslatable> {
    let target = TargetApi::of(api)?;
    tool_names_fit(api, conversation)?;
    match target {
        TargetApi::Anthropic => Ok((
            "/v1/messages".to_owned(),
            anthropic::write_request(conversation, model)?,
        )),
        TargetApi::Chat => Ok((
            "/v1/chat/completions".to_owned(),
            openai_chat::write_request(conversation, model)?,
        )),
        TargetApi::Gemini => Ok((
            gemini::path(model, conversation.stream),
            gemini::write_request(conversation)?,
        )),
    }
}

/// Whether `name` is a tool name `api` takes. Anthropic and Chat:
/// `^[a-zA-Z0-9_-]{1,64}$` (Messages API `tools[].name`, Chat
/// `function.name`); Gemini: a letter or `_` first, then letters, digits,
/// `_`, `.`, `:` or `-`, at most 64 (`FunctionDeclaration.name`).
fn tool_name_fits(api: WireApi, name: &str) -> bool {
    let Some(first) = name.bytes().next() else {
        return false;
    };
    let gemini = api == WireApi::GeminiGenerateContent;
    let allowed = |b: u8| {
        b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (gemini && matches!(b, b'.' | b':'))
    };
    name.len() <= 64
        && name.bytes().all(allowed)
        && (!gemini || first.is_ascii_alphabetic() || first == b'_')
}

/// Every tool the conversation names (defined, called, answered, chosen)
/// has a name `api` takes: a renamed tool would not be the client's.
fn tool_names_fit(api: WireApi, conversation: &Conversation) -> Result<(), Untranslatable> {
    let defined = conversation.tools.iter().map(|t| t.name.as_str());
    let used = conversation
        .turns
        .iter()
        .flat_map(|t| &t.parts)
        .filter_map(|p| match p {
            Part::ToolCall { name, .. } | Part::ToolResult { name, .. } => Some(name.as_str()),
            _ => None,
        });
    let chosen = match &conversation.tool_choice {
        Some(ToolChoice::Named(name)) => Some(name.as_str()),
        _ => None,
    };
    match defined
        .chain(used)
        .chain(chosen)
        .find(|n| !tool_name_fits(api, n))
    {
        Some(name) => Err(Untranslatable::new(format!(
            "tool name `{name}` is not one {api} takes"
        ))),
        None => Ok(()),
    }
}

/// Reads a whole answer of `api`.
pub(crate) fn read_reply(api: WireApi, body: &Value) -> Result<Reply, Untranslatable> {
    match TargetApi::of(api)? {
        TargetApi::Anthropic => anthropic::read_reply(body),
        TargetApi::Chat => openai_chat::read_reply(body),
        TargetApi::Gemini => gemini::read_reply(body),
    }
}

/// Writes a whole answer of `api`.
pub(crate) fn write_reply(api: WireApi, reply: &Reply) -> Result<Value, Untranslatable> {
    match ClientApi::of(api)? {
        ClientApi::Anthropic => Ok(anthropic::write_reply(reply)),
        ClientApi::Chat => Ok(openai_chat::write_reply(reply)),
        ClientApi::Gemini => Ok(gemini::write_reply(reply)),
        ClientApi::Responses => openai_responses::write_reply(reply),
    }
}

/// A whole answer of `from` rewritten as one of `to`.
pub(crate) fn translate_reply(
    from: WireApi,
    to: WireApi,
    body: &[u8],
) -> Result<Bytes, Untranslatable> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| Untranslatable::new("the answer is not JSON"))?;
    let reply = read_reply(from, &value)?;
    Ok(Bytes::from(write_reply(to, &reply)?.to_string()))
}

/// Rewrites a streamed answer of one API as one of another, frame by frame
/// as it arrives: every complete frame read is written out at once, and
/// only an incomplete frame (bounded by the framer) is held.
pub(crate) struct StreamTranslator {
    framer: SseFramer,
    reader: Box<dyn ReadStream>,
    writer: Box<dyn WriteStream>,
    events: Vec<Event>,
    done: bool,
}

impl std::fmt::Debug for StreamTranslator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamTranslator")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl StreamTranslator {
    /// A translator from the target's stream (`from`) to the client's
    /// (`to`). `include_usage`: the client asked for usage in its stream
    /// (Chat's `stream_options.include_usage`).
    pub(crate) fn new(
        from: WireApi,
        to: WireApi,
        include_usage: bool,
    ) -> Result<Self, Untranslatable> {
        let reader: Box<dyn ReadStream> = match TargetApi::of(from)? {
            TargetApi::Anthropic => Box::<anthropic::StreamReader>::default(),
            TargetApi::Chat => Box::<openai_chat::StreamReader>::default(),
            TargetApi::Gemini => Box::<gemini::StreamReader>::default(),
        };
        let writer: Box<dyn WriteStream> = match ClientApi::of(to)? {
            ClientApi::Anthropic => Box::<anthropic::StreamWriter>::default(),
            ClientApi::Chat => Box::new(openai_chat::StreamWriter::new(include_usage)),
            ClientApi::Gemini => Box::<gemini::StreamWriter>::default(),
            ClientApi::Responses => Box::new(openai_responses::StreamWriter::new()),
        };
        Ok(StreamTranslator {
            framer: SseFramer::new(),
            reader,
            writer,
            events: Vec::new(),
            done: false,
        })
    }

    /// The translated bytes of every frame this chunk completes.
    pub(crate) fn push(&mut self, chunk: Bytes) -> Result<Bytes, Untranslatable> {
        self.framer
            .push(chunk)
            .map_err(|_| Untranslatable::new("a stream frame is too large"))?;
        let mut out = BytesMut::new();
        while let Some(frame) = self.framer.next_frame() {
            self.translate(&frame, &mut out)?;
        }
        Ok(out.freeze())
    }

    /// The translated bytes of the end of the input. An answer that never
    /// said how it ended was cut, which is an error, never a success.
    pub(crate) fn finish(&mut self) -> Result<Bytes, Untranslatable> {
        let mut out = BytesMut::new();
        while let Some(frame) = self.framer.finish() {
            self.translate(&frame, &mut out)?;
        }
        if !self.done {
            self.reader.end(&mut self.events);
            self.write_events(&mut out)?;
        }
        if !self.done {
            return Err(Untranslatable::new(
                "the stream ended before the answer did",
            ));
        }
        Ok(out.freeze())
    }

    fn translate(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), Untranslatable> {
        if self.done {
            return Ok(());
        }
        self.reader.frame(frame, &mut self.events)?;
        self.write_events(out)
    }

    fn write_events(&mut self, out: &mut BytesMut) -> Result<(), Untranslatable> {
        for event in self.events.drain(..) {
            if self.done {
                break;
            }
            self.done = event == Event::Done;
            self.writer.event(event, out)?;
        }
        self.events.clear();
        Ok(())
    }
}

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

/// An answer's body rewritten from the target's API into the client's as
/// it arrives: a stream frame by frame, a whole JSON body once it is all
/// in (bounded).
#[derive(Debug)]
pub(crate) enum BodyTranslation {
    Stream(Box<StreamTranslator>),
    Whole {
        from: WireApi,
        to: WireApi,
        held: BytesMut,
        limit: usize,
    },
}

impl BodyTranslation {
    /// The translation of a hop's answer from `from` to `to`; `limit`
    /// bounds a whole body held for translation.
    pub(crate) fn new(
        from: WireApi,
        to: WireApi,
        streaming: bool,
        include_usage: bool,
        limit: usize,
    ) -> Result<Self, Untranslatable> {
        Ok(if streaming {
            BodyTranslation::Stream(Box::new(StreamTranslator::new(from, to, include_usage)?))
        } else {
            TargetApi::of(from)?;
            ClientApi::of(to)?;
            BodyTranslation::Whole {
                from,
                to,
                held: BytesMut::new(),
                limit,
            }
        })
    }

    /// The translated bytes this chunk yields (often none for a whole body).
    pub(crate) fn push(&mut self, chunk: Bytes) -> Result<Bytes, Untranslatable> {
        match self {
            BodyTranslation::Stream(stream) => stream.push(chunk),
            BodyTranslation::Whole { held, limit, .. } => {
                if held.len() + chunk.len() > *limit {
                    return Err(Untranslatable::new("the answer is too large to translate"));
                }
                held.extend_from_slice(&chunk);
                Ok(Bytes::new())
            }
        }
    }

    /// The translated bytes of the end of the body.
    pub(crate) fn finish(&mut self) -> Result<Bytes, Untranslatable> {
        match self {
            BodyTranslation::Stream(stream) => stream.finish(),
            BodyTranslation::Whole { from, to, held, .. } => {
                translate_reply(*from, *to, &std::mem::take(held))
            }
        }
    }
}

/// The headers of a hop to another provider's API: the content type and the
/// operator's key as that API takes it (marked sensitive, so that no log
/// of headers shows it). Nothing of the client's request goes along.
pub(crate) fn hop_headers(api: WireApi, key: &str) -> Option<http::HeaderMap> {
    use http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
    let mut headers = http::HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let (name, value) = match api {
        WireApi::AnthropicMessages => {
            headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
            (http::HeaderName::from_static("x-api-key"), key.to_owned())
        }
        WireApi::OpenAiChatCompletions => (AUTHORIZATION, format!("Bearer {key}")),
        WireApi::GeminiGenerateContent => (
            http::HeaderName::from_static("x-goog-api-key"),
            key.to_owned(),
        ),
        _ => return None,
    };
    let mut value = HeaderValue::from_str(&value).ok()?;
    value.set_sensitive(true);
    headers.insert(name, value);
    Some(headers)
}
