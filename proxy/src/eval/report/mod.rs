//! The report: per variant × category × provider, what was refused, what
//! recovered it and at what cost; for two variants, their difference with a
//! confidence interval. Written as JSON, as a Markdown summary and as one
//! self-contained HTML page.

mod html;
mod interval;
mod markdown;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::results::{Row, Shape, Step};

pub use interval::{newcombe, wilson, Interval};

/// A category, or a provider, taken together.
pub(crate) const ALL: &str = "all";

/// The report of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Report {
    pub(crate) generated: String,
    pub(crate) run: RunInfo,
    /// Per variant, every category and provider together.
    pub(crate) variants: Vec<Cell>,
    /// Per variant × category × provider.
    pub(crate) cells: Vec<Cell>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) comparison: Option<Comparison>,
}

/// What was run, and how far it got.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RunInfo {
    pub(crate) prompts: String,
    pub(crate) prompt_count: usize,
    /// `API=MODEL` for each `--send`.
    pub(crate) sends: Vec<String>,
    pub(crate) target: String,
    pub(crate) variants: Vec<VariantInfo>,
    pub(crate) calls_planned: usize,
    pub(crate) calls_measured: usize,
    /// Calls whose last try failed (measured next run).
    pub(crate) errors: usize,
    /// Every planned call measured.
    pub(crate) complete: bool,
    /// Why the run stopped before its end, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stopped: Option<String>,
    /// Requests the simulated providers answered with a contract error.
    pub(crate) contract_violations: usize,
    /// What this run spent: requests sent upstream, tokens reported.
    pub(crate) requests: u64,
    pub(crate) tokens: u64,
}

/// A variant as the report names it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct VariantInfo {
    pub(crate) name: String,
    pub(crate) flags: Vec<String>,
}

/// A count and its share of what it is counted in (`None` of nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Part {
    pub(crate) count: usize,
    pub(crate) share: Option<f64>,
}

/// Milliseconds the recovery attempts added, over the refusals that had any.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Latency {
    pub(crate) p50: Option<u64>,
    pub(crate) p95: Option<u64>,
    /// How many refusals it is over.
    pub(crate) of: usize,
}

/// The tokens refused attempts cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Tokens {
    pub(crate) total: u64,
    pub(crate) per_refusal: Option<f64>,
}

/// One variant × category × provider (or `all` of either).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Cell {
    pub(crate) variant: String,
    pub(crate) category: String,
    pub(crate) provider: String,
    /// Calls measured.
    pub(crate) calls: usize,
    /// Of `calls`: the client got an answer (not refused, or recovered).
    pub(crate) answered: Part,
    /// Of `calls`.
    pub(crate) refused: Part,
    /// Of `calls`: `empty`, `partial`, `error`.
    pub(crate) refused_by_shape: BTreeMap<String, Part>,
    /// Of `refused`.
    pub(crate) recovered: Part,
    /// Of `refused`: `server_side`, `chain`, `rescue`, `continuation`.
    pub(crate) recovered_by_step: BTreeMap<String, Part>,
    /// Of `refused`: partial refusals left as they came (output, then the
    /// refusal), neither recovered nor dead.
    pub(crate) left_partial: Part,
    /// Of `refused`.
    pub(crate) dead: Part,
    /// Of `refused`, by dead reason.
    pub(crate) dead_by_reason: BTreeMap<String, Part>,
    /// The models that served the recovered refusals.
    pub(crate) served_by: BTreeMap<String, usize>,
    pub(crate) added_latency_ms: Latency,
    pub(crate) added_tokens: Tokens,
    /// Every token reported, answers included.
    pub(crate) tokens: u64,
}

/// Two variants side by side: `b`'s share minus `a`'s, per category.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Comparison {
    pub(crate) a: String,
    pub(crate) b: String,
    pub(crate) confidence: f64,
    pub(crate) method: String,
    pub(crate) rows: Vec<Difference>,
}

/// One share of two variants, and their difference.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Difference {
    pub(crate) category: String,
    /// `recovered` (of the refusals) or `answered` (of the calls).
    pub(crate) metric: String,
    pub(crate) a: Trials,
    pub(crate) b: Trials,
    /// `b` − `a`.
    pub(crate) difference: Option<f64>,
    pub(crate) interval: Option<Interval>,
    /// `b higher`, `a higher`, or `no clear difference` (the interval holds 0).
    pub(crate) verdict: String,
}

/// Successes in trials.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Trials {
    pub(crate) successes: usize,
    pub(crate) trials: usize,
    pub(crate) share: Option<f64>,
}

fn part(count: usize, of: usize) -> Part {
    Part {
        count,
        share: (of > 0).then(|| count as f64 / of as f64),
    }
}

/// The nearest-rank percentile `q` of sorted `values`.
fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.max(1) - 1).copied()
}

