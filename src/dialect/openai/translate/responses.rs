//! OpenAI Responses through the shared form, as a client's API only: a fallback
//! to OpenAI is sent in Chat Completions, so this file reads requests and
//! writes answers, and never the other way round.
//!
//! Sources: OpenAI API reference "Create a model response" (`input` as text
//! or a list of items: messages by role, with `input_text`, `output_text`,
//! `input_image` and `refusal` parts, `function_call` and
//! `function_call_output` items joined by `call_id`; flat function tools;
//! `instructions`; `max_output_tokens`), "The response object" (`status`,
//! `incomplete_details.reason`, `output` items, `usage` with its details),
//! "Streaming events" (every event has a `sequence_number`; an item is
//! added, its content parts are added, streamed and done, then the item is
//! done; the stream ends with `response.completed` or `response.incomplete`
//! carrying the whole response), and openai-python
//! `types/responses/` and `lib/streaming/responses/_responses.py` (its
//! stream reader finds items by `output_index` and parts by
//! `content_index`, and reads `logprobs` on text events).
//!
//! A refusal is written as Responses writes its own, in the forms the
//! guard's Responses dialect judges: a content filter as `status:
//! "incomplete"` with `incomplete_details.reason: "content_filter"` (and a
//! `refusal` part only if the target explained it), any other refusal as a
//! `refusal` content part with the explanation (else the category).

use bytes::BytesMut;
use serde_json::{json, Value};

use super::chat::{created, no_parameters, read_openai_tool_choice, refusal_text};
use crate::dialect::facts::{ClientSide, Translation};
use crate::dialect::translate::{
    integer, merge_usage, number, only_known_fields, parse_data_url, read_tools, sse, Event,
    ImageSource, Part, Prompt, Reply, Role, Stop, Tool, ToolChoice, Untranslatable, WriteStream,
};
use crate::refusal::Usage;

const API: &str = "OpenAI Responses";

/// Responses' part in the translation: a client's API only.
pub(crate) const TRANSLATION: Translation = Translation {
    client: Some(ClientSide {
        read_request,
        write_reply,
        stream_writer: |_include_usage| Box::new(StreamWriter::new()),
    }),
    target: None,
    no_target: Some(
        "openai_responses is a client's API only: a fallback to OpenAI is sent in Chat Completions",
    ),
};

const CONTENT_FILTER: &str = crate::dialect::openai::chat::CONTENT_FILTER;

/// The most text, refusal and arguments a stream writer holds for the
/// final event, which repeats the whole answer. Far above any model's
/// longest answer (128k output tokens is about half a MiB of text); past
/// it the translation fails rather than hold without bound.
const MAX_HELD_OUTPUT: usize = 4 << 20;

// ---- requests ---------------------------------------------------------

pub(crate) fn read_request(body: &Value) -> Result<Prompt, Untranslatable> {
    only_known_fields(
        API,
        body,
        &[
            "model",
            "input",
            "instructions",
            "max_output_tokens",
            "temperature",
            "top_p",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "stream",
            "text",
            "include",
            "background",
        ],
        // Bookkeeping for OpenAI's own servers, as for Chat. `store` too:
        // the translated answer is served, not stored, so a later
        // `previous_response_id` naming it fails at OpenAI rather than
        // reading another conversation. Reasoning effort and summaries,
        // which the serving model does its own way; stream obfuscation;
        // truncation, whose only effect is on an input too long for the
        // model, which then fails instead of being cut.
        &[
            "user",
            "metadata",
            "store",
            "service_tier",
            "prompt_cache_key",
            "prompt_cache_retention",
            "prompt_cache_options",
            "safety_identifier",
            "reasoning",
            "stream_options",
            "truncation",
        ],
    )?;
    // A background response is fetched later by its id, from OpenAI.
    if !matches!(
        body.get("background"),
        None | Some(Value::Null | Value::Bool(false))
    ) {
        return Err(Untranslatable::field(API, "background"));
    }
    check_text(body.get("text"))?;
    check_include(body.get("include"))?;
    let mut prompt = Prompt {
        system: instructions(body.get("instructions"))?,
        max_tokens: integer(body, "max_output_tokens")?,
        temperature: number(body, "temperature")?,
        top_p: number(body, "top_p")?,
        tools: read_tools(body.get("tools"), read_tool)?,
        tool_choice: read_tool_choice(body.get("tool_choice"))?,
        parallel_tool_calls: body.get("parallel_tool_calls").and_then(Value::as_bool),
        ..Prompt::default()
    };
    match body.get("input") {
        Some(Value::String(text)) => push_text(&mut prompt, Role::User, text),
        Some(Value::Array(items)) => {
            for item in items {
                read_item(item, &mut prompt)?;
            }
        }
        _ => return Err(Untranslatable::new("`input` is neither text nor a list")),
    }
    Ok(prompt)
}

