//! What a run spends: the spend cap stops it and says so; a 429 is tried
//! again after the provider's `retry-after`, a 5xx after a backoff, and a
//! wait longer than allowed ends the call instead.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::raw_upstream::{chunk, head_with, last_chunk, Act, RawUpstream};

use super::resume::answer;
use super::{prompts, refusing_first, unique_calls, Eval, KEY};

/// An Anthropic error with `status` and extra headers.
fn error(status: u16, kind: &str, headers: &[(&str, &str)]) -> Vec<Act> {
    let body = format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"try later"}}}}"#);
    vec![
        Act::Write(head_with(status, "application/json", headers)),
        Act::Write(chunk(body.as_bytes())),
        Act::Write(last_chunk()),
    ]
}

#[test]
fn the_spend_cap_stops_the_run_and_says_so_and_a_rerun_goes_on() {
    let eval = Eval::new("cap");
    let prompts = eval.file("prompts.jsonl", &prompts(8, "cyber"));
    // Each call is a refusal and its rescue, or its chain's fallback: two
    // requests a call.
    let script = eval.file("script.toml", &refusing_first(&["claude-sonnet-4-5"]));
    let args = [
        "--simulate",
        "--script",
        &script,
        "--prompts",
        &prompts,
        "--send",
        "anthropic=claude-sonnet-4-5",
        "--concurrency",
        "1",
    ];
    let capped: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--cap-requests", "5"])
        .collect();
    let ended = eval.run(&capped, &[]);
    assert_eq!(ended.status, Some(3), "{}", ended.stderr);
    assert!(
        ended.stderr.contains("the spend cap was reached ("),
        "{}",
        ended.stderr
    );
    assert!(
        ended.stderr.contains("the cap is 5 (--cap-requests)"),
        "{}",
        ended.stderr
    );
    let report = eval.report();
    let run = &report["run"];
    assert_eq!(run["complete"], false);
    assert!(
        run["stopped"].as_str().unwrap().contains("spend cap"),
        "{run}"
    );
    assert!(
        ended
            .stdout
            .contains("**Stopped before the end**: the spend cap"),
        "{}",
        ended.stdout
    );
    // No call started once the cap was reached; the last one started below it.
    let rows = eval.rows();
    let spent: u64 = rows.iter().map(|r| r["requests"].as_u64().unwrap()).sum();
    let last = rows.last().unwrap()["requests"].as_u64().unwrap();
    assert!(
        spent >= 5 && spent - last < 5,
        "{spent} requests, the last call {last}"
    );
    assert_eq!(run["requests"], spent);
    assert!(rows.len() < 16);

    let ended = eval.run(&args, &[]);
    assert_eq!(ended.status, Some(0), "{}", ended.stderr);
    assert_eq!(unique_calls(&eval.rows()).len(), 16);
    // Nothing left to make; --restart forgets it all and makes it again.
    let ended = eval.run(&args, &[]);
    assert!(
        ended.stderr.contains("16 measured earlier, 0 to make"),
        "{}",
        ended.stderr
    );
    let restarted: Vec<&str> = args.iter().copied().chain(["--restart"]).collect();
    let ended = eval.run(&restarted, &[]);
    assert!(
        ended.stderr.contains("0 measured earlier, 16 to make"),
        "{}",
        ended.stderr
    );
    assert_eq!(unique_calls(&eval.rows()).len(), 16);
}

#[test]
fn the_token_cap_counts_what_the_providers_reported() {
    let eval = Eval::new("token-cap");
    let prompts = eval.file("prompts.jsonl", &prompts(8, "cyber"));
    let script = eval.file("script.toml", &refusing_first(&["claude-sonnet-4-5"]));
    let args = [
        "--simulate",
        "--script",
        &script,
        "--prompts",
        &prompts,
        "--send",
        "anthropic=claude-sonnet-4-5",
        "--concurrency",
        "1",
        "--cap-tokens",
        "1",
    ];
    let ended = eval.run(&args, &[]);
    assert_eq!(ended.status, Some(3), "{}", ended.stderr);
    assert!(
        ended
            .stderr
            .contains("tokens reported, the cap is 1 (--cap-tokens)"),
        "{}",
        ended.stderr
    );
    let rows = eval.rows();
    assert!(!rows.is_empty() && rows.len() < 16, "{rows:#?}");
    assert!(
        rows.iter()
            .map(|r| r["tokens"].as_u64().unwrap())
            .sum::<u64>()
            >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_tried_again_after_its_retry_after_and_a_5xx_after_a_backoff() {
    let arrived = Arc::new(Mutex::new(Vec::new()));
    let seen = arrived.clone();
    let upstream = RawUpstream::start(move |index, _| {
        seen.lock().unwrap().push(Instant::now());
        match index {
            0 => error(429, "rate_limit_error", &[("retry-after", "1")]),
            1 => error(529, "overloaded_error", &[]),
            _ => answer(),
        }
    })
    .await;
    let eval = Eval::new("retry");
    let prompts = eval.file("prompts.jsonl", &prompts(1, "cyber"));
    let variants = eval.direct_variant(&upstream.url());
    let args = [
        "--prompts",
        &prompts,
        "--variants",
        &variants,
        "--send",
        "anthropic=claude-sonnet-4-5",
        "--stream",
        "off",
    ];
    let ended = eval.run(&args, &[("ANTHROPIC_API_KEY", KEY)]);
    assert_eq!(ended.status, Some(0), "{}", ended.stderr);
    let rows = eval.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0]["answered"].as_bool(), rows[0]["retries"].as_u64()),
        (Some(true), Some(2))
    );
    assert_eq!(rows[0]["requests"], 3);
    let arrived = arrived.lock().unwrap().clone();
    assert_eq!(arrived.len(), 3);
    // The eval's own first backoff is a quarter of a second: a second's
    // wait is the provider's retry-after.
    let waited = arrived[1] - arrived[0];
    assert!(
        waited >= Duration::from_secs(1),
        "tried again after {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_longer_than_allowed_ends_the_call_and_the_run_says_so() {
    let upstream =
        RawUpstream::start(|_, _| error(429, "rate_limit_error", &[("retry-after", "3600")])).await;
    let eval = Eval::new("retry-long");
    let prompts = eval.file("prompts.jsonl", &prompts(1, "cyber"));
    let variants = eval.direct_variant(&upstream.url());
    let args = [
        "--prompts",
        &prompts,
        "--variants",
        &variants,
        "--send",
        "anthropic=claude-sonnet-4-5",
        "--max-retry-wait",
        "60",
    ];
    let ended = eval.run(&args, &[("ANTHROPIC_API_KEY", KEY)]);
    assert_eq!(ended.status, Some(3), "{}", ended.stderr);
    assert!(ended.stderr.contains("1 calls failed"), "{}", ended.stderr);
    let rows = eval.rows();
    let error = rows[0]["error"].as_str().unwrap();
    assert!(
        error.contains("HTTP 429") && error.contains("wait 3600 s"),
        "{error}"
    );
    assert_eq!(upstream.requests().len(), 1);
    assert_eq!(eval.report()["run"]["errors"], 1);
}
