//! Reroutes on every wire API: a response another model served than the
//! one asked for, with no refusal or fallback signal, is recorded (and, on
//! request, said in a header); with `recover_reroutes` it is decided at
//! its first event and the chain serves the turn before anything of the
//! rerouted answer reaches the client. An alias answered by its snapshot,
//! a deployment name, the guard's own fallbacks and the provider's own
//! server-side fallback are no reroute.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use refusal_guard::header::{RECOVERY, REROUTE};
use refusal_guard::recovery::FallbackChains;
use refusal_guard::refusal::{
    AttemptResult, AttemptStep, DeadReason, RefusalSignal, WireApi, REROUTED_CATEGORY,
};
use refusal_guard::telemetry::{MemorySink, RefusalRecord};
use refusal_guard::{Outcome, RefusalGuardLayer, RefusalHandle};
use serde_json::{json, Value};
use support::openai::{chat_role_chunk, chat_stream};
use support::*;
use tower::Layer;

/// The four wire APIs, each with the model its requests ask for and a
/// weaker one a provider might put in its place.
#[derive(Clone, Copy, Debug)]
enum Api {
    Messages,
    Chat,
    Responses,
    Gemini,
}

use Api::*;

const ALL: [Api; 4] = [Messages, Chat, Responses, Gemini];

impl Api {
    fn wire_api(self) -> WireApi {
        match self {
            Messages => WireApi::AnthropicMessages,
            Chat => WireApi::OpenAiChatCompletions,
            Responses => WireApi::OpenAiResponses,
            Gemini => WireApi::GeminiGenerateContent,
        }
    }

