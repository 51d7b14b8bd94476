//! A summary of logged refusals.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use serde::Serialize;

use refusal_guard::refusal::{Outcome, Usage};
use refusal_guard::telemetry::{RefusalRecord, RouteRestored};

/// The key used for a record with no category, model or dead reason.
const NONE: &str = "(none)";

/// How many records [`Report::recent`] holds.
const RECENT: usize = 5;

/// Counts of refusals by category, model, outcome and dead reason, the
/// tokens spent on refused attempts, plus the most recent refusals.
///
/// The maps are ordered by key so that the JSON form is deterministic; the
/// [`Display`](fmt::Display) form lists each table by count, largest first.
///
/// ```
/// use refusal_guard_proxy::Report;
///
/// let log = concat!(
///     r#"{"ts":"2026-11-29T17:44:06.123Z","model":"claude-x","category":"cyber","explanation":null,"outcome":"dead"}"#, "\n",
///     "{\"ts\":\"2026-11-29T17:4\n", // a torn line
///     r#"{"ts":"2026-11-29T18:00:00.000Z","model":"claude-x","category":null,"explanation":null,"outcome":"rescued"}"#, "\n",
/// );
/// let (report, skipped) = Report::from_jsonl_reader(log.as_bytes());
/// assert_eq!((report.total, report.recovered, skipped), (2, 1, 1));
/// assert_eq!(report.by_category["cyber"], 1);
/// assert_eq!(report.by_category["(none)"], 1);
/// assert_eq!(report.recent[0].ts, "2026-11-29T18:00:00.000Z");
/// println!("{report}");
///
/// // The tokens refused attempts cost, from the attempts' usage.
/// let line = r#"{"ts":"2026-11-29T19:00:00.000Z","model":"claude-x","category":"bio","explanation":null,"outcome":"dead","attempts":[{"step":"original","model":"claude-x","result":"refused","latency_ms":40,"usage":{"input_tokens":1200,"output_tokens":5}}]}"#;
/// let (report, _) = Report::from_jsonl_reader(line.as_bytes());
/// assert_eq!(report.refused_tokens.input_tokens, Some(1200));
/// assert_eq!(report.refused_tokens_by_category["bio"].total_tokens(), 1205);
/// assert!(report.to_string().contains("Tokens spent on refused attempts: 1205 (input 1200, output 5)"));
///
/// // What became of fallback credit tokens presented on fallbacks.
/// let line = r#"{"ts":"2026-11-29T19:00:01.000Z","model":"claude-x","category":"cyber","explanation":null,"outcome":"fallback","attempts":[{"step":"original","model":"claude-x","result":"refused","latency_ms":40},{"step":"fallback","model":"claude-y","result":"served","latency_ms":50,"fallback_credit":{"status":"not_applied","reason":"expired"}}]}"#;
/// let (report, _) = Report::from_jsonl_reader(line.as_bytes());
/// assert_eq!(report.fallback_credit["not_applied:expired"], 1);
/// assert!(report.to_string().contains("Fallback credit"));
///
/// // Where refused prompts went: every fallback to another provider's API.
/// let line = r#"{"ts":"2026-11-29T19:00:02.000Z","model":"claude-x","category":"cyber","explanation":null,"outcome":"fallback","provider":"anthropic","attempts":[{"step":"original","model":"claude-x","result":"refused","latency_ms":40},{"step":"fallback","model":"openai:gpt-5","provider":"openai","result":"served","latency_ms":50}]}"#;
/// let (report, _) = Report::from_jsonl_reader(line.as_bytes());
/// assert_eq!(report.cross_provider["anthropic -> openai [cyber] served"], 1);
/// assert!(report.to_string().contains("Fallbacks to another provider"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// How many refusals were read.
    pub total: usize,
    /// How many ended `fallback` or `rescued`.
    pub recovered: usize,
    /// Count per outcome word (`fallback`, `rescued`, `partial`, `dead`).
    pub by_outcome: BTreeMap<String, usize>,
    /// Count per provider category; `(none)` when the provider gave none.
    pub by_category: BTreeMap<String, usize>,
    /// Count per refusing model; `(none)` when unknown.
    pub by_model: BTreeMap<String, usize>,
    /// For dead refusals only: count per dead reason (`rescue_cap`, ...);
    /// `(none)` when the record does not say.
    pub by_reason: BTreeMap<String, usize>,
    /// The tokens providers reported for refused attempts (the attempts'
    /// usage: refused ones, and the declined part of a provider's own
    /// chain; see [`Attempt::usage`](refusal_guard::refusal::Attempt::usage)), over
    /// every record.
    pub refused_tokens: Usage,
    /// [`refused_tokens`](Report::refused_tokens) per model that refused
    /// (the attempt's model, else the record's; `(none)` when unknown).
    pub refused_tokens_by_model: BTreeMap<String, Usage>,
    /// [`refused_tokens`](Report::refused_tokens) per refusal category;
    /// `(none)` when the provider gave none.
    pub refused_tokens_by_category: BTreeMap<String, Usage>,
    /// Up to five most recent records, newest first. Ordered by `ts` (the
    /// fixed-width UTC format sorts as text); records with the same `ts`
    /// keep log order, later first.
    pub recent: Vec<RefusalRecord>,
    /// Sticky routes that ended, each with the conversation's primary model
    /// restored ([`RouteRestored`] lines; not refusals).
    pub restored: usize,
    /// Anthropic fallback credit tokens presented on attempts, by what the
    /// response said became of them: `redeemed`, or `not_applied` with its
    /// reason (`not_applied:expired`; `not_applied` alone when none given).
    pub fallback_credit: BTreeMap<String, usize>,
    /// Fallbacks to another provider's API (attempts with a
    /// [`provider`](refusal_guard::refusal::Attempt::provider)), by
    /// `from -> to [category] result`: `anthropic -> openai [cyber] served`.
    /// The refused prompt went to `to` for every one of them except those
    /// `skipped`.
    pub cross_provider: BTreeMap<String, usize>,
    /// Per tenant (the record's `tenant`; `(none)` for lines that do not
    /// say): its refusals, how many were recovered, and why the others
    /// stayed dead. `refusal-guard report --by tenant` prints it.
    pub by_tenant: BTreeMap<String, TenantSummary>,
}

