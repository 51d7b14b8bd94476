//! The results file: one JSON line per measured call, appended as each
//! ends, so that a run stopped any way leaves whole lines and a rerun
//! skips what is done.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use refusal_guard::refusal::{DeadReason, Outcome};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The largest results file read back (a line is a few hundred bytes:
/// millions of calls).
const MAX_FILE_BYTES: u64 = 1 << 30;

/// 16 hex digits of the SHA-256 of `bytes`: enough to tell an edited
/// prompt or variant from the one a result was measured with.
pub(crate) fn fingerprint(bytes: &[u8]) -> String {
    Sha256::digest(bytes)[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Which call a row is of: variant, prompt, API and model.
pub(crate) type Key = (String, String, String, String);

/// One call: a prompt sent as one API and model through one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Row {
    pub(crate) variant: String,
    /// The variant's flags' fingerprint.
    pub(crate) variant_hash: String,
    pub(crate) prompt: String,
    /// The prompt line's fingerprint.
    pub(crate) prompt_hash: String,
    /// The API it was sent as (`anthropic`, `openai`, ...).
    pub(crate) api: String,
    /// The model it asked for.
    pub(crate) model: String,
    pub(crate) provider: String,
    pub(crate) label: String,
    /// The status the client got last (0: none).
    pub(crate) status: u16,
    /// Whether the client got an answer: no refusal, or a recovered one.
    pub(crate) answered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) refusal: Option<RowRefusal>,
    /// The whole call, as the client waited for it (the try that counted).
    pub(crate) latency_ms: u64,
    /// What the recovery attempts took, until each was decided.
    pub(crate) added_latency_ms: u64,
    /// What the refused attempts cost, as the providers reported it.
    pub(crate) added_tokens: u64,
    /// Every token reported: the refused attempts' and the served answer's.
    pub(crate) tokens: u64,
    /// Requests the guard sent upstream, over every try.
    pub(crate) requests: u32,
    /// Tries after the first (429s, 5xx, timeouts).
    pub(crate) retries: u32,
    /// Why nothing was measured (then the call is tried again next run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// What the guard made of a refusal, from its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RowRefusal {
    pub(crate) shape: Shape,
    #[serde(default)]
    pub(crate) category: Option<String>,
    pub(crate) outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) step: Option<Step>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<DeadReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) served_model: Option<String>,
    /// Requests the guard sent for it, the original included.
    pub(crate) attempts: usize,
}

/// How the provider refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Shape {
    /// A refusal stop before any output.
    Empty,
    /// Output, then a refusal.
    Partial,
    /// An error response naming a policy (HTTP 400, a stream's error event).
    Error,
}

/// The step that recovered a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Step {
    /// The provider's own fallback (Anthropic `fallbacks`, as the client
    /// sent them or a retarget wrote them).
    ServerSide,
    /// A model of the client-side fallback chain.
    Chain,
    /// The reframed continuation.
    Rescue,
    /// A partial refusal continued on the chain's next model.
    Continuation,
}

impl Shape {
    pub(crate) const ALL: [Shape; 3] = [Shape::Empty, Shape::Partial, Shape::Error];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Shape::Empty => "empty",
            Shape::Partial => "partial",
            Shape::Error => "error",
        }
    }
}

impl Step {
    pub(crate) const ALL: [Step; 4] = [
        Step::ServerSide,
        Step::Chain,
        Step::Rescue,
        Step::Continuation,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Step::ServerSide => "server_side",
            Step::Chain => "chain",
            Step::Rescue => "rescue",
            Step::Continuation => "continuation",
        }
    }
}

impl Row {
    /// Which call it is: variant, prompt, API and model.
    pub(crate) fn key(&self) -> Key {
        let Row {
            variant,
            prompt,
            api,
            model,
            ..
        } = self;
        (variant.clone(), prompt.clone(), api.clone(), model.clone())
    }

    /// Whether it measured the call (an error is tried again).
    pub(crate) fn is_done(&self) -> bool {
        self.error.is_none()
    }
}

