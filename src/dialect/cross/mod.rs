//! Which reader and writer translate a fallback between two wire APIs:
//! the client's request read with its API's reader and written with the
//! target's writer, the target's answer read back and written in the
//! client's API, whole or as a stream. The shared form is `translate`; each
//! provider's reader and writer live in its folder.

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use super::anthropic::translate as anthropic;
use super::gemini::translate as gemini;
use super::openai::translate::{chat as openai_chat, responses as openai_responses};
use super::translate::{
    Event, Part, Prompt, ReadStream, Reply, ToolChoice, Untranslatable, WriteStream,
};
use crate::refusal::WireApi;
use crate::sse::{Frame, SseFramer};

mod body;
#[cfg(test)]
mod tests;

pub(crate) use body::Translated;

/// An API a translated fallback can serve a client in: its request is read,
/// and the fallback's answer written in it.
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

/// An API a translated fallback can be sent in: its request is written, and its
/// answer read. A fallback to OpenAI speaks Chat Completions (see `fallback_api`), so
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
                "openai_responses is a client's API only: a fallback to OpenAI is sent in Chat Completions",
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
) -> Result<Prompt, Untranslatable> {
    let mut prompt = match ClientApi::of(api)? {
        ClientApi::Anthropic => anthropic::read_request(body)?,
        ClientApi::Chat => openai_chat::read_request(body)?,
        ClientApi::Gemini => gemini::read_request(body)?,
        ClientApi::Responses => openai_responses::read_request(body)?,
    };
    prompt.stream = stream;
    prompt.check_turns()?;
    Ok(prompt)
}

/// Writes a request of `api` for `model`: its path (and query) and body.
pub(crate) fn write_request(
    api: WireApi,
    prompt: &Prompt,
    model: &str,
) -> Result<(String, Value), Untranslatable> {
    let target = TargetApi::of(api)?;
    tool_names_fit(api, prompt)?;
    match target {
        TargetApi::Anthropic => Ok((
            "/v1/messages".to_owned(),
            anthropic::write_request(prompt, model)?,
        )),
        TargetApi::Chat => Ok((
            "/v1/chat/completions".to_owned(),
            openai_chat::write_request(prompt, model)?,
        )),
        TargetApi::Gemini => Ok((
            gemini::path(model, prompt.stream),
            gemini::write_request(prompt)?,
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
fn tool_names_fit(api: WireApi, prompt: &Prompt) -> Result<(), Untranslatable> {
    let defined = prompt.tools.iter().map(|t| t.name.as_str());
    let used = prompt
        .turns
        .iter()
        .flat_map(|t| &t.parts)
        .filter_map(|p| match p {
            Part::ToolCall { name, .. } | Part::ToolResult { name, .. } => Some(name.as_str()),
            _ => None,
        });
    let chosen = match &prompt.tool_choice {
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
    /// The translation of a fallback's answer from `from` to `to`; `limit`
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

/// The headers of a fallback to another provider's API: the content type and the
/// operator's key as that API takes it (marked sensitive, so that no log
/// of headers shows it). Nothing of the client's request goes along.
pub(crate) fn fallback_headers(api: WireApi, key: &str) -> Option<http::HeaderMap> {
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