/// One tenant's part of a [`Report`].
///
/// ```
/// use refusal_guard_proxy::Report;
///
/// let log = concat!(
///     r#"{"ts":"2026-11-29T17:00:00.000Z","model":"m","category":"cyber","explanation":null,"outcome":"fallback","tenant":"red-team"}"#, "\n",
///     r#"{"ts":"2026-11-29T17:01:00.000Z","model":"m","category":"cyber","explanation":null,"outcome":"dead","reason":"capped","tenant":"blue-team"}"#, "\n",
/// );
/// let (report, _) = Report::from_jsonl_reader(log.as_bytes());
/// assert_eq!(report.by_tenant["red-team"].recovered, 1);
/// assert_eq!(report.by_tenant["blue-team"].by_reason["capped"], 1);
/// assert!(report.tenants_table().to_string().contains("blue-team"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TenantSummary {
    /// Its refusals.
    pub total: usize,
    /// How many ended `fallback` or `rescued`.
    pub recovered: usize,
    /// Count per outcome word.
    pub by_outcome: BTreeMap<String, usize>,
    /// For dead refusals: count per dead reason.
    pub by_reason: BTreeMap<String, usize>,
}

/// The table `refusal-guard report --by tenant` prints: a [`Report`] by tenant.
#[derive(Debug, Clone, Copy)]
pub struct TenantsTable<'a>(&'a Report);

