//! OpenAI Chat Completions through the shared form.
//!
//! Sources: OpenAI API reference "Create chat completion" (messages by
//! role, content parts `text` and `image_url`, `tool_calls`, `tool`
//! messages by `tool_call_id`, `max_completion_tokens` (`max_tokens` is
//! deprecated and refused by reasoning models), `stop` up to 4 sequences,
//! `tool_choice`, `parallel_tool_calls`, `stream_options.include_usage`),
//! "The chat completion chunk object" (`delta.content`, `delta.refusal`,
//! `delta.tool_calls[].index`, `finish_reason`, the usage chunk with empty
//! `choices`), openai-python `types/chat/chat_completion_chunk.py`.

use bytes::BytesMut;
use serde_json::{json, Map, Value};

use crate::dialect::facts::{ClientSide, TargetSide, Translation};
use crate::dialect::translate::{
    integer, merge_usage, number, only_known_fields, parse_data_url, plain_tool_name, read_tools,
    result_text, sse, strings, Event, ImageSource, Part, Prompt, ReadStream, RefusalStop, Reply,
    Role, Stop, Tool, ToolChoice, Untranslatable, WriteStream, MAX_HELD_BYTES,
};
use crate::refusal::Usage;
use crate::sse::Frame;

const API: &str = "OpenAI Chat";

/// Chat Completions takes at most this many stop sequences.
const MAX_STOP_SEQUENCES: usize = 4;

/// The category of a refusal the model wrote in its `refusal` field, as
/// the Chat dialect names it.
/// Chat Completions' part in the translation: a client's API, and the API
/// a fallback to OpenAI is sent in.
pub(crate) const TRANSLATION: Translation = Translation {
    client: Some(ClientSide {
        read_request,
        write_reply: |reply| Ok(write_reply(reply)),
        stream_writer: |include_usage| Box::new(StreamWriter::new(include_usage)),
    }),
    target: Some(TargetSide {
        write_request: |prompt, model| {
            Ok((
                "/v1/chat/completions".to_owned(),
                write_request(prompt, model)?,
            ))
        },
        read_reply,
        stream_reader: || Box::<StreamReader>::default(),
        takes_tool_name: plain_tool_name,
        headers: &[],
        key_header: ("authorization", |key| format!("Bearer {key}")),
    }),
    no_target: None,
};

const MODEL_REFUSAL: &str = crate::dialect::openai::chat::MODEL_REFUSAL;
const CONTENT_FILTER: &str = crate::dialect::openai::chat::CONTENT_FILTER;

// ---- requests ---------------------------------------------------------

pub(crate) fn read_request(body: &Value) -> Result<Prompt, Untranslatable> {
    only_known_fields(
        API,
        body,
        &[
            "model",
            "messages",
            "max_tokens",
            "max_completion_tokens",
            "stop",
            "temperature",
            "top_p",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "stream",
            "stream_options",
            "n",
        ],
        // Bookkeeping for OpenAI's own servers, and reasoning effort, which
        // the serving model does its own way.
        &[
            "user",
            "metadata",
            "store",
            "reasoning_effort",
            "service_tier",
            "prompt_cache_key",
            "safety_identifier",
            "seed",
        ],
    )?;
    if integer(body, "n")?.is_some_and(|n| n != 1) {
        return Err(Untranslatable::new("`n` above 1 (several choices)"));
    }
    let mut prompt = Prompt {
        max_tokens: integer(body, "max_completion_tokens")?.or(integer(body, "max_tokens")?),
        stop: strings(body.get("stop"))?,
        temperature: number(body, "temperature")?,
        top_p: number(body, "top_p")?,
        tools: read_tools(body.get("tools"), read_tool)?,
        tool_choice: read_tool_choice(body.get("tool_choice"))?,
        parallel_tool_calls: body.get("parallel_tool_calls").and_then(Value::as_bool),
        ..Prompt::default()
    };
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| Untranslatable::new("`messages` is not a list"))?;
    for message in messages {
        read_message(message, &mut prompt)?;
    }
    Ok(prompt)
}

fn read_tool(tool: &Value) -> Result<Tool, Untranslatable> {
    if tool.get("type").and_then(Value::as_str) != Some("function") {
        return Err(Untranslatable::new("an OpenAI tool that is not a function"));
    }
    let function = tool.get("function").unwrap_or(&Value::Null);
    Tool::read(function, "parameters", no_parameters)
}

/// The schema of a function that declares no parameters.
pub(crate) fn no_parameters() -> Value {
    json!({"type": "object", "properties": {}})
}

