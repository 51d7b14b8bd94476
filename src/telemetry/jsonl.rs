//! The append-only JSONL log.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{RefusalRecord, RouteRestored, TelemetrySink};

/// Appends each record to a file as one JSON line.
///
/// Safe to share between threads and between processes writing the same file:
/// the file is opened in append mode and each record is written with a single
/// `write` of the whole line (serialised first, ending in `\n`), so lines never
/// interleave; within a process a mutex serialises writers as well.
///
/// The file is reopened for every record. Refusals are rare, so the cost is
/// small, and it means that a log deleted while the sink is alive (for example
/// by `refusals clear`) or moved away by log rotation is simply recreated,
/// instead of records silently going to the old, unlinked file.
///
/// Failures (a full disk, a file replaced by a directory, no permission) are
/// reported and the record is dropped; [`TelemetrySink::record`] never panics
/// and never fails the request. Reports are rate-limited: the first failure at
/// once, then at most one every 10 s, saying how many records were lost. They
/// go to `tracing::warn!` when a subscriber is installed (the proxy installs
/// one on stderr), else straight to stderr.
///
/// On Unix a new log file is created `0600` and new directories `0700`:
/// prompts' categories and models are nobody else's business.
///
/// ```
/// use refusal_guard::telemetry::JsonlSink;
///
/// let dir = std::env::temp_dir().join(format!("rg-doc-jsonl-{}", std::process::id()));
/// let sink = JsonlSink::open(dir.join("logs/refusals.jsonl"))?;
/// assert!(sink.path().exists());
/// assert_eq!(std::fs::metadata(sink.path())?.len(), 0);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct JsonlSink {
    path: PathBuf,
    lock: Mutex<()>,
    failures: Mutex<Failures>,
}

/// The time between two reports of failed writes.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Failed writes since the last report.
#[derive(Debug, Default)]
struct Failures {
    last_report: Option<Instant>,
    unreported: u64,
}

impl JsonlSink {
    /// Opens (creating it and its parent directories if needed) the log at
    /// `path` for appending.
    ///
    /// Fails if the directories cannot be created or the file cannot be
    /// opened for appending (for example, `path` is a directory).
    pub fn open(path: impl Into<PathBuf>) -> io::Result<Self> {
        let path = path.into();
        open_append(&path)?;
        Ok(JsonlSink {
            path,
            lock: Mutex::new(()),
            failures: Mutex::new(Failures::default()),
        })
    }

    /// `~/.refusal-guard/refusals.jsonl`, the log pi-refusal-guard also
    /// writes; `None` when `$HOME` is unset or empty.
    ///
    /// ```
    /// if let Some(path) = refusal_guard::telemetry::JsonlSink::default_path() {
    ///     assert!(path.ends_with(".refusal-guard/refusals.jsonl"));
    /// }
    /// ```
    pub fn default_path() -> Option<PathBuf> {
        let home = std::env::var_os("HOME").filter(|home| !home.is_empty())?;
        Some(
            PathBuf::from(home)
                .join(".refusal-guard")
                .join("refusals.jsonl"),
        )
    }

    /// The path of the log.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(&self, line: &[u8]) -> io::Result<()> {
        // A writer that panicked held no state worth distrusting: keep going.
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut file = open_append(&self.path)?;
        file.write_all(line)
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let mut dirs = fs::DirBuilder::new();
        dirs.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut dirs, 0o700);
        dirs.create(parent)?;
    }
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

impl TelemetrySink for JsonlSink {
    fn record(&self, record: &RefusalRecord) {
        let line = record.to_json_line();
        if let Err(error) = self.append(&line) {
            self.report(&error);
        }
    }

    /// Appends the event as a line without `outcome`, which readers of
    /// refusal records skip (the proxy's `Report` counts it apart).
    fn route_restored(&self, event: &RouteRestored) {
        if let Err(error) = self.append(&event.to_json_line()) {
            self.report(&error);
        }
    }
}

impl JsonlSink {
    /// Reports a failed write, at most once every [`REPORT_EVERY`].
    fn report(&self, error: &io::Error) {
        let lost = {
            let mut failures = self
                .failures
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            failures.unreported += 1;
            let due = failures
                .last_report
                .map_or(true, |last| last.elapsed() >= REPORT_EVERY);
            if !due {
                return;
            }
            failures.last_report = Some(Instant::now());
            std::mem::take(&mut failures.unreported)
        };
        if tracing::dispatcher::has_been_set() {
            tracing::warn!(
                target: "refusal_guard::telemetry",
                path = %self.path.display(),
                %error,
                lost,
                "could not append refusal records to the log"
            );
        } else {
            let _ = writeln!(
                io::stderr().lock(),
                "refusal-guard: could not append {lost} refusal record(s) to {}: {error}",
                self.path.display()
            );
        }
    }
}
