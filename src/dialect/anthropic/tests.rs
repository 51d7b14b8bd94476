use http::HeaderValue;

use super::*;
use crate::dialect::tests::{data, event, frames, judge_frames};
use crate::dialect::{json_event, Declined, PrefillClaim};
use crate::refusal::{FallbackCredit, Prefill as ClaimState, RefusalSignal, Usage};
use crate::sse::Frame;

/// Every event of the recorded Anthropic streams (and some shaped to
/// test the edges), judged in typed fields and as a `Value`, in
/// order: the two readings agree, and the typed one is what was used
/// for most.
#[test]
fn typed_and_value_readings_of_stream_events_agree() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut streams: Vec<Vec<Frame>> = Vec::new();
    for dir in [
        "anthropic/anthropic-sdk-python",
        "anthropic/vercel-ai",
        "e2e",
    ] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let name = path.to_string_lossy().into_owned();
            if name.ends_with(".sse") {
                streams.push(frames(&text));
            } else if name.ends_with(".chunks.txt") {
                streams.push(text.lines().map(data).collect());
            }
        }
    }
    streams.push(
        [
            json!({"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 5, "cache_read_input_tokens": 2}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": " \n"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "fallback", "from": {"model": "a"}, "to": {"model": "b"}, "trigger": {"category": "cyber"}}}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "name": "t"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "caf\u{e9} \"x\""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 7}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "refusal"}, "usage": {"output_tokens": 3}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": {"category": 1, "explanation": "e"}}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": "odd"}}),
            json!({"message": {"model": "no type"}}),
            json!({"type": "error", "error": {"type": "overloaded_error"}}),
            json!({"type": "message_start", "message": {"id": "msg_1", "model": "m"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details":
                {"fallback_credit_token": "t", "fallback_has_prefill_claim": false, "recommended_model": "r"}}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details":
                {"fallback_has_prefill_claim": "yes", "recommended_model": 3}}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4,
                "iterations": [{"type": "message", "model": "a", "input_tokens": 9, "output_tokens": 1},
                               {"type": "compaction", "input_tokens": 2},
                               {"type": "fallback_message", "model": "b", "input_tokens": 9}],
                "fallback_credit": {"status": {"type": "not_applied", "reason": "expired"}}}}),
            json!({"type": "message_delta", "usage": {"iterations": [{"type": "fallback_message"}],
                "fallback_credit": {"status": {"type": "redeemed"}}}}),
            json!({"type": "message_delta", "usage": {"iterations": [{"type": "message", "model": "a"}],
                "fallback_credit": {"status": {"type": "later"}}}}),
        ]
        .iter()
        .map(|event| data(&event.to_string()))
        .collect(),
    );
    let (mut compared, mut fitted) = (0, 0);
    for stream in &streams {
        let (mut typed_side, mut value_side) =
            (AnthropicStream::default(), AnthropicStream::default());
        for frame in stream {
            let value = value_side.judge_value(frame);
            let Some(fields) = frame
                .data()
                .and_then(|d| typed::<EventFields<'_>>(d.as_bytes()))
            else {
                typed_side.judge_value(frame);
                continue;
            };
            assert_eq!(typed_side.judge_fields(&fields, frame), value, "{frame:?}");
            assert_eq!(typed_side.start_usage, value_side.start_usage, "{frame:?}");
            fitted += 1;
        }
        compared += stream.len();
    }
    assert!(compared > 150, "{compared} events compared");
    assert!(
        fitted * 10 > compared * 9,
        "{fitted} of {compared} fitted the typed fields"
    );
}

fn one(frame: Frame) -> Finding {
    judge_frames(&AnthropicMessages, &[frame]).remove(0)
}

fn stop(delta: Value) -> Finding {
    one(event(
        "message_delta",
        &json!({"type": "message_delta", "delta": delta, "usage": {"output_tokens": 3}}),
    ))
}

#[test]
fn a_refusal_stop_in_a_stream_names_its_category_and_explanation() {
    let seen = stop(json!({"stop_reason": "refusal", "stop_details":
        {"type": "refusal", "category": "cyber", "explanation": "Declined."}}));
    let info = seen.refusal.unwrap();
    assert_eq!(info.signal, Some(RefusalSignal::StopReason));
    assert_eq!(info.category.as_deref(), Some("cyber"));
    assert_eq!(info.explanation.as_deref(), Some("Declined."));
    assert_eq!(info.credit_token, None);
    assert!(!seen.real_output);
}

#[test]
fn a_refusal_may_carry_a_credit_token() {
    let seen = stop(json!({"stop_reason": "refusal", "stop_details":
        {"type": "refusal", "category": "bio", "fallback_credit_token": "tok_1"}}));
    assert_eq!(seen.refusal.unwrap().credit_token.as_deref(), Some("tok_1"));
}

#[test]
fn a_refusal_without_details_or_with_a_null_category_is_still_one() {
    let bare = stop(json!({"stop_reason": "refusal"})).refusal.unwrap();
    assert_eq!((bare.category, bare.explanation), (None, None));
    let null = stop(json!({"stop_reason": "refusal",
        "stop_details": {"type": "refusal", "category": null, "explanation": null}}));
    assert_eq!(null.refusal.unwrap().category, None);
    assert!(stop(json!({"stop_reason": "end_turn"})).refusal.is_none());
}

