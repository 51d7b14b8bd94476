//! The providers' request contract, executable: every request is checked
//! against the documented rules of its wire API (told from its path), and
//! a request that breaks one is answered the way the provider answers it,
//! in the API's own error shape: HTTP 400, 404 for a path no provider
//! serves, or 501 for a real endpoint the contract has no rules for. A
//! rewrite of the guard's that a real API would reject thus fails where it
//! would fail in production.
//!
//! The strict [`Simulator`](super::Simulator) applies it to every request
//! it receives, and every scripted upstream of the crate's tests does.
//!
//! ```
//! use refusal_guard_testkit::contract::{Api, Contract};
//!
//! let headers = http::HeaderMap::new();
//! let body = br#"{"model":"claude-opus-4-7","max_tokens":64,"messages":[
//!     {"role":"user","content":[{"type":"text","text":"note"},
//!         {"type":"tool_result","tool_use_id":"t","content":"r"}]}]}"#;
//! let broken = Contract::new().check("POST", "/v1/messages", &headers, body).unwrap_err();
//! assert_eq!((broken.api, broken.rule), (Some(Api::Anthropic), "A4"));
//! assert_eq!(broken.status(), 400);
//! let unknown = Contract::new().check("POST", "/v1/other", &headers, b"{}").unwrap_err();
//! assert_eq!(unknown.status(), 404);
//! ```
//!
//! # The rules, with their sources
//!
//! Anthropic Messages, first party (`POST .../v1/messages`) and Claude on
//! Vertex AI (`.../publishers/anthropic/models/{model}:rawPredict` and
//! `:streamRawPredict`). Sources: platform docs "Messages API" (create
//! message), "Refusals and fallback", "Fallback credit", "SDK middleware",
//! "Claude on Vertex AI"; anthropic-sdk-python
//! `lib/middleware/_fallbacks.py` (in `src/anthropic`), anthropic-sdk-typescript
//! `src/lib/middleware.ts`, anthropic-sdk-go `lib/betafallback`.
//!
//! - `A1` the body is a JSON object (the request is an object of named
//!   parameters: anthropic-sdk-python `types/message_create_params.py`,
//!   `MessageCreateParamsBase`);
//! - `A2` first party: `model` (a string) and `max_tokens` (an integer) are
//!   present; Vertex: `anthropic_version` is `vertex-2023-10-16` ("Claude
//!   on Vertex AI"; the official SDKs' Vertex clients send exactly it,
//!   anthropic-sdk-python `lib/vertex/_client.py` `DEFAULT_VERSION`),
//!   `max_tokens` is in the body and `model` is not (it is in the path);
//! - `A3` `messages` is a non-empty array of objects whose `role` is `user`,
//!   `assistant` or, but on Bedrock's InvokeModel, `system`; every message has
//!   content (a non-empty string or array) but a final assistant turn ("all
//!   messages must have non-empty content except for the optional final
//!   assistant message"), and no text block is empty ("text content blocks
//!   must be non-empty"). The first party takes an assistant turn first;
//!   Bedrock does not ("first message must use the "user" role",
//!   anthropic-sdk-typescript#622). A mid-conversation `system` message (or
//!   a run of them, one section) is never first, immediately follows a
//!   `user` turn or an `assistant` turn ending in a server tool result, and
//!   ends the array or precedes an `assistant` turn ("Mid-conversation
//!   system messages", Limitations: "Placing it elsewhere returns a 400
//!   error"; the API's words: "role 'system' must follow a 'user' message
//!   or an 'assistant' message ending in a server tool result"). Which
//!   models take them (and under which beta) is not checked;
//! - `A4` in a user turn, `tool_result` blocks come before any other block
//!   ("Handle tool calls": "In the user message containing tool results,
//!   the tool_result blocks must come FIRST in the content array. Any text
//!   must come AFTER all tool results.");
//! - `A5` consecutive turns of one role are combined into one turn (the
//!   reference's `messages`: "Consecutive `user` or `assistant` turns in
//!   your request will be combined into a single turn"), so several
//!   assistant messages at the end are one prefill; a final assistant
//!   turn's text does not end in whitespace ("final assistant content
//!   cannot end with trailing whitespace") and its last block is not
//!   `thinking` ("The final block in an assistant message cannot be
//!   `thinking`");
//! - `A6` `fallbacks` is `"default"` or a list of 1 to 3 objects, each with a
//!   `model`, the models distinct and none the requested model ("Refusals
//!   and fallback", Naming your own fallback models: "you can set
//!   `fallbacks` to a list of up to three models", "Each must be distinct
//!   from the other entries and from the requested model"; anthropic-sdk-python
//!   `types/beta/beta_fallbacks_param.py`: a list of entries or `"default"`);
//! - `A7` `fallbacks` needs an `anthropic-beta` with
//!   `server-side-fallback-2026-06-01` or `-07-01`; `"default"` needs
//!   `-07-01` ("Refusals and fallback": "The beta header must carry exactly
//!   the date `2026-07-01`, which supports both `"default"` and the
//!   explicit-list form, or `2026-06-01`, which accepts only the
//!   explicit-list form");
//! - `A8` server-side fallback is first party only: no `fallbacks` on
//!   Vertex (nor Bedrock or Foundry);
//! - `A9` `fallbacks` and `fallback_credit_token` never in one request, in
//!   either token mode (a fallback that presents a credit token drops
//!   `fallbacks`; anthropic-sdk-python
//!   `types/beta/beta_fallback_credit_token_param.py`: "Two failures stay
//!   hard in both modes: a malformed token, and combining
//!   `fallback_credit_token` with `fallbacks`");
//! - `A10` `fallback_credit_token` needs `fallback-credit-2026-06-01` or
//!   `-07-01`, or the `server-side-fallback` beta of either date, which
//!   "also grants the same fields" ("Fallback credit": "Send the retry
//!   with the same fallback-credit-2026-06-01 beta header. The retry needs
//!   the header to redeem the token"); a string, or the object form `{token, mode}` with
//!   `mode`, when given, `strict` or `best_effort`, which needs `-07-01`
//!   (`beta_fallback_credit_token_param.py`: "Requires `anthropic-beta:
//!   fallback-credit-2026-07-01`; without that header the field accepts the
//!   bare string only", and a mode-less object is `strict`);
//! - `A11` every `tool_use` of an assistant turn is answered by a
//!   `tool_result` in the next turn, and every `tool_result` answers a
//!   `tool_use` of the turn before it (the API's own 400s: "`tool_use` ids
//!   were found without `tool_result` blocks immediately after", "unexpected
//!   `tool_use_id` found in `tool_result` blocks"; "Tool use" guide);
//! - `A12` `temperature` from 0 to 1, `stop_sequences` an array of strings,
//!   each custom tool's `name` matching `^[a-zA-Z0-9_-]{1,64}$` with an
//!   object `input_schema`, `tool_choice.type` one of `auto`, `any`,
//!   `tool` (with a `name`) or `none` (anthropic-sdk-python
//!   `types/message_create_params.py`: `temperature` "Ranges from `0.0` to
//!   `1.0`", `stop_sequences: SequenceNotStr[str]`; `types/tool_param.py`:
//!   `name`, `input_schema` required; `types/tool_choice_param.py`: the four
//!   choices; the name pattern is the API's own 400, "String should match
//!   pattern '^[a-zA-Z0-9_-]{1,64}$'", as "Define tools" gives it);
//! - `A13` each `fallbacks` entry carries only `model`, `max_tokens`,
//!   `thinking`, `output_config` and `speed` (anthropic-sdk-python
//!   `types/beta/beta_fallback_param.py`: any other key is rejected at parse
//!   time);
//! - `A14` each `fallbacks` entry is one of the requested model's allowed
//!   fallback models (the Models API's `allowed_fallback_models`), for the
//!   models whose list is known; a model whose list is empty answers any
//!   `fallbacks` with "'MODEL' does not support the `fallbacks` parameter";
//! - `A15` a model of the Claude 4.6 generation or later (and Fable 5,
//!   Mythos 5) rejects a request ending in an assistant turn ("This model
//!   does not support assistant message prefill") unless it presents a
//!   `fallback_credit_token`; a request ending in one names no such model
//!   in `fallbacks` (it must be valid sent to every model named);
//! - `A16` token counting (`POST .../v1/messages/count_tokens`, and Vertex
//!   AI's `.../publishers/anthropic/models/count-tokens:rawPredict`) takes
//!   the Messages body without `max_tokens` and `stream`: `model` is
//!   present, neither of those is, and `A3`-`A5`, `A11`, `A12` apply to the
//!   rest (API reference "Count tokens in a Message"; anthropic-sdk-python
//!   `types/message_count_tokens_params.py`, which has no `max_tokens` or
//!   `stream`, and `lib/vertex/_client.py`, which sends the body, `model`
//!   included, to `count-tokens:rawPredict`; the API's 400 to a forwarded
//!   Messages body: "max_tokens: Extra inputs are not permitted").
//!
//! OpenAI Chat Completions (`POST .../chat/completions`), also Azure OpenAI
//! (`/openai/deployments/{deployment}/chat/completions`, model in the path).
//! Sources: OpenAI API reference "Create chat completion"; Azure OpenAI
//! "REST API reference", chat completions.
//!
//! - `C1` the body is a JSON object; OpenAI: `model` is a string
//!   (openai-python `types/chat/completion_create_params.py`: `model:
//!   Required[...]`; Azure names the deployment in the path instead);
//! - `C2` `messages` is a non-empty array; each `role` is `system`,
//!   `developer`, `user`, `assistant`, `tool` or `function` (openai-python
//!   `types/chat/chat_completion_message_param.py`, the union of the six
//!   message params);
//! - `C3` a `tool` message answers, by `tool_call_id`, a call of the
//!   assistant message with `tool_calls` it follows (only tool messages in
//!   between), and every such call is answered before the next other
//!   message (the API's own 400s: "messages with role 'tool' must be a
//!   response to a preceding message with 'tool_calls'", "An assistant
//!   message with 'tool_calls' must be followed by tool messages responding
//!   to each 'tool_call_id'");
//! - `C4` `n`, when present, is an integer from 1 to 128 (source: only the
//!   section's; the upper bound was not found in the docs searched);
//! - `C5` `stop` a string or up to 4 strings, `temperature` from 0 to 2,
//!   each tool `{"type": "function", "function": {"name", ...}}` (or
//!   `custom`) with a name matching `^[a-zA-Z0-9_-]{1,64}$`, `tool_choice`
//!   `none`, `auto`, `required` or a named function (openai-python
//!   `completion_create_params.py`: `stop` "Up to 4 sequences",
//!   `temperature` "between 0 and 2", `tool_choice`;
//!   `shared_params/function_definition.py`: the name "Must be a-z, A-Z,
//!   0-9, or contain underscores and dashes, with a maximum length of 64").
//!
//! OpenAI Responses (`POST .../responses`). Source: OpenAI API reference
//! "Create a model response" (input items).
//!
//! - `R1` the body is a JSON object; `model` is a string (not on Azure
//!   deployment paths) (openai-python
//!   `types/responses/response_create_params.py`: `model`);
//! - `R2` `input`, when present, is a string or an array of items: a message
//!   (`role` `user`, `assistant`, `system` or `developer`, `content` a string
//!   or an array of parts) or a typed item (`type` a string) (openai-python
//!   `response_create_params.py`: `input: Union[str, ResponseInputParam]`;
//!   `types/responses/easy_input_message_param.py`: the four roles and the
//!   two forms of `content`).
//!
//! Gemini (`...:generateContent`, `...:streamGenerateContent`), Google AI and
//! Vertex AI. Sources: Gemini API reference "models.generateContent"
//! (`Content`, `Part`, `GenerationConfig`); Vertex AI "GenerateContentRequest".
//!
//! - `G1` the body is a JSON object with a non-empty `contents` array
//!   ("models.generateContent": `contents[]` Required; the API's 400
//!   "contents is not specified");
//! - `G2` each content's `role`, when present, is `user` or `model`, and its
//!   `parts` is a non-empty array of objects each carrying data (`text` a
//!   string, or another data field) (`Content`: "Must be either 'user' or
//!   'model'"; `Part`, whose `data` is a union: the API's 400 "required
//!   oneof field 'data' must have one initialized field");
//! - `G3` `generationConfig.candidateCount`, when present, is an integer
//!   from 1 to 8 (source: only the section's; `GenerationConfig` documents
//!   the field, the upper bound was not found in the docs searched);
//! - `G4` `generationConfig.stopSequences` at most 5 strings,
//!   `generationConfig.temperature` from 0 to 2, and each
//!   `functionDeclarations` entry named as its API says. The Gemini API
//!   (`generativelanguage`, paths `/v1beta/models/...`): 1 to 64 letters,
//!   digits, `_`, `:`, `.` or `-` (Gemini API reference,
//!   `google.ai.generativelanguage.v1beta` `FunctionDeclaration.name`:
//!   "Must be a-z, A-Z, 0-9, or contain underscores, colons, dots, and
//!   dashes, with a maximum length of 64"), starting with a letter or `_`
//!   (the reference leaves the first character out; the API's own 400 says
//!   it: "Invalid function name. Must start with a letter or an underscore.
//!   Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons
//!   (:), or dashes (-), with a maximum length of 64", as quoted in
//!   google-gemini/gemini-cli and router-for-me/Cli-Proxy-API-Management-Center
//!   issues). Vertex AI (paths under `/projects/` or `/publishers/`): 1 to
//!   64 letters, digits, `_`, `.` or `-`, starting with a letter or `_`, no
//!   colon (Vertex AI v1 reference, `google.cloud.aiplatform.v1`
//!   `FunctionDeclaration.name`: "Must start with a letter or an
//!   underscore. Must be a-z, A-Z, 0-9, or contain underscores, dots and
//!   dashes, with a maximum length of 64"; the 128 characters with colons
//!   of its earlier reference are no longer documented).
//!
//! Claude on Amazon Bedrock, answered as Bedrock does (`x-amzn-errortype`
//! and `{"message": ...}`), for an upstream that is Bedrock
//! ([`Contract::bedrock`]). Sources: Amazon Bedrock user guide "Anthropic
//! Claude Messages API", "Request and Response" (InvokeModel request),
//! "Inference using Anthropic Messages API" (`/anthropic/v1/messages`),
//! "Fallback credit for refused requests", API reference "Converse"
//! (`Message`, `ContentBlock`, `ToolUseBlock`, `ToolResultBlock`,
//! `InferenceConfiguration`).
//!
//! - `B1` InvokeModel (`/model/{id}/invoke`,
//!   `/invoke-with-response-stream`): a JSON object with
//!   `anthropic_version` `"bedrock-2023-05-31"` and no other ("The value
//!   must be bedrock-2023-05-31"; anthropic-sdk-python
//!   `lib/bedrock/_client.py` set `DEFAULT_VERSION = "bedrock-2023-05-31"`
//!   until 2.14.0 defaults it to `_constants.ANTHROPIC_API_VERSION`,
//!   `2026-10-21`; Anthropic's "Claude
//!   on Amazon Bedrock (Opus 4.6 and earlier)" warns that the ARN-versioned
//!   models InvokeModel serves do not support the `2026-10-21` a later SDK
//!   sends by default, and can answer it with a 400); an integer
//!   `max_tokens`; no
//!   `model` or `stream` key (extraneous keys are not permitted: the model
//!   is in the path, the action says whether it streams); `anthropic_beta`,
//!   when present, an array of the betas Bedrock documents for Claude
//!   (below; any other, first-party betas included, is an "invalid beta
//!   flag"); `A3`-`A5` apply to `messages`, the first message `user`;
//! - `B2` no Bedrock surface takes `fallbacks` (server-side fallback is
//!   first party only); InvokeModel takes `fallback_credit_token` as a
//!   string only with `fallback-credit-2026-06-09` in `anthropic_beta`
//!   (Amazon Bedrock user guide "Fallback credit for refused requests"),
//!   the Messages API on Bedrock (`/anthropic/v1/messages`) not at all, and
//!   `A1`-`A5` apply there;
//! - `B3` Converse (`/model/{id}/converse`, `/converse-stream`): a
//!   non-empty `messages` array, the first `user`, roles `user` and
//!   `assistant` alternating; each `content` a non-empty array of content
//!   blocks, each an object with exactly one member (a union: `text`,
//!   `image`, `toolUse`, `toolResult`, ...; no `type` key);
//!   `inferenceConfig.maxTokens`, when present, an integer of at least 1
//!   (API reference "Message": `role` user or assistant, `content`
//!   required; "ContentBlock": "This data type is a UNION, so only one of
//!   the following members can be specified"; "InferenceConfiguration":
//!   `maxTokens` "Minimum value of 1"; the API's ValidationExceptions "A
//!   conversation must start with a user message." and "A conversation must
//!   alternate between user and assistant roles.");
//! - `B4` Converse: every `toolUse` of an assistant message is answered by
//!   a `toolResult` with its `toolUseId` in the next message ("Expected
//!   toolResult blocks at messages.N.content for the following Ids"), and a
//!   message holds no more `toolResult` blocks than the turn before it has
//!   `toolUse` blocks ("The number of toolResult blocks at
//!   messages.N.content exceeds the number of toolUse blocks of previous
//!   turn").
//!
//! - `B5` the Messages API on Bedrock: every beta of the `anthropic-beta`
//!   header is one InvokeModel takes in `anthropic_beta` (the list of `B1`),
//!   else Bedrock's "invalid beta flag" (coder/aibridge#221: Claude Code's
//!   header forwarded to Bedrock's Messages API answered 400 "invalid beta
//!   flag"; which betas that API takes is not documented, the list is
//!   InvokeModel's). InvokeModel itself takes no such header (its request
//!   syntax in the API reference has none; the official SDK moves the
//!   header's betas into the body, `lib/bedrock/_client.py`), so it is not
//!   checked there.
//!
//! Every API:
//!
//! - `P1` a `POST` to a path no provider serves (none of the above, nor of
//!   `P2`'s) is answered 404 in the shape its path suggests (Bedrock's on a
//!   Bedrock upstream), unless the upstream serves it too
//!   ([`Contract::serving`]) (Anthropic API reference "Errors": 404
//!   `not_found_error`; OpenAI answers "Invalid URL (POST /v1/...)", as
//!   openai/openai-node#132 and openai/openai-python#250 quote it);
//! - `P2` a `POST` to an endpoint a provider really serves but the contract
//!   has no rules for (Anthropic's Message Batches, Files, Skills and legacy
//!   Text Completions; OpenAI's embeddings, legacy completions,
//!   moderations, images, audio, files, uploads, batches and the Responses
//!   sub-endpoints; Gemini's `countTokens`, `embedContent`, batch and
//!   `predict` methods; on Bedrock, CountTokens, StartAsyncInvoke and
//!   ApplyGuardrail, from each provider's API reference) is not checked:
//!   an upstream that does not serve it ([`Contract::serving`]) answers 501
//!   Not Implemented, saying so, in the shape its path suggests. Saying 404
//!   there would tell the client the provider has no such endpoint.

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use serde_json::Value;