/// Plain text output only: a JSON format is structured output the shared
/// form does not carry, and `verbosity` is refused as Chat's is.
fn check_text(text: Option<&Value>) -> Result<(), Untranslatable> {
    let Some(text) = text.filter(|t| !t.is_null()) else {
        return Ok(());
    };
    let object = text
        .as_object()
        .ok_or_else(|| Untranslatable::new("`text` is not an object"))?;
    for (key, value) in object {
        let plain = key == "format" && value["type"] == "text";
        if !value.is_null() && !plain {
            return Err(Untranslatable::field(API, &format!("text.{key}")));
        }
    }
    Ok(())
}

/// What a stateless client asks to have included. Encrypted reasoning is
/// harmless to leave out: reasoning is the serving model's own and is not
/// translated, so there is none to include. Anything else (logprobs, tool
/// results, image URLs) would be missing from the answer.
fn check_include(include: Option<&Value>) -> Result<(), Untranslatable> {
    let harmless = |item: &Value| item.as_str() == Some("reasoning.encrypted_content");
    match include {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(items)) if items.iter().all(harmless) => Ok(()),
        Some(_) => Err(Untranslatable::field(API, "include")),
    }
}

fn instructions(value: Option<&Value>) -> Result<Option<String>, Untranslatable> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(Untranslatable::new("`instructions` is not text")),
    }
}

fn push_text(prompt: &mut Prompt, role: Role, text: &str) {
    if !text.is_empty() {
        prompt.push(role, Part::Text(text.to_owned()));
    }
}

/// A function tool (flat, unlike Chat's). Its `strict` is dropped, as the
/// Chat reader drops `function.strict`.
fn read_tool(tool: &Value) -> Result<Tool, Untranslatable> {
    match tool.get("type").and_then(Value::as_str) {
        Some("function") => {}
        Some(other) => {
            return Err(Untranslatable::new(format!(
                "{API} `{other}` tools have no translation"
            )))
        }
        None => return Err(Untranslatable::new("a tool has no type")),
    }
    Tool::read(tool, "parameters", no_parameters)
}

fn read_tool_choice(choice: Option<&Value>) -> Result<Option<ToolChoice>, Untranslatable> {
    read_openai_tool_choice(choice, |named| named["name"].as_str())
}

fn read_item(item: &Value, prompt: &mut Prompt) -> Result<(), Untranslatable> {
    match item.get("type").and_then(Value::as_str) {
        // A message may leave out its type.
        None | Some("message") => read_message(item, prompt),
        Some("function_call") => {
            let part = Part::ToolCall {
                id: required(item, "call_id")?,
                name: required(item, "name")?,
                arguments: item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}")
                    .to_owned(),
            };
            prompt.push(Role::Assistant, part);
            Ok(())
        }
        Some("function_call_output") => read_call_output(item, prompt),
        // An earlier answer's reasoning, dropped as thinking is.
        Some("reasoning") => Ok(()),
        Some(other) => Err(Untranslatable::new(format!(
            "{API} `{other}` input items have no translation"
        ))),
    }
}

fn required(item: &Value, key: &str) -> Result<String, Untranslatable> {
    item.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| Untranslatable::new(format!("an input item has no `{key}`")))
}

