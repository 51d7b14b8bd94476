//! Gemini `generateContent` through the shared form.
//!
//! Sources: Gemini API reference "models.generateContent" and
//! "models.streamGenerateContent" (`Content`, `Part` with `text`,
//! `inlineData`, `functionCall`, `functionResponse`, `systemInstruction`,
//! `tools[].functionDeclarations` with `parametersJsonSchema`,
//! `toolConfig.functionCallingConfig`, `GenerationConfig`
//! `maxOutputTokens`/`stopSequences` (at most 5)/`temperature`/`topP`/
//! `topK`, `FinishReason`, `PromptFeedback.blockReason`,
//! `UsageMetadata`), "Thought signatures" (a function call in history that
//! no Gemini model made carries the documented validator-skipping
//! signature, which Gemini 3 requires).

use bytes::BytesMut;
use serde_json::{json, Map, Value};

use super::{finish, Finish};
use crate::dialect::facts::{ClientSide, TargetSide, Translation};
use crate::dialect::translate::{
    merge_usage, only_known_fields, result_text, sse, strings, Event, ImageSource, Part, Prompt,
    ReadStream, RefusalStop, Reply, Role, Stop, Tool, ToolChoice, Untranslatable, WriteStream,
    MAX_HELD_BYTES,
};
use crate::refusal::{Usage, RECITATION_CATEGORY};
use crate::sse::Frame;

const API: &str = "Gemini";

/// Gemini takes at most this many stop sequences.
const MAX_STOP_SEQUENCES: usize = 5;

/// The signature Gemini documents for function calls in a history it did
/// not produce.
const FOREIGN_SIGNATURE: &str = "skip_thought_signature_validator";

/// Gemini's part in the translation: a client's API, and the API a
/// fallback to Google is sent in.
pub(crate) const TRANSLATION: Translation = Translation {
    client: Some(ClientSide {
        read_request,
        write_reply: |reply| Ok(write_reply(reply)),
        stream_writer: |_include_usage| Box::<StreamWriter>::default(),
    }),
    target: Some(TargetSide {
        write_request: |prompt, model| Ok((path(model, prompt.stream), write_request(prompt)?)),
        read_reply,
        stream_reader: || Box::<StreamReader>::default(),
        takes_tool_name,
        headers: &[],
        key_header: ("x-goog-api-key", str::to_owned),
    }),
    no_target: None,
};

/// Whether `name` is a tool name Gemini takes: a letter or `_` first, then
/// letters, digits, `_`, `.`, `:` or `-`, at most 64
/// (`FunctionDeclaration.name`).
fn takes_tool_name(name: &str) -> bool {
    let Some(first) = name.bytes().next() else {
        return false;
    };
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':');
    name.len() <= 64 && name.bytes().all(allowed) && (first.is_ascii_alphabetic() || first == b'_')
}

/// The request path for `model`, streamed as SSE or not.
fn path(model: &str, stream: bool) -> String {
    if stream {
        format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
    } else {
        format!("/v1beta/models/{model}:generateContent")
    }
}

/// A field under its REST name or its proto name (the API takes both).
fn field<'a>(body: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    body.get(camel)
        .or_else(|| body.get(snake))
        .filter(|v| !v.is_null())
}

// ---- requests ---------------------------------------------------------

/// Calls read so far, to give function responses without an id the id of
/// the call they answer.
#[derive(Default)]
struct Calls {
    made: Vec<(String, String)>,
    answered: Vec<String>,
}

impl Calls {
    fn call_id(&mut self, id: Option<&str>, name: &str) -> String {
        let id = id
            .map(str::to_owned)
            .unwrap_or_else(|| format!("call_{}", self.made.len()));
        self.made.push((id.clone(), name.to_owned()));
        id
    }

    fn answer_id(&mut self, id: Option<&str>, name: &str) -> String {
        let found = id.map(str::to_owned).or_else(|| {
            self.made
                .iter()
                .find(|(id, made)| made == name && !self.answered.contains(id))
                .map(|(id, _)| id.clone())
        });
        let id = found.unwrap_or_else(|| format!("call_{name}"));
        self.answered.push(id.clone());
        id
    }
}