fn read_tool_choice(choice: Option<&Value>) -> Result<Option<ToolChoice>, Untranslatable> {
    read_openai_tool_choice(choice, |named| named["function"]["name"].as_str())
}

/// An OpenAI `tool_choice`: a mode, or a named function whose name
/// `name_of` finds (Chat nests it under `function`, Responses does not).
pub(crate) fn read_openai_tool_choice(
    choice: Option<&Value>,
    name_of: fn(&Value) -> Option<&str>,
) -> Result<Option<ToolChoice>, Untranslatable> {
    Ok(match choice {
        None | Some(Value::Null) => None,
        Some(Value::String(mode)) => Some(match mode.as_str() {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Any,
            "none" => ToolChoice::None,
            _ => return Err(Untranslatable::new("`tool_choice` has an unknown mode")),
        }),
        Some(named) => match name_of(named) {
            Some(name) if named["type"] == "function" => Some(ToolChoice::Named(name.to_owned())),
            _ => return Err(Untranslatable::new("`tool_choice` has no translation")),
        },
    })
}

fn read_message(message: &Value, prompt: &mut Prompt) -> Result<(), Untranslatable> {
    match message.get("role").and_then(Value::as_str) {
        Some("system") | Some("developer") => {
            if !prompt.turns.is_empty() {
                return Err(Untranslatable::new(
                    "a system message after the conversation began",
                ));
            }
            let text = content_text(message.get("content"))?;
            let system = prompt.system.get_or_insert_with(String::new);
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(&text);
        }
        Some("user") => {
            for part in read_user_content(message.get("content"))? {
                prompt.push(Role::User, part);
            }
        }
        Some("assistant") => read_assistant(message, prompt)?,
        Some("tool") => {
            let id = message
                .get("tool_call_id")
                .and_then(Value::as_str)
                .ok_or_else(|| Untranslatable::new("a tool message has no `tool_call_id`"))?
                .to_owned();
            let text = content_text(message.get("content"))?;
            let part = Part::ToolResult {
                name: prompt.call_name(&id).unwrap_or_default(),
                id,
                content: if text.is_empty() {
                    Vec::new()
                } else {
                    vec![Part::Text(text)]
                },
                is_error: false,
            };
            prompt.push(Role::User, part);
        }
        _ => return Err(Untranslatable::new("a message's role has no translation")),
    }
    Ok(())
}

fn read_assistant(message: &Value, prompt: &mut Prompt) -> Result<(), Untranslatable> {
    if message.get("function_call").is_some_and(|f| !f.is_null())
        || message.get("audio").is_some_and(|a| !a.is_null())
    {
        return Err(Untranslatable::new(
            "an assistant message with a function call or audio",
        ));
    }
    let mut text = match message.get("content") {
        None | Some(Value::Null) => String::new(),
        other => content_text(other)?,
    };
    if let Some(refusal) = message.get("refusal").and_then(Value::as_str) {
        text.push_str(refusal);
    }
    if !text.is_empty() {
        prompt.push(Role::Assistant, Part::Text(text));
    }
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function").unwrap_or(&Value::Null);
        let part = Part::ToolCall {
            id: call
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| Untranslatable::new("a tool call has no id"))?
                .to_owned(),
            name: function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| Untranslatable::new("a tool call has no name"))?
                .to_owned(),
            arguments: function
                .get("arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}")
                .to_owned(),
        };
        prompt.push(Role::Assistant, part);
    }
    Ok(())
}

/// Text content: a string, or a list of text (and refusal) parts.
fn content_text(content: Option<&Value>) -> Result<String, Untranslatable> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => text.push_str(part["text"].as_str().unwrap_or_default()),
                    Some("refusal") => text.push_str(part["refusal"].as_str().unwrap_or_default()),
                    _ => return Err(Untranslatable::new("a content part that is not text")),
                }
            }
            Ok(text)
        }
        Some(_) => Err(Untranslatable::new("content is neither text nor parts")),
    }
}

fn read_user_content(content: Option<&Value>) -> Result<Vec<Part>, Untranslatable> {
    let Some(Value::Array(parts)) = content else {
        let text = content_text(content)?;
        return Ok(if text.is_empty() {
            Vec::new()
        } else {
            vec![Part::Text(text)]
        });
    };
    let mut read = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = part["text"].as_str().unwrap_or_default();
                if !text.is_empty() {
                    read.push(Part::Text(text.to_owned()));
                }
            }
            Some("image_url") => {
                let url = part["image_url"]["url"]
                    .as_str()
                    .ok_or_else(|| Untranslatable::new("an image part has no url"))?;
                read.push(Part::Image(match parse_data_url(url) {
                    Some((media_type, data)) => ImageSource::Base64 { media_type, data },
                    None => ImageSource::Url(url.to_owned()),
                }));
            }
            Some(other) => {
                return Err(Untranslatable::new(format!(
                    "OpenAI `{other}` content parts have no translation"
                )))
            }
            None => return Err(Untranslatable::new("a content part has no type")),
        }
    }
    Ok(read)
}

