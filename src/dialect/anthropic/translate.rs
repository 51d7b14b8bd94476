//! Anthropic Messages through the shared form.
//!
//! Sources: platform docs "Messages API" (create message: `system`,
//! content blocks `text`, `image`, `tool_use`, `tool_result`; `tool_choice`
//! `auto`/`any`/`tool`/`none` with `disable_parallel_tool_use`), "Streaming
//! messages" (`message_start`, `content_block_*`, `message_delta`,
//! `message_stop`, `input_json_delta`), "Refusals and fallback"
//! (`stop_reason: "refusal"` with `stop_details`).

use bytes::BytesMut;
use serde_json::{json, Map, Value};

use crate::dialect::facts::{ClientSide, TargetSide, Translation};
use crate::dialect::translate::{
    integer, merge_usage, number, only_known_fields, plain_tool_name, read_tools, sse, strings,
    Event, ImageSource, Part, Prompt, ReadStream, RefusalStop, Reply, Role, Stop, Tool, ToolChoice,
    Untranslatable, WriteStream,
};
use crate::refusal::Usage;
use crate::sse::Frame;

const API: &str = "Anthropic";

/// Anthropic's part in the translation: a client's API, and the API a
/// fallback to Anthropic is sent in.
pub(crate) const TRANSLATION: Translation = Translation {
    client: Some(ClientSide {
        read_request,
        write_reply: |reply| Ok(write_reply(reply)),
        stream_writer: |_include_usage| Box::<StreamWriter>::default(),
    }),
    target: Some(TargetSide {
        write_request: |prompt, model| {
            Ok(("/v1/messages".to_owned(), write_request(prompt, model)?))
        },
        read_reply,
        stream_reader: || Box::<StreamReader>::default(),
        takes_tool_name: plain_tool_name,
        headers: &[("anthropic-version", "2023-06-01")],
        key_header: ("x-api-key", str::to_owned),
    }),
    no_target: None,
};

/// What a Claude request gets when the client's API left `max_tokens` out
/// (Anthropic requires it): an output every current Claude model allows.
pub(crate) const DEFAULT_MAX_TOKENS: u64 = 8192;

/// The error message Anthropic's output filter sends (lowercased start).
const OUTPUT_BLOCKED: &str = "output blocked by content filtering policy";

// ---- requests ---------------------------------------------------------

pub(crate) fn read_request(body: &Value) -> Result<Prompt, Untranslatable> {
    only_known_fields(
        API,
        body,
        &[
            "model",
            "messages",
            "system",
            "max_tokens",
            "stop_sequences",
            "temperature",
            "top_p",
            "top_k",
            "tools",
            "tool_choice",
            "stream",
        ],
        // Hints for Anthropic's own servers (caching, tiers, the guard's
        // server-side fallbacks and credit) and thinking, which the serving
        // model does its own way.
        &[
            "metadata",
            "thinking",
            "service_tier",
            "fallbacks",
            "fallback_credit_token",
            "cache_control",
            "anthropic_version",
        ],
    )?;
    let mut prompt = Prompt {
        system: read_system(body.get("system"))?,
        max_tokens: integer(body, "max_tokens")?,
        stop: strings(body.get("stop_sequences"))?,
        temperature: number(body, "temperature")?,
        top_p: number(body, "top_p")?,
        top_k: integer(body, "top_k")?,
        tools: read_tools(body.get("tools"), read_tool)?,
        ..Prompt::default()
    };
    read_tool_choice(body.get("tool_choice"), &mut prompt)?;
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| Untranslatable::new("`messages` is not a list"))?;
    for message in messages {
        let role = match message.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            _ => return Err(Untranslatable::new("a message has an unknown role")),
        };
        for part in read_content(message.get("content"), &prompt)? {
            prompt.push(role, part);
        }
    }
    Ok(prompt)
}

