//! Per-conversation state: the one-rescue-until-output rule and sticky
//! fallback routing.
//!
//! The state sits behind the [`RescueLedger`] trait so that a deployment with
//! several proxy replicas can keep it in a shared store; [`MemoryLedger`] is
//! the bounded in-process default.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// A conversation's identity, already hashed: it never holds prompt text, so
/// it can be logged.
///
/// ```
/// use refusal_guard::ledger::ConversationKey;
///
/// let a = ConversationKey::from_bytes(b"system prompt + first user turn");
/// let b = ConversationKey::from_bytes(b"system prompt + first user turn");
/// assert_eq!(a, b);
/// assert_eq!(a.as_str().len(), 32);
/// assert_ne!(a, ConversationKey::from_bytes(b"another conversation"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConversationKey(String);

impl ConversationKey {
    /// Hashes arbitrary bytes (SHA-256, first 128 bits, hex) into a key.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let digest = Sha256::digest(bytes);
        let mut hex = String::with_capacity(32);
        for byte in &digest[..16] {
            hex.push_str(&format!("{byte:02x}"));
        }
        ConversationKey(hex)
    }

    /// The hex form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConversationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where the guard keeps per-conversation state.
///
/// Methods are synchronous and called on the request path: an implementation
/// backed by a remote store should answer from a local cache and write
/// behind, so that a slow store never slows a request.
///
/// ```
/// use std::time::Duration;
/// use refusal_guard::ledger::{ConversationKey, MemoryLedger, RescueLedger};
///
/// let ledger = MemoryLedger::new();
/// let key = ConversationKey::from_bytes(b"conversation");
/// assert!(ledger.try_reserve_rescue(&key, 1));
/// assert!(!ledger.try_reserve_rescue(&key, 1)); // one rescue until real output
/// ledger.record_output(&key);
/// assert!(ledger.try_reserve_rescue(&key, 1));
/// ```
pub trait RescueLedger: Send + Sync + 'static {
    /// Reserves a rescue for the conversation. Returns `false` when it already
    /// had `cap` rescues since its last real output.
    fn try_reserve_rescue(&self, key: &ConversationKey, cap: u32) -> bool;

    /// Records that a response of the conversation produced real output,
    /// which clears its rescue count.
    fn record_output(&self, key: &ConversationKey);

    /// The model a fallback served this conversation with, if still sticky.
    fn sticky_model(&self, key: &ConversationKey) -> Option<String>;

    /// Routes the conversation to `model` for `ttl`.
    fn set_sticky_model(&self, key: &ConversationKey, model: &str, ttl: Duration);
}

#[derive(Debug)]
struct Entry {
    rescues_since_output: u32,
    sticky: Option<(String, Instant)>,
    touched: Instant,
}

/// The default in-process ledger: bounded by entry count (the least recently
/// used conversations are forgotten first) and by idle time.
///
/// Forgetting a conversation only ever allows one more rescue, never fewer.
#[derive(Debug)]
pub struct MemoryLedger {
    entries: Mutex<HashMap<ConversationKey, Entry>>,
    capacity: usize,
    idle_ttl: Duration,
}

impl Default for MemoryLedger {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLedger {
    /// Default number of conversations remembered.
    pub const DEFAULT_CAPACITY: usize = 10_000;
    /// Default time after which an idle conversation is forgotten.
    pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(6 * 60 * 60);

    /// A ledger with the default bounds.
    pub fn new() -> Self {
        Self::with_bounds(Self::DEFAULT_CAPACITY, Self::DEFAULT_IDLE_TTL)
    }

    /// A ledger remembering at most `capacity` conversations, each for at
    /// most `idle_ttl` after it was last touched.
    pub fn with_bounds(capacity: usize, idle_ttl: Duration) -> Self {
        MemoryLedger {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            idle_ttl,
        }
    }

    /// Number of conversations remembered now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no conversation is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConversationKey, Entry>> {
        // The map stays consistent even if a holder panicked: every update is
        // a single assignment.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with_entry<T>(&self, key: &ConversationKey, f: impl FnOnce(&mut Entry) -> T) -> T {
        let now = Instant::now();
        let mut entries = self.lock();
        if let Some(entry) = entries.get(key) {
            if now.duration_since(entry.touched) > self.idle_ttl {
                entries.remove(key);
            }
        }
        if !entries.contains_key(key) && entries.len() >= self.capacity {
            self.evict(&mut entries, now);
        }
        let entry = entries.entry(key.clone()).or_insert(Entry {
            rescues_since_output: 0,
            sticky: None,
            touched: now,
        });
        entry.touched = now;
        f(entry)
    }

    /// Drops idle entries, then the least recently used eighth, so that the
    /// cost of a full scan is paid once per many inserts.
    fn evict(&self, entries: &mut HashMap<ConversationKey, Entry>, now: Instant) {
        entries.retain(|_, e| now.duration_since(e.touched) <= self.idle_ttl);
        if entries.len() < self.capacity {
            return;
        }
        let mut ages: Vec<(Instant, ConversationKey)> = entries
            .iter()
            .map(|(k, e)| (e.touched, k.clone()))
            .collect();
        ages.sort_unstable();
        let drop = (self.capacity / 8).max(1);
        for (_, key) in ages.into_iter().take(drop) {
            entries.remove(&key);
        }
    }
}

impl RescueLedger for MemoryLedger {
    fn try_reserve_rescue(&self, key: &ConversationKey, cap: u32) -> bool {
        self.with_entry(key, |entry| {
            if entry.rescues_since_output >= cap {
                return false;
            }
            entry.rescues_since_output += 1;
            true
        })
    }

    fn record_output(&self, key: &ConversationKey) {
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(key) {
            entry.rescues_since_output = 0;
            entry.touched = Instant::now();
        }
    }

    fn sticky_model(&self, key: &ConversationKey) -> Option<String> {
        let mut entries = self.lock();
        let entry = entries.get_mut(key)?;
        match &entry.sticky {
            Some((model, until)) if Instant::now() < *until => Some(model.clone()),
            Some(_) => {
                entry.sticky = None;
                None
            }
            None => None,
        }
    }

    fn set_sticky_model(&self, key: &ConversationKey, model: &str, ttl: Duration) {
        self.with_entry(key, |entry| {
            entry.sticky = Some((model.to_owned(), Instant::now() + ttl));
        });
    }
}

impl<T: RescueLedger> RescueLedger for std::sync::Arc<T> {
    fn try_reserve_rescue(&self, key: &ConversationKey, cap: u32) -> bool {
        (**self).try_reserve_rescue(key, cap)
    }
    fn record_output(&self, key: &ConversationKey) {
        (**self).record_output(key)
    }
    fn sticky_model(&self, key: &ConversationKey) -> Option<String> {
        (**self).sticky_model(key)
    }
    fn set_sticky_model(&self, key: &ConversationKey, model: &str, ttl: Duration) {
        (**self).set_sticky_model(key, model, ttl)
    }
}