#[test]
fn thinking_and_blank_text_are_not_output() {
    let start = |block: Value| {
        one(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ))
    };
    assert!(!start(json!({"type": "thinking", "thinking": ""})).real_output);
    assert!(!start(json!({"type": "redacted_thinking", "data": "x"})).real_output);
    assert!(!start(json!({"type": "text", "text": " \n"})).real_output);
    assert!(start(json!({"type": "text", "text": "Hi"})).real_output);
    let tool = start(json!({"type": "tool_use", "id": "t", "name": "f", "input": {}}));
    assert!(tool.real_output && tool.tool_call);
    let delta = |delta: Value| {
        one(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ))
    };
    assert!(!delta(json!({"type": "thinking_delta", "thinking": "hm"})).real_output);
    let text = delta(json!({"type": "text_delta", "text": "Sure"}));
    assert!(text.real_output);
    assert_eq!(text.text, "Sure");
}

#[test]
fn unknown_events_and_broken_json_are_tolerated() {
    let seen = judge_frames(
        &AnthropicMessages,
        &frames(concat!(
            "event: future_event\ndata: {\"type\":\"future_event\",\"stop_reason\":\"refusal\"}\n\n",
            "event: content_block_delta\ndata: {broken\n\n",
            ": keep-alive\n\n",
        )),
    );
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|o| *o == Finding::default()));
    let error = one(event(
        "error",
        &json!({"type": "error", "error": {"type": "overloaded_error"}}),
    ));
    assert!(error.error);
}

#[test]
fn the_model_comes_from_message_start() {
    let seen = one(event(
        "message_start",
        &json!({"type": "message_start", "message": {"model": "claude-sonnet-4-5", "content": []}}),
    ));
    assert_eq!(seen.model.as_deref(), Some("claude-sonnet-4-5"));
}

#[test]
fn deltas_are_skipped_once_committed() {
    let frame = event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "Sure"}}),
    );
    let mut judge = AnthropicMessages.event_judge();
    assert_eq!(judge.judge(&frame, true), Finding::default());
    assert!(judge.judge(&frame, false).real_output);
}

#[test]
fn only_deltas_and_pings_are_skipped_by_name() {
    let judge = AnthropicMessages.event_judge();
    let skips = |name: &[u8]| judge.skips_committed(Some(name));
    assert!(skips(b"content_block_delta") && skips(b"ping"));
    for name in [
        &b"content_block_deltas"[..],
        b"content_block_delt",
        b"content_block_start",
        b"message_delta",
        b"pin",
        b"ping ",
        b"Ping",
        b"",
    ] {
        assert!(!skips(name), "{name:?}");
    }
    assert!(!judge.skips_committed(None));
}

#[test]
fn a_server_side_fallback_block_is_read() {
    let block = json!({"type": "fallback", "from": {"model": "claude-opus-4-7"},
        "to": {"model": "claude-sonnet-4-5"}, "trigger": {"type": "refusal", "category": "cyber"}});
    let seen = one(event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0, "content_block": block}),
    ));
    let fallback = seen.server_fallback.unwrap();
    assert_eq!(fallback.from.as_deref(), Some("claude-opus-4-7"));
    assert_eq!(fallback.to.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(fallback.category.as_deref(), Some("cyber"));
    assert!(!seen.real_output);
}

#[test]
fn a_json_body_shows_an_empty_or_a_partial_refusal() {
    let empty = AnthropicMessages.judge_json(&json!({"type": "message",
        "model": "claude-opus-4-7", "content": [], "stop_reason": "refusal",
        "stop_details": {"type": "refusal", "category": "cyber", "explanation": "No."}}));
    assert!(!empty.real_output);
    assert_eq!(empty.model.as_deref(), Some("claude-opus-4-7"));
    assert_eq!(empty.refusal.unwrap().explanation.as_deref(), Some("No."));
    let partial = AnthropicMessages.judge_json(&json!({"type": "message",
        "content": [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "Part"}],
        "stop_reason": "refusal"}));
    assert!(partial.real_output && partial.refusal.is_some());
    assert_eq!(partial.text, "Part");
    let error = AnthropicMessages.judge_json(&json!({"type": "error", "error": {}}));
    assert!(error.error && error.refusal.is_none());
}