pub(crate) fn read_request(body: &Value) -> Result<Prompt, Untranslatable> {
    only_known_fields(
        API,
        body,
        &[
            "contents",
            "systemInstruction",
            "system_instruction",
            "generationConfig",
            "generation_config",
            "tools",
            "toolConfig",
            "tool_config",
            "model",
        ],
        // Gemini's own filter thresholds, and billing labels.
        &["safetySettings", "safety_settings", "labels"],
    )?;
    let mut prompt = Prompt {
        system: read_system(field(body, "systemInstruction", "system_instruction"))?,
        tools: read_tools(body.get("tools"))?,
        tool_choice: read_tool_choice(field(body, "toolConfig", "tool_config"))?,
        ..Prompt::default()
    };
    if let Some(config) = field(body, "generationConfig", "generation_config") {
        read_config(config, &mut prompt)?;
    }
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .ok_or_else(|| Untranslatable::new("`contents` is not a list"))?;
    let mut calls = Calls::default();
    for content in contents {
        let role = match content.get("role").and_then(Value::as_str) {
            None | Some("user") => Role::User,
            Some("model") => Role::Assistant,
            _ => return Err(Untranslatable::new("a content's role has no translation")),
        };
        for part in content
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(read) = read_part(part, &mut calls)? {
                prompt.push(role, read);
            }
        }
    }
    Ok(prompt)
}

fn read_system(system: Option<&Value>) -> Result<Option<String>, Untranslatable> {
    let Some(system) = system else {
        return Ok(None);
    };
    if let Some(text) = system.as_str() {
        return Ok(Some(text.to_owned()));
    }
    let mut texts = Vec::new();
    for part in system
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        texts.push(
            part.get("text")
                .and_then(Value::as_str)
                .ok_or_else(|| Untranslatable::new("a system instruction part is not text"))?,
        );
    }
    Ok(Some(texts.join("\n\n")).filter(|t| !t.is_empty()))
}

fn read_config(config: &Value, prompt: &mut Prompt) -> Result<(), Untranslatable> {
    for (key, value) in config.as_object().into_iter().flatten() {
        match key.as_str() {
            "maxOutputTokens" | "max_output_tokens" => prompt.max_tokens = value.as_u64(),
            "stopSequences" | "stop_sequences" => prompt.stop = strings(Some(value))?,
            "temperature" => prompt.temperature = value.as_f64(),
            "topP" | "top_p" => prompt.top_p = value.as_f64(),
            "topK" | "top_k" => prompt.top_k = value.as_f64().map(|k| k as u64),
            "candidateCount" | "candidate_count" if value.as_u64() == Some(1) => {}
            // Thinking is the serving model's own.
            "thinkingConfig" | "thinking_config" => {}
            "responseMimeType" | "response_mime_type" if value == "text/plain" => {}
            _ if value.is_null() => {}
            other => return Err(Untranslatable::field("Gemini generationConfig", other)),
        }
    }
    Ok(())
}

/// Gemini's schema types are upper case in its own SDKs' JSON (`OBJECT`);
/// JSON Schema's are lower case.
fn json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| match (key.as_str(), value) {
                    ("type", Value::String(kind)) => {
                        (key.clone(), json!(kind.to_ascii_lowercase()))
                    }
                    _ => (key.clone(), json_schema(value)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(json_schema).collect()),
        other => other.clone(),
    }
}

fn read_tools(tools: Option<&Value>) -> Result<Vec<Tool>, Untranslatable> {
    let mut read = Vec::new();
    for tool in tools.and_then(Value::as_array).into_iter().flatten() {
        let declarations = field(tool, "functionDeclarations", "function_declarations")
            .and_then(Value::as_array)
            .ok_or_else(|| Untranslatable::new("a Gemini tool that is not a function"))?;
        if tool.as_object().is_some_and(|t| t.len() > 1) {
            return Err(Untranslatable::new("a Gemini tool that is not a function"));
        }
        for declaration in declarations {
            let parameters = field(
                declaration,
                "parametersJsonSchema",
                "parameters_json_schema",
            )
            .cloned()
            .or_else(|| declaration.get("parameters").map(json_schema))
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            read.push(Tool {
                name: declaration["name"]
                    .as_str()
                    .ok_or_else(|| Untranslatable::new("a function has no name"))?
                    .to_owned(),
                description: declaration["description"].as_str().map(str::to_owned),
                parameters,
            });
        }
    }
    Ok(read)
}

