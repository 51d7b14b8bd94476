//! Progress on stderr: a bar on a terminal, else a plain line per call
//! (what a log or a test reads).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::results::Row;

/// How the run shows its progress.
pub(crate) enum Progress {
    Bar(ProgressBar),
    Lines { total: u64, ended: AtomicU64 },
}

impl Progress {
    /// A bar when stderr is a terminal, else lines; `total` calls to make.
    pub(crate) fn new(total: u64) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress::Lines {
                total,
                ended: AtomicU64::new(0),
            };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} calls, eta {eta} {wide_msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress::Bar(bar)
    }

    /// One call ended as `row` says.
    pub(crate) fn ended(&self, row: &Row) {
        match self {
            Progress::Bar(bar) => {
                bar.set_message(format!("{} {}: {}", row.variant, row.prompt, what(row)));
                bar.inc(1);
            }
            Progress::Lines { total, ended } => {
                let n = ended.fetch_add(1, Ordering::Relaxed) + 1;
                let line = format!(
                    "eval: [{n}/{total}] {} {} {}={}: {}\n",
                    row.variant,
                    row.prompt,
                    row.api,
                    row.model,
                    what(row)
                );
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
            }
        }
    }

    /// Done: the bar is cleared, lines need nothing.
    pub(crate) fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// What became of a call, in a few words.
fn what(row: &Row) -> String {
    if let Some(error) = &row.error {
        return format!("error: {error}");
    }
    let Some(refusal) = &row.refusal else {
        return "answered".to_owned();
    };
    let shape = refusal.shape.as_str();
    match (refusal.step, refusal.reason) {
        (Some(step), _) => format!(
            "refused ({shape}), recovered by {}{}",
            step.as_str(),
            refusal
                .served_model
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        ),
        (None, Some(reason)) => format!("refused ({shape}), dead: {reason}"),
        (None, None) => format!("refused ({shape}), {}", refusal.outcome),
    }
}