fn read_message(message: &Value, prompt: &mut Prompt) -> Result<(), Untranslatable> {
    let content = message.get("content");
    match message.get("role").and_then(Value::as_str) {
        Some("system") | Some("developer") => {
            if !prompt.turns.is_empty() {
                return Err(Untranslatable::new(
                    "a system message after the conversation began",
                ));
            }
            let text = content_text(content)?;
            let system = prompt.system.get_or_insert_with(String::new);
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(&text);
        }
        Some("user") => {
            for part in content_parts(content)? {
                prompt.push(Role::User, part);
            }
        }
        Some("assistant") => {
            let text = content_text(content)?;
            push_text(prompt, Role::Assistant, &text);
        }
        _ => return Err(Untranslatable::new("a message's role has no translation")),
    }
    Ok(())
}

/// The text of content given as a string or as text parts (an earlier
/// answer's refusal part reads as its text, as in the Chat reader).
fn content_text(content: Option<&Value>) -> Result<String, Untranslatable> {
    let mut text = String::new();
    for part in content_parts(content)? {
        match part {
            Part::Text(piece) => text.push_str(&piece),
            _ => return Err(Untranslatable::new("a content part that is not text")),
        }
    }
    Ok(text)
}

/// Content given as a string or as parts: text and images.
fn content_parts(content: Option<&Value>) -> Result<Vec<Part>, Untranslatable> {
    let parts = match content {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(text)) if text.is_empty() => return Ok(Vec::new()),
        Some(Value::String(text)) => return Ok(vec![Part::Text(text.clone())]),
        Some(Value::Array(parts)) => parts,
        Some(_) => return Err(Untranslatable::new("content is neither text nor parts")),
    };
    let mut read = Vec::new();
    for part in parts {
        let text = match part.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text") => part["text"].as_str(),
            Some("refusal") => part["refusal"].as_str(),
            Some("input_image") => {
                read.push(read_image(part)?);
                continue;
            }
            Some(other) => {
                return Err(Untranslatable::new(format!(
                    "{API} `{other}` content parts have no translation"
                )))
            }
            None => return Err(Untranslatable::new("a content part has no type")),
        };
        match text {
            Some("") => {}
            Some(text) => read.push(Part::Text(text.to_owned())),
            None => return Err(Untranslatable::new("a text part has no text")),
        }
    }
    Ok(read)
}

/// An image by URL or `data:` URL; `detail` is dropped, as the Chat reader
/// drops it. An uploaded file (`file_id`) is OpenAI's own.
fn read_image(part: &Value) -> Result<Part, Untranslatable> {
    if part.get("file_id").is_some_and(|f| !f.is_null()) {
        return Err(Untranslatable::new("an image given as an OpenAI file"));
    }
    let url = part["image_url"]
        .as_str()
        .ok_or_else(|| Untranslatable::new("an image part has no url"))?;
    Ok(Part::Image(match parse_data_url(url) {
        Some((media_type, data)) => ImageSource::Base64 { media_type, data },
        None => ImageSource::Url(url.to_owned()),
    }))
}

fn read_call_output(item: &Value, prompt: &mut Prompt) -> Result<(), Untranslatable> {
    let id = required(item, "call_id")?;
    let part = Part::ToolResult {
        name: prompt.call_name(&id).unwrap_or_default(),
        content: content_parts(item.get("output"))?,
        id,
        is_error: false,
    };
    prompt.push(Role::User, part);
    Ok(())
}

// ---- whole answers ----------------------------------------------------

/// The response status and `incomplete_details` a stop is written with.
fn status(stop: &Stop) -> (&'static str, Value) {
    match stop {
        Stop::MaxTokens => ("incomplete", json!({"reason": "max_output_tokens"})),
        Stop::Refusal(refusal) if refusal.category.as_deref() == Some(CONTENT_FILTER) => {
            ("incomplete", json!({"reason": CONTENT_FILTER}))
        }
        _ => ("completed", Value::Null),
    }
}