fn read_system(system: Option<&Value>) -> Result<Option<String>, Untranslatable> {
    match system {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone()).filter(|t| !t.is_empty())),
        Some(Value::Array(blocks)) => {
            let mut texts = Vec::new();
            for block in blocks {
                match block.get("text").and_then(Value::as_str) {
                    Some(text) if block.get("type").and_then(Value::as_str) == Some("text") => {
                        texts.push(text)
                    }
                    _ => return Err(Untranslatable::new("a system block is not text")),
                }
            }
            Ok(Some(texts.join("\n\n")).filter(|t| !t.is_empty()))
        }
        Some(_) => Err(Untranslatable::new("`system` is neither text nor blocks")),
    }
}

fn read_tool(tool: &Value) -> Result<Tool, Untranslatable> {
    match tool.get("type").and_then(Value::as_str) {
        None | Some("custom") => {}
        Some(kind) => {
            return Err(Untranslatable::new(format!(
                "Anthropic server tool `{kind}` has no translation"
            )))
        }
    }
    Tool::read(tool, "input_schema", || json!({"type": "object"}))
}

fn read_tool_choice(choice: Option<&Value>, prompt: &mut Prompt) -> Result<(), Untranslatable> {
    let Some(choice) = choice.filter(|c| !c.is_null()) else {
        return Ok(());
    };
    prompt.tool_choice = Some(match choice.get("type").and_then(Value::as_str) {
        Some("auto") => ToolChoice::Auto,
        Some("any") => ToolChoice::Any,
        Some("none") => ToolChoice::None,
        Some("tool") => ToolChoice::Named(
            choice
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| Untranslatable::new("`tool_choice` names no tool"))?
                .to_owned(),
        ),
        _ => return Err(Untranslatable::new("`tool_choice` has an unknown type")),
    });
    if choice
        .get("disable_parallel_tool_use")
        .and_then(Value::as_bool)
        == Some(true)
    {
        prompt.parallel_tool_calls = Some(false);
    }
    Ok(())
}

fn read_content(content: Option<&Value>, prompt: &Prompt) -> Result<Vec<Part>, Untranslatable> {
    match content {
        Some(Value::String(text)) => Ok(text_part(text).into_iter().collect()),
        Some(Value::Array(blocks)) => {
            let mut parts = Vec::new();
            for block in blocks {
                if let Some(part) = read_block(block, prompt)? {
                    parts.push(part);
                }
            }
            Ok(parts)
        }
        _ => Err(Untranslatable::new(
            "a message's content is neither text nor blocks",
        )),
    }
}

fn text_part(text: &str) -> Option<Part> {
    (!text.is_empty()).then(|| Part::Text(text.to_owned()))
}

fn read_block(block: &Value, prompt: &Prompt) -> Result<Option<Part>, Untranslatable> {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match kind {
        "text" => Ok(block
            .get("text")
            .and_then(Value::as_str)
            .and_then(text_part)),
        "image" => read_image(block).map(Some),
        "tool_use" => {
            let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
            Ok(Some(Part::ToolCall {
                id: required_str(block, "id")?,
                name: required_str(block, "name")?,
                arguments: input.to_string(),
            }))
        }
        "tool_result" => {
            let id = required_str(block, "tool_use_id")?;
            let content = match block.get("content") {
                None | Some(Value::Null) => Vec::new(),
                other => read_content(other, prompt)?,
            };
            Ok(Some(Part::ToolResult {
                name: prompt.call_name(&id).unwrap_or_default(),
                id,
                content,
                is_error: block.get("is_error").and_then(Value::as_bool) == Some(true),
            }))
        }
        // Thinking is the model's own: another model neither reads nor
        // continues it.
        "thinking" | "redacted_thinking" => Ok(None),
        other => Err(Untranslatable::new(format!(
            "Anthropic `{other}` blocks have no translation"
        ))),
    }
}