fn read_tool_choice(config: Option<&Value>) -> Result<Option<ToolChoice>, Untranslatable> {
    let Some(calling) =
        config.and_then(|c| field(c, "functionCallingConfig", "function_calling_config"))
    else {
        return Ok(None);
    };
    let allowed: Vec<&str> = field(calling, "allowedFunctionNames", "allowed_function_names")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    Ok(Some(match (calling["mode"].as_str(), allowed.as_slice()) {
        (None | Some("AUTO"), []) => ToolChoice::Auto,
        (Some("ANY"), []) => ToolChoice::Any,
        (Some("ANY"), [one]) => ToolChoice::Named((*one).to_owned()),
        (Some("NONE"), _) => ToolChoice::None,
        _ => {
            return Err(Untranslatable::new(
                "a Gemini function calling mode has no translation",
            ))
        }
    }))
}

fn read_part(part: &Value, calls: &mut Calls) -> Result<Option<Part>, Untranslatable> {
    if part.get("thought").and_then(Value::as_bool) == Some(true) {
        return Ok(None);
    }
    if let Some(text) = part.get("text").and_then(Value::as_str) {
        return Ok((!text.is_empty()).then(|| Part::Text(text.to_owned())));
    }
    if let Some(inline) = field(part, "inlineData", "inline_data") {
        let media_type = field(inline, "mimeType", "mime_type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !media_type.starts_with("image/") {
            return Err(Untranslatable::new(
                "Gemini inline data that is not an image",
            ));
        }
        return Ok(Some(Part::Image(ImageSource::Base64 {
            media_type: media_type.to_owned(),
            data: inline["data"].as_str().unwrap_or_default().to_owned(),
        })));
    }
    if let Some(call) = field(part, "functionCall", "function_call") {
        let name = call["name"].as_str().unwrap_or_default();
        return Ok(Some(Part::ToolCall {
            id: calls.call_id(call["id"].as_str(), name),
            name: name.to_owned(),
            arguments: call
                .get("args")
                .cloned()
                .unwrap_or_else(|| json!({}))
                .to_string(),
        }));
    }
    if let Some(response) = field(part, "functionResponse", "function_response") {
        let name = response["name"].as_str().unwrap_or_default();
        let (text, is_error) = response_text(response.get("response").unwrap_or(&Value::Null));
        return Ok(Some(Part::ToolResult {
            id: calls.answer_id(response["id"].as_str(), name),
            name: name.to_owned(),
            content: if text.is_empty() {
                Vec::new()
            } else {
                vec![Part::Text(text)]
            },
            is_error,
        }));
    }
    let kind = part
        .as_object()
        .and_then(|p| p.keys().find(|k| !k.starts_with("thought")))
        .map(String::as_str)
        .unwrap_or("empty");
    Err(Untranslatable::new(format!(
        "Gemini `{kind}` parts have no translation"
    )))
}

/// A function response as text: its `output` (or `error`) when that is a
/// string, else the whole response as JSON.
fn response_text(response: &Value) -> (String, bool) {
    if let Some(error) = response.get("error") {
        let text = error
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string());
        return (text, true);
    }
    match response.get("output").or_else(|| response.get("result")) {
        Some(Value::String(text)) if response.as_object().is_some_and(|r| r.len() == 1) => {
            (text.clone(), false)
        }
        _ => (response.to_string(), false),
    }
}