/// The text of the refusal part a stop is written with. A content filter
/// is said by the status alone, as Responses says its own, unless the
/// target explained it.
fn refusal_part(stop: &Stop) -> Option<&str> {
    match stop {
        Stop::Refusal(refusal) if refusal.category.as_deref() == Some(CONTENT_FILTER) => {
            refusal.explanation.as_deref()
        }
        _ => refusal_text(stop),
    }
}

/// Responses counts cached and cache-written tokens into `input_tokens`.
fn write_usage(usage: &Usage) -> Value {
    let cached = usage.cache_read_tokens.unwrap_or(0);
    let input = usage.input_tokens.unwrap_or(0) + cached + usage.cache_write_tokens.unwrap_or(0);
    let output = usage.output_tokens.unwrap_or(0);
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output})
}

/// A response id: the target's own, marked as a response's.
fn response_id(id: Option<String>) -> String {
    match id {
        Some(id) if id.starts_with("resp_") => id,
        Some(id) => format!("resp_{id}"),
        None => "resp_translated".to_owned(),
    }
}

/// The answer as a response object: built by the stream writer, which
/// writes nothing, so that both forms say the same.
pub(crate) fn write_reply(reply: &Reply) -> Result<Value, Untranslatable> {
    let mut writer = StreamWriter::building();
    let mut none = BytesMut::new();
    let mut events = vec![Event::Start {
        id: reply.id.clone(),
        model: reply.model.clone(),
    }];
    for part in &reply.parts {
        match part {
            Part::Text(text) => events.push(Event::Text(text.clone())),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => {
                events.push(Event::ToolStart {
                    id: id.clone(),
                    name: name.clone(),
                });
                events.push(Event::ToolArgs(arguments.clone()));
            }
            _ => {}
        }
    }
    events.push(Event::Usage(reply.usage));
    events.push(Event::Stop(reply.stop.clone()));
    for event in events {
        writer.event(event, &mut none)?;
    }
    Ok(writer.finish(&mut none)?.0)
}

// ---- streams ----------------------------------------------------------

/// The output item the writer has open.
#[derive(Debug)]
enum Open {
    /// A message; `text` is its open `output_text` part's text so far.
    Message {
        id: String,
        parts: Vec<Value>,
        text: Option<String>,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// Writes a Responses stream: adds and finishes output items and their
/// content parts as the events change kind, numbers every event, and ends
/// with the whole response. Building a whole answer, it writes nothing.
#[derive(Debug)]
pub(crate) struct StreamWriter {
    /// Building a whole answer: no events are written, nothing is bounded
    /// (the whole body was bounded when it was held).
    building: bool,
    started: bool,
    id: Option<String>,
    model: Option<String>,
    created_at: u64,
    sequence: u64,
    /// Finished items, as the final response lists them.
    output: Vec<Value>,
    open: Option<Open>,
    /// Bytes of text, refusal and arguments held for the final event.
    held: usize,
    stop: Option<Stop>,
    usage: Usage,
}

impl StreamWriter {
    pub(crate) fn new() -> Self {
        StreamWriter {
            building: false,
            started: false,
            id: None,
            model: None,
            created_at: created(),
            sequence: 0,
            output: Vec::new(),
            open: None,
            held: 0,
            stop: None,
            usage: Usage::default(),
        }
    }

    fn building() -> Self {
        StreamWriter {
            building: true,
            ..StreamWriter::new()
        }
    }

    /// One event, numbered, with its type in the frame and in the data.
    fn emit(&mut self, kind: &str, mut data: Value, out: &mut BytesMut) {
        if self.building {
            return;
        }
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        sse(out, Some(kind), &data);
    }

    fn hold(&mut self, bytes: usize) -> Result<(), Untranslatable> {
        self.held += bytes;
        if !self.building && self.held > MAX_HELD_OUTPUT {
            return Err(Untranslatable::new(
                "the answer is too long to repeat in its final event",
            ));
        }
        Ok(())
    }

    /// A response object. `parallel_tool_calls`, `tool_choice` and `tools`
    /// echo the request in OpenAI's answers and are required by the SDKs'
    /// types; the writer never sees the request, so they say the defaults.
    fn response(&self, status: &str, details: Value, output: Vec<Value>, usage: Value) -> Value {
        json!({"id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "error": null, "incomplete_details": details,
            "model": self.model, "output": output, "parallel_tool_calls": true,
            "tool_choice": "auto", "tools": [], "usage": usage})
    }

    fn start(&mut self, out: &mut BytesMut) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        self.id = Some(response_id(self.id.take()));
        for kind in ["response.created", "response.in_progress"] {
            let response = self.response("in_progress", Value::Null, Vec::new(), Value::Null);
            self.emit(kind, json!({"response": response}), out);
        }
    }

    /// An item id, unique within the response.
    fn item_id(&self, prefix: &str) -> String {
        let response = self.id.as_deref().unwrap_or_default();
        let base = response.strip_prefix("resp_").unwrap_or(response);
        format!("{prefix}_{base}_{}", self.output.len())
    }

    fn output_index(&self) -> usize {
        self.output.len()
    }

    fn add_item(&mut self, open: Open, item: Value, out: &mut BytesMut) {
        let index = self.output_index();
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
            out,
        );
        self.open = Some(open);
    }

