//! The eval's requests keep the providers' documented rules: every API,
//! streamed and not, with rescues and fallbacks on the client's API and
//! across providers, through the strict simulated providers; and a request
//! that breaks a rule is caught, not measured as if it counted.

use super::{prompts, refusing_first, Eval};

const VARIANTS: &str = r#"
[[variant]]
name = "rescue"

[[variant]]
name = "across"
flags = ["--chain", "claude-sonnet-4-5=openai:gpt-5", "--chain", "gpt-5-mini=anthropic:claude-opus-4-8", "--chain", "gemini-2.5-flash=gemini-2.5-pro", "--chain", "gpt-5-nano=gpt-5"]
"#;

#[test]
fn every_api_streamed_or_not_keeps_the_contract_through_rescues_and_fallbacks() {
    for stream in ["on", "off"] {
        let eval = Eval::new("contract");
        let prompts = eval.file("prompts.jsonl", &prompts(3, "cyber"));
        let variants = eval.file("variants.toml", VARIANTS);
        // The models asked for refuse once; their fallbacks answer.
        let asked = [
            "claude-sonnet-4-5",
            "gpt-5-mini",
            "gpt-5-nano",
            "gemini-2.5-flash",
        ];
        let script = eval.file("script.toml", &refusing_first(&asked));
        let args = [
            "--simulate",
            "--script",
            &script,
            "--prompts",
            &prompts,
            "--variants",
            &variants,
            "--stream",
            stream,
            "--send",
            "anthropic=claude-sonnet-4-5",
            "--send",
            "openai=gpt-5-mini",
            "--send",
            "openai-responses=gpt-5-nano",
            "--send",
            "gemini=gemini-2.5-flash",
        ];
        let ended = eval.run(&args, &[]);
        assert_eq!(ended.status, Some(0), "stream {stream}: {}", ended.stderr);
        let report = eval.report();
        assert_eq!(report["run"]["contract_violations"], 0);
        assert_eq!(report["run"]["calls_measured"], 24);
        // Every call was refused and recovered, so every recovery request
        // was sent (and held to the rules).
        for variant in report["variants"].as_array().unwrap() {
            assert_eq!(variant["refused"]["count"], 12, "{variant:#}");
            assert_eq!(variant["recovered"]["count"], 12, "{variant:#}");
        }
    }
}

#[test]
fn a_request_that_breaks_a_rule_fails_the_run() {
    let eval = Eval::new("contract-broken");
    // No `max_tokens`: the Messages API answers 400.
    let prompts = eval.file(
        "prompts.jsonl",
        r#"{"id":"broken","api":"anthropic","body":{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}}"#,
    );
    let ended = eval.run(&["--simulate", "--prompts", &prompts], &[]);
    assert_eq!(ended.status, Some(1), "{}", ended.stderr);
    assert!(
        ended.stderr.contains("broke the providers' rules"),
        "{}",
        ended.stderr
    );
    assert!(
        ended.stderr.contains("A2") || ended.stderr.contains("max_tokens"),
        "{}",
        ended.stderr
    );
    let report = eval.report();
    assert!(report["run"]["contract_violations"].as_u64().unwrap() >= 1);
    assert!(
        ended.stdout.contains("broke the providers' rules"),
        "{}",
        ended.stdout
    );
}

#[test]
fn calls_to_a_provider_without_a_key_are_refused_before_any_is_made() {
    let eval = Eval::new("no-key");
    let prompts = eval.file("prompts.jsonl", &prompts(1, "cyber"));
    let output = std::process::Command::new(super::BIN)
        .args(eval.args(&["--prompts", &prompts, "--send", "openai=gpt-5"]))
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("set OPENAI_API_KEY") && stderr.contains("--simulate"),
        "{stderr}"
    );
    assert!(
        !eval.out().join("results.jsonl").exists(),
        "nothing was started"
    );

    // A body goes to its own API, whatever --send says.
    let body = eval.file(
        "body.jsonl",
        r#"{"id":"b","api":"openai","body":{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}}"#,
    );
    let output = std::process::Command::new(super::BIN)
        .args(eval.args(&["--prompts", &body, "--send", "anthropic=claude-sonnet-4-5"]))
        .env_remove("OPENAI_API_KEY")
        .env("ANTHROPIC_API_KEY", super::KEY)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("set OPENAI_API_KEY") && !stderr.contains("ANTHROPIC"),
        "{stderr}"
    );
}