pub(crate) fn write_request(prompt: &Prompt, model: &str) -> Result<Value, Untranslatable> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    let mut messages = Vec::new();
    if let Some(system) = &prompt.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for turn in &prompt.turns {
        match turn.role {
            Role::User => write_user(&turn.parts, &mut messages)?,
            Role::Assistant => messages.push(write_assistant(&turn.parts)),
        }
    }
    body.insert("messages".into(), Value::Array(messages));
    if let Some(max) = prompt.max_tokens {
        body.insert("max_completion_tokens".into(), json!(max));
    }
    if prompt.stop.len() > MAX_STOP_SEQUENCES {
        return Err(Untranslatable::new("more than 4 stop sequences"));
    }
    if !prompt.stop.is_empty() {
        body.insert("stop".into(), json!(prompt.stop));
    }
    if let Some(temperature) = prompt.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = prompt.top_p {
        body.insert("top_p".into(), json!(top_p));
    }
    if prompt.top_k.is_some() {
        return Err(Untranslatable::new("Chat Completions has no `top_k`"));
    }
    write_tools(prompt, &mut body);
    if prompt.stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(Value::Object(body))
}

fn write_tools(prompt: &Prompt, body: &mut Map<String, Value>) {
    if !prompt.tools.is_empty() {
        let tools: Vec<Value> = prompt
            .tools
            .iter()
            .map(|tool| {
                let mut function = json!({"name": tool.name, "parameters": tool.parameters});
                if let Some(description) = &tool.description {
                    function["description"] = json!(description);
                }
                json!({"type": "function", "function": function})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(parallel) = prompt.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), json!(parallel));
        }
    }
    if let Some(choice) = &prompt.tool_choice {
        let written = match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Any => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Named(name) => json!({"type": "function", "function": {"name": name}}),
        };
        body.insert("tool_choice".into(), written);
    }
}

fn write_user(parts: &[Part], messages: &mut Vec<Value>) -> Result<(), Untranslatable> {
    let mut content = Vec::new();
    for part in parts {
        match part {
            Part::ToolResult { id, content: result, is_error, .. } => {
                let mut text = result_text(result)?;
                if *is_error && text.is_empty() {
                    text = "error".to_owned();
                }
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
            }
            Part::Text(text) => content.push(json!({"type": "text", "text": text})),
            Part::Image(ImageSource::Base64 { media_type, data }) => content.push(json!({
                "type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data}")}})),
            Part::Image(ImageSource::Url(url)) => {
                content.push(json!({"type": "image_url", "image_url": {"url": url}}))
            }
            Part::ToolCall { .. } => return Err(Untranslatable::new("a tool call in a user turn")),
        }
    }
    if !content.is_empty() {
        messages.push(json!({"role": "user", "content": content}));
    }
    Ok(())
}

