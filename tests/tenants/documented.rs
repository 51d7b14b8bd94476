//! `docs/tenants.md`'s own example through the built binary, read from the
//! page: its command line (whose `--chain` names only Anthropic models) and
//! its tenants file (red team's chain ending in `openai:gpt-5`, with
//! `operator_keys = ["openai"]`), the operator's `OPENAI_API_KEY` set and
//! `--upstream-openai` given. Red team's refusal climbs its own chain to
//! OpenAI on the operator's key; blue team's `cyber` refusal stops.

use std::time::Duration;

use refusal_guard_proxy::hash_key;
use serde_json::Value;
use support::binary::{arg, Running, TempDir};
use support::fixtures::{code_blocks, doc};
use support::mock_upstream::MockUpstream;
use support::proxy::post_messages;
use support::requests::messages_request;

use super::{BIN, OPUS, REFUSAL, SONNET};

/// The key whose hash red team's entry lists, and blue team's.
const RED: &str = "test";
const BLUE: &str = "blue";
const OPERATOR_KEY: &str = "sk-openai-operator-docs-example";
const CHAT_TEXT: &str = "e2e/openai_chat_text_e2aad469.bin";

/// The page's first command line, as arguments: `refusal-guard` and the
/// line continuations dropped, the file paths it names put in `dir`.
fn documented_command(page: &str, dir: &TempDir) -> Vec<String> {
    let command = code_blocks(page, "sh").remove(0).replace("\\\n", " ");
    let mut words = command.split_whitespace().map(str::to_owned);
    assert_eq!(words.next().as_deref(), Some("refusal-guard"), "{command}");
    let mut args = Vec::new();
    while let Some(word) = words.next() {
        let value = words
            .next()
            .unwrap_or_else(|| panic!("{word} without a value"));
        let value = match word.as_str() {
            "--tenants" => arg(&dir.path().join("tenants.toml")).to_owned(),
            "--log" => arg(&dir.path().join("refusals.jsonl")).to_owned(),
            "--chain" => value,
            other => panic!("the example's flag {other} is not known to this test"),
        };
        args.extend([word, value]);
    }
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_tenants_example_sends_red_teams_openai_fallback_on_the_operators_key() {
    let page = doc("tenants.md");
    let dir = TempDir::new("tenants-documented");
    let file = code_blocks(&page, "toml").remove(0);
    assert!(
        file.contains(&hash_key(RED)) && file.contains(&hash_key(BLUE)),
        "{file}"
    );
    dir.write("tenants.toml", &file);
    let mut args = documented_command(&page, &dir);
    assert!(
        !args.iter().any(|a| a.contains("openai:")),
        "the example's --chain names only Anthropic models: {args:?}"
    );
    let anthropic = MockUpstream::start().await.unwrap();
    let openai = MockUpstream::start().await.unwrap();
    let (anthropic_url, openai_url) = (anthropic.url(), openai.url());
    args.extend(
        [
            "--listen",
            "127.0.0.1:0",
            "--upstream-anthropic",
            &anthropic_url,
            "--upstream-openai",
            &openai_url,
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let running = Running::spawn_env(BIN, &args, &[("OPENAI_API_KEY", OPERATOR_KEY)]);
    let url = running.announced("listening on http://");

    // Opus refuses, red team's Sonnet refuses too (the scripts in the
    // headers go to the Anthropic upstream with the client's request); the
    // OpenAI fallback carries none of the client's headers, so its script
    // is in the conversation's text.
    let text = format!("audit my host [mock-script={CHAT_TEXT};mock-id=docs-red-openai]");
    let red = post_messages(
        &url,
        &format!("{REFUSAL},{REFUSAL}"),
        "docs-red",
        &messages_request(OPUS, true, &text),
    )
    .header("x-refusal-guard-key", RED)
    .send()
    .await
    .unwrap();
    assert_eq!(red.status(), 200);
    let recovery = red.headers().get("refusal-guard-recovery").cloned();
    let body = red.text().await.unwrap();
    assert!(body.contains("event: message_stop"), "{body}");
    assert!(
        body.contains("text_delta"),
        "the OpenAI answer in Messages events: {body}"
    );
    let recovery = recovery.expect("the recovery header");
    assert!(
        recovery
            .to_str()
            .unwrap()
            .contains("served-by=openai:gpt-5"),
        "{recovery:?}"
    );
    let models: Vec<String> = anthropic
        .seen_for("docs-red")
        .iter()
        .map(|seen| seen.json()["model"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(models, [OPUS, SONNET]);
    let fallback = openai.seen_for("docs-red-openai");
    assert_eq!(fallback.len(), 1, "one fallback to OpenAI");
    assert_eq!(fallback[0].path, "/v1/chat/completions");
    assert_eq!(fallback[0].json()["model"], "gpt-5");
    let bearer = format!("Bearer {OPERATOR_KEY}");
    assert_eq!(
        fallback[0].header("authorization"),
        Some(bearer.as_str()),
        "the operator's key"
    );
    for (name, value) in &fallback[0].headers {
        assert!(
            !value.contains("sk-test-key"),
            "the client's own key went to OpenAI in {name}"
        );
    }
    for seen in anthropic.seen() {
        assert_eq!(
            seen.header("x-refusal-guard-key"),
            None,
            "the tenant's key stays"
        );
    }

    // Blue team stops `cyber`: its refusal comes back as it was sent.
    let blue = post_messages(
        &url,
        REFUSAL,
        "docs-blue",
        &messages_request(OPUS, true, "audit my host"),
    )
    .header("x-refusal-guard-key", BLUE)
    .send()
    .await
    .unwrap();
    assert_eq!(blue.bytes().await.unwrap(), support::fixture(REFUSAL));
    assert_eq!(anthropic.seen_for("docs-blue").len(), 1);

    let log = dir.path().join("refusals.jsonl");
    let records = wait_for_records(&log, 2).await;
    let red = records.iter().find(|r| r["tenant"] == "red-team").unwrap();
    assert_eq!(red["outcome"], "fallback", "{red}");
    let attempts: Vec<(&str, &str, &str)> = red["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap_or("-");
            (s("step"), s("model"), s("result"))
        })
        .collect();
    assert_eq!(
        attempts,
        [
            ("original", OPUS, "refused"),
            ("fallback", SONNET, "refused"),
            ("fallback", "openai:gpt-5", "served"),
        ]
    );
    assert_eq!(red["attempts"][2]["provider"], "openai");
    let blue = records.iter().find(|r| r["tenant"] == "blue-team").unwrap();
    assert_eq!(
        (&blue["outcome"], &blue["reason"]),
        (&Value::from("dead"), &Value::from("policy_stop"))
    );
    let stderr = running.logged().join("\n");
    assert!(!stderr.contains("no endpoint"), "{stderr}");
    assert!(
        !stderr.contains(OPERATOR_KEY),
        "the operator's key is never logged: {stderr}"
    );
}

/// The log's records once it has `count` (written as each response ends),
/// waited for at most 10 s.
async fn wait_for_records(log: &std::path::Path, count: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let records: Vec<Value> = text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        if records.len() >= count {
            return records;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{count} records in {}: {text}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn a_tenant_allowed_the_operators_openai_key_when_none_was_given_is_warned_of_at_start() {
    let page = doc("tenants.md");
    let dir = TempDir::new("tenants-documented-unkeyed");
    dir.write("tenants.toml", &code_blocks(&page, "toml").remove(0));
    let mut args = documented_command(&page, &dir);
    args.extend(
        [
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9",
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let running = Running::spawn_env(BIN, &args, &[]);
    running.announced("listening on http://");
    let warned = running.line_with("tenant `red-team`", Duration::from_secs(10));
    assert!(
        warned.contains("its chains name `openai:` models") && warned.contains("no openai key"),
        "{warned}"
    );
    assert!(
        !running.logged().iter().any(|l| l.contains("blue-team")),
        "blue team names no other provider"
    );
}