#[test]
fn a_body_read_from_its_bytes_shows_what_its_value_shows() {
    let bodies = [
        r#"{"id":"msg_b","type":"message","model":"m","content":[{"type":"fallback","from":{"model":"a"},
            "to":{"model":"b"},"trigger":{"category":"cyber"}},{"type":"fallback","from":{"model":"b"},
            "to":{"model":"c"}},{"type":"text","text":"Hi"}],"stop_reason":"end_turn",
            "usage":{"input_tokens":3,"iterations":[{"type":"message","model":"a","input_tokens":5},
            {"type":"message","model":"b","output_tokens":2},{"type":"fallback_message","model":"c"}],
            "fallback_credit":{"status":{"type":"not_applied","reason":"body_mismatch"}}}}"#,
        r#"{"content":[],"stop_reason":"refusal","stop_details":{"fallback_credit_token":"t",
            "fallback_has_prefill_claim":true,"recommended_model":"r"},"usage":{"input_tokens":1,
            "fallback_credit":{"status":{"type":"redeemed"}}}}"#,
        r#"{"type":"message","model":"claude-opus-4-7","content":[],"stop_reason":"refusal",
            "stop_details":{"type":"refusal","category":"cyber","explanation":"No.",
            "fallback_credit_token":"tok"},"usage":{"input_tokens":5,"output_tokens":2,
            "cache_read_input_tokens":1,"cache_creation_input_tokens":0}}"#,
        r#"{"content":[{"type":"thinking","thinking":"x"},{"type":"text","text":"Pa\nrt"},
            {"type":"text","text":" "}],"stop_reason":"refusal","stop_details":null,
            "usage":{"input_tokens":-1,"output_tokens":1.5}}"#,
        r#"{"content":[{"type":"tool_use","id":"t","name":"n","input":{"a":[1,{"b":null}]}}],
            "stop_reason":"tool_use"}"#,
        r#"{"content":[{"type":"fallback","from":{"model":"a"},"to":{"model":"b"},
            "trigger":{"category":"cyber"}},{"type":"fallback","from":{"model":"c"}},
            {"type":"text","text":"Hi"}],"model":null}"#,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#,
        // Leaves of other types read as absent.
        r#"{"type":7,"model":["m"],"content":[{"type":{"x":1},"text":"y"}],"stop_reason":"refusal",
            "stop_details":{"category":1,"explanation":true},"usage":{"input_tokens":"3"}}"#,
        // Shapes the typed read does not fit: read as a whole Value.
        r#"{"model":"a","model":"b","content":[{"type":"text","text":"x"}]}"#,
        r#"{"content":{"type":"text","text":"x"},"stop_reason":"refusal","usage":5}"#,
        r#"{"content":["text",{"type":"text","text":"y"}],"stop_reason":"refusal","stop_details":"x"}"#,
        r#"{"content":[{"type":"fallback","from":"a","trigger":[]}]}"#,
        r#"[{"type":"error"}]"#,
        r#"{"content":[{"type":"text","text":3},{"type":"text","text":null}]}"#,
        r#"["error","m"]"#,
        r#"{"content":[["text","Hi"]],"stop_reason":"refusal","stop_details":["cyber"],"usage":[1,2]}"#,
    ];
    let compact = bodies.map(|body| body.lines().map(str::trim).collect::<String>());
    let pretty = "{\n  \"content\": [{\"type\": \"text\", \"text\": \"x\"}]\n}".to_owned();
    for (at, body) in compact.iter().chain([&pretty]).enumerate() {
        // The first eight fit the typed read, the others take the Value.
        let fits = typed::<MessageFields<'_>>(body.as_bytes()).is_some();
        assert_eq!(fits, at < 8, "{body}");
        let value: Value = serde_json::from_str(body).unwrap();
        let from_value = AnthropicMessages.judge_json(&value);
        let read = AnthropicMessages.judge_json_bytes(body.as_bytes(), true);
        assert_eq!(read.as_ref(), Some(&from_value), "{body}");
        let without_text = AnthropicMessages.judge_json_bytes(body.as_bytes(), false);
        let expected = Finding {
            text: String::new(),
            ..from_value
        };
        assert_eq!(without_text, Some(expected), "{body}");
    }
    assert_eq!(AnthropicMessages.judge_json_bytes(b"{broken", true), None);
}

#[test]
fn the_rescue_note_joins_the_last_user_turn_after_its_tool_results() {
    let mut body = json!({"messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
    ]});
    AnthropicMessages.append_note(&mut body, "NOTE").unwrap();
    let content = body["messages"][1]["content"].as_array().unwrap();
    assert_eq!(body["messages"].as_array().unwrap().len(), 2);
    assert_eq!(content[0]["type"], "tool_result");
    assert_eq!(content[1], json!({"type": "text", "text": "NOTE"}));
}

#[test]
fn the_rescue_note_goes_before_a_trailing_system_message() {
    // A mid-conversation system message must follow a user turn and end
    // the messages or precede an assistant turn: the note joins the turn
    // it follows rather than coming after it.
    let mut body = json!({"messages": [
        {"role": "user", "content": "Audit this"},
        {"role": "system", "content": "Reminder: be brief."},
    ]});
    AnthropicMessages.append_note(&mut body, "NOTE").unwrap();
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["content"][1]["text"], "NOTE");
    assert_eq!(messages[1]["role"], "system");
    // After a server tool's result, a turn of its own, still before it.
    let mut served = json!({"messages": [
        {"role": "user", "content": "Search"},
        {"role": "assistant", "content": [{"type": "web_search_tool_result",
            "tool_use_id": "s1", "content": []}]},
        {"role": "system", "content": "Cite sources."},
    ]});
    AnthropicMessages.append_note(&mut served, "NOTE").unwrap();
    let roles: Vec<&str> = served["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "system"]);
}

#[test]
fn the_rescue_note_turns_text_content_into_blocks_or_adds_a_turn() {
    let mut text = json!({"messages": [{"role": "user", "content": "Audit this"}]});
    AnthropicMessages.append_note(&mut text, "NOTE").unwrap();
    assert_eq!(
        text["messages"][0]["content"],
        json!([{"type": "text", "text": "Audit this"}, {"type": "text", "text": "NOTE"}])
    );
    let mut after = json!({"messages": [{"role": "user", "content": "a"},
                                        {"role": "assistant", "content": "b"}]});
    AnthropicMessages.append_note(&mut after, "NOTE").unwrap();
    assert_eq!(after["messages"][2]["role"], "user");
    assert_eq!(after["messages"][2]["content"][0]["text"], "NOTE");
    assert!(AnthropicMessages
        .append_note(&mut json!({}), "NOTE")
        .is_err());
    let mut odd = json!({"messages": [{"role": "user", "content": 7}]});
    assert!(AnthropicMessages.append_note(&mut odd, "NOTE").is_err());
}

#[test]
fn a_model_swap_rewrites_the_body_or_the_vertex_path() {
    let mut uri: Uri = "https://h/v1/messages".parse().unwrap();
    let mut body = json!({"model": "claude-opus-4-7", "messages": []});
    AnthropicMessages
        .swap_model(&mut uri, &mut body, "claude-sonnet-4-5")
        .unwrap();
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(uri, "https://h/v1/messages");

    let vertex = "https://h/v1/projects/p/locations/l/publishers/anthropic/models/claude-opus-4-7:streamRawPredict?x=1";
    let mut uri: Uri = vertex.parse().unwrap();
    let mut body = json!({"anthropic_version": "vertex-2023-10-16", "messages": []});
    assert!(AnthropicMessages.is_streaming(&uri, &body));
    AnthropicMessages
        .swap_model(&mut uri, &mut body, "claude-sonnet-4-5")
        .unwrap();
    assert_eq!(
        uri,
        "https://h/v1/projects/p/locations/l/publishers/anthropic/models/claude-sonnet-4-5:streamRawPredict?x=1"
    );
    assert!(body.get("model").is_none());
    let recognised = AnthropicMessages.recognise(&Method::POST, &uri);
    assert_eq!(recognised, Some(Some("claude-sonnet-4-5".to_owned())));
}