fn write_assistant(parts: &[Part]) -> Value {
    let mut text = String::new();
    let mut calls = Vec::new();
    for part in parts {
        match part {
            Part::Text(piece) => text.push_str(piece),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => calls.push(json!({"id": id,
                "type": "function", "function": {"name": name, "arguments": arguments}})),
            _ => {}
        }
    }
    let mut message = json!({"role": "assistant",
        "content": if text.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    message
}

// ---- whole answers ----------------------------------------------------

fn read_stop(finish: Option<&str>, refusal: Option<String>) -> Stop {
    match (finish, refusal) {
        (Some("content_filter"), explanation) => Stop::Refusal(RefusalStop {
            category: Some(CONTENT_FILTER.to_owned()),
            explanation,
        }),
        (Some("refusal"), explanation) => Stop::Refusal(RefusalStop {
            category: None,
            explanation,
        }),
        (_, Some(explanation)) => Stop::Refusal(RefusalStop {
            category: Some(MODEL_REFUSAL.to_owned()),
            explanation: Some(explanation),
        }),
        (Some("length"), None) => Stop::MaxTokens,
        (Some("tool_calls") | Some("function_call"), None) => Stop::ToolUse,
        _ => Stop::EndTurn,
    }
}

fn read_usage(usage: Option<&Value>) -> Option<Usage> {
    let usage = usage.filter(|u| u.is_object())?;
    let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64();
    Some(Usage {
        input_tokens: usage["prompt_tokens"]
            .as_u64()
            .map(|prompt| prompt.saturating_sub(cached.unwrap_or(0))),
        output_tokens: usage["completion_tokens"].as_u64(),
        cache_read_tokens: cached,
        cache_write_tokens: None,
    })
}

pub(crate) fn read_reply(body: &Value) -> Result<Reply, Untranslatable> {
    let choice = body["choices"]
        .get(0)
        .ok_or_else(|| Untranslatable::new("the Chat answer has no choice"))?;
    let message = &choice["message"];
    let mut parts = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        parts.push(Part::Text(text.to_owned()));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        parts.push(Part::ToolCall {
            id: call["id"].as_str().unwrap_or_default().to_owned(),
            name: call["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            arguments: call["function"]["arguments"]
                .as_str()
                .unwrap_or("{}")
                .to_owned(),
        });
    }
    let refusal = message["refusal"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    Ok(Reply {
        id: body["id"].as_str().map(str::to_owned),
        model: body["model"].as_str().map(str::to_owned),
        parts,
        stop: read_stop(choice["finish_reason"].as_str(), refusal),
        usage: read_usage(body.get("usage")).unwrap_or_default(),
    })
}

fn finish_reason(stop: &Stop) -> &'static str {
    match stop {
        Stop::EndTurn | Stop::Sequence(_) => "stop",
        Stop::MaxTokens => "length",
        Stop::ToolUse => "tool_calls",
        Stop::Refusal(_) => "content_filter",
    }
}

/// The text a refusal is written with where the API takes one: the
/// explanation, else the category, else a plain word.
pub(crate) fn refusal_text(stop: &Stop) -> Option<&str> {
    match stop {
        Stop::Refusal(refusal) => Some(
            refusal
                .explanation
                .as_deref()
                .or(refusal.category.as_deref())
                .unwrap_or("refused"),
        ),
        _ => None,
    }
}

fn write_usage(usage: &Usage) -> Value {
    let cached = usage.cache_read_tokens.unwrap_or(0);
    let prompt = usage.input_tokens.unwrap_or(0) + cached + usage.cache_write_tokens.unwrap_or(0);
    let completion = usage.output_tokens.unwrap_or(0);
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached}})
}

/// Now, in Unix seconds, as OpenAI's answers say when they were made.
pub(crate) fn created() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(crate) fn write_reply(reply: &Reply) -> Value {
    let mut text = String::new();
    let mut calls = Vec::new();
    for part in &reply.parts {
        match part {
            Part::Text(piece) => text.push_str(piece),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => calls.push(json!({"id": id,
                "type": "function", "function": {"name": name, "arguments": arguments}})),
            _ => {}
        }
    }
    let mut message = json!({"role": "assistant",
        "content": if text.is_empty() { Value::Null } else { json!(text) },
        "refusal": refusal_text(&reply.stop)});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": reply.id.clone().unwrap_or_else(|| "chatcmpl-translated".to_owned()),
        "object": "chat.completion",
        "created": created(),
        "model": reply.model,
        "choices": [{"index": 0, "message": message, "logprobs": null,
            "finish_reason": finish_reason(&reply.stop)}],
        "usage": write_usage(&reply.usage),
    })
}

// ---- streams ----------------------------------------------------------

/// Reads a Chat Completions stream (one choice).
#[derive(Debug, Default)]
pub(crate) struct StreamReader {
    started: bool,
    /// The chunk index of the tool call being streamed.
    tool: Option<u64>,
    /// The refusal text so far (bounded).
    refusal: String,
    stopped: bool,
}

