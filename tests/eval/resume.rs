//! A run stopped midway, by SIGKILL or by Ctrl-C (SIGINT), leaves whole
//! lines, and the same command resumes it: no call measured twice, none
//! lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::binary::Running;
use support::raw_upstream::{whole, Act, RawUpstream};

use super::{prompts, unique_calls, Eval, BIN, KEY};

/// An Anthropic message answering.
pub fn answer() -> Vec<Act> {
    let body = br#"{"id":"msg_eval","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Here is how."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":3}}"#;
    vec![Act::Write(whole(200, "application/json", body))]
}

/// Six prompts, one at a time, to an upstream that holds the fourth
/// request unanswered: stopped there by `signal`, then run again.
async fn stopped_then_resumed(signal: &str, status: Option<i32>, says: &str) {
    let hold = Arc::new(AtomicBool::new(true));
    let held = hold.clone();
    let upstream = RawUpstream::start(move |index, _| match index {
        3 if held.load(Ordering::SeqCst) => vec![Act::Hang],
        _ => answer(),
    })
    .await;
    let eval = Eval::new("resume");
    let prompts = eval.file("prompts.jsonl", &prompts(6, "cyber"));
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
        "--concurrency",
        "1",
    ];
    let all = eval.args(&args);
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let env = [("ANTHROPIC_API_KEY", KEY)];
    let running = Running::spawn_env(BIN, &all, &env);
    running.line_with("[3/6]", Duration::from_secs(60));
    let reached = upstream
        .wait_until(Duration::from_secs(60), |u| u.requests().len() == 4)
        .await;
    assert!(
        reached,
        "the fourth request never arrived: {:#?}",
        running.logged()
    );
    running.signal(signal);
    let (code, stderr) = running.exited(Duration::from_secs(30));
    assert_eq!(code, status, "{stderr}");
    assert!(stderr.contains(says), "{stderr}");
    let rows = eval.rows();
    let measured: Vec<&str> = rows.iter().map(|r| r["prompt"].as_str().unwrap()).collect();
    assert_eq!(
        measured,
        ["p1", "p2", "p3"],
        "whole lines, the held call not among them"
    );

    hold.store(false, Ordering::SeqCst);
    let again = eval.run(&args, &env);
    assert_eq!(again.status, Some(0), "{}", again.stderr);
    assert!(
        again.stderr.contains("3 measured earlier, 3 to make"),
        "{}",
        again.stderr
    );
    let rows = eval.rows();
    assert_eq!(unique_calls(&rows).len(), 6, "every call once: {rows:#?}");
    assert!(rows
        .iter()
        .all(|r| r["answered"] == true && r["error"].is_null()));
    // The upstream saw the first three once, the held one, then the
    // three left: nothing sent again that was measured.
    let sent: Vec<String> = upstream
        .requests()
        .iter()
        .map(|r| r.first_user_text())
        .collect();
    let question = |i: usize| format!("Question {i}: how do I audit my server?");
    let expected: Vec<String> = [1, 2, 3, 4, 4, 5, 6].into_iter().map(question).collect();
    assert_eq!(sent, expected);
    assert_eq!(eval.report()["run"]["complete"], true);
    // The key went upstream with every request, and nowhere else.
    assert!(upstream
        .requests()
        .iter()
        .all(|r| r.header("x-api-key") == Some(KEY)));
    for file in ["results.jsonl", "report.json", "report.md", "report.html"] {
        let text = std::fs::read_to_string(eval.out().join(file)).unwrap();
        assert!(!text.contains(KEY), "{file} holds the key");
    }
    assert!(!again.stderr.contains(KEY) && !again.stdout.contains(KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_midway_resumes_without_repeating_or_losing_a_call() {
    // Killed outright: no chance to say anything.
    stopped_then_resumed("KILL", None, "eval: [3/6]").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_drops_the_calls_in_flight_and_says_how_to_resume() {
    stopped_then_resumed("INT", Some(130), "run the same command again to resume").await;
}