    /// The open message's id and the index of its open (or next) content
    /// part, opening a message first if another item (or none) is open.
    fn message(&mut self, out: &mut BytesMut) -> (String, usize) {
        if let Some(Open::Message { id, parts, .. }) = &self.open {
            return (id.clone(), parts.len());
        }
        self.close("completed", out);
        let id = self.item_id("msg");
        let item = json!({"id": id, "type": "message", "status": "in_progress",
            "role": "assistant", "content": []});
        let open = Open::Message {
            id: id.clone(),
            parts: Vec::new(),
            text: None,
        };
        self.add_item(open, item, out);
        (id, 0)
    }

    /// A content part event of the open message.
    fn part_event(&mut self, kind: &str, mut data: Value, out: &mut BytesMut) {
        let (id, index) = self.message(out);
        data["item_id"] = json!(id);
        data["output_index"] = json!(self.output_index());
        data["content_index"] = json!(index);
        self.emit(kind, data, out);
    }

    fn text(&mut self, delta: String, out: &mut BytesMut) -> Result<(), Untranslatable> {
        self.hold(delta.len())?;
        self.message(out);
        if !matches!(self.open, Some(Open::Message { text: Some(_), .. })) {
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            self.part_event("response.content_part.added", json!({"part": part}), out);
        }
        if let Some(Open::Message { text, .. }) = &mut self.open {
            text.get_or_insert_with(String::new).push_str(&delta);
        }
        let data = json!({"delta": delta, "logprobs": []});
        self.part_event("response.output_text.delta", data, out);
        Ok(())
    }

    /// Finishes the open message's text part, if one is open.
    fn close_text(&mut self, out: &mut BytesMut) {
        let Some(Open::Message { text, .. }) = &mut self.open else {
            return;
        };
        let Some(text) = text.take() else {
            return;
        };
        let done = json!({"text": text, "logprobs": []});
        self.part_event("response.output_text.done", done, out);
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        self.finish_part(part, out);
    }

    /// Announces a finished content part and keeps it for the item.
    fn finish_part(&mut self, part: Value, out: &mut BytesMut) {
        self.part_event(
            "response.content_part.done",
            json!({"part": part.clone()}),
            out,
        );
        if let Some(Open::Message { parts, .. }) = &mut self.open {
            parts.push(part);
        }
    }

    /// A refusal part on the open message (or a new one), whole: the
    /// refusal is known only once the answer has stopped.
    fn refuse(&mut self, refusal: &str, out: &mut BytesMut) -> Result<(), Untranslatable> {
        self.hold(refusal.len())?;
        self.close_text(out);
        let empty = json!({"type": "refusal", "refusal": ""});
        self.part_event("response.content_part.added", json!({"part": empty}), out);
        self.part_event("response.refusal.delta", json!({"delta": refusal}), out);
        self.part_event("response.refusal.done", json!({"refusal": refusal}), out);
        self.finish_part(json!({"type": "refusal", "refusal": refusal}), out);
        Ok(())
    }

