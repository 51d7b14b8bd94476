//! The report's shares equal the scripted truth, exactly: the simulated
//! providers refuse per model and category at seeded rates, and the truth
//! of every call comes from the testkit's own pure functions
//! (`Simulator::plan`, nothing sent), for two variants whose ladders
//! differ, on two wire APIs, at several calls at once.

use std::collections::BTreeMap;

use refusal_guard_testkit::{Call, Reply, ReplyKind, Simulator, When};
use serde_json::Value;

use super::{cell, Eval};

const SEED: u64 = 7;
const SONNET: &str = "claude-sonnet-4-5";
const OPUS: &str = "claude-opus-4-8";
const MINI: &str = "gpt-5-mini";
const GPT5: &str = "gpt-5";

/// (model, category, rate, reply): the rules of the script, in order.
const RULES: [(&str, &str, f64, &str); 10] = [
    (SONNET, "cyber", 0.5, "refusal"),
    (SONNET, "cyber", 0.6, "partial"),
    (SONNET, "bio", 0.3, "refusal"),
    (OPUS, "cyber", 0.4, "refusal"),
    (OPUS, "bio", 0.6, "refusal"),
    (MINI, "cyber", 0.45, "refusal"),
    (MINI, "bio", 0.2, "refusal"),
    (MINI, "bio", 0.5, "blocked"),
    (GPT5, "cyber", 0.3, "refusal"),
    (GPT5, "bio", 0.25, "refusal"),
];

const VARIANTS: &str = r#"
[[variant]]
name = "rescue"
flags = []

[[variant]]
name = "chain"
flags = ["--chain", "claude-sonnet-4-5=claude-opus-4-8", "--chain", "gpt-5-mini=gpt-5", "--rescue", "off"]
"#;

/// The script as the eval reads it.
fn script() -> String {
    let mut text = format!("seed = {SEED}\n");
    for (model, category, rate, reply) in RULES {
        text.push_str(&format!(
            "\n[[rule]]\nmodel = \"{model}\"\ncategory = \"{category}\"\nrate = {rate}\nreply = \"{reply}\"\n"
        ));
        if reply == "partial" {
            text.push_str("text = \"Some background first. \"\n");
        }
    }
    text
}

/// The same script, built with the testkit for its pure functions.
fn simulator(labels: BTreeMap<String, String>) -> Simulator {
    RULES.iter().fold(
        Simulator::answering()
            .seed(SEED)
            .categorize(move |prompt| labels.get(prompt).cloned()),
        |simulator, (model, category, rate, reply)| {
            let reply = match *reply {
                "refusal" => Reply::refusal(),
                "partial" => Reply::partial("Some background first. "),
                _ => Reply::blocked(),
            };
            simulator.when(
                When::any().model(*model).category(*category).rate(*rate),
                reply,
            )
        },
    )
}

/// What one call comes to, as the script and the variant's ladder say.
#[derive(Debug, Default, Clone, PartialEq)]
struct Tally {
    calls: usize,
    refused: usize,
    shapes: BTreeMap<&'static str, usize>,
    steps: BTreeMap<&'static str, usize>,
    dead: BTreeMap<&'static str, usize>,
    served_by: BTreeMap<String, usize>,
}

fn shape(kind: ReplyKind) -> Option<&'static str> {
    match kind {
        ReplyKind::Refusal => Some("empty"),
        ReplyKind::Partial => Some("partial"),
        ReplyKind::Blocked => Some("error"),
        _ => None,
    }
}

/// One call's truth, as a row of results.jsonl says it: `answered`, or
/// the refusal's shape and what became of it. The original goes to
/// `model`, then the variant's ladder: the rescue on the same model, or the
/// chain's `fallback` with the rescue off; a partial refusal is left as it
/// came.
fn truth(simulator: &Simulator, prompt: &str, model: &str, fallback: &str, chain: bool) -> String {
    let original = simulator.plan(&Call::new(model, prompt).attempt(1).attempt_on_model(1));
    let Some(shape) = shape(original.kind()) else {
        return "answered".to_owned();
    };
    if shape == "partial" {
        return "partial, left".to_owned();
    }
    let (next, step, served, dead) = if chain {
        let call = Call::new(fallback, prompt).attempt(2).attempt_on_model(1);
        (simulator.plan(&call), "chain", fallback, "still_refused")
    } else {
        let call = Call::new(model, prompt).attempt(2).attempt_on_model(2);
        (simulator.plan(&call), "rescue", model, "still_refused")
    };
    // A recovery that answers with output first is served as it comes,
    // whatever follows: the guard records it recovered.
    if matches!(next.kind(), ReplyKind::Refusal | ReplyKind::Blocked) {
        format!("{shape}, dead: {dead}")
    } else {
        format!("{shape}, {step} by {served}")
    }
}

/// What a row of results.jsonl says of its call, in the same words.
fn measured(row: &Value) -> String {
    let refusal = &row["refusal"];
    if refusal.is_null() {
        return "answered".to_owned();
    }
    let shape = refusal["shape"].as_str().unwrap();
    match (refusal["step"].as_str(), refusal["reason"].as_str()) {
        (Some(step), _) => format!(
            "{shape}, {step} by {}",
            refusal["served_model"].as_str().unwrap()
        ),
        (None, Some(reason)) => format!("{shape}, dead: {reason}"),
        (None, None) => format!("{shape}, left"),
    }
}