fn read_image(block: &Value) -> Result<Part, Untranslatable> {
    let source = block.get("source").unwrap_or(&Value::Null);
    match source.get("type").and_then(Value::as_str) {
        Some("base64") => Ok(Part::Image(ImageSource::Base64 {
            media_type: required_str(source, "media_type")?,
            data: required_str(source, "data")?,
        })),
        Some("url") => Ok(Part::Image(ImageSource::Url(required_str(source, "url")?))),
        _ => Err(Untranslatable::new(
            "an Anthropic image source has no translation",
        )),
    }
}

fn required_str(value: &Value, key: &str) -> Result<String, Untranslatable> {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| Untranslatable::new(format!("`{key}` is missing")))
}

pub(crate) fn write_request(prompt: &Prompt, model: &str) -> Result<Value, Untranslatable> {
    if prompt.turns.last().map(|t| t.role) == Some(Role::Assistant) {
        // Claude would continue that turn (a prefill), not answer it.
        return Err(Untranslatable::new(
            "the conversation ends with an assistant turn",
        ));
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "max_tokens".into(),
        json!(prompt.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    if let Some(system) = &prompt.system {
        body.insert("system".into(), json!(system));
    }
    let messages: Result<Vec<Value>, _> = prompt
        .turns
        .iter()
        .map(|turn| write_turn(turn.role, &turn.parts))
        .collect();
    body.insert("messages".into(), Value::Array(messages?));
    write_sampling(prompt, &mut body)?;
    write_tools(prompt, &mut body);
    if prompt.stream {
        body.insert("stream".into(), json!(true));
    }
    Ok(Value::Object(body))
}

fn write_sampling(prompt: &Prompt, body: &mut Map<String, Value>) -> Result<(), Untranslatable> {
    if !prompt.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(prompt.stop));
    }
    if let Some(temperature) = prompt.temperature {
        if !(0.0..=1.0).contains(&temperature) {
            return Err(Untranslatable::new(
                "Claude takes a temperature from 0 to 1",
            ));
        }
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = prompt.top_p {
        if prompt.temperature.is_some() {
            return Err(Untranslatable::new(
                "current Claude models take temperature or top_p, not both",
            ));
        }
        body.insert("top_p".into(), json!(top_p));
    }
    if let Some(top_k) = prompt.top_k {
        body.insert("top_k".into(), json!(top_k));
    }
    Ok(())
}

fn write_tools(prompt: &Prompt, body: &mut Map<String, Value>) {
    if !prompt.tools.is_empty() {
        let tools: Vec<Value> = prompt
            .tools
            .iter()
            .map(|tool| {
                let mut written = json!({"name": tool.name, "input_schema": tool.parameters});
                if let Some(description) = &tool.description {
                    written["description"] = json!(description);
                }
                written
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let serial = prompt.parallel_tool_calls == Some(false);
    let mut choice = match &prompt.tool_choice {
        None if serial => json!({"type": "auto"}),
        None => return,
        Some(ToolChoice::Auto) => json!({"type": "auto"}),
        Some(ToolChoice::Any) => json!({"type": "any"}),
        Some(ToolChoice::None) => json!({"type": "none"}),
        Some(ToolChoice::Named(name)) => json!({"type": "tool", "name": name}),
    };
    if serial && choice["type"] != "none" {
        choice["disable_parallel_tool_use"] = json!(true);
    }
    body.insert("tool_choice".into(), choice);
}

fn write_turn(role: Role, parts: &[Part]) -> Result<Value, Untranslatable> {
    // Tool results come first in a user turn.
    let (results, others): (Vec<&Part>, Vec<&Part>) = parts
        .iter()
        .partition(|p| matches!(p, Part::ToolResult { .. }));
    let blocks: Result<Vec<Value>, _> =
        results.into_iter().chain(others).map(write_block).collect();
    let role = match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    Ok(json!({"role": role, "content": blocks?}))
}

fn write_block(part: &Part) -> Result<Value, Untranslatable> {
    Ok(match part {
        Part::Text(text) => json!({"type": "text", "text": text}),
        Part::Image(ImageSource::Base64 { media_type, data }) => json!({"type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data}}),
        Part::Image(ImageSource::Url(url)) => {
            json!({"type": "image", "source": {"type": "url", "url": url}})
        }
        Part::ToolCall {
            id,
            name,
            arguments,
        } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": arguments_object(arguments)?})
        }
        Part::ToolResult {
            id,
            content,
            is_error,
            ..
        } => {
            let content: Result<Vec<Value>, _> = content.iter().map(write_block).collect();
            let mut block = json!({"type": "tool_result", "tool_use_id": id, "content": content?});
            if *is_error {
                block["is_error"] = json!(true);
            }
            block
        }
    })
}

/// A tool call's JSON arguments as the object Anthropic's `input` is.
pub(crate) fn arguments_object(arguments: &str) -> Result<Value, Untranslatable> {
    if arguments.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => Ok(value),
        _ => Err(Untranslatable::new(
            "a tool call's arguments are not a JSON object",
        )),
    }
}

// ---- whole answers ----------------------------------------------------

fn read_stop(carrier: &Value) -> Stop {
    match carrier.get("stop_reason").and_then(Value::as_str) {
        Some("max_tokens") | Some("model_context_window_exceeded") => Stop::MaxTokens,
        Some("stop_sequence") => Stop::Sequence(
            carrier
                .get("stop_sequence")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ),
        Some("tool_use") => Stop::ToolUse,
        Some("refusal") => {
            let details = carrier.get("stop_details").unwrap_or(&Value::Null);
            Stop::Refusal(RefusalStop {
                category: details
                    .get("category")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                explanation: details
                    .get("explanation")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })
        }
        _ => Stop::EndTurn,
    }
}

fn read_usage(usage: Option<&Value>) -> Usage {
    let usage = usage.unwrap_or(&Value::Null);
    let count = |key| usage.get(key).and_then(Value::as_u64);
    Usage {
        input_tokens: count("input_tokens"),
        output_tokens: count("output_tokens"),
        cache_read_tokens: count("cache_read_input_tokens"),
        cache_write_tokens: count("cache_creation_input_tokens"),
    }
}

pub(crate) fn read_reply(body: &Value) -> Result<Reply, Untranslatable> {
    if let Some(refusal) = blocked(body) {
        return Ok(Reply {
            id: None,
            model: None,
            parts: Vec::new(),
            stop: Stop::Refusal(refusal),
            usage: Usage::default(),
        });
    }
    let content = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| Untranslatable::new("the Anthropic answer has no content"))?;
    let mut parts = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => parts.extend(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .and_then(text_part),
            ),
            Some("tool_use") => parts.push(Part::ToolCall {
                id: required_str(block, "id")?,
                name: required_str(block, "name")?,
                arguments: block
                    .get("input")
                    .cloned()
                    .unwrap_or_else(|| json!({}))
                    .to_string(),
            }),
            _ => {}
        }
    }
    Ok(Reply {
        id: body.get("id").and_then(Value::as_str).map(str::to_owned),
        model: body.get("model").and_then(Value::as_str).map(str::to_owned),
        parts,
        stop: read_stop(body),
        usage: read_usage(body.get("usage")),
    })
}

/// The output filter's block, sent as an error body or stream event.
fn blocked(body: &Value) -> Option<RefusalStop> {
    let message = body.get("error")?.get("message")?.as_str()?;
    message
        .trim_start()
        .to_ascii_lowercase()
        .starts_with(OUTPUT_BLOCKED)
        .then(|| RefusalStop {
            category: Some("content_filter".to_owned()),
            explanation: Some(message.to_owned()),
        })
}

fn stop_fields(stop: &Stop) -> (Value, Value, Option<Value>) {
    match stop {
        Stop::EndTurn => (json!("end_turn"), Value::Null, None),
        Stop::MaxTokens => (json!("max_tokens"), Value::Null, None),
        Stop::Sequence(Some(sequence)) => (json!("stop_sequence"), json!(sequence), None),
        // Chat and Gemini do not say which sequence matched, and Anthropic's
        // `stop_sequence` stop always names one.
        Stop::Sequence(None) => (json!("end_turn"), Value::Null, None),
        Stop::ToolUse => (json!("tool_use"), Value::Null, None),
        Stop::Refusal(refusal) => (
            json!("refusal"),
            Value::Null,
            Some(json!({"type": "refusal", "category": refusal.category,
                "explanation": refusal.explanation})),
        ),
    }
}

fn write_usage(usage: &Usage) -> Value {
    let mut written = json!({
        "input_tokens": usage.input_tokens.unwrap_or(0),
        "output_tokens": usage.output_tokens.unwrap_or(0),
    });
    if let Some(read) = usage.cache_read_tokens {
        written["cache_read_input_tokens"] = json!(read);
    }
    if let Some(write) = usage.cache_write_tokens {
        written["cache_creation_input_tokens"] = json!(write);
    }
    written
}

pub(crate) fn write_reply(reply: &Reply) -> Value {
    let content: Vec<Value> = reply
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) => Some(json!({"type": "text", "text": text})),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(json!({"type": "tool_use", "id": id,
                "name": name, "input": arguments_object(arguments).unwrap_or_else(|_| json!({}))})),
            _ => None,
        })
        .collect();
    let (stop_reason, stop_sequence, details) = stop_fields(&reply.stop);
    let mut body = json!({
        "id": reply.id.clone().unwrap_or_else(|| "msg_translated".to_owned()),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": write_usage(&reply.usage),
    });
    if let Some(details) = details {
        body["stop_details"] = details;
    }
    body
}