pub(crate) fn write_request(prompt: &Prompt) -> Result<Value, Untranslatable> {
    let mut body = Map::new();
    let contents: Result<Vec<Value>, _> = prompt
        .turns
        .iter()
        .map(|turn| {
            let parts: Result<Vec<Value>, _> = turn.parts.iter().map(write_part).collect();
            let role = match turn.role {
                Role::User => "user",
                Role::Assistant => "model",
            };
            Ok(json!({"role": role, "parts": parts?}))
        })
        .collect();
    body.insert("contents".into(), Value::Array(contents?));
    if let Some(system) = &prompt.system {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    write_tools(prompt, &mut body);
    let mut config = Map::new();
    if let Some(max) = prompt.max_tokens {
        config.insert("maxOutputTokens".into(), json!(max));
    }
    if prompt.stop.len() > MAX_STOP_SEQUENCES {
        return Err(Untranslatable::new("more than 5 stop sequences"));
    }
    if !prompt.stop.is_empty() {
        config.insert("stopSequences".into(), json!(prompt.stop));
    }
    if let Some(temperature) = prompt.temperature {
        config.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = prompt.top_p {
        config.insert("topP".into(), json!(top_p));
    }
    if let Some(top_k) = prompt.top_k {
        config.insert("topK".into(), json!(top_k));
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    Ok(Value::Object(body))
}

fn write_tools(prompt: &Prompt, body: &mut Map<String, Value>) {
    if !prompt.tools.is_empty() {
        let declarations: Vec<Value> = prompt
            .tools
            .iter()
            .map(|tool| {
                let mut declaration =
                    json!({"name": tool.name, "parametersJsonSchema": tool.parameters});
                if let Some(description) = &tool.description {
                    declaration["description"] = json!(description);
                }
                declaration
            })
            .collect();
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations}]),
        );
    }
    let config = match &prompt.tool_choice {
        None => return,
        Some(ToolChoice::Auto) => json!({"mode": "AUTO"}),
        Some(ToolChoice::Any) => json!({"mode": "ANY"}),
        Some(ToolChoice::None) => json!({"mode": "NONE"}),
        Some(ToolChoice::Named(name)) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    };
    body.insert(
        "toolConfig".into(),
        json!({"functionCallingConfig": config}),
    );
}

fn write_part(part: &Part) -> Result<Value, Untranslatable> {
    Ok(match part {
        Part::Text(text) => json!({"text": text}),
        Part::Image(ImageSource::Base64 { media_type, data }) => {
            json!({"inlineData": {"mimeType": media_type, "data": data}})
        }
        Part::Image(ImageSource::Url(_)) => {
            return Err(Untranslatable::new("Gemini takes no image URLs inline"))
        }
        Part::ToolCall {
            id,
            name,
            arguments,
        } => json!({
            "functionCall": {"id": id, "name": name,
                "args": crate::dialect::anthropic::translate::arguments_object(arguments)?},
            "thoughtSignature": FOREIGN_SIGNATURE}),
        Part::ToolResult {
            id,
            name,
            content,
            is_error,
        } => {
            if name.is_empty() {
                return Err(Untranslatable::new(
                    "a tool result whose call is not in the conversation",
                ));
            }
            let text = result_text(content)?;
            let response = if *is_error {
                json!({"error": text})
            } else {
                json!({"output": text})
            };
            json!({"functionResponse": {"id": id, "name": name, "response": response}})
        }
    })
}

// ---- whole answers ----------------------------------------------------

fn read_usage(chunk: &Value) -> Option<Usage> {
    let metadata = chunk.get("usageMetadata")?;
    let cached = metadata["cachedContentTokenCount"].as_u64();
    let output = match (
        metadata["candidatesTokenCount"].as_u64(),
        metadata["thoughtsTokenCount"].as_u64(),
    ) {
        (None, None) => None,
        (c, t) => Some(c.unwrap_or(0) + t.unwrap_or(0)),
    };
    Some(Usage {
        input_tokens: metadata["promptTokenCount"]
            .as_u64()
            .map(|p| p.saturating_sub(cached.unwrap_or(0))),
        output_tokens: output,
        cache_read_tokens: cached,
        cache_write_tokens: None,
    })
}

fn prompt_block(chunk: &Value) -> Option<Stop> {
    let feedback = chunk.get("promptFeedback")?;
    let category = feedback["blockReason"].as_str().map(str::to_owned);
    let explanation = feedback["blockReasonMessage"].as_str().map(str::to_owned);
    (category.is_some() || explanation.is_some()).then_some(Stop::Refusal(RefusalStop {
        category,
        explanation,
    }))
}

/// A candidate's stop, its refusals read as the Gemini dialect reads them.
fn read_stop(candidate: &Value, called: bool) -> Option<Stop> {
    let reason = candidate["finishReason"].as_str()?;
    Some(match (reason, finish(reason)) {
        ("MAX_TOKENS", _) => Stop::MaxTokens,
        (_, Finish::Refusal(category)) => Stop::Refusal(RefusalStop {
            category: Some(category.to_owned()),
            explanation: candidate["finishMessage"].as_str().map(str::to_owned),
        }),
        _ if called => Stop::ToolUse,
        _ => Stop::EndTurn,
    })
}

/// A call id for a Gemini function call that came without one.
fn call_id(response: Option<&str>, index: usize) -> String {
    let base: String = response
        .unwrap_or("gemini")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    format!("call_{base}_{index}")
}