use refusal_guard::api_error::{provider_error, provider_error_for};
use refusal_guard::refusal::WireApi;

/// The wire API a request is for, told from its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Api {
    /// Anthropic Messages, first party.
    Anthropic,
    /// Anthropic's token counting: first party (`.../v1/messages/count_tokens`)
    /// or on Vertex AI (`.../publishers/anthropic/models/count-tokens:rawPredict`).
    AnthropicCountTokens,
    /// Claude on Vertex AI.
    AnthropicVertex,
    /// OpenAI Chat Completions.
    OpenAiChat,
    /// Azure OpenAI Chat Completions (deployment in the path).
    AzureChat,
    /// OpenAI Responses.
    Responses,
    /// Gemini, Google AI or Vertex AI.
    Gemini,
    /// Bedrock InvokeModel (and its streaming action), Anthropic body.
    BedrockInvoke,
    /// The Messages API on Bedrock (`/anthropic/v1/messages`).
    BedrockMessages,
    /// Bedrock Converse (and ConverseStream).
    BedrockConverse,
}

impl Api {
    /// The API a `method path` request is for; `None` for anything the
    /// contract does not cover (other endpoints, test-only paths). The
    /// Messages API on Bedrock looks like a first-party path under a base
    /// path: only an upstream that is Bedrock ([`Contract::bedrock`]) reads
    /// it as Bedrock's.
    ///
    /// ```
    /// use refusal_guard_testkit::contract::Api;
    ///
    /// assert_eq!(Api::of("POST", "/v1/chat/completions"), Some(Api::OpenAiChat));
    /// assert_eq!(Api::of("POST", "/model/m/converse-stream"), Some(Api::BedrockConverse));
    /// assert_eq!(Api::of("GET", "/v1/messages"), None);
    /// ```
    pub fn of(method: &str, path: &str) -> Option<Api> {
        if !method.eq_ignore_ascii_case("POST") {
            return None;
        }
        // A client may percent-encode the method's colon (Google decodes it).
        let path = bare(path).replace("%3A", ":").replace("%3a", ":");
        let path = path.as_str();
        if path.ends_with("/v1/messages/count_tokens")
            || path.ends_with("/publishers/anthropic/models/count-tokens:rawPredict")
        {
            return Some(Api::AnthropicCountTokens);
        }
        if path.contains("/publishers/anthropic/models/")
            && (path.ends_with(":rawPredict") || path.ends_with(":streamRawPredict"))
        {
            return Some(Api::AnthropicVertex);
        }
        if path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent") {
            return Some(Api::Gemini);
        }
        if let Some(api) = Api::bedrock_runtime(path) {
            return Some(api);
        }
        if path.ends_with("/v1/messages") {
            return Some(Api::Anthropic);
        }
        if path.ends_with("/chat/completions") {
            return Some(if path.contains("/openai/deployments/") {
                Api::AzureChat
            } else {
                Api::OpenAiChat
            });
        }
        if path.ends_with("/responses") {
            return Some(Api::Responses);
        }
        None
    }

    /// The Bedrock runtime's own paths (`/model/{id}/{action}`), which no
    /// other API has.
    fn bedrock_runtime(path: &str) -> Option<Api> {
        let segments: Vec<&str> = path.split('/').collect();
        let n = segments.len();
        if n < 3 || segments[n - 3] != "model" {
            return None;
        }
        match segments[n - 1] {
            "invoke" | "invoke-with-response-stream" => Some(Api::BedrockInvoke),
            "converse" | "converse-stream" => Some(Api::BedrockConverse),
            _ => None,
        }
    }

    fn is_bedrock(self) -> bool {
        matches!(
            self,
            Api::BedrockInvoke | Api::BedrockMessages | Api::BedrockConverse
        )
    }

    /// The wire API whose error shape its provider answers in: Bedrock
    /// rejects a request in its own shape whatever API it is for.
    fn answered_as(self) -> WireApi {
        match self {
            Api::Anthropic | Api::AnthropicVertex | Api::AnthropicCountTokens => {
                WireApi::AnthropicMessages
            }
            Api::OpenAiChat | Api::AzureChat => WireApi::OpenAiChatCompletions,
            Api::Responses => WireApi::OpenAiResponses,
            Api::Gemini => WireApi::GeminiGenerateContent,
            Api::BedrockInvoke | Api::BedrockMessages | Api::BedrockConverse => {
                WireApi::BedrockInvokeModel
            }
        }
    }

    /// The rule a body that is not a JSON object breaks.
    fn first_rule(self) -> &'static str {
        match self {
            Api::Anthropic
            | Api::AnthropicVertex
            | Api::AnthropicCountTokens
            | Api::BedrockMessages => "A1",
            Api::OpenAiChat | Api::AzureChat => "C1",
            Api::Responses => "R1",
            Api::Gemini => "G1",
            Api::BedrockInvoke => "B1",
            Api::BedrockConverse => "B3",
        }
    }
}