/// The results file, open for appending.
#[derive(Debug)]
pub(crate) struct ResultsFile {
    path: PathBuf,
    file: Mutex<File>,
}

/// What was in the file when it was opened.
#[derive(Debug, Default)]
pub(crate) struct Earlier {
    pub(crate) rows: Vec<Row>,
    /// Lines that could not be read (another tool's, a newer version's).
    pub(crate) unreadable: usize,
    /// Bytes of a last line cut short (a run killed mid-write), removed.
    pub(crate) cut_bytes: u64,
}

impl ResultsFile {
    /// Opens (or creates) the file at `path` and reads what it holds. A
    /// last line without its newline is what a kill mid-write leaves: it
    /// is cut off, so that every line is whole again.
    pub(crate) fn open(path: &Path) -> Result<(ResultsFile, Earlier), String> {
        let shown = path.display();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| format!("cannot open {shown}: {e}"))?;
        let length = file.metadata().map_err(|e| format!("{shown}: {e}"))?.len();
        if length > MAX_FILE_BYTES {
            return Err(format!("{shown} is larger than {MAX_FILE_BYTES} bytes"));
        }
        let mut bytes = Vec::with_capacity(length as usize);
        file.read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read {shown}: {e}"))?;
        let whole = bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |end| end + 1);
        let mut earlier = Earlier {
            cut_bytes: (bytes.len() - whole) as u64,
            ..Earlier::default()
        };
        if earlier.cut_bytes > 0 {
            file.set_len(whole as u64)
                .map_err(|e| format!("cannot repair {shown}: {e}"))?;
            file.seek(SeekFrom::End(0))
                .map_err(|e| format!("{shown}: {e}"))?;
        }
        for line in bytes[..whole]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
        {
            match serde_json::from_slice::<Row>(line) {
                Ok(row) => earlier.rows.push(row),
                Err(_) => earlier.unreadable += 1,
            }
        }
        let file = Mutex::new(file);
        let path = path.to_owned();
        Ok((ResultsFile { path, file }, earlier))
    }

    /// Appends `row` as one line, in one write: a process stopped by any
    /// signal leaves it whole or absent (a cut write is repaired by
    /// [`open`](Self::open)).
    pub(crate) fn append(&self, row: &Row) -> Result<(), String> {
        let mut line = serde_json::to_vec(row).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(&line)
            .map_err(|e| format!("cannot write to {}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(prompt: &str) -> Row {
        Row {
            variant: "a".into(),
            variant_hash: "h".into(),
            prompt: prompt.into(),
            prompt_hash: "p".into(),
            api: "anthropic".into(),
            model: "m".into(),
            provider: "anthropic".into(),
            label: "cyber".into(),
            status: 200,
            answered: true,
            refusal: Some(RowRefusal {
                shape: Shape::Empty,
                category: Some("cyber".into()),
                outcome: Outcome::Fallback,
                step: Some(Step::Chain),
                reason: None,
                served_model: Some("n".into()),
                attempts: 2,
            }),
            latency_ms: 5,
            added_latency_ms: 2,
            added_tokens: 12,
            tokens: 48,
            requests: 2,
            retries: 0,
            error: None,
        }
    }

    #[test]
    fn a_line_cut_by_a_kill_is_removed_and_whole_lines_read_back() {
        let dir = std::env::temp_dir().join(format!("rg-eval-results-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("results.jsonl");
        let (file, earlier) = ResultsFile::open(&path).unwrap();
        assert!(earlier.rows.is_empty());
        file.append(&row("1")).unwrap();
        file.append(&row("2")).unwrap();
        drop(file);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("not json\n{\"variant\":\"a\",\"vari");
        std::fs::write(&path, &text).unwrap();
        let (file, earlier) = ResultsFile::open(&path).unwrap();
        assert_eq!(earlier.rows, vec![row("1"), row("2")]);
        assert_eq!((earlier.unreadable, earlier.cut_bytes), (1, 20));
        file.append(&row("3")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("}\n") && text.lines().count() == 4, "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