fn candidate_parts(candidate: &Value) -> impl Iterator<Item = &Value> {
    candidate["content"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
}

pub(crate) fn read_reply(body: &Value) -> Result<Reply, Untranslatable> {
    let id = body["responseId"].as_str().map(str::to_owned);
    let mut reply = Reply {
        id: id.clone(),
        model: body["modelVersion"].as_str().map(str::to_owned),
        parts: Vec::new(),
        stop: Stop::EndTurn,
        usage: read_usage(body).unwrap_or_default(),
    };
    if let Some(blocked) = prompt_block(body) {
        reply.stop = blocked;
        return Ok(reply);
    }
    let candidate = body["candidates"]
        .get(0)
        .ok_or_else(|| Untranslatable::new("the Gemini answer has no candidate"))?;
    for part in candidate_parts(candidate) {
        if part["thought"].as_bool() == Some(true) {
            continue;
        }
        if let Some(text) = part["text"].as_str().filter(|t| !t.is_empty()) {
            reply.parts.push(Part::Text(text.to_owned()));
        } else if let Some(call) = part.get("functionCall") {
            let index = reply.parts.len();
            reply.parts.push(Part::ToolCall {
                id: call["id"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| call_id(id.as_deref(), index)),
                name: call["name"].as_str().unwrap_or_default().to_owned(),
                arguments: call
                    .get("args")
                    .cloned()
                    .unwrap_or_else(|| json!({}))
                    .to_string(),
            });
        }
    }
    let called = reply
        .parts
        .iter()
        .any(|p| matches!(p, Part::ToolCall { .. }));
    reply.stop = read_stop(candidate, called).unwrap_or(Stop::EndTurn);
    Ok(reply)
}

/// The finish reason a stop is written as: a copyright stop as one, every
/// other refusal as `SAFETY`.
fn finish_reason(stop: &Stop) -> (&'static str, Option<&str>) {
    match stop {
        Stop::MaxTokens => ("MAX_TOKENS", None),
        Stop::Refusal(refusal) if refusal.category.as_deref() == Some(RECITATION_CATEGORY) => {
            ("RECITATION", refusal.explanation.as_deref())
        }
        Stop::Refusal(refusal) => ("SAFETY", refusal.explanation.as_deref()),
        _ => ("STOP", None),
    }
}

fn write_usage(usage: &Usage) -> Value {
    let cached = usage.cache_read_tokens.unwrap_or(0);
    let prompt = usage.input_tokens.unwrap_or(0) + cached + usage.cache_write_tokens.unwrap_or(0);
    let output = usage.output_tokens.unwrap_or(0);
    let mut written = json!({"promptTokenCount": prompt, "candidatesTokenCount": output,
        "totalTokenCount": prompt + output});
    if cached > 0 {
        written["cachedContentTokenCount"] = json!(cached);
    }
    written
}

fn write_call(id: &str, name: &str, arguments: &str) -> Value {
    let args = crate::dialect::anthropic::translate::arguments_object(arguments)
        .unwrap_or_else(|_| json!({}));
    json!({"functionCall": {"id": id, "name": name, "args": args}})
}

pub(crate) fn write_reply(reply: &Reply) -> Value {
    let parts: Vec<Value> = reply
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) => Some(json!({"text": text})),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(write_call(id, name, arguments)),
            _ => None,
        })
        .collect();
    let (reason, message) = finish_reason(&reply.stop);
    let mut candidate = json!({"index": 0, "finishReason": reason});
    if !parts.is_empty() {
        candidate["content"] = json!({"role": "model", "parts": parts});
    }
    if let Some(message) = message {
        candidate["finishMessage"] = json!(message);
    }
    json!({"candidates": [candidate], "usageMetadata": write_usage(&reply.usage),
        "modelVersion": reply.model, "responseId": reply.id})
}

// ---- streams ----------------------------------------------------------

/// Reads a Gemini stream (`alt=sse`): every chunk is a whole
/// `GenerateContentResponse`, and the stream ends without a closing event.
#[derive(Debug, Default)]
pub(crate) struct StreamReader {
    started: bool,
    id: Option<String>,
    calls: usize,
    stopped: bool,
}