impl fmt::Display for TenantsTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenants = &self.0.by_tenant;
        if tenants.is_empty() {
            return writeln!(f, "No refusals recorded.");
        }
        let mut rows: Vec<(&String, &TenantSummary)> = tenants.iter().collect();
        rows.sort_by_key(|(_, t)| Reverse(t.total));
        writeln!(f, "By tenant:")?;
        for (name, tenant) in rows {
            let percent = tenant.recovered * 100 / tenant.total.max(1);
            write!(
                f,
                "  {:>6}  {name}: {} recovered ({percent}%)",
                tenant.total, tenant.recovered
            )?;
            let mut dead: Vec<(&String, &usize)> = tenant.by_reason.iter().collect();
            dead.sort_by_key(|(_, count)| Reverse(**count));
            let dead: Vec<String> = dead.iter().map(|(r, c)| format!("{r} {c}")).collect();
            if !dead.is_empty() {
                write!(f, "; dead: {}", dead.join(", "))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl Report {
    /// Summarises `records`, given in log order.
    pub fn from_records<I>(records: I) -> Report
    where
        I: IntoIterator<Item = RefusalRecord>,
    {
        let mut builder = Builder::default();
        for record in records {
            builder.add(record);
        }
        builder.finish()
    }

    /// Summarises a JSONL log, returning the report and how many lines were
    /// skipped because they did not hold a record (torn by a crash mid-write,
    /// invalid UTF-8 or JSON, or missing `ts` / `outcome`). Blank lines are
    /// ignored and not counted.
    ///
    /// Reading stops at the first I/O error, which is logged with
    /// `tracing::warn!` and counted as one skipped line.
    pub fn from_jsonl_reader(mut reader: impl BufRead) -> (Report, usize) {
        let mut builder = Builder::default();
        let mut skipped = 0;
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(
                        target: "refusal_guard::telemetry",
                        %error,
                        "stopped reading refusal log"
                    );
                    skipped += 1;
                    break;
                }
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<RefusalRecord>(&line) {
                Ok(record) => builder.add(record),
                Err(_) if RouteRestored::from_json_line(&line).is_some() => {
                    builder.report.restored += 1;
                }
                Err(_) => skipped += 1,
            }
        }
        (builder.finish(), skipped)
    }

    /// Reads and summarises the JSONL log at `path`, as
    /// [`Report::from_jsonl_reader`] does. Fails only if the file cannot be
    /// opened (a missing log is [`io::ErrorKind::NotFound`]).
    pub fn read_path(path: impl AsRef<Path>) -> io::Result<(Report, usize)> {
        let file = File::open(path)?;
        Ok(Report::from_jsonl_reader(BufReader::new(file)))
    }

    fn add_refused_tokens(&mut self, record: &RefusalRecord) {
        let category = record.category.as_deref().unwrap_or(NONE);
        for attempt in &record.attempts {
            if let Some(credit) = &attempt.fallback_credit {
                let key = match credit.reason() {
                    Some(reason) => format!("{}:{reason}", credit.as_str()),
                    None => credit.as_str().to_owned(),
                };
                *self.fallback_credit.entry(key).or_default() += 1;
            }
            if let Some(to) = attempt.provider {
                let from = record.provider.map_or(NONE, |p| p.as_str());
                let key = format!("{from} -> {to} [{category}] {}", attempt.result.as_str());
                *self.cross_provider.entry(key).or_default() += 1;
            }
            let Some(usage) = attempt.usage else {
                continue;
            };
            let model = attempt.model.as_deref().or(record.model.as_deref());
            self.refused_tokens += usage;
            *self
                .refused_tokens_by_model
                .entry(model.unwrap_or(NONE).to_owned())
                .or_default() += usage;
            *self
                .refused_tokens_by_category
                .entry(category.to_owned())
                .or_default() += usage;
        }
    }

    /// Whether no refusals were read.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The report by tenant, as a table to print.
    pub fn tenants_table(&self) -> TenantsTable<'_> {
        TenantsTable(self)
    }
}

#[derive(Default)]
struct Builder {
    report: Report,
    /// `(position in the log, record)`, newest first.
    recent: Vec<(usize, RefusalRecord)>,
}

impl Builder {
    fn add(&mut self, record: RefusalRecord) {
        let report = &mut self.report;
        let position = report.total;
        report.total += 1;
        if matches!(record.outcome, Outcome::Fallback | Outcome::Rescued) {
            report.recovered += 1;
        }
        bump(&mut report.by_outcome, record.outcome.as_str());
        bump(
            &mut report.by_category,
            record.category.as_deref().unwrap_or(NONE),
        );
        bump(
            &mut report.by_model,
            record.model.as_deref().unwrap_or(NONE),
        );
        let reason = record.reason.map(|r| r.as_str()).unwrap_or(NONE);
        if record.outcome == Outcome::Dead {
            bump(&mut report.by_reason, reason);
        }
        let tenant = report
            .by_tenant
            .entry(record.tenant.clone().unwrap_or_else(|| NONE.to_owned()))
            .or_default();
        tenant.total += 1;
        if matches!(record.outcome, Outcome::Fallback | Outcome::Rescued) {
            tenant.recovered += 1;
        }
        bump(&mut tenant.by_outcome, record.outcome.as_str());
        if record.outcome == Outcome::Dead {
            bump(&mut tenant.by_reason, reason);
        }
        report.add_refused_tokens(&record);

        // Newest first: a kept record stays ahead of the new one when it has a
        // later `ts`, or the same `ts` and a later position in the log.
        let at = self.recent.partition_point(|(pos, kept)| {
            (kept.ts.as_str(), *pos) > (record.ts.as_str(), position)
        });
        if at < RECENT {
            self.recent.insert(at, (position, record));
            self.recent.truncate(RECENT);
        }
    }

    fn finish(mut self) -> Report {
        self.report.recent = self.recent.into_iter().map(|(_, r)| r).collect();
        self.report
    }
}