    /// The model the requests ask for.
    fn asked(self) -> &'static str {
        match self {
            Messages => "claude-opus-4-7",
            Chat | Responses => "gpt-5.3-codex",
            Gemini => "gemini-2.5-pro",
        }
    }

    /// A weaker model a provider serves in its place.
    fn weaker(self) -> &'static str {
        match self {
            Messages => "claude-haiku-4-5-20251001",
            Chat | Responses => "gpt-5.2",
            Gemini => "gemini-2.5-flash-lite",
        }
    }

    /// Names of one model: each request's model, and how the response
    /// names it (a dated snapshot, a resource prefix, a version).
    fn aliases(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Messages => &[
                ("claude-opus-4-7", "claude-opus-4-7-20260415"),
                ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"),
                ("claude-3-7-sonnet-latest", "claude-3-7-sonnet-20250219"),
            ],
            Chat | Responses => &[
                ("gpt-5", "gpt-5-2025-08-07"),
                ("gpt-4o", "gpt-4o-2024-08-06"),
                ("gpt-4", "gpt-4-0613"),
            ],
            Gemini => &[
                ("gemini-2.0-flash", "gemini-2.0-flash-001"),
                ("gemini-2.5-pro", "models/gemini-2.5-pro"),
                ("gemini-flash-latest", "gemini-2.5-flash-preview-09-2025"),
            ],
        }
    }

    fn url(self, model: &str, stream: bool) -> String {
        match self {
            Messages => "https://api.anthropic.com/v1/messages".to_owned(),
            Chat => "https://api.openai.com/v1/chat/completions".to_owned(),
            Responses => "https://api.openai.com/v1/responses".to_owned(),
            Gemini if stream => format!("https://generativelanguage.googleapis.com/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            Gemini => format!("https://generativelanguage.googleapis.com/v1beta/models/{model}:generateContent"),
        }
    }

    fn body(self, model: &str, stream: bool) -> Value {
        let user = "Audit my SSH config.";
        match self {
            Messages => messages_request(model, stream, user),
            Chat => json!({"model": model, "stream": stream,
                "messages": [{"role": "user", "content": user}]}),
            Responses => json!({"model": model, "stream": stream, "input": user}),
            Gemini => json!({"contents": [{"role": "user", "parts": [{"text": user}]}]}),
        }
    }

    /// A request for `model`.
    fn request(self, model: &str, stream: bool) -> Request<Full<Bytes>> {
        post_json(&self.url(model, stream), &self.body(model, stream))
    }

    /// The opening of an answer by `model`: the event that names it and
    /// the first text, in one piece (one network chunk).
    fn opening(self, model: &str, text: &str) -> Bytes {
        match self {
            Messages => anthropic_stream(&[
                events::message_start(model),
                events::block_start(0, json!({"type": "text", "text": ""})),
                events::text_delta(0, text),
            ]),
            Chat => chat_stream(&[chat_role_chunk(model), chat_chunk(model, text)], false),
            Responses => responses_stream(&[
                responses_created(model),
                json!({"type": "response.output_text.delta", "sequence_number": 1,
                    "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text}),
            ]),
            Gemini => gemini_stream(&[gemini_chunk(model, Some(text), None)]),
        }
    }

    /// The rest of the answer the opening began.
    fn closing(self, model: &str, text: &str) -> Bytes {
        match self {
            Messages => anthropic_stream(&[
                events::block_stop(0),
                events::stop("end_turn"),
                events::message_stop(),
            ]),
            Chat => {
                let done = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                    "created": 1767225600, "model": model,
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
                chat_stream(&[done], true)
            }
            Responses => responses_stream(&[json!({"type": "response.completed",
                "sequence_number": 2, "response": responses_object(model, "completed", text)})]),
            Gemini => gemini_stream(&[gemini_chunk(model, None, Some("STOP"))]),
        }
    }

    /// A whole streamed answer by `model`.
    fn stream(self, model: &str, text: &str) -> Bytes {
        [self.opening(model, text), self.closing(model, text)]
            .concat()
            .into()
    }

    /// A whole JSON answer by `model`.
    fn json(self, model: &str, text: &str) -> Bytes {
        let body = match self {
            Messages => json!({"id": "msg_1", "type": "message", "role": "assistant",
                "model": model, "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 5}}),
            Chat => json!({"id": "chatcmpl-1", "object": "chat.completion",
                "created": 1767225600, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text}}]}),
            Responses => responses_object(model, "completed", text),
            Gemini => json!({"candidates": [{"content": {"role": "model",
                "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
                "modelVersion": model}),
        };
        Bytes::from(body.to_string())
    }

    /// An answer by `model`, streamed or not.
    fn answer(self, model: &str, text: &str, stream: bool) -> (Bytes, Reply) {
        if stream {
            let bytes = self.stream(model, text);
            (bytes.clone(), Reply::Sse(vec![bytes]))
        } else {
            let bytes = self.json(model, text);
            (bytes.clone(), Reply::Json(bytes))
        }
    }

    /// A refusal by `model`, with nothing before it, streamed.
    fn refusal(self, model: &str) -> Bytes {
        match self {
            Messages => anthropic_stream(&[
                events::message_start(model),
                events::refusal(Some("cyber"), None),
                events::message_stop(),
            ]),
            Chat => {
                let filtered = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                    "created": 1767225600, "model": model,
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]});
                chat_stream(&[chat_role_chunk(model), filtered], true)
            }
            Responses => {
                let mut incomplete = responses_object(model, "incomplete", "");
                incomplete["output"] = json!([]);
                incomplete["incomplete_details"] = json!({"reason": "content_filter"});
                responses_stream(&[
                    responses_created(model),
                    json!({"type": "response.incomplete", "sequence_number": 1,
                        "response": incomplete}),
                ])
            }
            Gemini => gemini_stream(&[gemini_chunk(model, None, Some("SAFETY"))]),
        }
    }
}

fn post_json(url: &str, body: &Value) -> Request<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap();
    Request::post(url)
        .header("content-type", "application/json")
        .header("content-length", bytes.len())
        .header("authorization", "Bearer sk-test")
        .header("x-api-key", "sk-test")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap()
}

fn chat_chunk(model: &str, text: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1767225600,
        "model": model, "choices": [{"index": 0, "delta": {"content": text},
        "finish_reason": null}]})
}

fn responses_stream(events: &[Value]) -> Bytes {
    let mut out = String::new();
    for event in events {
        out.push_str(&format!(
            "event: {}\ndata: {event}\n\n",
            event["type"].as_str().unwrap()
        ));
    }
    Bytes::from(out)
}

