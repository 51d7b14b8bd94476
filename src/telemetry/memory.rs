//! A bounded in-memory sink.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{RefusalRecord, TelemetrySink};

/// Keeps the most recent records in memory.
///
/// Clones share the same buffer, so keep one clone to read what the guard
/// recorded through another. The buffer is bounded: once it holds `capacity`
/// records, each new record drops the oldest one.
///
/// ```
/// use refusal_guard::telemetry::{MemorySink, RefusalRecord, TelemetrySink};
///
/// let sink = MemorySink::with_capacity(2);
/// let reader = sink.clone();
/// for ts in ["2026-01-01T00:00:00.000Z", "2026-01-02T00:00:00.000Z", "2026-01-03T00:00:00.000Z"] {
///     let line = format!(r#"{{"ts":"{ts}","outcome":"dead"}}"#);
///     let record: RefusalRecord = serde_json::from_str(&line).unwrap();
///     sink.record(&record);
/// }
/// let kept: Vec<String> = reader.records().into_iter().map(|r| r.ts).collect();
/// assert_eq!(kept, ["2026-01-02T00:00:00.000Z", "2026-01-03T00:00:00.000Z"]);
/// ```
#[derive(Debug, Clone)]
pub struct MemorySink {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    capacity: usize,
    records: Mutex<VecDeque<RefusalRecord>>,
}

impl MemorySink {
    /// How many records [`MemorySink::new`] keeps.
    pub const DEFAULT_CAPACITY: usize = 1024;

    /// A sink keeping the last [`MemorySink::DEFAULT_CAPACITY`] records.
    pub fn new() -> Self {
        MemorySink::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// A sink keeping the last `capacity` records (`0` keeps none).
    pub fn with_capacity(capacity: usize) -> Self {
        MemorySink {
            inner: Arc::new(Inner {
                capacity,
                records: Mutex::new(VecDeque::with_capacity(capacity.min(64))),
            }),
        }
    }

    /// The most records kept at once.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// A copy of the kept records, oldest first.
    pub fn records(&self) -> Vec<RefusalRecord> {
        self.lock().iter().cloned().collect()
    }

    /// How many records are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no records are kept.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Drops all kept records.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Removes and returns the kept records, oldest first.
    pub fn take(&self) -> Vec<RefusalRecord> {
        self.lock().drain(..).collect()
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<RefusalRecord>> {
        self.inner
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for MemorySink {
    fn default() -> Self {
        MemorySink::new()
    }
}

impl TelemetrySink for MemorySink {
    fn record(&self, record: &RefusalRecord) {
        if self.inner.capacity == 0 {
            return;
        }
        let mut records = self.lock();
        while records.len() >= self.inner.capacity {
            records.pop_front();
        }
        records.push_back(record.clone());
    }
}
