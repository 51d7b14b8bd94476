//! The refusals dashboard: one self-contained HTML page (inline CSS, SVG
//! drawn by an inline script, no network) summarising refusal records.
//!
//! The admin listener serves it live from the log; `refusals --html` writes
//! it from any logs. The numbers are computed here; the page only draws them.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use serde::Serialize;

use refusal_guard::refusal::Outcome;
use refusal_guard::telemetry::metrics::RequestTally;
use refusal_guard::telemetry::{format_ts, parse_ts, RefusalRecord, RouteRestored};

/// The page around the data; `/*DATA*/` is replaced by the summary's JSON.
const TEMPLATE: &str = include_str!("dashboard.html");

/// How many categories the time chart stacks; the rest are `other`.
const TOP_CATEGORIES: usize = 8;
/// How many models and categories the table shows; the rest are `other`.
const TABLE_MODELS: usize = 12;
/// How many recent refusals the page lists.
const RECENT: usize = 15;
/// Most bars in the time chart.
const MAX_BUCKETS: u64 = 48;
/// Bar widths the time chart may use, in milliseconds.
const BUCKET_WIDTHS: [u64; 10] = [
    60_000,
    5 * 60_000,
    15 * 60_000,
    3_600_000,
    3 * 3_600_000,
    6 * 3_600_000,
    86_400_000,
    7 * 86_400_000,
    30 * 86_400_000,
    365 * 86_400_000,
];