// ---- streams ----------------------------------------------------------

/// Reads an Anthropic stream.
#[derive(Debug, Default)]
pub(crate) struct StreamReader {
    usage: Usage,
}

impl ReadStream for StreamReader {
    fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), Untranslatable> {
        let Some(event) = crate::dialect::json_event(frame) else {
            return Ok(());
        };
        match crate::dialect::event_type(&event, frame) {
            "message_start" => {
                let message = event.get("message").unwrap_or(&Value::Null);
                out.push(Event::Start {
                    id: message.get("id").and_then(Value::as_str).map(str::to_owned),
                    model: message
                        .get("model")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                });
                merge_usage(&mut self.usage, &read_usage(message.get("usage")));
            }
            "content_block_start" => {
                block_start(event.get("content_block").unwrap_or(&Value::Null), out)?;
            }
            "content_block_delta" => block_delta(event.get("delta").unwrap_or(&Value::Null), out),
            "message_delta" => {
                out.push(Event::Stop(read_stop(
                    event.get("delta").unwrap_or(&Value::Null),
                )));
                merge_usage(&mut self.usage, &read_usage(event.get("usage")));
                out.push(Event::Usage(self.usage));
            }
            "message_stop" => out.push(Event::Done),
            "error" => match blocked(&event) {
                Some(refusal) => {
                    out.push(Event::Stop(Stop::Refusal(refusal)));
                    out.push(Event::Done);
                }
                None => out.push(Event::Error(
                    event["error"]["message"]
                        .as_str()
                        .unwrap_or("error")
                        .to_owned(),
                )),
            },
            _ => {}
        }
        Ok(())
    }
}