#[test]
fn vertex_paths_of_other_publishers_or_methods_are_not_claude() {
    let other = |path: &str| AnthropicMessages.recognise(&Method::POST, &path.parse().unwrap());
    let base = "https://h/v1/projects/p/locations/l/publishers";
    assert_eq!(
        other(&format!("{base}/google/models/gemini:rawPredict")),
        None
    );
    assert_eq!(
        other(&format!("{base}/anthropic/models/claude:countTokens")),
        None
    );
    assert_eq!(
        other(&format!("{base}/anthropic/models/count-tokens:rawPredict")),
        None
    );
    let uri: Uri = format!("{base}/anthropic/models/claude:rawPredict")
        .parse()
        .unwrap();
    assert!(!AnthropicMessages.is_streaming(&uri, &json!({"stream": false})));
    assert!(AnthropicMessages.is_streaming(&uri, &json!({"stream": true})));
}

#[test]
fn a_credit_token_goes_in_the_body_with_its_beta() {
    let mut headers = HeaderMap::new();
    headers.insert(BETA_HEADER, HeaderValue::from_static("other-beta"));
    let mut body = json!({"model": "m"});
    AnthropicMessages.attach_credit_token(&mut headers, &mut body, "tok_1");
    assert_eq!(
        body["fallback_credit_token"],
        json!({"token": "tok_1", "mode": "best_effort"})
    );
    assert_eq!(
        headers[BETA_HEADER],
        format!("other-beta,{FALLBACK_CREDIT_BETA}")
    );
    let mut asked = HeaderMap::new();
    AnthropicMessages.request_fallback_credit(&mut asked);
    assert_eq!(asked[BETA_HEADER], FALLBACK_CREDIT_BETA);
}