/// The path without its query (which may carry a key) or a trailing `/`.
fn bare(path: &str) -> &str {
    path.split('?').next().unwrap_or("").trim_end_matches('/')
}

/// The real endpoint a `POST` to `path` (bare) is, if it is one the
/// contract has no rules for (`P2`): named for the message. On a Bedrock
/// upstream only Bedrock's own count.
fn unchecked_endpoint(path: &str, bedrock: bool) -> Option<&'static str> {
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.last().copied().unwrap_or("");
    if bedrock {
        // Amazon Bedrock API reference, Runtime: CountTokens
        // (`POST /model/{modelId}/count-tokens`), StartAsyncInvoke
        // (`POST /async-invoke`), ApplyGuardrail
        // (`POST /guardrail/{id}/version/{version}/apply`).
        let n = segments.len();
        return match last {
            "count-tokens" if n >= 3 && segments[n - 3] == "model" => Some("Bedrock's CountTokens"),
            "async-invoke" => Some("Bedrock's StartAsyncInvoke"),
            "apply" if path.contains("/guardrail/") => Some("Bedrock's ApplyGuardrail"),
            _ => None,
        };
    }
    // Gemini API reference, `models` methods, and Vertex AI's
    // `endpoints`/`publishers.models` methods besides generateContent.
    if let Some((_, method)) = last.split_once(':') {
        return match method {
            "countTokens" | "computeTokens" => Some("Gemini's token counting"),
            "embedContent" | "batchEmbedContents" => Some("Gemini's embeddings"),
            "batchGenerateContent" => Some("Gemini's batch mode"),
            "predict" | "predictLongRunning" => Some("a Gemini/Vertex AI predict method"),
            _ => None,
        };
    }
    // Anthropic API reference: Message Batches (create, and
    // `.../{id}/cancel`), legacy Text Completions, Files, Skills.
    if path.ends_with("/v1/messages/batches") || path.contains("/v1/messages/batches/") {
        return Some("Anthropic's Message Batches");
    }
    if path.ends_with("/v1/complete") {
        return Some("Anthropic's legacy Text Completions");
    }
    if path.contains("/v1/skills") {
        return Some("Anthropic's Skills");
    }
    // OpenAI API reference (and Azure OpenAI's deployment paths): the
    // endpoints besides Chat Completions and Responses that clients call.
    const OPENAI: &[(&str, &str)] = &[
        ("/embeddings", "OpenAI's embeddings"),
        ("/completions", "OpenAI's legacy completions"),
        ("/moderations", "OpenAI's moderations"),
        ("/images/generations", "OpenAI's images"),
        ("/images/edits", "OpenAI's images"),
        ("/images/variations", "OpenAI's images"),
        ("/audio/speech", "OpenAI's audio"),
        ("/audio/transcriptions", "OpenAI's audio"),
        ("/audio/translations", "OpenAI's audio"),
        ("/batches", "OpenAI's Batch API"),
        ("/uploads", "OpenAI's Uploads"),
        (
            "/responses/input_tokens",
            "OpenAI's Responses input token count",
        ),
        ("/responses/compact", "OpenAI's Responses compaction"),
    ];
    if let Some((_, name)) = OPENAI.iter().find(|(suffix, _)| path.ends_with(suffix)) {
        return Some(name);
    }
    if path.ends_with("/cancel") && path.contains("/responses/") {
        return Some("OpenAI's Responses cancel");
    }
    // Both Anthropic's and OpenAI's Files APIs upload with `POST .../v1/files`.
    if path.ends_with("/v1/files") {
        return Some("a Files API upload");
    }
    None
}

/// A broken rule, and the provider's answer to it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Violation {
    /// The API whose rule it broke; `None` for a path the contract has no
    /// API for (`P1`, `P2`).
    pub api: Option<Api>,
    /// The rule's name in the module's list (`A9`, `C3`, `P1`, ...).
    pub rule: &'static str,
    /// What is wrong, in the provider's words where it has them.
    pub message: String,
    /// The request that broke it: `METHOD path`, without the query.
    pub request: String,
    status: StatusCode,
    /// The API whose error shape answers it; `None`: the one its path
    /// suggests.
    answered_as: Option<WireApi>,
}

impl Violation {
    /// The status the provider answers with: 404 for a path no provider
    /// serves, 501 for a real endpoint the contract has no rules for (and
    /// the upstream does not serve), else 400.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The provider's error body for it (JSON text).
    pub fn body(&self) -> String {
        String::from_utf8_lossy(self.response().body()).into_owned()
    }