/// A `content_block_start`'s block: a tool call's start, or a text block's
/// opening text.
fn block_start(block: &Value, out: &mut Vec<Event>) -> Result<(), Untranslatable> {
    match block.get("type").and_then(Value::as_str) {
        Some("tool_use") => out.push(Event::ToolStart {
            id: required_str(block, "id")?,
            name: required_str(block, "name")?,
        }),
        Some("text") => out.extend(
            block
                .get("text")
                .and_then(Value::as_str)
                .and_then(text_part)
                .map(|p| match p {
                    Part::Text(text) => Event::Text(text),
                    _ => unreachable!(),
                }),
        ),
        _ => {}
    }
    Ok(())
}

/// A `content_block_delta`'s delta: text, or a tool call's arguments.
fn block_delta(delta: &Value, out: &mut Vec<Event>) {
    let (field, event): (&str, fn(String) -> Event) =
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => ("text", Event::Text),
            Some("input_json_delta") => ("partial_json", Event::ToolArgs),
            _ => return,
        };
    out.extend(
        delta
            .get(field)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(|t| event(t.to_owned())),
    );
}

/// What the Anthropic writer has open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Tool,
}

/// Writes an Anthropic stream: opens and closes content blocks as the
/// events change kind, and ends the message once the stream is done (the
/// stop reason and usage go into one `message_delta`).
#[derive(Debug, Default)]
pub(crate) struct StreamWriter {
    started: bool,
    id: Option<String>,
    model: Option<String>,
    open: Option<Open>,
    next_index: u64,
    stop: Option<Stop>,
    usage: Usage,
}