#[test]
fn server_fallbacks_are_retargeted_or_injected_within_the_cap() {
    let models: Vec<String> = ["claude-opus-4-7", "a", "b", "a", "c", "d"]
        .map(str::to_owned)
        .to_vec();
    let own = Some("claude-opus-4-7");
    let mut headers = HeaderMap::new();
    let mut body = json!({"model": "claude-opus-4-7"});
    // Nothing to retarget and no injection asked for.
    let uri: Uri = "https://api.anthropic.com/v1/messages".parse().unwrap();
    assert!(AnthropicMessages
        .retarget_fallbacks(
            &uri,
            &mut headers,
            &mut body,
            Retarget {
                models: &models,
                own_model: own,
                inject: false,
                allowed: None,
            }
        )
        .is_none());
    assert!(body.get("fallbacks").is_none());

    assert!(AnthropicMessages
        .retarget_fallbacks(
            &uri,
            &mut headers,
            &mut body,
            Retarget {
                models: &models,
                own_model: own,
                inject: true,
                allowed: None,
            }
        )
        .is_some());
    let listed: Vec<&str> = body["fallbacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["model"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["a", "b", "c"]);
    assert_eq!(headers[BETA_HEADER], SERVER_FALLBACK_BETA);

    // The client's own options for a model it listed are kept.
    let mut headers = HeaderMap::new();
    let mut body = json!({"fallbacks": [{"model": "b", "max_tokens": 9}]});
    let two = ["b".to_owned(), "e".to_owned()];
    assert!(AnthropicMessages
        .retarget_fallbacks(
            &uri,
            &mut headers,
            &mut body,
            Retarget {
                models: &two,
                own_model: own,
                inject: false,
                allowed: None,
            }
        )
        .is_some());
    assert_eq!(
        body["fallbacks"],
        json!([{"model": "b", "max_tokens": 9}, {"model": "e"}])
    );
    assert!(headers.get(BETA_HEADER).is_none());
}

#[test]
fn default_fallbacks_and_other_platforms_are_never_retargeted() {
    let models = ["b".to_owned()];
    let first_party: Uri = "https://api.anthropic.com/v1/messages".parse().unwrap();
    let mut body = json!({"model": "a", "fallbacks": "default"});
    let mut headers = HeaderMap::new();
    assert!(AnthropicMessages.carries_server_fallbacks(&body));
    assert!(AnthropicMessages
        .retarget_fallbacks(
            &first_party,
            &mut headers,
            &mut body,
            Retarget {
                models: &models,
                own_model: Some("a"),
                inject: true,
                allowed: None,
            }
        )
        .is_none());
    assert_eq!(body["fallbacks"], "default");
    for elsewhere in [
        "https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/models/a:rawPredict",
        "https://r.services.ai.azure.com/anthropic/v1/messages",
    ] {
        let uri: Uri = elsewhere.parse().unwrap();
        let mut body = json!({"max_tokens": 5});
        assert!(AnthropicMessages.retarget_fallbacks(
            &uri,
            &mut headers,
            &mut body,
            Retarget {
                models: &models,
                own_model: Some("a"),
                inject: true,
                allowed: None,
            }
        ).is_none());
        assert!(body.get("fallbacks").is_none(), "{elsewhere}");
    }
    assert!(headers.is_empty());
}

#[test]
fn a_fallback_drops_fallbacks_that_name_its_model_or_that_a_token_replaces() {
    let mut uri: Uri = "https://api.anthropic.com/v1/messages".parse().unwrap();
    let mut body = json!({"model": "a", "fallbacks": [{"model": "b"}, {"model": "c"}]});
    AnthropicMessages
        .swap_model(&mut uri, &mut body, "b")
        .unwrap();
    assert_eq!(body["fallbacks"], json!([{"model": "c"}]));
    AnthropicMessages
        .swap_model(&mut uri, &mut body, "c")
        .unwrap();
    assert!(body.get("fallbacks").is_none(), "an emptied list goes");

    let mut headers = HeaderMap::new();
    let mut body = json!({"model": "b", "fallbacks": "default"});
    AnthropicMessages.attach_credit_token(&mut headers, &mut body, "tok");
    assert!(body.get("fallbacks").is_none());
    assert_eq!(body["fallback_credit_token"]["token"], "tok");
}

#[test]
fn a_handoff_is_marked_first_in_json_and_in_the_stream() {
    let declined = [Declined {
        model: "claude-opus-4-7".into(),
        category: Some("cyber".into()),
        usage: None,
    }];
    let handoff = Handoff {
        declined: &declined,
        to: "claude-sonnet-4-5",
        primary_id: None,
    };
    let mut body = json!({"content": [{"type": "text", "text": "Hi"}]});
    assert!(AnthropicMessages.handoff_json(&mut body, &handoff));
    assert_eq!(body["content"][0]["type"], "fallback");
    assert_eq!(body["content"][0]["to"]["model"], "claude-sonnet-4-5");
    assert_eq!(body["content"][1]["text"], "Hi");

    let mut rewrite = AnthropicMessages.handoff_stream(&handoff).unwrap();
    let start = data(r#"{"type":"message_start","message":{"content":[]}}"#);
    let out = rewrite.rewrite(&start).unwrap();
    let out = std::str::from_utf8(&out).unwrap();
    assert!(out.starts_with("data: {\"type\":\"message_start\""));
    let marked = frames(&out[start.raw().len()..]);
    assert_eq!(
        json_event(&marked[0]).unwrap()["content_block"]["type"],
        "fallback"
    );
    assert_eq!(
        json_event(&marked[1]).unwrap()["type"],
        "content_block_stop"
    );
    let block = data(
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    );
    let moved = frames(std::str::from_utf8(&rewrite.rewrite(&block).unwrap()).unwrap());
    assert_eq!(json_event(&moved[0]).unwrap()["index"], 1);
    assert!(rewrite.rewrite(&data(r#"{"type":"ping"}"#)).is_none());
}

fn prefill_after(events: &[Value]) -> (Box<dyn PartialContinuation>, Option<PrefillClaim>) {
    let mut track = AnthropicMessages.partial_continuation(1 << 20).unwrap();
    let mut claim = None;
    for payload in events {
        let kind = payload["type"].as_str().unwrap();
        claim = claim.or(track.claim(&event(kind, payload)));
    }
    (track, claim)
}

fn claimed_refusal() -> Value {
    json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details":
        {"type": "refusal", "category": "cyber", "explanation": null,
         "fallback_credit_token": "tok", "fallback_has_prefill_claim": true}}})
}

fn text_block(index: u64, text: &str) -> [Value; 2] {
    [
        json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
    ]
}

#[test]
fn a_claimed_refusal_after_text_is_offered_and_prefilled_after_the_clients_own_prefill() {
    let [start, delta] = text_block(1, "continued \n");
    let thinking = json!({"type": "content_block_start", "index": 0,
        "content_block": {"type": "thinking", "thinking": ""}});
    let (track, claim) = prefill_after(&[thinking, start, delta, claimed_refusal()]);
    let claim = claim.expect("offered");
    assert_eq!(claim.token, "tok");
    // The client's own prefill, as a string: the text goes after it.
    let mut body = json!({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Sure:"},
    ]});
    let mut headers = HeaderMap::new();
    headers.insert(BETA_HEADER, HeaderValue::from_static("other-beta"));
    track.prefill(&mut headers, &mut body, &claim).unwrap();
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Sure:"},
            {"type": "text", "text": "continued"},
        ]})
    );
    assert_eq!(body["messages"].as_array().unwrap().len(), 2);
    assert_eq!(
        body["fallback_credit_token"],
        json!({"token": "tok", "mode": "best_effort"})
    );
    assert_eq!(
        headers[BETA_HEADER],
        "other-beta,fallback-credit-2026-07-01"
    );
}

#[test]
fn no_offer_without_real_text_or_after_a_tool_call() {
    let [start, blank] = text_block(0, "  ");
    assert!(prefill_after(&[start.clone(), blank, claimed_refusal()])
        .1
        .is_none());
    let [_, delta] = text_block(0, "text");
    let tool = json!({"type": "content_block_start", "index": 1,
        "content_block": {"type": "mcp_tool_use", "id": "t", "name": "n", "input": {}}});
    let stop = json!({"type": "content_block_stop", "index": 1});
    assert!(
        prefill_after(&[start, delta, tool, stop, claimed_refusal()])
            .1
            .is_none()
    );
}

#[test]
fn merged_json_keeps_both_contents_and_ends_as_the_continuation_ended() {
    let mut original = json!({"id": "a", "content": [{"type": "text", "text": "one"}],
        "stop_reason": "refusal", "stop_details": {"type": "refusal"}, "usage": {"output_tokens": 1}});
    let more = json!({"id": "b", "content": [{"type": "text", "text": "two"}],
        "stop_reason": "end_turn", "stop_sequence": null, "usage": {"output_tokens": 2}});
    let track = AnthropicMessages.partial_continuation(1024).unwrap();
    track.merge_json(&mut original, &more).unwrap();
    assert_eq!(
        original,
        json!({"id": "a", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
            "stop_reason": "end_turn", "stop_sequence": null, "usage": {"output_tokens": 2}})
    );
}