/// A summary of refusal records, ready to render as the dashboard page.
///
/// ```
/// use refusal_guard::telemetry::RefusalRecord;
/// use refusal_guard_proxy::Dashboard;
///
/// let records: Vec<RefusalRecord> = [
///     r#"{"ts":"2026-11-29T17:00:00.000Z","model":"m","category":"cyber","explanation":null,"outcome":"rescued","latency_ms":900}"#,
///     r#"{"ts":"2026-11-29T17:30:00.000Z","model":"m","category":"cyber","explanation":null,"outcome":"dead"}"#,
/// ].iter().map(|line| serde_json::from_str(line).unwrap()).collect();
/// let dashboard = Dashboard::from_records(records);
/// assert_eq!((dashboard.total(), dashboard.recovered()), (2, 1));
/// let html = dashboard.to_html();
/// assert!(html.starts_with("<!doctype html>"));
/// // Nothing is fetched: no external scripts, styles or images.
/// assert!(!html.contains("src=") && !html.contains("<link"));
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct Dashboard {
    generated: String,
    total: usize,
    recovered: usize,
    recoverable: usize,
    by_outcome: BTreeMap<&'static str, usize>,
    /// For dead refusals: count per reason (`(none)` when not said).
    dead_reasons: BTreeMap<String, usize>,
    timeline: Timeline,
    table: Table,
    latency: Vec<Latency>,
    /// Per tenant (most refusals first; the rest as `other`), when the
    /// records name any.
    tenants: Vec<TenantRow>,
    recent: Vec<RefusalRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    requests: Option<Requests>,
    /// Seconds after which the page reloads itself (the live page).
    #[serde(skip_serializing_if = "Option::is_none")]
    refresh_secs: Option<u64>,
    skipped: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Timeline {
    /// Width of a bar, in milliseconds.
    width_ms: u64,
    categories: Vec<String>,
    /// Start of each bar (RFC 3339) and its count per category.
    bars: Vec<(String, Vec<usize>)>,
    /// Records whose time could not be read.
    undated: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Table {
    models: Vec<String>,
    categories: Vec<String>,
    /// `counts[model][category]`.
    counts: Vec<Vec<usize>>,
}

#[derive(Debug, Clone, Serialize)]
struct Latency {
    outcome: &'static str,
    count: usize,
    p50_ms: u64,
    p90_ms: u64,
    p99_ms: u64,
    max_ms: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
struct TenantRow {
    tenant: String,
    total: usize,
    recovered: usize,
    dead: usize,
    /// Dead because the tenant had used its recovery attempts for the hour.
    capped: usize,
}

#[derive(Debug, Clone, Serialize)]
struct Requests {
    total: u64,
    refused: u64,
    unsettled: u64,
}

/// What the summary keeps of each record.
struct Entry {
    at_ms: Option<i64>,
    model: String,
    category: String,
    outcome: Outcome,
    reason: Option<&'static str>,
    latency_ms: u64,
    tenant: Option<String>,
}

const OUTCOMES: [Outcome; 4] = [
    Outcome::Fallback,
    Outcome::Rescued,
    Outcome::Partial,
    Outcome::Dead,
];

/// The key for a record without a model or category.
const NONE: &str = "(none)";

impl Dashboard {
    /// Summarises `records`, given in log order.
    pub fn from_records<I>(records: I) -> Dashboard
    where
        I: IntoIterator<Item = RefusalRecord>,
    {
        let mut builder = Builder::default();
        for record in records {
            builder.add(record);
        }
        builder.finish()
    }

    /// Summarises JSONL logs (several files read as one log), returning the
    /// dashboard; lines that hold no record are counted in the page as
    /// skipped. A log that does not exist counts as empty.
    ///
    /// `max_bytes_each` bounds what is read of each file: past it only its
    /// newest `max_bytes_each` bytes are read (the live page uses this; the
    /// `refusals` command reads everything with `u64::MAX`).
    ///
    /// ```
    /// use refusal_guard_proxy::Dashboard;
    ///
    /// let dir = std::env::temp_dir().join(format!("rg-dash-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let log = dir.join("a.jsonl");
    /// std::fs::write(&log, concat!(
    ///     r#"{"ts":"2026-11-29T17:00:00.000Z","outcome":"rescued"}"#, "\n",
    ///     "torn line\n",
    /// )).unwrap();
    /// let dashboard = Dashboard::from_logs(&[log, dir.join("missing.jsonl")], u64::MAX).unwrap();
    /// assert_eq!(dashboard.total(), 1);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn from_logs<P: AsRef<Path>>(paths: &[P], max_bytes_each: u64) -> io::Result<Dashboard> {
        let mut builder = Builder::default();
        for path in paths {
            let mut file = match File::open(path.as_ref()) {
                Ok(file) => file,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            let len = file.metadata()?.len();
            let torn = len > max_bytes_each;
            if torn {
                file.seek(SeekFrom::Start(len - max_bytes_each))?;
            }
            let mut reader = BufReader::new(file.take(max_bytes_each));
            if torn {
                // The first line read is the tail of one cut in half.
                let mut skip = Vec::new();
                reader.read_until(b'\n', &mut skip)?;
            }
            builder.read(reader)?;
        }
        Ok(builder.finish())
    }

    /// Adds the guarded request totals (the live page shows the refusal rate).
    ///
    /// ```
    /// use refusal_guard_proxy::Dashboard;
    ///
    /// let page = Dashboard::from_records([])
    ///     .with_requests(refusal_guard::telemetry::metrics::request_tally())
    ///     .to_html();
    /// assert!(page.contains(r#""requests":{"#));
    /// ```
    pub fn with_requests(mut self, tally: RequestTally) -> Self {
        self.requests = Some(Requests {
            total: tally.total(),
            refused: tally.refused,
            unsettled: tally.unsettled,
        });
        self
    }

    /// Makes the page reload itself every `interval` (whole seconds, at
    /// least one), for a page served live.
    ///
    /// ```
    /// use std::time::Duration;
    /// use refusal_guard_proxy::Dashboard;
    ///
    /// let page = Dashboard::from_records([]).refresh_every(Duration::from_secs(30)).to_html();
    /// assert!(page.contains(r#""refresh_secs":30"#));
    /// ```
    pub fn refresh_every(mut self, interval: std::time::Duration) -> Self {
        self.refresh_secs = Some(interval.as_secs().max(1));
        self
    }

    /// How many refusals the page counts.
    pub fn total(&self) -> usize {
        self.total
    }

    /// How many of them ended `fallback` or `rescued`.
    pub fn recovered(&self) -> usize {
        self.recovered
    }

    /// The page: a complete HTML document with no external references.
    pub fn to_html(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned());
        // `<` escaped keeps `</script>` (or `<!--`) in a logged string from
        // ending the data block; JSON reads `\u003c` back as `<`.
        let json = json.replace('<', "\\u003c");
        TEMPLATE.replace("/*DATA*/", &json)
    }
}

#[derive(Default)]
struct Builder {
    entries: Vec<Entry>,
    recent: Vec<RefusalRecord>,
    skipped: usize,
}

impl Builder {
    fn read(&mut self, reader: impl BufRead) -> io::Result<()> {
        for line in reader.split(b'\n') {
            let line = line?;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<RefusalRecord>(&line) {
                Ok(record) => self.add(record),
                // Not a refusal, and not a bad line either.
                Err(_) if RouteRestored::from_json_line(&line).is_some() => {}
                Err(_) => self.skipped += 1,
            }
        }
        Ok(())
    }

    fn add(&mut self, record: RefusalRecord) {
        self.entries.push(Entry {
            at_ms: parse_ts(&record.ts),
            model: record.model.clone().unwrap_or_else(|| NONE.to_owned()),
            category: record.category.clone().unwrap_or_else(|| NONE.to_owned()),
            outcome: record.outcome,
            reason: record.reason.map(|r| r.as_str()),
            latency_ms: record.latency_ms,
            tenant: record.tenant.clone(),
        });
        self.recent.push(record);
        if self.recent.len() >= RECENT * 4 {
            self.trim_recent();
        }
    }

    /// Keeps the newest records (by time, an unreadable time as the
    /// oldest; log order among equals).
    fn trim_recent(&mut self) {
        let mut indexed: Vec<_> = std::mem::take(&mut self.recent)
            .into_iter()
            .enumerate()
            .map(|(i, r)| (parse_ts(&r.ts).unwrap_or(i64::MIN), i, r))
            .collect();
        indexed.sort_by(|(a, i, _), (b, j, _)| b.cmp(a).then(j.cmp(i)));
        indexed.truncate(RECENT);
        indexed.reverse();
        self.recent = indexed.into_iter().map(|(_, _, r)| r).collect();
    }

    fn finish(mut self) -> Dashboard {
        self.trim_recent();
        self.recent.reverse();
        let entries = &self.entries;
        let mut by_outcome: BTreeMap<&'static str, usize> =
            OUTCOMES.iter().map(|o| (o.as_str(), 0)).collect();
        for entry in entries {
            *by_outcome.entry(entry.outcome.as_str()).or_default() += 1;
        }
        let recovered = by_outcome["fallback"] + by_outcome["rescued"];
        let mut dead_reasons: BTreeMap<String, usize> = BTreeMap::new();
        for entry in entries.iter().filter(|e| e.outcome == Outcome::Dead) {
            *dead_reasons
                .entry(entry.reason.unwrap_or(NONE).to_owned())
                .or_default() += 1;
        }
        Dashboard {
            generated: format_ts(std::time::SystemTime::now()),
            total: entries.len(),
            recovered,
            recoverable: entries.len() - by_outcome["partial"],
            by_outcome,
            dead_reasons,
            timeline: timeline(entries),
            table: table(entries),
            latency: latency(entries),
            tenants: tenants(entries),
            recent: self.recent,
            requests: None,
            refresh_secs: None,
            skipped: self.skipped,
        }
    }
}

/// The rows of the tenants table: the most frequent tenants, then `other`.
fn tenants(entries: &[Entry]) -> Vec<TenantRow> {
    if entries.iter().all(|e| e.tenant.is_none()) {
        return Vec::new();
    }
    let name = |e: &Entry| e.tenant.clone().unwrap_or_else(|| NONE.to_owned());
    let shown = top(entries.iter().map(name), TABLE_MODELS);
    let mut rows: Vec<TenantRow> = shown
        .iter()
        .map(|tenant| TenantRow {
            tenant: tenant.clone(),
            ..TenantRow::default()
        })
        .collect();
    let mut other = TenantRow {
        tenant: "other".to_owned(),
        ..TenantRow::default()
    };
    for entry in entries {
        let at = shown.iter().position(|t| *t == name(entry));
        let row = match at {
            Some(at) => &mut rows[at],
            None => &mut other,
        };
        row.total += 1;
        match entry.outcome {
            Outcome::Fallback | Outcome::Rescued => row.recovered += 1,
            Outcome::Dead => row.dead += 1,
            _ => {}
        }
        if entry.reason == Some("capped") {
            row.capped += 1;
        }
    }
    if other.total > 0 {
        rows.push(other);
    }
    rows
}

/// The `n` most frequent keys, most frequent first (ties by name).
fn top(keys: impl Iterator<Item = String>, n: usize) -> Vec<String> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for key in keys {
        *counts.entry(key).or_default() += 1;
    }
    let mut sorted: Vec<_> = counts.into_iter().collect();
    sorted.sort_by(|(a, x), (b, y)| y.cmp(x).then(a.cmp(b)));
    sorted.into_iter().take(n).map(|(key, _)| key).collect()
}

/// The index of `key` among `kept`, or of `other` (one past them).
fn slot(kept: &[String], key: &str) -> usize {
    kept.iter().position(|k| k == key).unwrap_or(kept.len())
}

/// `kept`, plus `other` when some key was folded into it.
fn with_other(mut kept: Vec<String>, folded: bool) -> Vec<String> {
    if folded {
        kept.push("other".to_owned());
    }
    kept
}

fn timeline(entries: &[Entry]) -> Timeline {
    let dated: Vec<(i64, &str)> = entries
        .iter()
        .filter_map(|e| e.at_ms.map(|at| (at, e.category.as_str())))
        .collect();
    let undated = entries.len() - dated.len();
    let (Some(first), Some(last)) = (
        dated.iter().map(|d| d.0).min(),
        dated.iter().map(|d| d.0).max(),
    ) else {
        return Timeline {
            undated,
            ..Timeline::default()
        };
    };
    let span = (last - first) as u64;
    let width = BUCKET_WIDTHS
        .into_iter()
        .find(|w| span / w < MAX_BUCKETS)
        .unwrap_or(BUCKET_WIDTHS[BUCKET_WIDTHS.len() - 1]);
    let start = first.div_euclid(width as i64) * width as i64;
    let count = ((last - start) as u64 / width + 1) as usize;
    let kept = top(dated.iter().map(|d| d.1.to_owned()), TOP_CATEGORIES);
    let folded = dated.iter().any(|d| !kept.iter().any(|k| k == d.1));
    let categories = with_other(kept, folded);
    let mut bars: Vec<Vec<usize>> = vec![vec![0; categories.len()]; count];
    for (at, category) in &dated {
        let bar = ((at - start) as u64 / width) as usize;
        bars[bar][slot(&categories, category).min(categories.len() - 1)] += 1;
    }
    Timeline {
        width_ms: width,
        bars: bars
            .into_iter()
            .enumerate()
            .map(|(i, counts)| (ts_of_ms(start + (i as u64 * width) as i64), counts))
            .collect(),
        categories,
        undated,
    }
}

fn table(entries: &[Entry]) -> Table {
    let models = top(entries.iter().map(|e| e.model.clone()), TABLE_MODELS);
    let categories = top(entries.iter().map(|e| e.category.clone()), TOP_CATEGORIES);
    let models_folded = entries.iter().any(|e| !models.contains(&e.model));
    let categories_folded = entries.iter().any(|e| !categories.contains(&e.category));
    let models = with_other(models, models_folded);
    let categories = with_other(categories, categories_folded);
    let mut counts = vec![vec![0; categories.len()]; models.len()];
    for entry in entries {
        let m = slot(&models, &entry.model).min(models.len() - 1);
        let c = slot(&categories, &entry.category).min(categories.len() - 1);
        counts[m][c] += 1;
    }
    Table {
        models,
        categories,
        counts,
    }
}

fn latency(entries: &[Entry]) -> Vec<Latency> {
    [Outcome::Fallback, Outcome::Rescued, Outcome::Dead]
        .into_iter()
        .filter_map(|outcome| {
            let mut values: Vec<u64> = entries
                .iter()
                .filter(|e| e.outcome == outcome && e.latency_ms > 0)
                .map(|e| e.latency_ms)
                .collect();
            values.sort_unstable();
            let max_ms = *values.last()?;
            Some(Latency {
                outcome: outcome.as_str(),
                count: values.len(),
                p50_ms: percentile(&values, 50),
                p90_ms: percentile(&values, 90),
                p99_ms: percentile(&values, 99),
                max_ms,
            })
        })
        .collect()
}

/// The nearest-rank percentile of sorted, non-empty `values`.
///
/// ```text
/// percentile([1, 2, 3, 4], 50) == 2; percentile([1, 2, 3, 4], 90) == 4
/// ```
fn percentile(values: &[u64], p: usize) -> u64 {
    let rank = (p * values.len()).div_ceil(100).max(1);
    values[rank - 1]
}

fn ts_of_ms(ms: i64) -> String {
    let time = if ms >= 0 {
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64)
    } else {
        std::time::UNIX_EPOCH - std::time::Duration::from_millis(ms.unsigned_abs())
    };
    format_ts(time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_back_what_format_ts_writes() {
        for ms in [
            0i64,
            1_700_000_000_123,
            951_782_400_000,
            -86_400_000,
            4_102_444_800_999,
        ] {
            assert_eq!(parse_ts(&ts_of_ms(ms)), Some(ms), "{ms}");
        }
        assert_eq!(
            parse_ts("2026-11-29T17:44:06Z"),
            Some(parse_ts("2026-11-29T17:44:06.000Z").unwrap())
        );
        assert_eq!(parse_ts("2026-13-29T17:44:06.000Z"), None);
        assert_eq!(parse_ts("yesterday"), None);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        assert_eq!(percentile(&[1, 2, 3, 4], 50), 2);
        assert_eq!(percentile(&[1, 2, 3, 4], 90), 4);
        assert_eq!(percentile(&[7], 99), 7);
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&hundred, 90), 90);
    }

    fn record(ts: &str, model: &str, category: &str, outcome: &str) -> RefusalRecord {
        serde_json::from_value(serde_json::json!({
            "ts": ts, "model": model, "category": category, "outcome": outcome, "latency_ms": 100,
        }))
        .unwrap()
    }

    #[test]
    fn tenants_get_a_row_each_only_when_records_name_them() {
        let plain =
            Dashboard::from_records([record("2026-11-29T17:00:00.000Z", "m", "cyber", "dead")]);
        assert!(plain.tenants.is_empty());
        let of = |tenant: &str, outcome: &str, reason: Option<&str>| {
            let mut r = record("2026-11-29T17:00:00.000Z", "m", "cyber", outcome);
            r.tenant = Some(tenant.to_owned());
            r.reason = reason.and_then(|w| serde_json::from_value(serde_json::json!(w)).ok());
            r
        };
        let page = Dashboard::from_records([
            of("red", "fallback", None),
            of("red", "dead", Some("capped")),
            of("blue", "dead", Some("policy_stop")),
        ]);
        let rows: Vec<_> = page
            .tenants
            .iter()
            .map(|t| (t.tenant.as_str(), t.total, t.recovered, t.dead, t.capped))
            .collect();
        assert_eq!(rows, [("red", 2, 1, 1, 1), ("blue", 1, 0, 1, 0)]);
        assert!(page.to_html().contains("\"tenants\":[{\"tenant\":\"red\""));
    }

    #[test]
    fn every_record_lands_in_one_bar_and_one_cell() {
        let mut records = Vec::new();
        for i in 0..30 {
            let ts = ts_of_ms(1_700_000_000_000 + i * 7 * 60_000);
            let category = format!("c{}", i % 11);
            let outcome = ["rescued", "dead", "partial", "fallback"][(i % 4) as usize];
            records.push(record(&ts, &format!("m{}", i % 15), &category, outcome));
        }
        records.push(record("not a time", "m0", "c0", "dead"));
        let dashboard = Dashboard::from_records(records);
        let bars: usize = dashboard.timeline.bars.iter().flat_map(|b| &b.1).sum();
        assert_eq!(bars + dashboard.timeline.undated, 31);
        assert_eq!(dashboard.timeline.undated, 1);
        assert_eq!(dashboard.timeline.categories.last().unwrap(), "other");
        assert_eq!(dashboard.timeline.width_ms, 5 * 60_000);
        let cells: usize = dashboard.table.counts.iter().flatten().sum();
        assert_eq!(cells, 31);
        assert_eq!(dashboard.table.models.len(), TABLE_MODELS + 1);
        assert_eq!(dashboard.recent.len(), RECENT);
        assert_eq!(
            dashboard.recent[0].ts,
            ts_of_ms(1_700_000_000_000 + 29 * 7 * 60_000)
        );
        assert_eq!(dashboard.total, 31);
        assert_eq!(dashboard.recoverable, 31 - 7);
    }

    #[test]
    fn logged_markup_cannot_end_the_data_block() {
        let html = Dashboard::from_records([record(
            "2026-11-29T17:00:00.000Z",
            "</script><script>alert(1)</script>",
            "cyber",
            "dead",
        )])
        .to_html();
        assert!(!html.contains("</script><script>alert"));
        assert_eq!(
            html.matches("</script>").count(),
            TEMPLATE.matches("</script>").count()
        );
    }
}