impl Cell {
    /// The cell of `rows` (measured ones).
    pub(crate) fn of(variant: &str, category: &str, provider: &str, rows: &[&Row]) -> Cell {
        let calls = rows.len();
        let refusals: Vec<_> = rows.iter().filter_map(|r| r.refusal.as_ref()).collect();
        let refused = refusals.len();
        let mut cell = Cell {
            variant: variant.to_owned(),
            category: category.to_owned(),
            provider: provider.to_owned(),
            calls,
            answered: part(rows.iter().filter(|r| r.answered).count(), calls),
            refused: part(refused, calls),
            ..Cell::default()
        };
        for shape in Shape::ALL {
            let count = refusals.iter().filter(|r| r.shape == shape).count();
            cell.refused_by_shape
                .insert(shape.as_str().to_owned(), part(count, calls));
        }
        for step in Step::ALL {
            let count = refusals.iter().filter(|r| r.step == Some(step)).count();
            cell.recovered_by_step
                .insert(step.as_str().to_owned(), part(count, refused));
        }
        let recovered = refusals.iter().filter(|r| r.step.is_some()).count();
        cell.recovered = part(recovered, refused);
        let dead: Vec<_> = refusals
            .iter()
            .filter(|r| r.outcome == refusal_guard::Outcome::Dead)
            .collect();
        cell.dead = part(dead.len(), refused);
        cell.left_partial = part(refused - recovered - dead.len(), refused);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for refusal in &dead {
            let reason = refusal.reason.map_or("(none)", |r| r.as_str());
            *reasons.entry(reason.to_owned()).or_default() += 1;
        }
        cell.dead_by_reason = reasons
            .into_iter()
            .map(|(r, n)| (r, part(n, refused)))
            .collect();
        for refusal in refusals.iter().filter(|r| r.step.is_some()) {
            let model = refusal
                .served_model
                .clone()
                .unwrap_or_else(|| "(unknown)".to_owned());
            *cell.served_by.entry(model).or_default() += 1;
        }
        let mut added: Vec<u64> = rows
            .iter()
            .filter(|r| r.refusal.as_ref().is_some_and(|f| f.attempts > 1))
            .map(|r| r.added_latency_ms)
            .collect();
        added.sort_unstable();
        cell.added_latency_ms = Latency {
            p50: percentile(&added, 0.50),
            p95: percentile(&added, 0.95),
            of: added.len(),
        };
        let added_tokens: u64 = rows.iter().map(|r| r.added_tokens).sum();
        cell.added_tokens = Tokens {
            total: added_tokens,
            per_refusal: (refused > 0).then(|| added_tokens as f64 / refused as f64),
        };
        cell.tokens = rows.iter().map(|r| r.tokens).sum();
        cell
    }
}

impl Report {
    /// The report of `rows` (the run's measured calls, one per call), for
    /// `variants` in their order; the comparison is of `compare` (two
    /// variant names) when given.
    pub(crate) fn build(run: RunInfo, rows: &[Row], compare: Option<(&str, &str)>) -> Report {
        let names: Vec<String> = run.variants.iter().map(|v| v.name.clone()).collect();
        let mut variants = Vec::new();
        let mut cells = Vec::new();
        for name in &names {
            let of: Vec<&Row> = rows.iter().filter(|r| &r.variant == name).collect();
            variants.push(Cell::of(name, ALL, ALL, &of));
            let mut keys: Vec<(&str, &str)> = of
                .iter()
                .map(|r| (r.label.as_str(), r.provider.as_str()))
                .collect();
            keys.sort_unstable();
            keys.dedup();
            for (category, provider) in keys {
                let rows: Vec<&Row> = of
                    .iter()
                    .copied()
                    .filter(|r| r.label == category && r.provider == provider)
                    .collect();
                cells.push(Cell::of(name, category, provider, &rows));
            }
        }
        let comparison = compare.map(|(a, b)| Comparison::of(a, b, rows));
        Report {
            generated: refusal_guard::telemetry::format_ts(std::time::SystemTime::now()),
            run,
            variants,
            cells,
            comparison,
        }
    }

    /// The report as pretty JSON.
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    pub(crate) fn to_markdown(&self) -> String {
        markdown::render(self)
    }

    pub(crate) fn to_html(&self) -> String {
        html::render(self)
    }
}

impl Comparison {
    fn of(a: &str, b: &str, rows: &[Row]) -> Comparison {
        let mut categories: Vec<&str> = rows.iter().map(|r| r.label.as_str()).collect();
        categories.sort_unstable();
        categories.dedup();
        let mut differences = Vec::new();
        for category in std::iter::once(ALL).chain(categories) {
            let of = |variant: &str| -> Vec<&Row> {
                rows.iter()
                    .filter(|r| r.variant == variant && (category == ALL || r.label == category))
                    .collect()
            };
            let (rows_a, rows_b) = (of(a), of(b));
            for metric in ["recovered", "answered"] {
                let (ta, tb) = (trials(metric, &rows_a), trials(metric, &rows_b));
                differences.push(Difference::of(category, metric, ta, tb));
            }
        }
        Comparison {
            a: a.to_owned(),
            b: b.to_owned(),
            confidence: 0.95,
            method: "newcombe-wilson".to_owned(),
            rows: differences,
        }
    }
}

/// `recovered`: recovered refusals of the refusals; `answered`: answered
/// calls of the calls.
fn trials(metric: &str, rows: &[&Row]) -> Trials {
    let (successes, trials) = if metric == "recovered" {
        let refusals: Vec<_> = rows.iter().filter_map(|r| r.refusal.as_ref()).collect();
        (
            refusals.iter().filter(|r| r.step.is_some()).count(),
            refusals.len(),
        )
    } else {
        (rows.iter().filter(|r| r.answered).count(), rows.len())
    };
    Trials {
        successes,
        trials,
        share: part(successes, trials).share,
    }
}

impl Difference {
    fn of(category: &str, metric: &str, a: Trials, b: Trials) -> Difference {
        let interval = newcombe(
            (a.successes as u64, a.trials as u64),
            (b.successes as u64, b.trials as u64),
        );
        let difference = a.share.zip(b.share).map(|(a, b)| b - a);
        let verdict = match interval {
            Some(i) if i.low > 0.0 => "b higher",
            Some(i) if i.high < 0.0 => "a higher",
            Some(_) => "no clear difference",
            None => "nothing to compare",
        };
        Difference {
            category: category.to_owned(),
            metric: metric.to_owned(),
            a,
            b,
            difference,
            interval,
            verdict: verdict.to_owned(),
        }
    }
}
