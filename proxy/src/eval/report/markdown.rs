//! The report as a Markdown summary (what the command prints).

use std::fmt::Write;

use super::{Cell, Difference, Part, Report, Trials};

/// A share as a percentage with one decimal, or `–`.
fn percent(share: Option<f64>) -> String {
    share.map_or_else(|| "–".to_owned(), |s| format!("{:.1}%", 100.0 * s))
}

fn counted(part: &Part) -> String {
    format!("{} ({})", percent(part.share), part.count)
}

fn ms(value: Option<u64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v} ms"))
}

/// `name count, name count` for the parts with any, or `–`.
fn parts(map: &std::collections::BTreeMap<String, Part>) -> String {
    let listed: Vec<String> = map
        .iter()
        .filter(|(_, p)| p.count > 0)
        .map(|(name, p)| format!("{name} {}", p.count))
        .collect();
    if listed.is_empty() {
        "–".to_owned()
    } else {
        listed.join(", ")
    }
}

pub(super) fn render(report: &Report) -> String {
    let mut out = String::new();
    let run = &report.run;
    let _ = writeln!(out, "# refusal-guard eval\n");
    let _ = writeln!(
        out,
        "- Prompts: {} ({} prompts)",
        run.prompts, run.prompt_count
    );
    if !run.sends.is_empty() {
        let _ = writeln!(out, "- Sent as: {}", run.sends.join(", "));
    }
    let _ = writeln!(out, "- Target: {}", run.target);
    let _ = writeln!(
        out,
        "- Calls: {} of {} measured, {} failed; this run sent {} requests, {} tokens reported",
        run.calls_measured, run.calls_planned, run.errors, run.requests, run.tokens
    );
    if let Some(stopped) = &run.stopped {
        let _ = writeln!(out, "- **Stopped before the end**: {stopped}");
    }
    if run.contract_violations > 0 {
        let _ = writeln!(
            out,
            "- **{} requests broke the providers' rules** (the simulated providers answered them with a 400)",
            run.contract_violations
        );
    }
    variants(&mut out, report);
    cells(&mut out, report);
    if let Some(comparison) = &report.comparison {
        let _ = writeln!(
            out,
            "\n## {} against {} (95% confidence, Newcombe's interval)\n",
            comparison.b, comparison.a
        );
        let _ = writeln!(
            out,
            "| category | share | {} | {} | difference | 95% interval | reading |\n|---|---|---:|---:|---:|---|---|",
            comparison.a, comparison.b
        );
        for row in &comparison.rows {
            difference(&mut out, row);
        }
        let _ = writeln!(
            out,
            "\n`recovered` is of the refusals, `answered` of the calls. An interval that holds 0 \
             means this many prompts cannot tell the two variants apart: the difference may be noise."
        );
    }
    out
}

fn variants(out: &mut String, report: &Report) {
    let _ = writeln!(out, "\n## Variants\n");
    let _ = writeln!(
        out,
        "| variant | flags | calls | answered | refused | recovered | by step | dead | added latency p50 / p95 | added tokens per refusal |\n|---|---|---:|---:|---:|---:|---|---:|---:|---:|"
    );
    for (cell, info) in report.variants.iter().zip(&report.run.variants) {
        let flags = if info.flags.is_empty() {
            "(the proxy's defaults)".to_owned()
        } else {
            format!("`{}`", info.flags.join(" "))
        };
        let _ = writeln!(
            out,
            "| {} | {flags} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            cell.variant,
            cell.calls,
            counted(&cell.answered),
            counted(&cell.refused),
            counted(&cell.recovered),
            parts(&cell.recovered_by_step),
            counted(&cell.dead),
            ms(cell.added_latency_ms.p50),
            ms(cell.added_latency_ms.p95),
            cell.added_tokens
                .per_refusal
                .map_or("–".to_owned(), |t| format!("{t:.1}")),
        );
    }
}

fn cells(out: &mut String, report: &Report) {
    let _ = writeln!(out, "\n## By category and provider\n");
    let _ = writeln!(
        out,
        "| variant | category | provider | calls | refused | shapes | recovered | by step | dead | dead by reason | served by | added latency p50 / p95 | added tokens |\n|---|---|---|---:|---:|---|---:|---|---:|---|---|---:|---:|"
    );
    for cell in &report.cells {
        row(out, cell);
    }
}

fn row(out: &mut String, cell: &Cell) {
    let served: Vec<String> = cell
        .served_by
        .iter()
        .map(|(m, n)| format!("{m} {n}"))
        .collect();
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
        cell.variant,
        cell.category,
        cell.provider,
        cell.calls,
        counted(&cell.refused),
        parts(&cell.refused_by_shape),
        counted(&cell.recovered),
        parts(&cell.recovered_by_step),
        counted(&cell.dead),
        parts(&cell.dead_by_reason),
        if served.is_empty() {
            "–".to_owned()
        } else {
            served.join(", ")
        },
        ms(cell.added_latency_ms.p50),
        ms(cell.added_latency_ms.p95),
        cell.added_tokens.total,
    );
}

fn trials(t: &Trials) -> String {
    format!("{}/{} ({})", t.successes, t.trials, percent(t.share))
}

fn points(value: f64) -> String {
    format!("{:+.1} pp", 100.0 * value)
}

fn difference(out: &mut String, row: &Difference) {
    let interval = row.interval.map_or("–".to_owned(), |i| {
        format!("{} to {}", points(i.low), points(i.high))
    });
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {} | {} | {} |",
        row.category,
        row.metric,
        trials(&row.a),
        trials(&row.b),
        row.difference.map_or("–".to_owned(), points),
        interval,
        row.verdict,
    );
}