impl StreamReader {
    fn choice(&mut self, choice: &Value, out: &mut Vec<Event>) -> Result<(), Untranslatable> {
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            out.push(Event::Text(text.to_owned()));
        }
        if let Some(piece) = delta["refusal"].as_str() {
            if self.refusal.len() + piece.len() <= MAX_HELD_BYTES {
                self.refusal.push_str(piece);
            }
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            self.tool_call(call, out)?;
        }
        if let Some(finish) = choice["finish_reason"].as_str() {
            let refusal = Some(std::mem::take(&mut self.refusal)).filter(|r| !r.trim().is_empty());
            out.push(Event::Stop(read_stop(Some(finish), refusal)));
            self.stopped = true;
        }
        Ok(())
    }

    fn tool_call(&mut self, call: &Value, out: &mut Vec<Event>) -> Result<(), Untranslatable> {
        let index = call["index"].as_u64().unwrap_or(0);
        if let Some(id) = call["id"].as_str() {
            if self.tool != Some(index) {
                self.tool = Some(index);
                out.push(Event::ToolStart {
                    id: id.to_owned(),
                    name: call["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                });
            }
        }
        if let Some(fragment) = call["function"]["arguments"]
            .as_str()
            .filter(|a| !a.is_empty())
        {
            if self.tool != Some(index) {
                return Err(Untranslatable::new(
                    "tool call arguments arrived outside their call",
                ));
            }
            out.push(Event::ToolArgs(fragment.to_owned()));
        }
        Ok(())
    }
}

impl ReadStream for StreamReader {
    fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), Untranslatable> {
        if frame.data().map(str::trim) == Some("[DONE]") {
            out.push(Event::Done);
            return Ok(());
        }
        let Some(chunk) = crate::dialect::json_event(frame) else {
            return Ok(());
        };
        if let Some(error) = chunk.get("error") {
            out.push(Event::Error(
                error["message"].as_str().unwrap_or("error").to_owned(),
            ));
            return Ok(());
        }
        if !std::mem::replace(&mut self.started, true) {
            out.push(Event::Start {
                id: chunk["id"].as_str().map(str::to_owned),
                model: chunk["model"].as_str().map(str::to_owned),
            });
        }
        if let Some(choice) = chunk["choices"].get(0) {
            self.choice(choice, out)?;
        }
        if let Some(usage) = read_usage(chunk.get("usage")) {
            out.push(Event::Usage(usage));
        }
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<Event>) {
        // Some compatible servers end after the finish without `[DONE]`.
        if self.stopped {
            out.push(Event::Done);
        }
    }
}

/// Writes a Chat Completions stream of one choice.
#[derive(Debug)]
pub(crate) struct StreamWriter {
    include_usage: bool,
    id: String,
    model: Option<String>,
    created: u64,
    role_sent: bool,
    /// Tool calls written so far.
    tools: u64,
    stop: Option<Stop>,
    usage: Usage,
}

impl StreamWriter {
    pub(crate) fn new(include_usage: bool) -> Self {
        StreamWriter {
            include_usage,
            id: "chatcmpl-translated".to_owned(),
            model: None,
            created: created(),
            role_sent: false,
            tools: 0,
            stop: None,
            usage: Usage::default(),
        }
    }

    fn chunk(&mut self, mut delta: Value, finish: Option<&str>, out: &mut BytesMut) {
        if !std::mem::replace(&mut self.role_sent, true) {
            delta["role"] = json!("assistant");
        }
        let chunk = json!({"id": self.id, "object": "chat.completion.chunk",
            "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        sse(out, None, &chunk);
    }

    fn end(&mut self, out: &mut BytesMut) -> Result<(), Untranslatable> {
        let stop = self
            .stop
            .take()
            .ok_or_else(|| Untranslatable::new("the stream ended without a stop reason"))?;
        if let Some(refusal) = refusal_text(&stop) {
            self.chunk(json!({"refusal": refusal}), None, out);
        }
        self.chunk(json!({}), Some(finish_reason(&stop)), out);
        if self.include_usage {
            let chunk = json!({"id": self.id, "object": "chat.completion.chunk",
                "created": self.created, "model": self.model, "choices": [],
                "usage": write_usage(&self.usage)});
            sse(out, None, &chunk);
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        Ok(())
    }
}

impl WriteStream for StreamWriter {
    fn event(&mut self, event: Event, out: &mut BytesMut) -> Result<(), Untranslatable> {
        match event {
            Event::Start { id, model } => {
                if let Some(id) = id {
                    self.id = id;
                }
                self.model = self.model.take().or(model);
            }
            Event::Text(text) => self.chunk(json!({"content": text}), None, out),
            Event::ToolStart { id, name } => {
                let call = json!({"index": self.tools, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""}});
                self.tools += 1;
                self.chunk(json!({"tool_calls": [call]}), None, out);
            }
            Event::ToolArgs(fragment) => {
                let Some(index) = self.tools.checked_sub(1) else {
                    return Err(Untranslatable::new(
                        "tool call arguments arrived outside their call",
                    ));
                };
                let call = json!({"index": index, "function": {"arguments": fragment}});
                self.chunk(json!({"tool_calls": [call]}), None, out);
            }
            Event::Stop(stop) => self.stop = Some(stop),
            Event::Usage(usage) => merge_usage(&mut self.usage, &usage),
            Event::Error(message) => sse(
                out,
                None,
                &json!({"error": {"message": message, "type": "server_error"}}),
            ),
            Event::Done => self.end(out)?,
        }
        Ok(())
    }
}