    /// The provider's whole answer: [`status`](Self::status), a JSON
    /// [`body`](Self::body), and Bedrock's `x-amzn-errortype` on Bedrock.
    ///
    /// ```
    /// use refusal_guard_testkit::contract::check;
    ///
    /// let path = "/model/anthropic.claude-opus-4-7/invoke";
    /// let broken = check("POST", path, &http::HeaderMap::new(), b"{}").unwrap_err();
    /// let response = broken.response();
    /// assert_eq!(response.status(), 400);
    /// assert_eq!(response.headers()["x-amzn-errortype"], "ValidationException");
    /// ```
    pub fn response(&self) -> Response<Bytes> {
        let message = format!("{} (contract rule {})", self.message, self.rule);
        match self.answered_as {
            Some(api) => provider_error_for(api, self.status, &message),
            None => {
                let path = self.request.split_once(' ').map_or("", |(_, path)| path);
                provider_error(path, self.status, &message)
            }
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let api = self
            .api
            .map_or("no API".to_owned(), |api| format!("{api:?}"));
        write!(
            f,
            "{} broke {api} rule {}: {}",
            self.request, self.rule, self.message
        )
    }
}

/// The rules one upstream keeps: which provider it is and which paths
/// beyond the APIs' it serves.
///
/// ```
/// use refusal_guard_testkit::contract::{Api, Contract};
///
/// let bedrock = Contract::new().bedrock();
/// let body = br#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":8,
///     "messages":[{"role":"assistant","content":"hi"}]}"#;
/// let broken = bedrock
///     .check("POST", "/model/m/invoke", &http::HeaderMap::new(), body)
///     .unwrap_err();
/// assert_eq!((broken.api, broken.rule), (Some(Api::BedrockInvoke), "A3"));
/// let embeddings = Contract::new().serving("/v1/embeddings");
/// assert!(embeddings
///     .check("POST", "/v1/embeddings", &http::HeaderMap::new(), b"{}")
///     .is_ok());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Contract {
    bedrock: bool,
    served: Vec<String>,
}

impl Contract {
    /// The contract of a first-party upstream that serves the APIs' paths
    /// only.
    pub fn new() -> Self {
        Self::default()
    }

    /// The upstream is Amazon Bedrock: `/anthropic/v1/messages` is the
    /// Messages API on Bedrock, and every answer is in Bedrock's shape.
    pub fn bedrock(mut self) -> Self {
        self.bedrock = true;
        self
    }

    /// The upstream also serves `POST`s to paths ending in `path` that no
    /// checked API has (a listing, a test-only endpoint, or a real endpoint
    /// the contract has no rules for, `P2`): they are not checked.
    pub fn serving(mut self, path: impl Into<String>) -> Self {
        self.served.push(path.into());
        self
    }

    /// Checks one request; `path` with its query, if any.
    pub fn check(
        &self,
        method: &str,
        path: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), Violation> {
        let request = format!("{method} {}", bare(path));
        let is_post = method.eq_ignore_ascii_case("POST");
        let Some(api) = self.api(method, path) else {
            if !is_post || self.served.iter().any(|p| bare(path).ends_with(p.as_str())) {
                return Ok(());
            }
            let answered_as = self.bedrock.then_some(WireApi::BedrockInvokeModel);
            if let Some(endpoint) = unchecked_endpoint(bare(path), self.bedrock) {
                return Err(Violation {
                    api: None,
                    rule: "P2",
                    message: format!(
                        "{request} is {endpoint}, which the contract has no rules for: \
                         not checked, and not served by this upstream"
                    ),
                    request,
                    status: StatusCode::NOT_IMPLEMENTED,
                    answered_as,
                });
            }
            return Err(Violation {
                api: None,
                rule: "P1",
                message: format!("Not Found: no provider serves {request}"),
                request,
                status: StatusCode::NOT_FOUND,
                answered_as,
            });
        };
        let fail = |(rule, message): Broken| Violation {
            api: Some(api),
            rule,
            message,
            request: request.clone(),
            status: StatusCode::BAD_REQUEST,
            answered_as: Some(api.answered_as()),
        };
        let Ok(body) = serde_json::from_slice::<Value>(body) else {
            return Err(fail((api.first_rule(), "the body is not JSON".into())));
        };
        let betas = betas(headers);
        match api {
            Api::Anthropic | Api::AnthropicVertex => anthropic(api, path, &betas, &body),
            Api::AnthropicCountTokens => count_tokens(&body),
            Api::OpenAiChat | Api::AzureChat => chat(api, &body),
            Api::Responses => responses(path, &body),
            Api::Gemini => gemini(path, &body),
            Api::BedrockInvoke => bedrock_anthropic(api, &betas, &body),
            Api::BedrockMessages => {
                bedrock_header_betas(&betas).and_then(|()| bedrock_anthropic(api, &betas, &body))
            }
            Api::BedrockConverse => converse(&body),
        }
        .map_err(fail)
    }

    /// The API of a request to this upstream.
    fn api(&self, method: &str, path: &str) -> Option<Api> {
        let api = Api::of(method, path)?;
        if !self.bedrock {
            return Some(api);
        }
        if api.is_bedrock() {
            return Some(api);
        }
        // Bedrock serves the Messages API under `/anthropic`, and no other.
        bare(path)
            .ends_with("/anthropic/v1/messages")
            .then_some(Api::BedrockMessages)
    }
}

/// Checks one request against the contract of a first-party upstream
/// ([`Contract::new`]); `path` with its query, if any.
///
/// ```
/// use refusal_guard_testkit::contract::check;
///
/// let body = br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
/// let path = "/v1beta/models/gemini-2.5-pro:generateContent";
/// assert!(check("POST", path, &http::HeaderMap::new(), body).is_ok());
/// ```
pub fn check(method: &str, path: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), Violation> {
    Contract::new().check(method, path, headers, body)
}