impl StreamWriter {
    fn start(&mut self, out: &mut BytesMut) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let message = json!({"type": "message_start", "message": {
            "id": self.id.clone().unwrap_or_else(|| "msg_translated".to_owned()),
            "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": write_usage(&self.usage)}});
        sse(out, Some("message_start"), &message);
    }

    fn open(&mut self, kind: Open, block: Value, out: &mut BytesMut) {
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some(kind);
        sse(
            out,
            Some("content_block_start"),
            &json!({"type": "content_block_start",
            "index": index, "content_block": block}),
        );
    }

    fn close(&mut self, out: &mut BytesMut) {
        if self.open.take().is_some() {
            sse(
                out,
                Some("content_block_stop"),
                &json!({"type": "content_block_stop",
                "index": self.next_index - 1}),
            );
        }
    }

    fn delta(&self, delta: Value, out: &mut BytesMut) {
        sse(
            out,
            Some("content_block_delta"),
            &json!({"type": "content_block_delta",
            "index": self.next_index - 1, "delta": delta}),
        );
    }

    fn end(&mut self, out: &mut BytesMut) -> Result<(), Untranslatable> {
        self.start(out);
        self.close(out);
        let stop = self
            .stop
            .take()
            .ok_or_else(|| Untranslatable::new("the stream ended without a stop reason"))?;
        let (stop_reason, stop_sequence, details) = stop_fields(&stop);
        let mut delta = json!({"stop_reason": stop_reason, "stop_sequence": stop_sequence});
        if let Some(details) = details {
            delta["stop_details"] = details;
        }
        sse(
            out,
            Some("message_delta"),
            &json!({"type": "message_delta", "delta": delta,
            "usage": write_usage(&self.usage)}),
        );
        sse(out, Some("message_stop"), &json!({"type": "message_stop"}));
        Ok(())
    }
}

impl WriteStream for StreamWriter {
    fn event(&mut self, event: Event, out: &mut BytesMut) -> Result<(), Untranslatable> {
        match event {
            Event::Start { id, model } => {
                self.id = self.id.take().or(id);
                self.model = self.model.take().or(model);
            }
            Event::Text(text) => {
                self.start(out);
                if self.open != Some(Open::Text) {
                    self.open(Open::Text, json!({"type": "text", "text": ""}), out);
                }
                self.delta(json!({"type": "text_delta", "text": text}), out);
            }
            Event::ToolStart { id, name } => {
                self.start(out);
                self.open(
                    Open::Tool,
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    out,
                );
            }
            Event::ToolArgs(fragment) => {
                if self.open != Some(Open::Tool) {
                    return Err(Untranslatable::new(
                        "tool call arguments arrived outside their call",
                    ));
                }
                self.delta(
                    json!({"type": "input_json_delta", "partial_json": fragment}),
                    out,
                );
            }
            Event::Stop(stop) => self.stop = Some(stop),
            Event::Usage(usage) => merge_usage(&mut self.usage, &usage),
            Event::Error(message) => {
                self.start(out);
                sse(
                    out,
                    Some("error"),
                    &json!({"type": "error",
                    "error": {"type": "api_error", "message": message}}),
                );
            }
            Event::Done => self.end(out)?,
        }
        Ok(())
    }
}