#[test]
fn the_filters_block_sent_as_an_error_is_a_refusal_and_other_errors_are_not() {
    let blocked = json!({"type": "error", "error": {"details": null,
        "type": "invalid_request_error",
        "message": "Output blocked by content filtering policy"},
        "request_id": "req_1"});
    let bad = StatusCode::BAD_REQUEST;
    let info = AnthropicMessages.judge_error(bad, &blocked).unwrap();
    assert_eq!(info.signal, Some(RefusalSignal::BlockedOutput));
    assert_eq!(info.category.as_deref(), Some("content_filter"));
    assert_eq!(
        info.explanation.as_deref(),
        Some("Output blocked by content filtering policy")
    );
    let named = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "Output blocked by content filtering policy",
        "details": {"category": "cyber"}}});
    let info = AnthropicMessages.judge_error(bad, &named).unwrap();
    assert_eq!(info.category.as_deref(), Some("cyber"));
    // Real invalid requests, and the same words on a server error.
    for message in [
        "messages.1.content: Input should be a valid list",
        "prompt is too long: 210000 tokens > 200000 maximum",
        "content filtering policy",
    ] {
        let other = json!({"type": "error",
            "error": {"type": "invalid_request_error", "message": message}});
        assert_eq!(
            AnthropicMessages.judge_error(bad, &other),
            None,
            "{message}"
        );
    }
    let server = StatusCode::INTERNAL_SERVER_ERROR;
    assert_eq!(AnthropicMessages.judge_error(server, &blocked), None);
    assert!(AnthropicMessages.refuses_with_errors());
}

#[test]
fn a_blocked_output_error_event_is_a_refusal_and_an_overload_an_error() {
    let blocked = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "Output blocked by content filtering policy"}});
    let seen = one(event("error", &blocked));
    assert!(!seen.error);
    let refusal = seen.refusal.unwrap();
    assert_eq!(refusal.signal, Some(RefusalSignal::BlockedOutput));
    assert_eq!(refusal.category.as_deref(), Some("content_filter"));
    let overloaded = json!({"type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let seen = one(event("error", &overloaded));
    assert!(seen.error && seen.refusal.is_none());
    // After text the same event is a partial refusal.
    let text = [
        event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Here is"}}),
        ),
        event("error", &blocked),
    ];
    let seen = judge_frames(&AnthropicMessages, &text);
    assert!(seen[1].real_output);
    assert!(seen[2].refusal.is_some());
}

#[test]
fn structured_output_is_a_forced_tool_or_an_output_format() {
    let demands = |body: Value| AnthropicMessages.structured_output(&body).is_some();
    assert!(demands(
        json!({"tool_choice": {"type": "tool", "name": "title"}})
    ));
    assert!(demands(json!({"tool_choice": {"type": "any"}})));
    assert!(demands(
        json!({"output_format": {"type": "json_schema", "schema": {}}})
    ));
    assert!(demands(
        json!({"output_config": {"format": {"type": "json_schema",
        "schema": {}}}})
    ));
    assert!(!demands(json!({"tool_choice": {"type": "auto"}})));
    assert!(!demands(json!({"tool_choice": {"type": "none"}})));
    assert!(!demands(json!({"output_config": {"effort": "high"}})));
    assert!(!demands(json!({"output_format": null})));
}

fn json_seen(body: Value) -> Finding {
    let bytes = body.to_string();
    let seen = AnthropicMessages.judge_json(&body);
    assert_eq!(
        AnthropicMessages.judge_json_bytes(bytes.as_bytes(), true),
        Some(seen.clone())
    );
    seen
}

#[test]
fn a_refusal_names_its_recommended_model_and_its_prefill_claim_in_three_states() {
    let details = |extra: Value| {
        let mut details =
            json!({"type": "refusal", "category": "cyber", "fallback_credit_token": "t"});
        details
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        details
    };
    let read = |extra: Value| {
        let delta = json!({"stop_reason": "refusal", "stop_details": details(extra.clone())});
        let streamed = stop(delta).refusal.unwrap();
        let whole = json_seen(json!({"content": [], "stop_reason": "refusal",
            "stop_details": details(extra)}))
        .refusal
        .unwrap();
        assert!(streamed.usage.is_some());
        assert_eq!(
            (streamed.prefill, streamed.recommended_model.clone()),
            (whole.prefill, whole.recommended_model)
        );
        (streamed.prefill, streamed.recommended_model)
    };
    assert_eq!(
        read(json!({"fallback_has_prefill_claim": true, "recommended_model": "claude-haiku-5-5"})),
        (ClaimState::Claimed, Some("claude-haiku-5-5".into()))
    );
    assert_eq!(
        read(json!({"fallback_has_prefill_claim": false, "recommended_model": null})),
        (ClaimState::NotClaimed, None)
    );
    // Absent is unknown, not false; so is a value of another type.
    assert_eq!(read(json!({})), (ClaimState::Unknown, None));
    assert_eq!(
        read(json!({"fallback_has_prefill_claim": "true"})),
        (ClaimState::Unknown, None)
    );
}