fn responses_object(model: &str, status: &str, text: &str) -> Value {
    json!({"id": "resp_1", "object": "response", "created_at": 1767225600,
        "status": status, "error": null, "incomplete_details": null, "model": model,
        "output": [{"id": "msg_1", "type": "message", "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}]})
}

fn responses_created(model: &str) -> Value {
    let mut response = responses_object(model, "in_progress", "");
    response["output"] = json!([]);
    json!({"type": "response.created", "sequence_number": 0, "response": response})
}

fn gemini_chunk(model: &str, text: Option<&str>, finish: Option<&str>) -> Value {
    let mut candidate = json!({"index": 0});
    if let Some(text) = text {
        candidate["content"] = json!({"role": "model", "parts": [{"text": text}]});
    }
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    json!({"candidates": [candidate], "modelVersion": model})
}

fn gemini_stream(chunks: &[Value]) -> Bytes {
    let mut out = String::new();
    for chunk in chunks {
        out.push_str(&format!("data: {chunk}\r\n\r\n"));
    }
    Bytes::from(out)
}

/// `api`'s requested model falls back to itself, then to its peer.
fn chains_to_itself(api: Api, then: &[&str]) -> FallbackChains {
    let mut chain = vec![api.asked()];
    chain.extend_from_slice(then);
    FallbackChains::new().chain(api.asked(), chain)
}

fn reroute_record(records: &[RefusalRecord], what: &str) -> RefusalRecord {
    assert_eq!(records.len(), 1, "{what}: {records:?}");
    records[0].clone()
}

#[tokio::test]
async fn a_reroute_is_recorded_and_served_as_it_came() {
    for api in ALL {
        for stream in [true, false] {
            let what = format!("{api:?} stream={stream}");
            let (sent, reply) = api.answer(api.weaker(), "Here is the audit.", stream);
            let request = api.request(api.asked(), stream);
            let done = exchange(RefusalGuardLayer::new(), vec![reply], request).await;
            assert_eq!(done.body, sent, "{what}: served as it came");
            assert_eq!(done.upstream.seen().len(), 1, "{what}: nothing sent again");
            assert!(
                done.parts.headers.get(REROUTE).is_none(),
                "{what}: the header is opt-in"
            );
            let record = reroute_record(&done.sink.records(), &what);
            assert_eq!(record.outcome, Outcome::Rerouted, "{what}");
            assert_eq!(record.signal, RefusalSignal::Rerouted, "{what}");
            assert_eq!(
                record.category.as_deref(),
                Some(REROUTED_CATEGORY),
                "{what}"
            );
            assert_eq!(record.model.as_deref(), Some(api.asked()), "{what}");
            assert_eq!(record.served_model.as_deref(), Some(api.weaker()), "{what}");
            assert_eq!(record.provider, api.wire_api().provider(), "{what}");
            assert_eq!(record.wire_api, api.wire_api(), "{what}");
            assert!(record.conversation.is_some(), "{what}: the conversation");
            assert_eq!(record.attempts.len(), 1, "{what}");
            let original = &record.attempts[0];
            assert_eq!(original.result, AttemptResult::Served, "{what}");
            assert_eq!(original.model.as_deref(), Some(api.asked()), "{what}");
            assert_eq!(
                original.rerouted_to.as_deref(),
                Some(api.weaker()),
                "{what}"
            );
            let handle = done.parts.extensions.get::<RefusalHandle>().unwrap();
            assert_eq!(
                handle.get(),
                Some(record.refusal()),
                "{what}: the handle says so"
            );
        }
    }
}

#[tokio::test]
async fn the_reroute_header_names_both_models_when_asked_for() {
    for api in ALL {
        let (sent, reply) = api.answer(api.weaker(), "Here is the audit.", true);
        let layer = RefusalGuardLayer::new().reroute_header(true);
        let done = exchange(layer, vec![reply], api.request(api.asked(), true)).await;
        assert_eq!(done.body, sent);
        let header = done.parts.headers.get(REROUTE).map(|v| v.to_str().unwrap());
        let expected = format!("requested={}; served={}", api.asked(), api.weaker());
        assert_eq!(header, Some(expected.as_str()), "{api:?}");
        // An answer by the model asked for says nothing.
        let (_, reply) = api.answer(api.asked(), "Here is the audit.", true);
        let layer = RefusalGuardLayer::new().reroute_header(true);
        let done = exchange(layer, vec![reply], api.request(api.asked(), true)).await;
        assert!(done.parts.headers.get(REROUTE).is_none(), "{api:?}");
        assert!(done.sink.is_empty(), "{api:?}");
    }
}

#[tokio::test]
async fn an_alias_answered_by_its_snapshot_is_no_reroute() {
    for api in ALL {
        for &(requested, served) in api.aliases() {
            for stream in [true, false] {
                let what = format!("{api:?} {requested} -> {served}, stream={stream}");
                let (sent, reply) = api.answer(served, "Here is the audit.", stream);
                let layer = RefusalGuardLayer::new().recover_reroutes(true);
                let done = exchange(layer, vec![reply], api.request(requested, stream)).await;
                done.assert_untouched(&sent);
                assert!(done.parts.headers.get(REROUTE).is_none(), "{what}");
            }
        }
    }
}

#[tokio::test]
async fn a_deployment_name_is_no_reroute() {
    let chat = (Chat, "https://r.openai.azure.com/openai/deployments/prod-chat/chat/completions?api-version=2024-10-21");
    let chat_v1 = (
        Chat,
        "https://r.openai.azure.com/openai/v1/chat/completions",
    );
    let responses = (Responses, "https://r.openai.azure.com/openai/v1/responses");
    let foundry = (
        Messages,
        "https://r.services.ai.azure.com/anthropic/v1/messages",
    );
    for (api, url) in [chat, chat_v1, responses, foundry] {
        for stream in [true, false] {
            let (sent, reply) = api.answer(api.weaker(), "Here is the audit.", stream);
            let mut body = api.body("prod-chat", stream);
            if url.contains("/deployments/") {
                // The deployment is in the path; Azure ignores a body model.
                body.as_object_mut().unwrap().remove("model");
            }
            let layer = RefusalGuardLayer::new().recover_reroutes(true);
            let done = exchange(layer, vec![reply], post_json(url, &body)).await;
            done.assert_untouched(&sent);
        }
    }
}

#[tokio::test]
async fn the_guards_own_fallback_is_no_reroute() {
    for api in ALL {
        let peer = match api {
            Messages => "claude-sonnet-4-5",
            Chat | Responses => "gpt-5",
            Gemini => "gemini-2.5-flash",
        };
        // The fallback answers as its dated snapshot where it has one.
        let answered_as = match api {
            Messages => "claude-sonnet-4-5-20250929",
            Chat | Responses => "gpt-5-2025-08-07",
            Gemini => "gemini-2.5-flash",
        };
        let served = api.stream(answered_as, "Here is the audit.");
        let replies = vec![
            Reply::Sse(vec![api.refusal(api.asked())]),
            Reply::Sse(vec![served.clone()]),
        ];
        let layer = RefusalGuardLayer::new()
            .rescue(false)
            .recover_reroutes(true)
            .reroute_header(true)
            .fallback_chains(FallbackChains::new().chain(api.asked(), [peer]));
        let done = exchange(layer, replies, api.request(api.asked(), true)).await;
        done.assert_served_on_the_second_call(&served, "the fallback's answer");
        assert!(done.parts.headers.get(REROUTE).is_none(), "{api:?}");
        let records = done.sink.records();
        assert_eq!(records.len(), 1, "{api:?}");
        assert_eq!(records[0].outcome, Outcome::Fallback, "{api:?}");
        assert_ne!(records[0].signal, RefusalSignal::Rerouted, "{api:?}");
        assert_eq!(
            records[0].served_model.as_deref(),
            Some(answered_as),
            "{api:?}"
        );
        for attempt in &records[0].attempts {
            assert_eq!(attempt.rerouted_to, None, "{api:?}: {attempt:?}");
        }
    }
}

#[tokio::test]
async fn an_anthropic_server_side_fallback_is_signalled_and_no_reroute() {
    // The body names the model that served (claude-opus-4-8) beside the
    // fallback block and the iterations that say so.
    let json = fixture("anthropic/vercel-ai/anthropic-fallback.json");
    let stream = fixture("anthropic/anthropic-sdk-python/fallback_response.txt");
    let cases = [
        (
            "claude-fable-5",
            "claude-opus-4-8",
            false,
            Reply::Json(json.clone()),
            json,
        ),
        (
            "claude-opus-4-7",
            "claude-sonnet-4-5",
            true,
            Reply::Sse(vec![stream.clone()]),
            stream,
        ),
    ];
    for (model, fallback, streamed, reply, sent) in cases {
        let mut body = messages_request(model, streamed, "Audit my SSH config.");
        body["fallbacks"] = json!([{ "model": fallback }]);
        let mut request = post_json("https://api.anthropic.com/v1/messages", &body);
        let beta = http::HeaderValue::from_static("server-side-fallback-2026-07-01");
        request.headers_mut().insert("anthropic-beta", beta);
        let layer = RefusalGuardLayer::new()
            .recover_reroutes(true)
            .reroute_header(true);
        let done = exchange(layer, vec![reply], request).await;
        assert_eq!(done.body, sent, "{model}");
        assert_eq!(done.upstream.seen().len(), 1, "{model}");
        assert!(done.parts.headers.get(REROUTE).is_none(), "{model}");
        let records = done.sink.records();
        assert_eq!(records.len(), 1, "{model}: the provider's fallback");
        assert_eq!(records[0].outcome, Outcome::Fallback, "{model}");
        assert_ne!(records[0].signal, RefusalSignal::Rerouted, "{model}");
        assert!(records[0].attempts.iter().all(|a| a.rerouted_to.is_none()));
    }
}

/// A mock upstream whose first answer opens with `opening` and then waits
/// on a gate the test keeps closed, and whose later answers are `then`,
/// in order: what the guard decides is decided on the opening alone.
fn gated_then(
    opening: Bytes,
    then: Vec<Bytes>,
) -> (Answering<impl MockInner>, tokio::sync::oneshot::Sender<()>) {
    let (open, gate) = tokio::sync::oneshot::channel();
    let gate = Arc::new(Mutex::new(Some(gate)));
    let then = Arc::new(Mutex::new(std::collections::VecDeque::from(then)));
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = answering(move |_request| {
        let (gate, then, calls) = (gate.clone(), then.clone(), calls.clone());
        let opening = opening.clone();
        async move {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                let gate = gate.lock().unwrap().take().unwrap();
                let steps = vec![Step::Data(opening), Step::Gate(gate)];
                return sse_response(Chunked::steps(steps, Duration::ZERO));
            }
            let next = then.lock().unwrap().pop_front().expect("a scripted answer");
            sse_response(Chunked::chunks(vec![next]))
        }
    });
    (inner, open)
}

#[tokio::test]
async fn with_recovery_on_a_rerouted_stream_is_served_by_the_chain_before_any_output() {
    for api in ALL {
        let rerouted = api.opening(api.weaker(), "REROUTED OUTPUT");
        let served = api.stream(api.asked(), "Here is the audit.");
        let (inner, gate) = gated_then(rerouted, vec![served.clone()]);
        let sink = MemorySink::new();
        let mut guard = RefusalGuardLayer::new()
            .recover_reroutes(true)
            .fallback_chains(chains_to_itself(api, &[]))
            .telemetry(sink.clone())
            .layer(inner.service());
        let request = api.request(api.asked(), true);
        // Bounded: the rest of the rerouted stream never comes.
        let (parts, body) =
            tokio::time::timeout(Duration::from_secs(60), call(&mut guard, request))
                .await
                .unwrap_or_else(|_| panic!("{api:?}: not decided at the first event"));
        assert_eq!(
            body, served,
            "{api:?}: the client saw only the fallback's bytes"
        );
        let recovered = parts.headers.get(RECOVERY).unwrap().to_str().unwrap();
        let expected = format!("fallback; category=rerouted; served-by={}", api.asked());
        assert_eq!(recovered, expected, "{api:?}");
        let record = reroute_record(&sink.records(), &format!("{api:?}"));
        assert_eq!(record.outcome, Outcome::Fallback, "{api:?}");
        assert_eq!(record.signal, RefusalSignal::Rerouted, "{api:?}");
        assert_eq!(
            record.category.as_deref(),
            Some(REROUTED_CATEGORY),
            "{api:?}"
        );
        assert_eq!(record.served_model.as_deref(), Some(api.asked()), "{api:?}");
        let steps: Vec<_> = record.attempts.iter().map(|a| (a.step, a.result)).collect();
        assert_eq!(
            steps,
            [
                (AttemptStep::Original, AttemptResult::Refused),
                (AttemptStep::Fallback, AttemptResult::Served),
            ],
            "{api:?}"
        );
        assert_eq!(
            record.attempts[0].rerouted_to.as_deref(),
            Some(api.weaker())
        );
        assert_eq!(record.attempts[1].rerouted_to, None, "{api:?}");
        drop(gate);
    }
}

#[tokio::test]
async fn with_recovery_on_a_rerouted_json_answer_is_served_by_the_chain() {
    for api in ALL {
        let (_, rerouted) = api.answer(api.weaker(), "REROUTED OUTPUT", false);
        let (served, again) = api.answer(api.asked(), "Here is the audit.", false);
        let layer = RefusalGuardLayer::new()
            .recover_reroutes(true)
            .fallback_chains(chains_to_itself(api, &[]));
        let done = exchange(
            layer,
            vec![rerouted, again],
            api.request(api.asked(), false),
        )
        .await;
        let seen = done.assert_served_on_the_second_call(&served, "the fallback's answer");
        assert_eq!(
            seen[1].json(),
            seen[0].json(),
            "{api:?}: asked again as it was"
        );
        let record = reroute_record(&done.sink.records(), &format!("{api:?}"));
        assert_eq!(record.outcome, Outcome::Fallback, "{api:?}");
        assert_eq!(
            record.category.as_deref(),
            Some(REROUTED_CATEGORY),
            "{api:?}"
        );
        assert_eq!(
            record.attempts[0].rerouted_to.as_deref(),
            Some(api.weaker())
        );
    }
}

#[tokio::test]
async fn a_rerouted_fallback_is_declined_too_and_the_next_one_serves() {
    let api = Messages;
    let served = api.stream("claude-sonnet-4-5", "Here is the audit.");
    let replies = vec![
        Reply::Sse(vec![api.stream(api.weaker(), "REROUTED")]),
        Reply::Sse(vec![api.stream(api.weaker(), "REROUTED AGAIN")]),
        Reply::Sse(vec![served.clone()]),
    ];
    let layer = RefusalGuardLayer::new()
        .recover_reroutes(true)
        .fallback_chains(chains_to_itself(api, &["claude-sonnet-4-5"]));
    let done = exchange(layer, replies, api.request(api.asked(), true)).await;
    assert_eq!(done.body, served);
    let record = reroute_record(&done.sink.records(), "chain");
    assert_eq!(record.outcome, Outcome::Fallback);
    let rerouted: Vec<_> = record
        .attempts
        .iter()
        .map(|a| a.rerouted_to.as_deref())
        .collect();
    assert_eq!(rerouted, [Some(api.weaker()), Some(api.weaker()), None]);
    assert_eq!(record.attempts[1].result, AttemptResult::Refused);
    assert_eq!(
        record.attempts[2].model.as_deref(),
        Some("claude-sonnet-4-5")
    );
}

#[tokio::test]
async fn with_recovery_on_an_unrecovered_reroute_is_served_as_it_came() {
    for api in ALL {
        for stream in [true, false] {
            let what = format!("{api:?} stream={stream}");
            let (sent, reply) = api.answer(api.weaker(), "Here is the audit.", stream);
            // No chain: nothing to serve the turn with, and no rescue for a
            // reroute (its note speaks of a safety classifier).
            let layer = RefusalGuardLayer::new()
                .recover_reroutes(true)
                .reroute_header(true);
            let done = exchange(layer, vec![reply], api.request(api.asked(), stream)).await;
            assert_eq!(done.body, sent, "{what}: as it came");
            assert_eq!(done.upstream.seen().len(), 1, "{what}");
            let header = done.parts.headers.get(REROUTE).map(|v| v.to_str().unwrap());
            let expected = format!("requested={}; served={}", api.asked(), api.weaker());
            assert_eq!(header, Some(expected.as_str()), "{what}");
            let record = reroute_record(&done.sink.records(), &what);
            assert_eq!(record.outcome, Outcome::Dead, "{what}");
            assert_eq!(record.reason, Some(DeadReason::NotSafety), "{what}");
            assert_eq!(record.served_model.as_deref(), Some(api.weaker()), "{what}");
            assert_eq!(
                record.attempts[0].rerouted_to.as_deref(),
                Some(api.weaker())
            );
        }
    }
}
