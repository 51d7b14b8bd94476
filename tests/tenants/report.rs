//! `refusal-guard report --by tenant` and `report --routing`, the built
//! binary run on refusal logs of two tenants whose fallbacks make a routing
//! history, as two replicas wrote them.

use serde_json::{json, Value};
use support::binary::{arg, run, TempDir};

use super::{BIN, HAIKU, OPUS, SONNET};

/// A record as the proxy logs it: `attempts` after the refused original.
fn record(ts: &str, tenant: &str, category: &str, end: &str, attempts: &[(&str, &str)]) -> String {
    let mut steps =
        vec![json!({"step": "original", "model": OPUS, "result": "refused", "latency_ms": 30})];
    for (model, result) in attempts {
        let step = if *model == "rescue" {
            "rescue"
        } else {
            "fallback"
        };
        let model = if *model == "rescue" { OPUS } else { model };
        steps.push(json!({"step": step, "model": model, "result": result, "latency_ms": 40}));
    }
    let (outcome, reason) = end.split_once(':').unwrap_or((end, ""));
    let mut line = json!({"ts": ts, "model": OPUS, "category": category, "explanation": null,
        "outcome": outcome, "attempts": steps, "tenant": tenant});
    if !reason.is_empty() {
        line["reason"] = json!(reason);
    }
    format!("{line}\n")
}

/// Replica a's log and replica b's: each holds a `cyber` fallback of red
/// team's in which Haiku refused and Sonnet served, a's the later (so that
/// read one after the other, b's would count at a's time, undecayed).
fn logs(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let fell_back = [(HAIKU, "refused"), (SONNET, "served")];
    let a = [
        record(
            "2026-11-29T18:00:00.000Z",
            "red-team",
            "cyber",
            "fallback",
            &fell_back,
        ),
        record(
            "2026-11-29T17:30:00.000Z",
            "red-team",
            "cyber",
            "dead:capped",
            &[],
        ),
        record(
            "2026-11-29T18:00:00.000Z",
            "blue-team",
            "cyber",
            "dead:policy_stop",
            &[],
        ),
    ];
    let b = [
        record(
            "2026-11-29T17:00:00.000Z",
            "red-team",
            "cyber",
            "fallback",
            &fell_back,
        ),
        record(
            "2026-11-29T17:00:00.000Z",
            "blue-team",
            "bio",
            "rescued",
            &[("rescue", "served")],
        ),
        // A line torn by a crash: skipped.
        "{\"ts\":\"2026-11-29T17:0".to_owned(),
    ];
    (
        dir.write("a.jsonl", &a.concat()),
        dir.write("b.jsonl", &b.concat()),
    )
}

fn stdout(output: &std::process::Output) -> String {
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn report_by_tenant_prints_each_tenants_refusals_recovered_and_dead() {
    let dir = TempDir::new("report-tenant");
    let (a, b) = logs(&dir);
    let both = dir.write(
        "both.jsonl",
        &(std::fs::read_to_string(&a).unwrap() + &std::fs::read_to_string(&b).unwrap()),
    );
    let shown = stdout(&run(
        BIN,
        &["report", "--log", arg(&both), "--by", "tenant"],
    ));
    assert_eq!(
        shown,
        format!(
            "Log: {}\nBy tenant:\n       3  red-team: 2 recovered (66%); dead: capped 1\n       \
             2  blue-team: 1 recovered (50%); dead: policy_stop 1\n",
            both.display()
        )
    );

    let json: Value = serde_json::from_str(&stdout(&run(
        BIN,
        &["report", "--log", arg(&both), "--by", "tenant", "--json"],
    )))
    .unwrap();
    assert_eq!(
        json["by_tenant"],
        json!({
            "blue-team": {"total": 2, "recovered": 1, "by_outcome": {"dead": 1, "rescued": 1},
                "by_reason": {"policy_stop": 1}},
            "red-team": {"total": 3, "recovered": 2, "by_outcome": {"dead": 1, "fallback": 2},
                "by_reason": {"capped": 1}},
        })
    );
}

#[test]
fn report_routing_reads_every_replicas_log_as_one_in_time_order() {
    let dir = TempDir::new("report-routing");
    let (a, b) = logs(&dir);
    let missing = dir.path().join("c.jsonl");
    let args = [
        "report",
        "--routing",
        "--half-life",
        "3600",
        "--log",
        arg(&a),
        "--log",
        arg(&b),
        "--log",
        arg(&missing),
    ];
    // Decayed to the last record (18:00), an hour a half-life: b's 17:00
    // fallback counts a half, a's 18:00 one a whole. Scores are (served +
    // 1) / (served + refused + 2).
    assert_eq!(
        stdout(&run(BIN, &args)),
        format!(
            "Fallback order learned per category and requested model (best first; served / \
             refused, decayed):\n\n\
             cyber on {OPUS}:\n  \
             1. {SONNET}  served 1.5, refused 0.0, score 0.71\n  \
             2. {HAIKU}  served 0.0, refused 1.5, score 0.29\n"
        )
    );

    let json: Value =
        serde_json::from_str(&stdout(&run(BIN, &[&args[..], &["--json"]].concat()))).unwrap();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{json}");
    // The layout docs/tenants.md shows, field for field.
    // Sorted: a JSON object's members have no order (and serde_json keeps
    // the writer's when a crate in the build turns preserve_order on).
    let keys = |object: &Value| {
        let mut keys = object
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<Vec<_>>();
        keys.sort();
        keys
    };
    assert_eq!(keys(&rows[0]), ["candidates", "category", "model"]);
    assert_eq!(
        keys(&rows[0]["candidates"][0]),
        ["candidate", "refused", "score", "served"]
    );
    assert_eq!(
        (&rows[0]["category"], &rows[0]["model"]),
        (&json!("cyber"), &json!(OPUS))
    );
    let candidates: Vec<(&str, f64, f64, f64)> = rows[0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let number = |field: &str| c[field].as_f64().unwrap();
            let name = c["candidate"].as_str().unwrap();
            (name, number("served"), number("refused"), number("score"))
        })
        .collect();
    assert_eq!(candidates.len(), 2, "{json}");
    assert_eq!(candidates[0].0, SONNET);
    assert_eq!((candidates[0].1, candidates[0].2), (1.5, 0.0));
    assert!((candidates[0].3 - 2.5 / 3.5).abs() < 1e-9, "{json}");
    assert_eq!(candidates[1].0, HAIKU);
    assert_eq!((candidates[1].1, candidates[1].2), (0.0, 1.5));

    // One replica's log alone: only its own fallback.
    let alone = stdout(&run(BIN, &args[..6]));
    assert!(
        alone.contains(&format!("1. {SONNET}  served 1.0, refused 0.0")),
        "{alone}"
    );
}

#[test]
fn several_logs_are_refused_where_they_are_not_read_as_one() {
    let dir = TempDir::new("report-several");
    let (a, b) = logs(&dir);
    let out = run(
        BIN,
        &[
            "report",
            "--by",
            "tenant",
            "--log",
            arg(&a),
            "--log",
            arg(&b),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("--html and --routing"), "{said}");
}