impl ReadStream for StreamReader {
    fn frame(&mut self, frame: &Frame, out: &mut Vec<Event>) -> Result<(), Untranslatable> {
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
            self.id = chunk["responseId"].as_str().map(str::to_owned);
            out.push(Event::Start {
                id: self.id.clone(),
                model: chunk["modelVersion"].as_str().map(str::to_owned),
            });
        }
        if let Some(blocked) = prompt_block(&chunk) {
            out.push(Event::Stop(blocked));
            self.stopped = true;
        }
        if let Some(candidate) = chunk["candidates"].get(0) {
            for part in candidate_parts(candidate) {
                if part["thought"].as_bool() == Some(true) {
                    continue;
                }
                if let Some(text) = part["text"].as_str().filter(|t| !t.is_empty()) {
                    out.push(Event::Text(text.to_owned()));
                } else if let Some(call) = part.get("functionCall") {
                    out.push(Event::ToolStart {
                        id: call["id"]
                            .as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| call_id(self.id.as_deref(), self.calls)),
                        name: call["name"].as_str().unwrap_or_default().to_owned(),
                    });
                    self.calls += 1;
                    let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
                    out.push(Event::ToolArgs(args.to_string()));
                }
            }
            if let Some(stop) = read_stop(candidate, self.calls > 0) {
                out.push(Event::Stop(stop));
                self.stopped = true;
            }
        }
        if let Some(usage) = read_usage(&chunk) {
            out.push(Event::Usage(usage));
        }
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<Event>) {
        if self.stopped {
            out.push(Event::Done);
        }
    }
}

/// A tool call being gathered: Gemini sends each call whole.
#[derive(Debug)]
struct Gathering {
    id: String,
    name: String,
    arguments: String,
}

/// Writes a Gemini stream: text as it comes, each tool call once whole.
#[derive(Debug, Default)]
pub(crate) struct StreamWriter {
    id: Option<String>,
    model: Option<String>,
    call: Option<Gathering>,
    stop: Option<Stop>,
    usage: Usage,
}

impl StreamWriter {
    fn chunk(&self, candidate: Value, usage: bool, out: &mut BytesMut) {
        let mut chunk = json!({"candidates": [candidate], "modelVersion": self.model,
            "responseId": self.id});
        if usage {
            chunk["usageMetadata"] = write_usage(&self.usage);
        }
        sse(out, None, &chunk);
    }

    fn flush_call(&mut self, out: &mut BytesMut) {
        if let Some(call) = self.call.take() {
            let part = write_call(&call.id, &call.name, &call.arguments);
            self.chunk(
                json!({"index": 0, "content": {"role": "model", "parts": [part]}}),
                false,
                out,
            );
        }
    }
}

impl WriteStream for StreamWriter {
    fn event(&mut self, event: Event, out: &mut BytesMut) -> Result<(), Untranslatable> {
        if !matches!(event, Event::ToolArgs(_) | Event::Usage(_) | Event::Stop(_)) {
            self.flush_call(out);
        }
        match event {
            Event::Start { id, model } => {
                self.id = self.id.take().or(id);
                self.model = self.model.take().or(model);
            }
            Event::Text(text) => self.chunk(
                json!({"index": 0, "content": {"role": "model", "parts": [{"text": text}]}}),
                false,
                out,
            ),
            Event::ToolStart { id, name } => {
                self.call = Some(Gathering {
                    id,
                    name,
                    arguments: String::new(),
                })
            }
            Event::ToolArgs(fragment) => {
                let call = self.call.as_mut().ok_or_else(|| {
                    Untranslatable::new("tool call arguments arrived outside their call")
                })?;
                if call.arguments.len() + fragment.len() > MAX_HELD_BYTES {
                    return Err(Untranslatable::new("a tool call's arguments are too large"));
                }
                call.arguments.push_str(&fragment);
            }
            Event::Stop(stop) => self.stop = Some(stop),
            Event::Usage(usage) => merge_usage(&mut self.usage, &usage),
            Event::Error(message) => sse(
                out,
                None,
                &json!({"error": {"code": 500, "message": message, "status": "INTERNAL"}}),
            ),
            Event::Done => {
                let stop = self
                    .stop
                    .take()
                    .ok_or_else(|| Untranslatable::new("the stream ended without a stop reason"))?;
                let (reason, message) = finish_reason(&stop);
                let mut candidate = json!({"index": 0, "finishReason": reason});
                if let Some(message) = message {
                    candidate["finishMessage"] = json!(message);
                }
                self.chunk(candidate, true, out);
            }
        }
        Ok(())
    }
}