/// Counts what `outcomes` say, as the report's cells count them.
fn tally(outcomes: &[String]) -> Tally {
    let mut tally = Tally {
        calls: outcomes.len(),
        ..Tally::default()
    };
    for outcome in outcomes.iter().filter(|o| *o != "answered") {
        tally.refused += 1;
        let (shape, rest) = outcome.split_once(", ").unwrap();
        let shape = ["empty", "partial", "error"]
            .into_iter()
            .find(|s| *s == shape)
            .unwrap();
        *tally.shapes.entry(shape).or_default() += 1;
        if let Some(reason) = rest.strip_prefix("dead: ") {
            let reason = ["rescue_off", "still_refused"]
                .into_iter()
                .find(|r| *r == reason)
                .unwrap();
            *tally.dead.entry(reason).or_default() += 1;
        } else if let Some((step, model)) = rest.split_once(" by ") {
            let step = ["chain", "rescue"]
                .into_iter()
                .find(|s| *s == step)
                .unwrap();
            *tally.steps.entry(step).or_default() += 1;
            *tally.served_by.entry(model.to_owned()).or_default() += 1;
        }
    }
    tally
}

/// What the report says of one cell, in the same terms.
fn reported(cell: &Value) -> Tally {
    let counts = |field: &str| -> BTreeMap<&'static str, usize> {
        let names = [
            "empty",
            "partial",
            "error",
            "server_side",
            "chain",
            "rescue",
            "continuation",
            "rescue_off",
            "still_refused",
        ];
        names
            .into_iter()
            .filter_map(|name| {
                let n = cell[field][name]["count"].as_u64().unwrap_or(0) as usize;
                (n > 0).then_some((name, n))
            })
            .collect()
    };
    let served_by = cell["served_by"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(m, n)| (m.clone(), n.as_u64().unwrap() as usize))
        .collect();
    // Every dead reason the report names is one the truth knows.
    let reasons = cell["dead_by_reason"].as_object().unwrap();
    assert!(
        reasons
            .keys()
            .all(|r| r == "rescue_off" || r == "still_refused"),
        "{cell:#}"
    );
    Tally {
        calls: cell["calls"].as_u64().unwrap() as usize,
        refused: cell["refused"]["count"].as_u64().unwrap() as usize,
        shapes: counts("refused_by_shape"),
        steps: counts("recovered_by_step"),
        dead: counts("dead_by_reason"),
        served_by,
    }
}

#[test]
fn the_reports_shares_equal_the_scripted_truth_for_two_ladders_on_two_apis() {
    let eval = Eval::new("shares");
    let mut lines = String::new();
    let mut labels = BTreeMap::new();
    for i in 0..80 {
        let category = if i % 2 == 0 { "cyber" } else { "bio" };
        let text = format!("Prompt {i}: a question filed under {category}");
        lines.push_str(
            &serde_json::json!({"id": format!("q{i}"), "prompt": text, "label": category})
                .to_string(),
        );
        lines.push('\n');
        labels.insert(text, category.to_owned());
    }
    let prompts = eval.file("prompts.jsonl", &lines);
    let variants = eval.file("variants.toml", VARIANTS);
    let script = eval.file("script.toml", &script());
    let args = [
        "--simulate",
        "--script",
        &script,
        "--prompts",
        &prompts,
        "--variants",
        &variants,
        "--send",
        "anthropic=claude-sonnet-4-5",
        "--send",
        "openai=gpt-5-mini",
        "--concurrency",
        "8",
    ];
    let ended = eval.run(&args, &[]);
    assert_eq!(ended.status, Some(0), "{}", ended.stderr);
    let report = eval.report();
    assert_eq!(report["run"]["contract_violations"], 0);

    let simulator = simulator(labels.clone());
    let rows = eval.rows();
    let ids: BTreeMap<String, String> = lines
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|v| {
            (
                v["prompt"].as_str().unwrap().to_owned(),
                v["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut differs = false;
    for (provider, model, fallback) in [("anthropic", SONNET, OPUS), ("openai", MINI, GPT5)] {
        for category in ["cyber", "bio"] {
            let mut recovered = Vec::new();
            for (variant, chain) in [("rescue", false), ("chain", true)] {
                // Call by call: the row of each prompt is its truth.
                let mut outcomes = Vec::new();
                for (prompt, _) in labels.iter().filter(|(_, label)| *label == category) {
                    let expected = truth(&simulator, prompt, model, fallback, chain);
                    let row = rows
                        .iter()
                        .find(|r| {
                            r["variant"] == variant
                                && r["provider"] == provider
                                && r["prompt"] == ids[prompt].as_str()
                        })
                        .unwrap();
                    assert_eq!(measured(row), expected, "{variant} {provider} {prompt}");
                    outcomes.push(expected);
                }
                // And the report's cell counts them, its shares exact.
                let expected = tally(&outcomes);
                let cell = cell(&report, variant, category, provider);
                assert_eq!(
                    reported(cell),
                    expected,
                    "{variant} × {category} × {provider}"
                );
                let refused = expected.refused as f64;
                assert_eq!(
                    cell["refused"]["share"].as_f64(),
                    Some(refused / expected.calls as f64)
                );
                let steps: usize = expected.steps.values().sum();
                assert_eq!(
                    cell["recovered"]["share"].as_f64(),
                    Some(steps as f64 / refused)
                );
                recovered.push(steps);
            }
            differs |= recovered[0] != recovered[1];
        }
    }
    assert!(differs, "the two ladders recover differently somewhere");
    // Seeded: the same run again measures the same.
    let again = Eval::new("shares-again");
    let ended = again.run(&args, &[]);
    assert_eq!(ended.status, Some(0), "{}", ended.stderr);
    // Everything but the time things took.
    let untimed = |report: Value| -> Vec<Value> {
        let mut cells = report["cells"].as_array().unwrap().clone();
        cells
            .iter_mut()
            .for_each(|c| drop(c.as_object_mut().unwrap().remove("added_latency_ms")));
        cells
    };
    assert_eq!(untimed(again.report()), untimed(report));
}