    fn start_call(&mut self, call_id: String, name: String, out: &mut BytesMut) {
        self.close("completed", out);
        let id = self.item_id("fc");
        let item = json!({"id": id, "type": "function_call", "status": "in_progress",
            "call_id": call_id, "name": name, "arguments": ""});
        let open = Open::Call {
            id,
            call_id,
            name,
            arguments: String::new(),
        };
        self.add_item(open, item, out);
    }

    fn arguments(&mut self, fragment: String, out: &mut BytesMut) -> Result<(), Untranslatable> {
        self.hold(fragment.len())?;
        let index = self.output_index();
        let Some(Open::Call { id, arguments, .. }) = &mut self.open else {
            return Err(Untranslatable::new(
                "tool call arguments arrived outside their call",
            ));
        };
        arguments.push_str(&fragment);
        let data = json!({"item_id": id, "output_index": index, "delta": fragment});
        self.emit("response.function_call_arguments.delta", data, out);
        Ok(())
    }

    /// Finishes the open item, if any, with `status`, and lists it.
    fn close(&mut self, status: &str, out: &mut BytesMut) {
        self.close_text(out);
        let index = self.output_index();
        let item = match self.open.take() {
            None => return,
            Some(Open::Message { id, parts, .. }) => json!({"id": id, "type": "message",
                "status": status, "role": "assistant", "content": parts}),
            Some(Open::Call {
                id,
                call_id,
                name,
                arguments,
            }) => {
                let done = json!({"item_id": id, "output_index": index,
                    "name": name, "arguments": arguments});
                self.emit("response.function_call_arguments.done", done, out);
                json!({"id": id, "type": "function_call", "status": status,
                    "call_id": call_id, "name": name, "arguments": arguments})
            }
        };
        let done = json!({"output_index": index, "item": item.clone()});
        self.emit("response.output_item.done", done, out);
        self.output.push(item);
    }

    /// Ends the response: the refusal part if it refused, the open item
    /// finished; returns the whole response and the type of the final
    /// event that carries it.
    fn finish(&mut self, out: &mut BytesMut) -> Result<(Value, &'static str), Untranslatable> {
        self.start(out);
        let stop = self
            .stop
            .take()
            .ok_or_else(|| Untranslatable::new("the stream ended without a stop reason"))?;
        if let Some(refusal) = refusal_part(&stop) {
            self.refuse(refusal, out)?;
        }
        let (status, details) = status(&stop);
        self.close(status, out);
        let output = std::mem::take(&mut self.output);
        let response = self.response(status, details, output, write_usage(&self.usage));
        let kind = match status {
            "completed" => "response.completed",
            _ => "response.incomplete",
        };
        Ok((response, kind))
    }
}

impl WriteStream for StreamWriter {
    fn event(&mut self, event: Event, out: &mut BytesMut) -> Result<(), Untranslatable> {
        match event {
            Event::Start { id, model } => {
                if !self.started {
                    self.id = self.id.take().or(id);
                }
                self.model = self.model.take().or(model);
            }
            Event::Text(text) => {
                self.start(out);
                self.text(text, out)?;
            }
            Event::ToolStart { id, name } => {
                self.start(out);
                self.start_call(id, name, out);
            }
            Event::ToolArgs(fragment) => self.arguments(fragment, out)?,
            Event::Stop(stop) => self.stop = Some(stop),
            Event::Usage(usage) => merge_usage(&mut self.usage, &usage),
            Event::Error(message) => {
                self.start(out);
                let error = json!({"code": null, "message": message, "param": null});
                self.emit("error", error, out);
            }
            Event::Done => {
                let (response, kind) = self.finish(out)?;
                self.emit(kind, json!({"response": response}), out);
            }
        }
        Ok(())
    }
}