fn bump(map: &mut BTreeMap<String, usize>, key: &str) {
    *map.entry(key.to_owned()).or_default() += 1;
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.total == 0 {
            return writeln!(f, "No refusals recorded.");
        }
        let percent = self.recovered * 100 / self.total;
        writeln!(
            f,
            "{} refusal{} recorded; {} recovered by a fallback or a rescue ({percent}%).",
            self.total,
            if self.total == 1 { "" } else { "s" },
            self.recovered,
        )?;
        table(f, "By outcome", &self.by_outcome)?;
        table(f, "By category", &self.by_category)?;
        table(f, "By model", &self.by_model)?;
        if !self.by_reason.is_empty() {
            table(f, "Why dead", &self.by_reason)?;
        }
        if !self.refused_tokens.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "Tokens spent on refused attempts: {}",
                tokens(&self.refused_tokens)
            )?;
            token_table(f, "By model", &self.refused_tokens_by_model)?;
            token_table(f, "By category", &self.refused_tokens_by_category)?;
        }
        if !self.fallback_credit.is_empty() {
            table(f, "Fallback credit", &self.fallback_credit)?;
        }
        if !self.cross_provider.is_empty() {
            table(f, "Fallbacks to another provider", &self.cross_provider)?;
        }
        if self.restored > 0 {
            writeln!(f)?;
            writeln!(
                f,
                "Sticky routes ended (primary model restored): {}",
                self.restored
            )?;
        }
        writeln!(f)?;
        writeln!(f, "Most recent:")?;
        for record in &self.recent {
            write!(
                f,
                "  {}  {}  [{}]  {}",
                record.ts,
                record.model.as_deref().unwrap_or(NONE),
                record.category.as_deref().unwrap_or(NONE),
                record.outcome,
            )?;
            if let Some(reason) = record.reason {
                write!(f, " ({reason})")?;
            }
            if let Some(explanation) = &record.explanation {
                write!(f, ": {explanation}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// `1234 (input 1000, output 34, cache read 200)`: the total, then each
/// known count.
fn tokens(usage: &Usage) -> String {
    let parts: Vec<String> = usage
        .kinds()
        .iter()
        .filter_map(|(kind, count)| Some(format!("{} {}", kind.replace('_', " "), (*count)?)))
        .collect();
    format!("{} ({})", usage.total_tokens(), parts.join(", "))
}

fn token_table(
    f: &mut fmt::Formatter<'_>,
    title: &str,
    spent: &BTreeMap<String, Usage>,
) -> fmt::Result {
    let mut rows: Vec<(&String, &Usage)> = spent.iter().collect();
    rows.sort_by_key(|(_, usage)| Reverse(usage.total_tokens()));
    writeln!(f, "  {title}:")?;
    for (name, usage) in rows {
        writeln!(f, "    {name}: {}", tokens(usage))?;
    }
    Ok(())
}

fn table(f: &mut fmt::Formatter<'_>, title: &str, counts: &BTreeMap<String, usize>) -> fmt::Result {
    let mut rows: Vec<(&String, &usize)> = counts.iter().collect();
    // Largest first; the map already orders equal counts by name.
    rows.sort_by_key(|(_, count)| Reverse(**count));
    writeln!(f)?;
    writeln!(f, "{title}:")?;
    for (name, count) in rows {
        writeln!(f, "  {count:>6}  {name}")?;
    }
    Ok(())
}

#[cfg(test)]
mod restored_tests {
    use super::*;
    use refusal_guard::telemetry::{RefusalRecord, RouteRestored};

    #[test]
    fn the_report_counts_restorations_apart_and_old_lines_still_parse() {
        let restored =
            RouteRestored::new(None, Some("claude-opus-4-7".into()), "claude-sonnet-4-5");
        let line = String::from_utf8(restored.to_json_line()).unwrap();
        // A line as pi-refusal-guard writes it, ours, and a torn one.
        let pi = r#"{"ts":"2026-11-29T17:44:06.123Z","model":"claude-x","category":"cyber","explanation":null,"outcome":"dead"}"#;
        let log = format!("{pi}\n{line}{{\"ts\":\"2026-\n");
        let (report, skipped) = Report::from_jsonl_reader(log.as_bytes());
        assert_eq!((report.total, report.restored, skipped), (1, 1, 1));
        assert!(report.to_string().contains("primary model restored): 1"));
        // Readers of refusal records alone skip it: it has no outcome.
        assert!(serde_json::from_str::<RefusalRecord>(&line).is_err());
        assert!(RouteRestored::from_json_line(pi.as_bytes()).is_none());
    }
}
