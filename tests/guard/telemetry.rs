//! Telemetry through the public API: records, sinks and the report.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use refusal_guard::refusal::{
    Attempt, AttemptResult, AttemptStep, DeadReason, Outcome, Provider, Refusal, RefusalKind,
    RefusalSignal, Usage, WireApi,
};
use refusal_guard::telemetry::{
    format_ts, Fanout, JsonlSink, MemorySink, RefusalRecord, TelemetrySink, TracingSink,
};
use refusal_guard_proxy::Report;
use support::log_capture::LogCapture;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = format!(
            "refusal-guard-test-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(unique);
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn refusal(outcome: Outcome, category: Option<&str>, model: Option<&str>) -> Refusal {
    let mut refusal = Refusal::new(WireApi::AnthropicMessages, outcome)
        .signal(RefusalSignal::StopReason)
        .explanation("the request looked like malware development")
        .request_id("req_011")
        .kind(if outcome == Outcome::Partial {
            RefusalKind::Partial
        } else {
            RefusalKind::Empty
        });
    refusal.category = category.map(str::to_owned);
    refusal.model = model.map(str::to_owned);
    if outcome == Outcome::Dead {
        refusal = refusal.reason(DeadReason::RescueCap);
    }
    assert_eq!(refusal.provider, Provider::Anthropic);
    refusal
}

fn record(outcome: Outcome, category: Option<&str>, model: Option<&str>) -> RefusalRecord {
    RefusalRecord::new(&refusal(outcome, category, model)).latency_ms(10)
}

fn at_secs(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn read_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------- JSONL --

#[test]
fn concurrent_writers_on_two_sinks_never_interleave_lines() {
    let dir = TempDir::new("concurrent");
    let path = dir.path().join("nested/dir/refusals.jsonl");
    // Two sinks on one path stand in for two processes sharing the log.
    let sinks = [
        Arc::new(JsonlSink::open(&path).unwrap()),
        Arc::new(JsonlSink::open(&path).unwrap()),
    ];
    // A long explanation makes each line several kilobytes, so a torn or
    // interleaved write would show up as invalid JSON.
    let long = "x".repeat(4096);

    let handles: Vec<_> = (0..8)
        .map(|thread_id| {
            let sink = sinks[thread_id % 2].clone();
            let long = long.clone();
            thread::spawn(move || {
                for n in 0..1000 {
                    let mut r = refusal(Outcome::Dead, Some("cyber"), Some("claude-x"));
                    r.request_id = Some(format!("{thread_id}-{n}"));
                    r.explanation = Some(long.clone());
                    sink.record(&RefusalRecord::new(&r).latency_ms(n));
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }

    let text = fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    let mut seen = HashSet::new();
    let mut lines = 0;
    for line in text.lines() {
        lines += 1;
        let parsed: RefusalRecord = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("line {lines} is not a record: {e}"));
        assert_eq!(parsed.explanation.as_deref(), Some(long.as_str()));
        assert!(seen.insert(parsed.request_id.unwrap()), "duplicate record");
    }
    assert_eq!(lines, 8000);
    assert_eq!(seen.len(), 8000);

    let (report, skipped) = Report::read_path(&path).unwrap();
    assert_eq!((report.total, skipped), (8000, 0));
}

#[test]
fn open_creates_parent_directories_and_appends() {
    let dir = TempDir::new("append");
    let path = dir.path().join("a/b/refusals.jsonl");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(
        &path,
        "{\"ts\":\"2026-01-01T00:00:00.000Z\",\"outcome\":\"dead\"}\n",
    )
    .unwrap();

    let sink = JsonlSink::open(&path).unwrap();
    assert_eq!(sink.path(), path);
    sink.record(&record(Outcome::Rescued, Some("bio"), Some("m")));

    let lines = read_lines(&path);
    assert_eq!(lines.len(), 2, "existing content must be kept");
    let second: RefusalRecord = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(second.outcome, Outcome::Rescued);
}

#[test]
fn a_log_deleted_while_the_sink_lives_is_recreated() {
    let dir = TempDir::new("recreate");
    let path = dir.path().join("refusals.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    sink.record(&record(Outcome::Dead, None, None));
    fs::remove_file(&path).unwrap();

    sink.record(&record(Outcome::Fallback, Some("cyber"), None));
    let lines = read_lines(&path);
    assert_eq!(lines.len(), 1);
    let only: RefusalRecord = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(only.outcome, Outcome::Fallback);
}

#[test]
fn unopenable_or_unwritable_logs_do_not_panic() {
    let dir = TempDir::new("failing");

    // A directory cannot be opened for appending.
    let error = JsonlSink::open(dir.path()).unwrap_err();
    assert!(error.kind() != std::io::ErrorKind::NotFound, "{error}");

    // A parent that is a file cannot be created.
    let file = dir.path().join("plain-file");
    fs::write(&file, "").unwrap();
    assert!(JsonlSink::open(file.join("refusals.jsonl")).is_err());

    // Opened fine, then the log path became a directory: writes fail quietly.
    let path = dir.path().join("refusals.jsonl");
    let sink = JsonlSink::open(&path).unwrap();
    fs::remove_file(&path).unwrap();
    fs::create_dir(&path).unwrap();
    sink.record(&record(Outcome::Dead, Some("cyber"), None));
    assert!(path.is_dir());

    // A device that is always full (Linux): the write itself fails.
    if Path::new("/dev/full").exists() {
        let full = JsonlSink::open("/dev/full").unwrap();
        full.record(&record(Outcome::Dead, Some("cyber"), None));
    }
}

#[test]
fn default_path_is_under_home() {
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => assert_eq!(
            JsonlSink::default_path().unwrap(),
            Path::new(&home).join(".refusal-guard/refusals.jsonl")
        ),
        None => assert_eq!(JsonlSink::default_path(), None),
    }
}

// -------------------------------------------------------------- records --

#[test]
fn a_full_record_round_trips_in_field_order() {
    let mut r = refusal(Outcome::Dead, Some("cyber"), Some("claude-opus-x"));
    r.served_model = Some("claude-opus-x".to_owned());
    let attempts = vec![
        Attempt::new(AttemptStep::Original, AttemptResult::Refused)
            .model("claude-opus-x")
            .status(200)
            .latency_ms(900)
            .usage(Usage::new().input_tokens(1800).output_tokens(2)),
        Attempt::new(AttemptStep::Rescue, AttemptResult::TransportError)
            .model("claude-opus-x")
            .latency_ms(30),
    ];
    let record = RefusalRecord::new(&r)
        .attempts(attempts.clone())
        .conversation("9f86d081")
        .latency_ms(1234);

    let line = record.to_json_line();
    assert_eq!(line.last(), Some(&b'\n'));
    let back: RefusalRecord = serde_json::from_slice(&line).unwrap();
    assert_eq!(back, record);
    assert_eq!(back.refusal(), r);
    assert_eq!(back.attempts, attempts);
    assert_eq!(back.conversation.as_deref(), Some("9f86d081"));
    assert_eq!(back.latency_ms, 1234);
    assert_eq!(
        back.usage,
        Some(Usage::new().input_tokens(1800).output_tokens(2))
    );

    let text = String::from_utf8(line).unwrap();
    let order = [
        "ts",
        "model",
        "category",
        "explanation",
        "outcome",
        "reason",
        "provider",
        "wire_api",
        "signal",
        "kind",
        "served_model",
        "request_id",
        "conversation",
        "attempts",
        "latency_ms",
        "usage",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|key| {
            text.find(&format!("\"{key}\":"))
                .unwrap_or_else(|| panic!("{key} missing from {text}"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "fields out of order: {text}"
    );
    assert!(text.contains(r#""outcome":"dead","reason":"rescue_cap","provider":"anthropic""#));
    // The attempt's usage, and the record's total as its last field.
    assert!(
        text.contains(r#""latency_ms":900,"usage":{"input_tokens":1800,"output_tokens":2}}"#),
        "{text}"
    );
    assert!(
        text.ends_with(
            "\"latency_ms\":1234,\"usage\":{\"input_tokens\":1800,\"output_tokens\":2}}\n"
        ),
        "{text}"
    );
}

#[test]
fn unknown_pi_fields_are_null_and_absent_extras_are_omitted() {
    let mut r = refusal(Outcome::Rescued, None, None);
    r.explanation = None;
    r.request_id = None;
    let text = String::from_utf8(RefusalRecord::new(&r).to_json_line()).unwrap();
    assert!(
        text.contains(r#""model":null,"category":null,"explanation":null,"outcome":"rescued""#),
        "{text}"
    );
    for absent in [
        "reason",
        "served_model",
        "request_id",
        "conversation",
        "usage",
    ] {
        assert!(
            !text.contains(&format!("\"{absent}\"")),
            "{absent} in {text}"
        );
    }
}

#[test]
fn timestamps_have_the_iso_shape() {
    assert_eq!(
        format_ts(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)),
        "2023-11-14T22:13:20.123Z"
    );
    assert_eq!(format_ts(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    // Leap days, a century leap year, sub-millisecond truncation.
    assert_eq!(
        format_ts(UNIX_EPOCH + Duration::from_millis(1_709_251_199_999)),
        "2024-02-29T23:59:59.999Z"
    );
    assert_eq!(format_ts(at_secs(951_782_400)), "2000-02-29T00:00:00.000Z");
    assert_eq!(
        format_ts(at_secs(4_107_542_400)),
        "2100-03-01T00:00:00.000Z"
    );
    assert_eq!(
        format_ts(UNIX_EPOCH + Duration::from_nanos(1_999_999)),
        "1970-01-01T00:00:00.001Z"
    );
    // Before the epoch the clock still reads forwards.
    assert_eq!(
        format_ts(UNIX_EPOCH - Duration::from_millis(1)),
        "1969-12-31T23:59:59.999Z"
    );

    let before = format_ts(SystemTime::now());
    let ts = record(Outcome::Dead, None, None).ts;
    let after = format_ts(SystemTime::now());
    // `new` stamps the current time (the format sorts as text).
    assert!(before <= ts && ts <= after, "{before} {ts} {after}");
    let bytes = ts.as_bytes();
    assert_eq!(bytes.len(), 24, "{ts}");
    for (i, &b) in bytes.iter().enumerate() {
        let expected_sep = match i {
            4 | 7 => Some(b'-'),
            10 => Some(b'T'),
            13 | 16 => Some(b':'),
            19 => Some(b'.'),
            23 => Some(b'Z'),
            _ => None,
        };
        match expected_sep {
            Some(sep) => assert_eq!(b, sep, "{ts} at {i}"),
            None => assert!(b.is_ascii_digit(), "{ts} at {i}"),
        }
    }
}

#[test]
fn pi_refusal_guard_lines_are_read_with_defaults() {
    let line = r#"{"ts":"2026-11-29T17:44:06.123Z","model":"claude-opus-5","category":"cyber","explanation":"Looks like exploit development.","outcome":"fallback"}"#;
    let record: RefusalRecord = serde_json::from_str(line).unwrap();
    assert_eq!(record.ts, "2026-11-29T17:44:06.123Z");
    assert_eq!(record.model.as_deref(), Some("claude-opus-5"));
    assert_eq!(record.category.as_deref(), Some("cyber"));
    assert_eq!(record.outcome, Outcome::Fallback);
    assert_eq!(
        (record.provider, record.wire_api, record.signal, record.kind),
        (None, None, None, None)
    );
    assert!(record.attempts.is_empty());
    assert_eq!(record.latency_ms, 0);

    let typed = record.refusal();
    assert_eq!(typed.provider, Provider::Anthropic);
    assert_eq!(typed.wire_api, WireApi::AnthropicMessages);
    assert_eq!(typed.kind, RefusalKind::Empty);
    assert_eq!(
        typed.explanation.as_deref(),
        Some("Looks like exploit development.")
    );

    // Nulls, a non-Anthropic category, a partial outcome.
    let line = r#"{"ts":"2026-11-29T17:45:00.000Z","model":null,"category":"content-blocked","explanation":null,"outcome":"partial"}"#;
    let record: RefusalRecord = serde_json::from_str(line).unwrap();
    assert_eq!((&record.model, &record.explanation), (&None, &None));
    assert_eq!(record.refusal().kind, RefusalKind::Partial);
}

#[test]
fn unknown_values_from_newer_writers_do_not_reject_the_line() {
    let line = r#"{"ts":"2026-11-29T17:44:06.123Z","model":"m","category":null,"explanation":null,
        "outcome":"dead","reason":"some_future_reason","provider":"mistral","wire_api":"x",
        "signal":"telepathy","kind":"both","attempts":[{"step":"original","model":"m","result":"refused","latency_ms":5,"usage":{"input_tokens":-3}},{"step":"teleport"}],
        "latency_ms":7,"new_field":{"nested":true},"usage":"lots"}"#;
    let record: RefusalRecord = serde_json::from_str(line).unwrap();
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.reason, None);
    assert_eq!(record.provider, None);
    assert_eq!(record.signal, None);
    assert_eq!(record.kind, None);
    assert_eq!(record.attempts.len(), 1, "the parsable attempt is kept");
    assert_eq!(
        record.attempts[0].usage, None,
        "usage it cannot read is unknown"
    );
    assert_eq!(record.usage, None);
    assert_eq!(record.latency_ms, 7);
}

// ---------------------------------------------------------------- sinks --

#[test]
fn closure_unit_arc_tuple_vec_and_fanout_sinks_all_receive() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_closure = seen.clone();
    let closure = move |r: &RefusalRecord| {
        seen_by_closure.lock().unwrap().push(r.outcome);
    };

    let a = MemorySink::new();
    let b = MemorySink::new();
    let c = MemorySink::new();
    let d = MemorySink::new();
    let sink = Fanout::new()
        .and(())
        .and(closure)
        .and(Arc::new(a.clone()))
        .and((b.clone(), ()))
        .and(vec![c.clone(), c.clone()])
        .and((d.clone(), (), |_: &RefusalRecord| {}));
    assert_eq!(sink.len(), 6);

    let boxed: Box<dyn TelemetrySink> = Box::new(sink);
    boxed.record(&record(Outcome::Dead, Some("cyber"), None));
    boxed.record(&record(Outcome::Rescued, Some("cyber"), None));

    assert_eq!(*seen.lock().unwrap(), [Outcome::Dead, Outcome::Rescued]);
    assert_eq!(a.len(), 2);
    assert_eq!(b.len(), 2);
    assert_eq!(c.len(), 4, "a Vec sends to each of its sinks");
    assert_eq!(d.len(), 2);

    let empty = Fanout::new();
    assert!(empty.is_empty());
    empty.record(&record(Outcome::Dead, None, None));
    ().record(&record(Outcome::Dead, None, None));
}

#[test]
fn memory_sink_is_bounded_and_shared_between_clones() {
    let sink = MemorySink::with_capacity(3);
    let reader = sink.clone();
    assert_eq!(MemorySink::new().capacity(), MemorySink::DEFAULT_CAPACITY);
    assert!(reader.is_empty());

    for secs in 0..5 {
        sink.record(&record(Outcome::Dead, None, None).at(at_secs(secs)));
    }
    assert_eq!(reader.len(), 3);
    let kept: Vec<String> = reader.records().into_iter().map(|r| r.ts).collect();
    assert_eq!(
        kept,
        [
            "1970-01-01T00:00:02.000Z",
            "1970-01-01T00:00:03.000Z",
            "1970-01-01T00:00:04.000Z"
        ]
    );

    let taken = reader.take();
    assert_eq!(taken.len(), 3);
    assert!(sink.is_empty(), "take empties the shared buffer");

    sink.record(&record(Outcome::Dead, None, None));
    reader.clear();
    assert_eq!(sink.len(), 0);

    let none = MemorySink::with_capacity(0);
    none.record(&record(Outcome::Dead, None, None));
    assert!(none.is_empty());
}

// --------------------------------------------------------------- report --

#[test]
fn report_counts_and_orders_the_most_recent_five() {
    // Given out of order on purpose; two share a timestamp.
    let specs: [(u64, Outcome, Option<&str>, Option<&str>); 7] = [
        (300, Outcome::Dead, Some("cyber"), Some("opus")),
        (100, Outcome::Fallback, Some("cyber"), Some("opus")),
        (700, Outcome::Rescued, Some("bio"), Some("sonnet")),
        (200, Outcome::Partial, None, Some("opus")),
        (700, Outcome::Dead, Some("cyber"), None),
        (500, Outcome::Fallback, Some("bio"), Some("sonnet")),
        (400, Outcome::Dead, Some("cyber"), Some("opus")),
    ];
    let records: Vec<RefusalRecord> = specs
        .iter()
        .enumerate()
        .map(|(i, &(secs, outcome, category, model))| {
            let mut r = record(outcome, category, model).at(at_secs(secs));
            r.request_id = Some(format!("line{i}"));
            r
        })
        .collect();
    let report = Report::from_records(records);

    assert_eq!(report.total, 7);
    assert_eq!(report.recovered, 3);
    let map = |pairs: &[(&str, usize)]| -> BTreeMap<String, usize> {
        pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
    };
    assert_eq!(
        report.by_outcome,
        map(&[("dead", 3), ("fallback", 2), ("partial", 1), ("rescued", 1)])
    );
    assert_eq!(
        report.by_category,
        map(&[("(none)", 1), ("bio", 2), ("cyber", 4)])
    );
    assert_eq!(
        report.by_model,
        map(&[("(none)", 1), ("opus", 4), ("sonnet", 2)])
    );
    assert_eq!(report.by_reason, map(&[("rescue_cap", 3)]));

    let recent: Vec<&str> = report
        .recent
        .iter()
        .map(|r| r.request_id.as_deref().unwrap())
        .collect();
    // Newest first; at equal `ts` the later line (line4) comes first.
    assert_eq!(recent, ["line4", "line2", "line5", "line6", "line0"]);

    let text = report.to_string();
    assert!(
        text.starts_with("7 refusals recorded; 3 recovered"),
        "{text}"
    );
    assert!(text.contains("     4  cyber"), "{text}");
    let cyber = text.find("     4  cyber").unwrap();
    let bio = text.find("     2  bio").unwrap();
    assert!(cyber < bio, "tables list the largest count first: {text}");
    assert!(text.contains("Most recent:"));

    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["total"], 7);
    assert_eq!(json["by_outcome"]["dead"], 3);
    assert_eq!(json["recent"].as_array().unwrap().len(), 5);
    assert_eq!(json["recent"][0]["request_id"], "line4");
}

#[test]
fn report_skips_and_counts_torn_and_garbage_lines() {
    let mut log = Vec::new();
    let good = |ts: &str, outcome: &str| {
        format!(
            r#"{{"ts":"{ts}","model":"claude-x","category":"cyber","explanation":null,"outcome":"{outcome}"}}"#
        )
    };
    log.extend_from_slice(good("2026-01-01T00:00:00.000Z", "dead").as_bytes());
    log.extend_from_slice(b"\n\n   \n"); // blank lines: ignored, not counted
    log.extend_from_slice(b"{\"ts\":\"2026-01-01T00:00:01.000Z\",\"outc"); // torn...
    log.extend_from_slice(good("2026-01-01T00:00:02.000Z", "rescued").as_bytes()); // ...then glued
    log.push(b'\n');
    log.extend_from_slice(b"not json at all\n");
    log.extend_from_slice(b"\xff\xfe\x00 invalid utf-8\n");
    log.extend_from_slice(b"{\"model\":\"no ts\",\"outcome\":\"dead\"}\n");
    log.extend_from_slice(b"{\"ts\":\"2026-01-01T00:00:03.000Z\",\"outcome\":\"pending\"}\n");
    log.extend_from_slice(b"[1,2,3]\n");
    log.extend_from_slice(good("2026-01-01T00:00:04.000Z", "fallback").as_bytes());
    // The last line has no newline: still a record.

    let (report, skipped) = Report::from_jsonl_reader(&log[..]);
    assert_eq!(skipped, 6);
    assert_eq!(report.total, 2);
    assert_eq!(report.by_outcome.get("dead"), Some(&1));
    assert_eq!(report.by_outcome.get("fallback"), Some(&1));
    assert_eq!(report.recent[0].ts, "2026-01-01T00:00:04.000Z");
}

#[test]
fn report_reads_a_file_and_reports_a_missing_one() {
    let dir = TempDir::new("report");
    let path = dir.path().join("refusals.jsonl");
    let error = Report::read_path(&path).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);

    let sink = JsonlSink::open(&path).unwrap();
    sink.record(&record(Outcome::Dead, Some("cyber"), Some("m")));
    sink.record(&record(Outcome::Partial, Some("bio"), Some("m")));
    let (report, skipped) = Report::read_path(&path).unwrap();
    assert_eq!((report.total, skipped), (2, 0));
    assert_eq!(report.by_model.get("m"), Some(&2));

    let empty = Report::from_records(Vec::new());
    assert!(empty.is_empty());
    assert_eq!(empty.to_string(), "No refusals recorded.\n");
}

// -------------------------------------------------------------- tracing --

#[test]
fn tracing_sink_emits_structured_events_at_the_configured_levels() {
    use tracing::Level;

    let capture = LogCapture::this_thread();
    let default = TracingSink::new();
    default.record(&record(Outcome::Dead, Some("cyber"), Some("claude-x")));
    default.record(&record(Outcome::Fallback, None, Some("claude-x")));
    let custom = TracingSink::new()
        .level(Level::DEBUG)
        .dead_level(Level::ERROR);
    custom.record(&record(Outcome::Dead, Some("bio"), None));
    custom.record(&record(Outcome::Partial, Some("bio"), None));

    let events = capture.all();
    let levels: Vec<Level> = events.iter().map(|e| e.level).collect();
    assert_eq!(
        levels,
        [Level::WARN, Level::INFO, Level::ERROR, Level::DEBUG]
    );
    assert!(events.iter().all(|e| e.target == "refusal_guard::refusal"));

    let field = |i: usize, name: &str| -> Option<String> {
        events[i]
            .fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(field(0, "outcome").as_deref(), Some("dead"));
    assert_eq!(field(0, "reason").as_deref(), Some("rescue_cap"));
    assert_eq!(field(0, "category").as_deref(), Some("cyber"));
    assert_eq!(field(0, "provider").as_deref(), Some("anthropic"));
    assert_eq!(field(0, "wire_api").as_deref(), Some("anthropic_messages"));
    assert_eq!(field(0, "signal").as_deref(), Some("stop_reason"));
    assert_eq!(field(0, "kind").as_deref(), Some("empty"));
    assert_eq!(field(0, "latency_ms").as_deref(), Some("10"));
    assert_eq!(field(1, "category"), None, "unknown fields are left out");
    assert_eq!(field(1, "reason"), None);
    assert_eq!(field(3, "kind").as_deref(), Some("partial"));
}