#[test]
fn a_server_side_chain_is_read_from_its_iterations_and_its_last_fallback_block() {
    let seen = json_seen(json!({
        "id": "msg_1", "model": "claude-c", "stop_reason": "end_turn",
        "content": [
            {"type": "fallback", "from": {"model": "claude-a"}, "to": {"model": "claude-b"},
             "trigger": {"type": "refusal", "category": "cyber"}},
            {"type": "fallback", "from": {"model": "claude-b"}, "to": {"model": "claude-c"},
             "trigger": {"type": "refusal", "category": "bio"}},
            {"type": "text", "text": "Answer"},
        ],
        "usage": {"input_tokens": 30, "output_tokens": 7, "iterations": [
            {"type": "message", "model": "claude-a", "input_tokens": 30, "output_tokens": 1,
             "cache_read_input_tokens": 0, "cache_creation_input_tokens": 4},
            {"type": "message", "model": "claude-b", "input_tokens": 30, "output_tokens": 2,
             "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
            {"type": "fallback_message", "model": "claude-c", "input_tokens": 30, "output_tokens": 7,
             "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
        ]},
    }));
    let fallback = seen.server_fallback.unwrap();
    assert_eq!(fallback.from.as_deref(), Some("claude-a"));
    assert_eq!(
        fallback.to.as_deref(),
        Some("claude-c"),
        "the last block names the served model"
    );
    assert_eq!(fallback.category.as_deref(), Some("cyber"));
    assert_eq!(seen.message_id.as_deref(), Some("msg_1"));
    let chain = seen.iterations.unwrap();
    assert_eq!(chain.served_by.as_deref(), Some("claude-c"));
    assert_eq!(chain.first_declined.as_deref(), Some("claude-a"));
    let declined = chain.declined_usage.unwrap();
    assert_eq!(
        (
            declined.input_tokens,
            declined.output_tokens,
            declined.cache_write_tokens
        ),
        (Some(60), Some(3), Some(4))
    );
    // A sticky-routed turn lists only the serving attempt; iterations
    // without a fallback_message are no chain at all.
    let sticky = json_seen(json!({"content": [], "usage": {"iterations": [
        {"type": "fallback_message", "model": "claude-c"}]}}));
    assert_eq!(sticky.iterations.unwrap().first_declined, None);
    let tools = json_seen(json!({"content": [], "usage": {"iterations": [
        {"type": "message", "model": "claude-a"}, {"type": "message", "model": "claude-a"}]}}));
    assert_eq!(tools.iterations, None);
}

#[test]
fn the_fate_of_a_credit_token_is_read_from_usage() {
    let streamed = one(event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 3, "fallback_credit": {"status": {"type": "redeemed"}}}}),
    ));
    assert_eq!(streamed.fallback_credit, Some(FallbackCredit::Redeemed));
    let whole = json_seen(json!({"content": [], "usage": {"input_tokens": 1,
        "fallback_credit": {"status": {"type": "not_applied", "reason": "variant_fields_present",
            "remove_to_redeem": ["speed"]}}}}));
    assert_eq!(
        whole.fallback_credit,
        Some(FallbackCredit::not_applied("variant_fields_present").redeemable_without(["speed"]))
    );
    // The same in a stream's final `message_delta`.
    let streamed = one(event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 3, "fallback_credit": {"status": {"type": "not_applied",
                "reason": "variant_fields_present", "remove_to_redeem": ["speed", "top_k"]}}}}),
    ));
    assert_eq!(
        streamed.fallback_credit.unwrap().remove_to_redeem(),
        ["speed", "top_k"]
    );
    let unknown = json_seen(
        json!({"content": [], "usage": {"fallback_credit": {"status": {"type": "later"}}}}),
    );
    assert_eq!(unknown.fallback_credit, None);
}

#[test]
fn an_absent_or_false_prefill_claim_is_never_continued() {
    let [start, delta] = text_block(0, "Some text");
    let with = |claim: Option<bool>| {
        let mut refusal = claimed_refusal();
        let details = refusal["delta"]["stop_details"].as_object_mut().unwrap();
        match claim {
            Some(claim) => details.insert("fallback_has_prefill_claim".into(), json!(claim)),
            None => details.remove("fallback_has_prefill_claim"),
        };
        prefill_after(&[start.clone(), delta.clone(), refusal]).1
    };
    assert!(with(Some(true)).is_some());
    assert!(with(Some(false)).is_none());
    assert!(with(None).is_none(), "absent is unknown: not a claim");
    let mut track = AnthropicMessages.partial_continuation(1 << 20).unwrap();
    let message = json!({"content": [{"type": "text", "text": "Some text"}], "stop_reason": "refusal",
        "stop_details": {"type": "refusal", "fallback_credit_token": "tok"}});
    assert!(track.claim_json(&message).is_none());
}

fn chain_handoff() -> (Vec<Declined>, &'static str) {
    let declined = vec![
        Declined {
            model: "claude-opus-4-7".into(),
            category: Some("cyber".into()),
            usage: Some(Usage::new().input_tokens(12).output_tokens(1)),
        },
        Declined {
            model: "claude-sonnet-4-5".into(),
            category: Some("bio".into()),
            usage: None,
        },
    ];
    (declined, "claude-haiku-4-5")
}