type Broken = (&'static str, String);

fn betas(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|beta| beta.trim().to_owned())
        .filter(|beta| !beta.is_empty())
        .collect()
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

/// `A16`: token counting takes a Messages body without the generation's
/// own fields. Anthropic's API reference "Count tokens in a Message" and
/// anthropic-sdk-python `types/message_count_tokens_params.py` (and its
/// beta twin) list `model` and `messages` as required and have no
/// `max_tokens` or `stream`; the API answers one with "max_tokens: Extra
/// inputs are not permitted" (the 400 clients that forwarded a Messages body
/// unchanged report). The messages are read as a Messages request's (`A3`
/// to `A5`, `A11`, `A12`); the fallback rules are not checked here.
fn count_tokens(body: &Value) -> Result<(), Broken> {
    let object = body
        .as_object()
        .ok_or(("A1", "the body is not an object".to_owned()))?;
    if !object.get("model").is_some_and(Value::is_string) {
        return Err(("A16", "model: Field required".into()));
    }
    for key in ["max_tokens", "stream"] {
        if object.contains_key(key) {
            return Err(("A16", format!("{key}: Extra inputs are not permitted")));
        }
    }
    let turns = anthropic_messages(object.get("messages"), Api::AnthropicCountTokens)?;
    anthropic_tool_pairs(&turns)?;
    anthropic_sampling_and_tools(object)
}

/// The API version Claude on Vertex AI takes in the body.
const VERTEX_VERSION: &str = "vertex-2023-10-16";

fn anthropic(api: Api, path: &str, betas: &[String], body: &Value) -> Result<(), Broken> {
    let object = body
        .as_object()
        .ok_or(("A1", "the body is not an object".to_owned()))?;
    let requested = anthropic_model(api, path, object)?;
    let turns = anthropic_messages(object.get("messages"), api)?;
    anthropic_tool_pairs(&turns)?;
    anthropic_sampling_and_tools(object)?;
    let fallbacks = object.get("fallbacks");
    if let Some(fallbacks) = fallbacks {
        server_fallbacks(api, fallbacks, requested.as_deref(), betas)?;
    }
    if let Some(token) = object.get("fallback_credit_token") {
        if fallbacks.is_some() {
            return Err((
                "A9",
                "fallback_credit_token cannot be combined with fallbacks".into(),
            ));
        }
        credit_token(token, betas)?;
    }
    prefill_accepted(object, requested.as_deref())
}

/// `A2`: the model asked for (the body's, or Vertex's in the path), and
/// the fields each platform requires.
fn anthropic_model(
    api: Api,
    path: &str,
    object: &serde_json::Map<String, Value>,
) -> Result<Option<String>, Broken> {
    if api != Api::AnthropicVertex {
        let model = object
            .get("model")
            .and_then(Value::as_str)
            .ok_or(("A2", "model: Field required".to_owned()))?;
        if !object.get("max_tokens").is_some_and(Value::is_u64) {
            return Err(("A2", "max_tokens: Field required".into()));
        }
        return Ok(Some(model.to_owned()));
    }
    if object.contains_key("model") {
        return Err(("A2", "`model`: Extra inputs are not permitted".into()));
    }
    if object.get("anthropic_version").and_then(Value::as_str) != Some(VERTEX_VERSION) {
        return Err((
            "A2",
            format!("anthropic_version: Input should be '{VERTEX_VERSION}'"),
        ));
    }
    if !object.get("max_tokens").is_some_and(Value::is_u64) {
        return Err(("A2", "max_tokens: Field required".into()));
    }
    Ok(path
        .rsplit('/')
        .next()
        .and_then(|last| last.split(':').next())
        .map(str::to_owned))
}

/// `A6`-`A8`, `A13`, `A14`: a request's server-side `fallbacks`.
fn server_fallbacks(
    api: Api,
    fallbacks: &Value,
    requested: Option<&str>,
    betas: &[String],
) -> Result<(), Broken> {
    if api != Api::Anthropic {
        return Err((
            "A8",
            "fallbacks: server-side fallback is not supported on this platform".into(),
        ));
    }
    anthropic_fallbacks(fallbacks, requested)?;
    fallback_entry_keys(fallbacks)?;
    allowed_fallbacks(fallbacks, requested)?;
    let has = |beta: &str| betas.iter().any(|b| b == beta);
    let june = has("server-side-fallback-2026-06-01");
    let july = has("server-side-fallback-2026-07-01");
    if fallbacks.is_string() && !july {
        return Err((
            "A7",
            "fallbacks: \"default\" requires the server-side-fallback-2026-07-01 beta".into(),
        ));
    }
    if !(june || july) {
        return Err((
            "A7",
            "fallbacks: requires the anthropic-beta header server-side-fallback-2026-07-01".into(),
        ));
    }
    Ok(())
}

/// `A10`: a `fallback_credit_token`'s form and the beta it needs.
fn credit_token(token: &Value, betas: &[String]) -> Result<(), Broken> {
    let has = |beta: &str| betas.iter().any(|b| b == beta);
    // The server-side fallback beta of the same date grants the same
    // fields ("Fallback credit": "The server-side-fallback-2026-07-01
    // header also grants the same fields").
    let june = has("fallback-credit-2026-06-01") || has("server-side-fallback-2026-06-01");
    let july = has("fallback-credit-2026-07-01") || has("server-side-fallback-2026-07-01");
    if !(june || july) {
        return Err((
            "A10",
            "fallback_credit_token: requires the fallback-credit beta".into(),
        ));
    }
    match token {
        Value::String(_) => Ok(()),
        Value::Object(form) => {
            // A mode-less object is `strict`, as the bare string is.
            let mode = form.get("mode").map(Value::as_str);
            if !form.get("token").is_some_and(Value::is_string)
                || !matches!(mode, None | Some(Some("strict" | "best_effort")))
            {
                return Err((
                    "A10",
                    "fallback_credit_token: expected {token, mode: strict|best_effort}".into(),
                ));
            }
            if !july {
                return Err((
                    "A10",
                    "fallback_credit_token: the object form requires fallback-credit-2026-07-01"
                        .into(),
                ));
            }
            Ok(())
        }
        _ => Err((
            "A10",
            "fallback_credit_token: expected a string or an object".into(),
        )),
    }
}

/// `B5`: the Messages API on Bedrock takes betas in the `anthropic-beta`
/// header, and Bedrock gates them itself: a value it does not know is a
/// 400 "invalid beta flag" (coder/aibridge#221, a client forwarding Claude
/// Code's header to Bedrock; LiteLLM keeps a per-provider allowlist of beta
/// headers for the same reason). Which betas it takes there is documented
/// nowhere the contract found: it holds the header to InvokeModel's list,
/// [`BEDROCK_BETAS`].
fn bedrock_header_betas(betas: &[String]) -> Result<(), Broken> {
    match betas
        .iter()
        .find(|beta| !BEDROCK_BETAS.contains(&beta.as_str()))
    {
        Some(unknown) => Err(("B5", format!("invalid beta flag: {unknown}"))),
        None => Ok(()),
    }
}

/// The betas InvokeModel takes in `anthropic_beta`. Any other value is an
/// "invalid beta flag": Bedrock gates its features itself, so first-party
/// betas (`server-side-fallback-*`, `fallback-credit-2026-07-01`,
/// `advanced-tool-use-*`, `prompt-caching-scope-*`, ...) are rejected there.
const BEDROCK_BETAS: &[&str] = &[
    // Amazon Bedrock user guide "Request and Response", `anthropic_beta`.
    "computer-use-2024-10-22",
    "computer-use-2025-01-24",
    "computer-use-2025-11-24",
    "token-efficient-tools-2025-02-19",
    "interleaved-thinking-2025-05-14",
    "output-128k-2025-02-19",
    "dev-full-thinking-2025-05-14",
    "context-1m-2025-08-07",
    "context-management-2025-06-27",
    "effort-2025-11-24",
    "tool-search-tool-2025-10-19",
    "tool-examples-2025-10-29",
    // "Fallback credit for refused requests": Bedrock's own credit beta.
    BEDROCK_CREDIT_BETA,
    // Accepted by InvokeModel when tested against it (the "Beta Header
    // Reference" of xiehust/anthropic_api_converter, which also lists what
    // it rejects); not in the user guide's list.
    "compact-2026-01-12",
    "structured-outputs-2025-11-13",
    "fine-grained-tool-streaming-2025-05-14",
    "pdfs-2024-09-25",
    "token-counting-2024-11-01",
    "mcp-client-2025-11-20",
    "web-search-2025-03-05",
    // Sent to InvokeModel by Claude Code (2.1.332, Bedrock mode), which
    // filters the betas it sends to Bedrock; in no list above.
    "thinking-token-count-2026-05-13",
];

/// Bedrock's fallback-credit beta, in InvokeModel's `anthropic_beta`.
const BEDROCK_CREDIT_BETA: &str = "fallback-credit-2026-06-09";

/// The `anthropic_version` InvokeModel takes: Bedrock's own ("The value
/// must be bedrock-2023-05-31", Amazon Bedrock user guide "Request and
/// Response"; anthropic-sdk-python `lib/bedrock/_client.py`
/// `DEFAULT_VERSION` before 2.14.0). Anthropic's
/// "Claude on Amazon Bedrock (Opus 4.6 and earlier)" warns that a later
/// SDK's default API version `2026-10-21` is not supported on Bedrock by the
/// ARN-versioned models InvokeModel serves and can be answered with a 400:
/// the contract rejects it with every other value.
const BEDROCK_VERSION: &str = "bedrock-2023-05-31";

fn bedrock_anthropic(api: Api, betas: &[String], body: &Value) -> Result<(), Broken> {
    let object = body
        .as_object()
        .ok_or((api.first_rule(), "the body is not an object".to_owned()))?;
    if object.contains_key("fallbacks") {
        return Err(("B2", "extraneous key [fallbacks] is not permitted".into()));
    }
    if api == Api::BedrockMessages {
        if object.contains_key("fallback_credit_token") {
            return Err((
                "B2",
                "extraneous key [fallback_credit_token] is not permitted".into(),
            ));
        }
        return anthropic(api, "", betas, body);
    }
    let body_betas = bedrock_betas(object)?;
    if let Some(token) = object.get("fallback_credit_token") {
        if !token.is_string() || !body_betas.contains(&BEDROCK_CREDIT_BETA) {
            return Err((
                "B2",
                format!(
                    "fallback_credit_token: a string, with {BEDROCK_CREDIT_BETA} in anthropic_beta"
                ),
            ));
        }
    }
    for key in ["model", "stream"] {
        if object.contains_key(key) {
            return Err(("B1", format!("extraneous key [{key}] is not permitted")));
        }
    }
    if object.get("anthropic_version").and_then(Value::as_str) != Some(BEDROCK_VERSION) {
        return Err((
            "B1",
            format!("anthropic_version: The value must be {BEDROCK_VERSION}"),
        ));
    }
    if !object.get("max_tokens").is_some_and(Value::is_u64) {
        return Err(("B1", "required key [max_tokens] not found".into()));
    }
    let turns = anthropic_messages(object.get("messages"), api)?;
    anthropic_tool_pairs(&turns)?;
    anthropic_sampling_and_tools(object)
}

/// InvokeModel's `anthropic_beta`: an array of betas Bedrock knows.
fn bedrock_betas(object: &serde_json::Map<String, Value>) -> Result<Vec<&str>, Broken> {
    let Some(betas) = object.get("anthropic_beta") else {
        return Ok(Vec::new());
    };
    let strings: Option<Vec<&str>> = betas
        .as_array()
        .and_then(|list| list.iter().map(Value::as_str).collect());
    let strings = strings.ok_or(("B1", "anthropic_beta: expected an array of strings".into()))?;
    match strings.iter().find(|beta| !BEDROCK_BETAS.contains(beta)) {
        Some(unknown) => Err(("B1", format!("invalid beta flag: {unknown}"))),
        None => Ok(strings),
    }
}

fn converse(body: &Value) -> Result<(), Broken> {
    let fail = |message: String| Err(("B3", message));
    let Some(object) = body.as_object() else {
        return fail("the body is not an object".into());
    };
    let Some(messages) = object.get("messages").and_then(Value::as_array) else {
        return fail("messages: required".into());
    };
    if messages.is_empty() || role(&messages[0]) != Some("user") {
        return fail("A conversation must start with a user message.".into());
    }
    let mut previous = None;
    for (i, message) in messages.iter().enumerate() {
        let role = role(message);
        if !matches!(role, Some("user" | "assistant")) {
            return fail(format!("messages.{i}.role: expected user or assistant"));
        }
        if role == previous {
            return fail("A conversation must alternate between user and assistant roles.".into());
        }
        previous = role;
        let blocks = message.get("content").and_then(Value::as_array);
        if !blocks.is_some_and(|blocks| !blocks.is_empty()) {
            return fail(format!(
                "messages.{i}.content: at least one block is required"
            ));
        }
        for (j, block) in blocks.into_iter().flatten().enumerate() {
            let union = block.as_object().is_some_and(|b| b.len() == 1);
            if !union || block.get("type").is_some() {
                return fail(format!(
                    "messages.{i}.content.{j}: a content block has exactly one member"
                ));
            }
        }
    }
    let max_tokens = object
        .get("inferenceConfig")
        .and_then(|c| c.get("maxTokens"));
    if max_tokens.is_some_and(|m| !m.as_u64().is_some_and(|m| m >= 1)) {
        return fail("inferenceConfig.maxTokens: expected an integer of at least 1".into());
    }
    converse_tool_pairs(messages)
}

/// The `toolUseId`s of a Converse message's `member` blocks (`toolUse` or
/// `toolResult`).
fn converse_ids<'a>(message: &'a Value, member: &str) -> Vec<&'a str> {
    message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|block| block.get(member)?.get("toolUseId")?.as_str())
        .collect()
}

