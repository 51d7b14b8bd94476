//! Which reader and writer translate a fallback between two wire APIs:
//! the client's request read with its API's reader and written with the
//! target's writer, the target's answer read back and written in the
//! client's API, whole or as a stream. The shared form is `translate`; each
//! provider's reader and writer live in its folder.

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::HeaderMap;
use serde_json::Value;

use super::facts::{ClientSide, TargetSide};
use super::registry;
use super::translate::{
    Event, Part, Prompt, ReadStream, Reply, ToolChoice, Untranslatable, WriteStream,
};
use crate::refusal::WireApi;
use crate::sse::{Frame, SseFramer};

mod body;
#[cfg(test)]
mod tests;

pub(crate) use body::Translated;

fn client(api: WireApi) -> Result<&'static ClientSide, Untranslatable> {
    registry::api(api)
        .translation
        .client
        .as_ref()
        .ok_or_else(|| Untranslatable::new(format!("{api} has no translation")))
}

fn target(api: WireApi) -> Result<&'static TargetSide, Untranslatable> {
    let translation = &registry::api(api).translation;
    translation
        .target
        .as_ref()
        .ok_or_else(|| match translation.no_target {
            Some(why) => Untranslatable::new(why),
            None => Untranslatable::new(format!("{api} has no translation")),
        })
}

/// Reads a request of `api`. `stream` is whether it asks for a stream
/// (Gemini says so in the path, not the body).
pub(crate) fn read_request(
    api: WireApi,
    body: &Value,
    stream: bool,
) -> Result<Prompt, Untranslatable> {
    let mut prompt = (client(api)?.read_request)(body)?;
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
    let target = target(api)?;
    tool_names_fit(api, target, prompt)?;
    (target.write_request)(prompt, model)
}

/// Every tool the conversation names (defined, called, answered, chosen)
/// has a name `api` takes: a renamed tool would not be the client's.
fn tool_names_fit(
    api: WireApi,
    target: &TargetSide,
    prompt: &Prompt,
) -> Result<(), Untranslatable> {
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
        .find(|n| !(target.takes_tool_name)(n))
    {
        Some(name) => Err(Untranslatable::new(format!(
            "tool name `{name}` is not one {api} takes"
        ))),
        None => Ok(()),
    }
}

/// Reads a whole answer of `api`.
pub(crate) fn read_reply(api: WireApi, body: &Value) -> Result<Reply, Untranslatable> {
    (target(api)?.read_reply)(body)
}

/// Writes a whole answer of `api`.
pub(crate) fn write_reply(api: WireApi, reply: &Reply) -> Result<Value, Untranslatable> {
    (client(api)?.write_reply)(reply)
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
        let reader = (target(from)?.stream_reader)();
        let writer = (client(to)?.stream_writer)(include_usage);
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
            target(from)?;
            client(to)?;
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

/// The headers of a fallback to another provider's API: the content type,
/// the API's own, and the operator's key as that API takes it (marked
/// sensitive, so that no log of headers shows it). Nothing of the client's
/// request goes along.
pub(crate) fn fallback_headers(api: WireApi, key: &str) -> Option<HeaderMap> {
    let target = target(api).ok()?;
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in target.headers {
        headers.insert(*name, HeaderValue::from_static(value));
    }
    let (name, write) = target.key_header;
    let mut value = HeaderValue::from_str(&write(key)).ok()?;
    value.set_sensitive(true);
    headers.insert(HeaderName::from_static(name), value);
    Some(headers)
}