#[test]
fn a_chain_is_marked_in_json_as_the_provider_marks_its_own() {
    let (declined, to) = chain_handoff();
    let handoff = Handoff {
        declined: &declined,
        to,
        primary_id: Some("msg_primary"),
    };
    let mut body = json!({"id": "msg_served", "content": [{"type": "text", "text": "Hi"}],
        "usage": {"input_tokens": 20, "output_tokens": 5}});
    assert!(AnthropicMessages.handoff_json(&mut body, &handoff));
    assert_eq!(body["id"], "msg_primary");
    let content = body["content"].as_array().unwrap();
    assert_eq!(content.len(), 3);
    assert_eq!(content[0]["from"]["model"], "claude-opus-4-7");
    assert_eq!(content[0]["to"]["model"], "claude-sonnet-4-5");
    assert_eq!(
        content[0]["trigger"],
        json!({"type": "refusal", "category": "cyber"})
    );
    assert_eq!(content[1]["from"]["model"], "claude-sonnet-4-5");
    assert_eq!(content[1]["to"]["model"], "claude-haiku-4-5");
    assert_eq!(content[2]["text"], "Hi");
    assert_eq!(
        body["usage"]["input_tokens"], 20,
        "top-level usage stays the served attempt's"
    );
    let kinds: Vec<(&str, &str, u64)> = body["usage"]["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["model"].as_str().unwrap(),
                e["input_tokens"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("message", "claude-opus-4-7", 12),
            ("message", "claude-sonnet-4-5", 0),
            ("fallback_message", "claude-haiku-4-5", 20)
        ]
    );
    // What the provider would read back is a served chain.
    let seen = AnthropicMessages.judge_json(&body);
    assert_eq!(
        seen.server_fallback.unwrap().to.as_deref(),
        Some("claude-haiku-4-5")
    );
}

#[test]
fn a_chain_is_marked_in_the_stream_with_indices_rising_and_the_primarys_id() {
    let (declined, to) = chain_handoff();
    let handoff = Handoff {
        declined: &declined,
        to,
        primary_id: Some("msg_primary"),
    };
    let mut rewrite = AnthropicMessages.handoff_stream(&handoff).unwrap();
    let served = [
        json!({"type": "message_start", "message": {"id": "msg_served", "model": "claude-haiku-4-5",
            "content": [], "usage": {"input_tokens": 20, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ];
    let mut out = String::new();
    for payload in &served {
        let frame = event(payload["type"].as_str().unwrap(), payload);
        match rewrite.rewrite(&frame) {
            Some(bytes) => out.push_str(std::str::from_utf8(&bytes).unwrap()),
            None => out.push_str(std::str::from_utf8(frame.raw()).unwrap()),
        }
    }
    let events: Vec<Value> = frames(&out)
        .iter()
        .map(|f| json_event(f).unwrap())
        .collect();
    let shape: Vec<(String, Option<u64>)> = events
        .iter()
        .map(|e| (e["type"].as_str().unwrap().to_owned(), e["index"].as_u64()))
        .collect();
    let expected = [
        ("message_start", None),
        ("content_block_start", Some(0)),
        ("content_block_stop", Some(0)),
        ("content_block_start", Some(1)),
        ("content_block_stop", Some(1)),
        ("content_block_start", Some(2)),
        ("content_block_delta", Some(2)),
        ("content_block_stop", Some(2)),
        ("message_delta", None),
        ("message_stop", None),
    ];
    let expected: Vec<(String, Option<u64>)> =
        expected.iter().map(|(t, i)| (t.to_string(), *i)).collect();
    assert_eq!(shape, expected);
    assert_eq!(events[0]["message"]["id"], "msg_primary");
    assert_eq!(events[1]["content_block"]["type"], "fallback");
    assert_eq!(
        events[3]["content_block"]["to"]["model"],
        "claude-haiku-4-5"
    );
    let iterations = events[8]["usage"]["iterations"].as_array().unwrap();
    assert_eq!(iterations.len(), 3);
    assert_eq!(iterations[2]["type"], "fallback_message");
    // The served attempt's counts: message_start's input, the delta's output.
    assert_eq!(
        (
            iterations[2]["input_tokens"].as_u64(),
            iterations[2]["output_tokens"].as_u64()
        ),
        (Some(20), Some(5))
    );
    assert_eq!(iterations[0]["output_tokens"], 1);
}

#[test]
fn a_conversation_is_seeded_the_same_whichever_turn_carries_the_cache_mark() {
    let marked = serde_json::json!({"type": "text", "text": "fix the build", "cache_control": {"type": "ephemeral"}});
    let plain = serde_json::json!({"type": "text", "text": "fix the build"});
    let system = |mark: bool| {
        let mut block = serde_json::json!({"type": "text", "text": "You are an agent."});
        if mark {
            block["cache_control"] = serde_json::json!({"type": "ephemeral"});
        }
        serde_json::json!([block])
    };
    let first = serde_json::json!({"system": system(true), "messages": [{"role": "user", "content": [marked]}]});
    let later = serde_json::json!({"system": system(false), "messages": [
        {"role": "user", "content": [plain]},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": [{"type": "text", "text": "now test it", "cache_control": {"type": "ephemeral"}}]},
    ]});
    let seed = |body: &Value| AnthropicMessages.conversation_seed(body).unwrap();
    assert_eq!(seed(&first), seed(&later));
    let other = serde_json::json!({"system": system(false), "messages": [{"role": "user", "content": "another task"}]});
    assert_ne!(seed(&first), seed(&other), "the text still names it");
}

#[test]
fn a_cache_mark_nested_in_the_first_user_turn_is_left_out_of_its_seed() {
    // A tool_result whose content is blocks, the last of them marked.
    let turn = |result: &str, mark: bool| {
        let mut block = serde_json::json!({"type": "text", "text": result});
        if mark {
            block["cache_control"] = serde_json::json!({"type": "ephemeral"});
        }
        serde_json::json!({"system": "You are an agent.", "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "exit status 1"}, block]},
            {"type": "text", "text": "fix the build"},
        ]}]})
    };
    let seed = |body: &Value| AnthropicMessages.conversation_seed(body).unwrap();
    assert_eq!(
        seed(&turn("build failed", true)),
        seed(&turn("build failed", false))
    );
    assert_ne!(
        seed(&turn("build failed", true)),
        seed(&turn("tests failed", true)),
        "what the turn says still names it"
    );
    assert_ne!(
        seed(&turn("build failed", false)),
        seed(&turn("tests failed", false))
    );
}