/// `B4`: Converse's `toolUse`/`toolResult` pairing (roles alternate, `B3`).
fn converse_tool_pairs(messages: &[Value]) -> Result<(), Broken> {
    for (i, message) in messages.iter().enumerate() {
        let results = converse_ids(message, "toolResult");
        let asked = match i.checked_sub(1) {
            Some(previous) => converse_ids(&messages[previous], "toolUse"),
            None => Vec::new(),
        };
        if results.len() > asked.len() {
            return Err((
                "B4",
                format!(
                    "The number of toolResult blocks at messages.{i}.content exceeds the \
                     number of toolUse blocks of previous turn."
                ),
            ));
        }
        let Some(next) = messages.get(i + 1) else {
            continue;
        };
        let answered = converse_ids(next, "toolResult");
        let open: Vec<&str> = converse_ids(message, "toolUse")
            .into_iter()
            .filter(|id| !answered.contains(id))
            .collect();
        if !open.is_empty() {
            return Err((
                "B4",
                format!(
                    "Expected toolResult blocks at messages.{}.content for the following Ids: {}",
                    i + 1,
                    open.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// One turn as the Messages API reads it: consecutive messages of one role
/// combined (`A5`), with the index of its first and last message and its
/// blocks (a string content stands as one text block).
struct Turn<'a> {
    role: &'a str,
    first: usize,
    last: usize,
    blocks: Vec<&'a Value>,
}

/// A block's type; a string content is text.
fn kind(block: &Value) -> &str {
    if block.is_string() {
        return "text";
    }
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

/// The text of a text block (or of a string content).
fn text_of(block: &Value) -> Option<&str> {
    block
        .as_str()
        .or_else(|| block.get("text").and_then(Value::as_str))
}

/// The user and assistant messages, combined into turns (their roles
/// checked by `A3`; a system message is no turn of either).
fn turns(messages: &[Value]) -> Vec<Turn<'_>> {
    let mut turns: Vec<Turn<'_>> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = role(message).unwrap_or("");
        if role == "system" {
            continue;
        }
        let blocks: Vec<&Value> = match message.get("content") {
            Some(Value::Array(blocks)) => blocks.iter().collect(),
            Some(text @ Value::String(_)) => vec![text],
            _ => Vec::new(),
        };
        match turns.last_mut() {
            Some(turn) if turn.role == role => {
                turn.last = i;
                turn.blocks.extend(blocks);
            }
            _ => turns.push(Turn {
                role,
                first: i,
                last: i,
                blocks,
            }),
        }
    }
    turns
}

/// `A3`-`A5` as `api` keeps them (the first message `user` on Bedrock, no
/// system message on InvokeModel), and the turns the API reads.
fn anthropic_messages(messages: Option<&Value>, api: Api) -> Result<Vec<Turn<'_>>, Broken> {
    let first_user = api.is_bedrock();
    let system = api != Api::BedrockInvoke;
    let messages = messages
        .and_then(Value::as_array)
        .ok_or(("A3", "messages: Field required".to_owned()))?;
    if messages.is_empty() {
        return Err(("A3", "messages: at least one message is required".into()));
    }
    for (i, message) in messages.iter().enumerate() {
        anthropic_message(i, i + 1 == messages.len(), message, system)?;
    }
    if first_user && role(&messages[0]) != Some("user") {
        return Err((
            "A3",
            "messages: first message must use the \"user\" role".into(),
        ));
    }
    system_placement(messages)?;
    let turns = turns(messages);
    for turn in turns.iter().filter(|turn| turn.role == "user") {
        let kinds: Vec<&str> = turn.blocks.iter().map(|b| kind(b)).collect();
        if let Some(first_other) = kinds.iter().position(|k| *k != "tool_result") {
            if kinds[first_other..].contains(&"tool_result") {
                return Err((
                    "A4",
                    format!(
                        "messages.{}: tool_result blocks must come first",
                        turn.first
                    ),
                ));
            }
        }
    }
    match turns.last() {
        Some(last) if last.role == "assistant" && last.last + 1 == messages.len() => {
            anthropic_prefill(last)
        }
        _ => Ok(()),
    }
    .map(|()| turns)
}

/// `A3`: where mid-conversation `system` messages may stand.
fn system_placement(messages: &[Value]) -> Result<(), Broken> {
    let is_system = |m: &Value| role(m) == Some("system");
    let mut i = 0;
    while i < messages.len() {
        if !is_system(&messages[i]) {
            i += 1;
            continue;
        }
        let end = (i..messages.len())
            .find(|&j| !is_system(&messages[j]))
            .unwrap_or(messages.len());
        let follows = i.checked_sub(1).map(|p| &messages[p]);
        let after_user_or_server_result = follows.is_some_and(|previous| match role(previous) {
            Some("user") => true,
            Some("assistant") => ends_in_server_tool_result(previous),
            _ => false,
        });
        if !after_user_or_server_result {
            return Err((
                "A3",
                format!(
                    "messages.{i}: role 'system' must follow a 'user' message or an 'assistant' \
                     message ending in a server tool result"
                ),
            ));
        }
        if messages
            .get(end)
            .is_some_and(|next| role(next) != Some("assistant"))
        {
            return Err((
                "A3",
                format!(
                    "messages.{i}: a system message must end the messages or precede an \
                     'assistant' message"
                ),
            ));
        }
        i = end;
    }
    Ok(())
}

/// Whether an assistant message's last block is a server tool's result
/// (`web_search_tool_result`, `code_execution_tool_result`, ...).
fn ends_in_server_tool_result(message: &Value) -> bool {
    let last = message
        .get("content")
        .and_then(Value::as_array)
        .and_then(|blocks| blocks.last());
    last.is_some_and(|block| kind(block).ends_with("_tool_result") && kind(block) != "tool_result")
}

/// `A3` for one message, the `last` of the request or not (`system`, a
/// mid-conversation system message, where the API takes one).
fn anthropic_message(i: usize, last: bool, message: &Value, system: bool) -> Result<(), Broken> {
    let role = match role(message) {
        Some(role @ ("user" | "assistant")) => role,
        Some(role @ "system") if system => role,
        other => {
            return Err((
                "A3",
                format!("messages.{i}.role: unexpected role {other:?}"),
            ))
        }
    };
    let content = message.get("content");
    let empty = match content {
        Some(Value::String(text)) => text.is_empty(),
        Some(Value::Array(blocks)) => blocks.is_empty(),
        _ => true,
    };
    if empty && !(last && role == "assistant") {
        return Err((
            "A3",
            format!(
                "messages.{i}: all messages must have non-empty content except for the \
                 optional final assistant message"
            ),
        ));
    }
    let blocks = content.and_then(Value::as_array).into_iter().flatten();
    for (j, block) in blocks.enumerate() {
        if kind(block) == "text" && text_of(block) == Some("") {
            return Err((
                "A3",
                format!("messages.{i}.content.{j}.text: text content blocks must be non-empty"),
            ));
        }
    }
    Ok(())
}

/// `A5`: the final assistant turn the model continues.
fn anthropic_prefill(turn: &Turn<'_>) -> Result<(), Broken> {
    let Some(last) = turn.blocks.last() else {
        return Ok(());
    };
    if kind(last) == "thinking" {
        return Err((
            "A5",
            format!(
                "messages.{}: The final block in an assistant message cannot be `thinking`.",
                turn.last
            ),
        ));
    }
    let trailing = kind(last) == "text" && text_of(last).is_some_and(|t| t != t.trim_end());
    if trailing {
        return Err((
            "A5",
            "final assistant content cannot end with trailing whitespace".into(),
        ));
    }
    Ok(())
}

/// The ids of the blocks of `kind` in a turn, under `field`.
fn block_ids<'a>(turn: &Turn<'a>, of_kind: &str, field: &str) -> Vec<&'a str> {
    turn.blocks
        .iter()
        .filter(|b| kind(b) == of_kind)
        .filter_map(|b| b.get(field).and_then(Value::as_str))
        .collect()
}

fn anthropic_tool_pairs(turns: &[Turn<'_>]) -> Result<(), Broken> {
    for (k, turn) in turns.iter().enumerate() {
        let results = block_ids(turn, "tool_result", "tool_use_id");
        let asked = match k.checked_sub(1).map(|p| &turns[p]) {
            Some(previous) if previous.role == "assistant" => block_ids(previous, "tool_use", "id"),
            _ => Vec::new(),
        };
        if let Some(stray) = results.iter().find(|id| !asked.contains(id)) {
            return Err((
                "A11",
                format!(
                    "messages.{}: unexpected `tool_use_id` found in `tool_result` blocks: \
                     {stray}. Each `tool_result` block must have a corresponding `tool_use` \
                     block in the previous message.",
                    turn.first
                ),
            ));
        }
        let Some(next) = turns.get(k + 1) else {
            continue;
        };
        if turn.role != "assistant" {
            continue;
        }
        let answered = block_ids(next, "tool_result", "tool_use_id");
        let open: Vec<&str> = block_ids(turn, "tool_use", "id")
            .into_iter()
            .filter(|id| !answered.contains(id))
            .collect();
        if !open.is_empty() {
            return Err((
                "A11",
                format!(
                    "messages.{}: `tool_use` ids were found without `tool_result` blocks \
                     immediately after: {}",
                    turn.first,
                    open.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// A tool name of the form Anthropic and OpenAI take: `^[a-zA-Z0-9_-]{1,64}$`.
fn plain_tool_name(name: Option<&str>) -> bool {
    name.is_some_and(|name| {
        (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// A `temperature` that, when given, is a number from 0 to `max`.
fn temperature_within(
    rule: &'static str,
    field: &str,
    value: Option<&Value>,
    max: f64,
) -> Result<(), Broken> {
    match value {
        Some(t) if !t.as_f64().is_some_and(|v| (0.0..=max).contains(&v)) => {
            Err((rule, format!("{field}: must be from 0 to {max}, got {t}")))
        }
        _ => Ok(()),
    }
}

fn anthropic_sampling_and_tools(object: &serde_json::Map<String, Value>) -> Result<(), Broken> {
    temperature_within("A12", "temperature", object.get("temperature"), 1.0)?;
    if let Some(stops) = object.get("stop_sequences") {
        let strings = stops
            .as_array()
            .is_some_and(|list| list.iter().all(Value::is_string));
        if !strings {
            return Err(("A12", "stop_sequences: expected an array of strings".into()));
        }
    }
    let tools = object.get("tools").and_then(Value::as_array);
    for (i, tool) in tools.into_iter().flatten().enumerate() {
        // Server tools (`web_search_20250305`, ...) are typed and named by Anthropic.
        let custom = matches!(
            tool.get("type").and_then(Value::as_str),
            None | Some("custom")
        );
        if !custom {
            continue;
        }
        if !plain_tool_name(tool.get("name").and_then(Value::as_str)) {
            return Err((
                "A12",
                format!("tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"),
            ));
        }
        if !tool.get("input_schema").is_some_and(Value::is_object) {
            return Err(("A12", format!("tools.{i}.input_schema: Field required")));
        }
    }
    if let Some(choice) = object.get("tool_choice") {
        let valid = match choice.get("type").and_then(Value::as_str) {
            Some("auto" | "any" | "none") => true,
            Some("tool") => choice.get("name").is_some_and(Value::is_string),
            _ => false,
        };
        if !valid {
            return Err(("A12", format!("tool_choice: invalid value {choice}")));
        }
    }
    Ok(())
}

fn anthropic_fallbacks(fallbacks: &Value, requested: Option<&str>) -> Result<(), Broken> {
    let list = match fallbacks {
        Value::String(s) if s == "default" => return Ok(()),
        Value::Array(list) => list,
        _ => {
            return Err((
                "A6",
                "fallbacks: expected \"default\" or a list of fallback objects".into(),
            ))
        }
    };
    if list.is_empty() || list.len() > 3 {
        return Err((
            "A6",
            format!("fallbacks: expected 1 to 3 entries, got {}", list.len()),
        ));
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let Some(model) = entry.get("model").and_then(Value::as_str) else {
            return Err(("A6", format!("fallbacks.{i}.model: Field required")));
        };
        if Some(model) == requested {
            return Err((
                "A6",
                format!("fallbacks.{i}.model: cannot be the requested model"),
            ));
        }
        if seen.contains(&model) {
            return Err((
                "A6",
                format!("fallbacks.{i}.model: duplicate model {model}"),
            ));
        }
        seen.push(model);
    }
    Ok(())
}

/// The keys a `fallbacks` entry may carry: the `model` and the overrides
/// for that attempt (anthropic-sdk-python `types/beta/beta_fallback_param.py`:
/// "Any other key is rejected at parse time"; platform docs "Refusals and
/// fallback", Naming your own fallback models).
const FALLBACK_ENTRY_KEYS: [&str; 5] =
    ["model", "max_tokens", "thinking", "output_config", "speed"];

/// `A13`: every `fallbacks` entry carries only [`FALLBACK_ENTRY_KEYS`].
fn fallback_entry_keys(fallbacks: &Value) -> Result<(), Broken> {
    let entries = fallbacks.as_array().into_iter().flatten();
    for (i, entry) in entries.enumerate() {
        let keys = entry.as_object().into_iter().flat_map(|e| e.keys());
        if let Some(key) = keys
            .into_iter()
            .find(|k| !FALLBACK_ENTRY_KEYS.contains(&k.as_str()))
        {
            return Err((
                "A13",
                format!("fallbacks.{i}.{key}: Extra inputs are not permitted"),
            ));
        }
    }
    Ok(())
}

/// The published allowed fallback models (the Models API's
/// `allowed_fallback_models`: "Model IDs this model accepts as
/// `fallbacks[i].model` on the Messages API. An empty list means the
/// `fallbacks` parameter is not supported for this model as primary",
/// anthropic-sdk-python `types/beta/beta_model_info.py`) of the requested
/// models the test upstreams know. A model not listed here is not checked.
const ALLOWED_FALLBACKS: &[(&str, &[&str])] = &[
    // Platform docs "Refusals and fallback": the documented chain,
    // `claude-fable-5` with `fallbacks: [{model: "claude-opus-4-8"}]`.
    ("claude-fable-5", &["claude-opus-4-8"]),
    // Clients quoting `/v1/models` (Opus 5's list is `["claude-opus-4-8"]`,
    // Sonnet 5's empty) and the API's 400 for the models without one:
    // "'claude-sonnet-5' does not support the `fallbacks` parameter", the
    // same for `claude-haiku-4-5-20251001`, `claude-opus-4-8` and
    // `claude-opus-4-6`.
    ("claude-opus-5", &["claude-opus-4-8"]),
    ("claude-sonnet-5", &[]),
    ("claude-opus-4-8", &[]),
    ("claude-opus-4-6", &[]),
    ("claude-haiku-4-5", &[]),
];

/// Whether `model` is the model `alias` names: the alias itself, or one of
/// its dated snapshots (`claude-haiku-4-5-20251001`).
fn names_model(model: &str, alias: &str) -> bool {
    let dated = |rest: &str| rest.len() == 8 && rest.bytes().all(|b| b.is_ascii_digit());
    model == alias
        || model
            .strip_prefix(alias)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(dated)
}

/// `A14`: a `fallbacks` list names only the requested model's allowed
/// fallback models ([`ALLOWED_FALLBACKS`]); a model without any rejects the
/// parameter, `"default"` included (platform docs "Refusals and fallback":
/// "Each entry must be one of the requested model's permitted targets").
fn allowed_fallbacks(fallbacks: &Value, requested: Option<&str>) -> Result<(), Broken> {
    let Some(requested) = requested else {
        return Ok(());
    };
    let Some((_, allowed)) = ALLOWED_FALLBACKS
        .iter()
        .find(|(alias, _)| names_model(requested, alias))
    else {
        return Ok(());
    };
    if allowed.is_empty() {
        return Err((
            "A14",
            format!("'{requested}' does not support the `fallbacks` parameter"),
        ));
    }
    let entries = fallbacks.as_array().into_iter().flatten();
    for (i, entry) in entries.enumerate() {
        let model = entry.get("model").and_then(Value::as_str).unwrap_or("");
        if !allowed.iter().any(|alias| names_model(model, alias)) {
            return Err((
                "A14",
                format!("fallbacks.{i}.model: '{model}' is not an allowed fallback model for '{requested}'"),
            ));
        }
    }
    Ok(())
}

/// The models the test upstreams know that reject a request ending in an
/// assistant turn: the Claude 4.6 generation and later (platform docs
/// "Migration guide": "Prefilling assistant messages returns a 400 error on
/// Claude 4.6 models"; "What's new in Claude 4.6", Prefill removal) and
/// Claude Fable 5 and Mythos 5 (Fable 5 launch notes: assistant prefill is
/// not supported and answers 400). The API's message: "This model does not
/// support assistant message prefill. The conversation must end with a user
/// message." (strands-agents/sdk-python#1694, agno-agi/agno#7015).
const PREFILL_REJECTING: &[&str] = &[
    "claude-opus-4-6",
    "claude-sonnet-4-6",
    "claude-opus-4-7",
    "claude-opus-4-8",
    "claude-opus-5",
    "claude-sonnet-5",
    "claude-fable-5",
    "claude-mythos-5",
];

fn rejects_prefill(model: &str) -> bool {
    PREFILL_REJECTING
        .iter()
        .any(|alias| names_model(model, alias))
}

/// `A15`: a request to a model that rejects prefill ([`PREFILL_REJECTING`])
/// does not end in an assistant turn, unless it presents a
/// `fallback_credit_token`, whose appended-assistant form "also authorizes
/// that one prefill" on such a model (anthropic-sdk-python
/// `types/beta/message_create_params.py`, `fallback_credit_token`). A
/// request with `fallbacks` must be "valid as a direct request to every
/// model named" (platform docs "Refusals and fallback"), so one that ends
/// in an assistant turn names no such model there.
fn prefill_accepted(
    object: &serde_json::Map<String, Value>,
    requested: Option<&str>,
) -> Result<(), Broken> {
    let messages = object.get("messages").and_then(Value::as_array);
    let last = messages.and_then(|m| m.last());
    if !last.is_some_and(|m| role(m) == Some("assistant")) {
        return Ok(());
    }
    const REJECTED: &str = "This model does not support assistant message prefill. \
                            The conversation must end with a user message.";
    let token = object.contains_key("fallback_credit_token");
    if !token && requested.is_some_and(rejects_prefill) {
        return Err(("A15", REJECTED.into()));
    }
    let entries = object.get("fallbacks").and_then(Value::as_array);
    for (i, entry) in entries.into_iter().flatten().enumerate() {
        let model = entry.get("model").and_then(Value::as_str).unwrap_or("");
        if rejects_prefill(model) {
            return Err(("A15", format!("fallbacks.{i}.model: '{model}': {REJECTED}")));
        }
    }
    Ok(())
}

fn chat(api: Api, body: &Value) -> Result<(), Broken> {
    let object = body
        .as_object()
        .ok_or(("C1", "the body is not an object".to_owned()))?;
    if api == Api::OpenAiChat && !object.get("model").is_some_and(Value::is_string) {
        return Err(("C1", "you must provide a model parameter".into()));
    }
    let messages = object
        .get("messages")
        .and_then(Value::as_array)
        .ok_or(("C2", "missing required parameter: 'messages'".to_owned()))?;
    if messages.is_empty() {
        return Err(("C2", "'messages' must contain at least one message".into()));
    }
    let mut open_calls: Option<Vec<&str>> = None;
    let mut unanswered: Vec<&str> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        if role(message) != Some("tool") && !unanswered.is_empty() {
            return Err((
                "C3",
                format!(
                    "messages.[{i}]: an assistant message with 'tool_calls' must be followed by \
                     tool messages responding to each 'tool_call_id' ({})",
                    unanswered.join(", ")
                ),
            ));
        }
        match role(message) {
            Some("system" | "developer" | "user" | "function") => open_calls = None,
            Some("assistant") => {
                open_calls = message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .map(|calls| {
                        calls
                            .iter()
                            .filter_map(|c| c.get("id").and_then(Value::as_str))
                            .collect()
                    });
                unanswered = open_calls.clone().unwrap_or_default();
            }
            Some("tool") => {
                let id = message.get("tool_call_id").and_then(Value::as_str);
                let answers = open_calls
                    .as_ref()
                    .is_some_and(|ids| id.is_some_and(|id| ids.contains(&id)));
                unanswered.retain(|open| Some(*open) != id);
                if !answers {
                    return Err((
                        "C3",
                        format!(
                            "messages.[{i}]: messages with role 'tool' must be a response to a \
                             preceding message with 'tool_calls'"
                        ),
                    ));
                }
            }
            other => {
                return Err((
                    "C2",
                    format!("messages.[{i}].role: invalid value {other:?}"),
                ))
            }
        }
    }
    chat_sampling_and_tools(object)?;
    if let Some(n) = object.get("n") {
        if !n.as_u64().is_some_and(|n| (1..=128).contains(&n)) {
            return Err((
                "C4",
                format!("n: expected an integer from 1 to 128, got {n}"),
            ));
        }
    }
    Ok(())
}

fn chat_sampling_and_tools(object: &serde_json::Map<String, Value>) -> Result<(), Broken> {
    match object.get("stop") {
        None | Some(Value::Null | Value::String(_)) => {}
        Some(Value::Array(stops)) if stops.len() <= 4 && stops.iter().all(Value::is_string) => {}
        Some(stop) => {
            return Err((
                "C5",
                format!("stop: expected a string or up to 4 strings, got {stop}"),
            ))
        }
    }
    let temperature = object.get("temperature").filter(|t| !t.is_null());
    temperature_within("C5", "temperature", temperature, 2.0)?;
    let tools = object.get("tools").and_then(Value::as_array);
    for (i, tool) in tools.into_iter().flatten().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str);
        let name = match kind {
            Some("function") => tool.pointer("/function/name"),
            Some("custom") => tool.pointer("/custom/name"),
            _ => return Err(("C5", format!("tools[{i}].type: invalid value {kind:?}"))),
        };
        if !plain_tool_name(name.and_then(Value::as_str)) {
            return Err((
                "C5",
                format!("tools[{i}].function.name: must match '^[a-zA-Z0-9_-]{{1,64}}$'"),
            ));
        }
    }
    if let Some(choice) = object.get("tool_choice") {
        let valid = match choice {
            Value::String(word) => matches!(word.as_str(), "none" | "auto" | "required"),
            Value::Object(_) => match choice.get("type").and_then(Value::as_str) {
                Some("function") => choice
                    .pointer("/function/name")
                    .is_some_and(Value::is_string),
                Some("allowed_tools" | "custom") => true,
                _ => false,
            },
            _ => false,
        };
        if !valid {
            return Err(("C5", format!("tool_choice: invalid value {choice}")));
        }
    }
    Ok(())
}

fn responses(path: &str, body: &Value) -> Result<(), Broken> {
    let object = body
        .as_object()
        .ok_or(("R1", "the body is not an object".to_owned()))?;
    if !path.contains("/openai/deployments/") && !object.get("model").is_some_and(Value::is_string)
    {
        return Err(("R1", "missing required parameter: 'model'".into()));
    }
    let items = match object.get("input") {
        None | Some(Value::String(_)) => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(("R2", "input: expected a string or an array".into())),
    };
    for (i, item) in items.iter().enumerate() {
        let kind = item.get("type").and_then(Value::as_str);
        if kind.is_none() || kind == Some("message") {
            if !matches!(
                role(item),
                Some("user" | "assistant" | "system" | "developer")
            ) {
                return Err(("R2", format!("input[{i}].role: invalid value")));
            }
            if !matches!(
                item.get("content"),
                Some(Value::String(_) | Value::Array(_))
            ) {
                return Err((
                    "R2",
                    format!("input[{i}].content: expected a string or parts"),
                ));
            }
        }
    }
    Ok(())
}

fn gemini(path: &str, body: &Value) -> Result<(), Broken> {
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
        .ok_or((
            "G1",
            "* GenerateContentRequest.contents: contents is not specified".to_owned(),
        ))?;
    for (i, content) in contents.iter().enumerate() {
        if let Some(role) = content.get("role") {
            if !matches!(role.as_str(), Some("user" | "model")) {
                return Err((
                    "G2",
                    format!("Please use a valid role: user, model (contents[{i}])"),
                ));
            }
        }
        let parts = content
            .get("parts")
            .and_then(Value::as_array)
            .filter(|p| !p.is_empty())
            .ok_or((
                "G2",
                format!("* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty"),
            ))?;
        for (j, part) in parts.iter().enumerate() {
            let Some(fields) = part.as_object() else {
                return Err(("G2", format!("contents[{i}].parts[{j}]: not an object")));
            };
            if fields.get("text").is_some_and(|t| !t.is_string()) {
                return Err(("G2", format!("contents[{i}].parts[{j}].text: not a string")));
            }
            let data = fields
                .keys()
                .any(|k| !matches!(k.as_str(), "thought" | "thoughtSignature" | "videoMetadata"));
            if !data {
                return Err((
                    "G2",
                    format!("contents[{i}].parts[{j}]: required oneof field 'data' must have one initialized field"),
                ));
            }
        }
    }
    gemini_config_and_tools(GoogleApi::of(path), body)?;
    if let Some(count) = body.pointer("/generationConfig/candidateCount") {
        if !count.as_u64().is_some_and(|n| (1..=8).contains(&n)) {
            return Err((
                "G3",
                format!("generationConfig.candidateCount: expected 1 to 8, got {count}"),
            ));
        }
    }
    Ok(())
}

/// Which of Google's two APIs serving Gemini a request went to: they name
/// functions by different rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoogleApi {
    /// The Gemini API (`generativelanguage.googleapis.com/v1beta/models/...`).
    Gemini,
    /// Vertex AI (`.../v1/projects/{p}/locations/{l}/publishers/google/models/...`,
    /// or express mode's `.../v1/publishers/google/models/...`).
    Vertex,
}

impl GoogleApi {
    fn of(path: &str) -> GoogleApi {
        if path.contains("/projects/") || path.contains("/publishers/") {
            GoogleApi::Vertex
        } else {
            GoogleApi::Gemini
        }
    }

    /// Whether `name` names a function in this API (`G4`): 1 to 64
    /// characters, a letter or `_` first, then letters, digits, `_`, `.`,
    /// `-`, and in the Gemini API `:` too.
    fn names_function(self, name: Option<&str>) -> bool {
        let Some(name) = name.filter(|name| (1..=64).contains(&name.len())) else {
            return false;
        };
        let colons = self == GoogleApi::Gemini;
        let first = name.as_bytes()[0];
        (first.is_ascii_alphabetic() || first == b'_')
            && name.bytes().all(|b| {
                b.is_ascii_alphanumeric()
                    || matches!(b, b'_' | b'.' | b'-')
                    || (colons && b == b':')
            })
    }
}

fn gemini_config_and_tools(api: GoogleApi, body: &Value) -> Result<(), Broken> {
    if let Some(stops) = body.pointer("/generationConfig/stopSequences") {
        let valid = stops
            .as_array()
            .is_some_and(|list| list.len() <= 5 && list.iter().all(Value::is_string));
        if !valid {
            return Err((
                "G4",
                format!("generationConfig.stopSequences: at most 5 strings, got {stops}"),
            ));
        }
    }
    let temperature = body.pointer("/generationConfig/temperature");
    temperature_within("G4", "generationConfig.temperature", temperature, 2.0)?;
    let tools = body.get("tools").and_then(Value::as_array);
    for (i, tool) in tools.into_iter().flatten().enumerate() {
        let declarations = tool.get("functionDeclarations").and_then(Value::as_array);
        for (j, declaration) in declarations.into_iter().flatten().enumerate() {
            if !api.names_function(declaration.get("name").and_then(Value::as_str)) {
                return Err((
                    "G4",
                    format!("tools[{i}].function_declarations[{j}].name: Invalid function name"),
                ));
            }
        }
    }
    Ok(())
}
