//! Per-conversation state: the one-rescue-until-output rule and sticky
//! fallback routes.
//!
//! The state sits behind the async [`ConversationStore`] trait, so that
//! several proxy replicas can share it (a Redis implementation reserves a
//! rescue with one atomic script, without caching or writing behind);
//! [`MemoryStore`] is the bounded in-process default.

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod failover;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;

#[cfg(feature = "redis")]
pub use failover::FailoverStore;
#[cfg(feature = "redis")]
pub use redis::RedisStore;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

// Tokio's clock (the system's outside tests): a paused test clock moves the
// store's TTLs too, so tests of them need no real waiting.
use tokio::time::Instant;

use sha2::{Digest, Sha256};

/// A conversation's identity, already hashed: it never holds prompt text, so
/// it can be logged.
///
/// ```
/// use refusal_guard::store::ConversationKey;
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

/// The future a [`ConversationStore`] method returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where the guard keeps per-conversation state.
///
/// Every method is async: a store backed by a remote service (Redis, a
/// database) answers from it directly, and a slow answer only delays the
/// request that asked. The guard bounds each call by the call's recovery
/// deadline; a store that cannot answer should fail *closed* (no rescue,
/// no route) and log why.
///
/// # Atomicity
///
/// [`reserve_rescue`](Self::reserve_rescue) must check and count in one
/// atomic step across everything that shares the store: of any number of
/// concurrent reservations for one conversation with `cap` 1, at most one
/// returns `true` (in Redis: one Lua script, or `INCR` then a compare, on
/// the conversation's key). The other methods need no more than
/// last-writer-wins.
///
/// ```
/// use refusal_guard::store::{ConversationKey, ConversationStore, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::new();
/// let key = ConversationKey::from_bytes(b"conversation");
/// assert!(store.reserve_rescue(&key, 1).await);
/// assert!(!store.reserve_rescue(&key, 1).await); // one rescue until real output
/// store.record_output(&key).await;
/// assert!(store.reserve_rescue(&key, 1).await);
/// # }
/// ```
pub trait ConversationStore: Send + Sync + 'static {
    /// Reserves a rescue for the conversation: `false` when it already had
    /// `cap` rescues since its last real output. Atomic (see above).
    fn reserve_rescue<'a>(&'a self, key: &'a ConversationKey, cap: u32) -> StoreFuture<'a, bool>;

    /// Records that a response of the conversation produced real output,
    /// which clears its rescue count.
    fn record_output<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, ()>;

    /// The model a fallback served this conversation with, if still sticky.
    fn sticky_route<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, Option<String>>;

    /// The conversation's sticky route as its next request arrives: still
    /// routed, or ended since the last lookup (reported once, so that the
    /// guard can tell the primary model was restored), or none. By default
    /// [`sticky_route`](Self::sticky_route), which never reports an end.
    fn sticky_lookup<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, StickyLookup> {
        Box::pin(async move {
            match self.sticky_route(key).await {
                Some(model) => StickyLookup::Routed(model),
                None => StickyLookup::Unrouted,
            }
        })
    }

    /// Routes the conversation to `model` for `ttl`.
    fn set_sticky_route<'a>(
        &'a self,
        key: &'a ConversationKey,
        model: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, ()>;

    /// Whether the store may hold state for any conversation at all. When
    /// it answers `false`, the guard skips [`record_output`](Self::record_output)
    /// (there is no count to clear) and spares computing the key. The
    /// default, `true`, is right for any store shared with other processes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use refusal_guard::store::{ConversationKey, ConversationStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// assert!(!store.may_hold_any());
    /// let key = ConversationKey::from_bytes(b"conversation");
    /// assert!(store.reserve_rescue(&key, 1).await);
    /// assert!(store.may_hold_any());
    /// store.record_output(&key).await; // the count cleared: nothing to keep
    /// assert!(!store.may_hold_any());
    /// store.set_sticky_route(&key, "fallback", Duration::from_secs(60)).await;
    /// store.record_output(&key).await; // the route stays
    /// assert!(store.may_hold_any());
    /// # }
    /// ```
    fn may_hold_any(&self) -> bool {
        true
    }
}

/// A conversation's sticky route, as [`ConversationStore::sticky_lookup`]
/// finds it.
///
/// ```
/// use std::time::Duration;
/// use refusal_guard::store::{ConversationKey, ConversationStore, MemoryStore, StickyLookup};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::new();
/// let key = ConversationKey::from_bytes(b"c");
/// store.set_sticky_route(&key, "claude-sonnet-4-5", Duration::ZERO).await;
/// assert_eq!(store.sticky_lookup(&key).await, StickyLookup::Ended("claude-sonnet-4-5".into()));
/// assert_eq!(store.sticky_lookup(&key).await, StickyLookup::Unrouted);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StickyLookup {
    /// Send the conversation to this model.
    Routed(String),
    /// The route to this model ended (its TTL ran out) since the last
    /// lookup: the conversation is back on its primary model.
    Ended(String),
    /// No route.
    Unrouted,
}

#[derive(Debug)]
struct Entry {
    rescues_since_output: u32,
    sticky: Option<(String, Instant)>,
    touched: Instant,
}

/// The default in-process store: bounded by entry count (the least recently
/// used conversations are forgotten first) and by idle time. Every method
/// answers at once.
///
/// Forgetting a conversation only ever allows one more rescue, never fewer.
#[derive(Debug)]
pub struct MemoryStore {
    entries: Mutex<HashMap<ConversationKey, Entry>>,
    capacity: usize,
    idle_ttl: Duration,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// Default number of conversations remembered.
    pub const DEFAULT_CAPACITY: usize = 10_000;
    /// Default time after which an idle conversation is forgotten.
    pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(6 * 60 * 60);

    /// A store with the default bounds.
    pub fn new() -> Self {
        Self::with_bounds(Self::DEFAULT_CAPACITY, Self::DEFAULT_IDLE_TTL)
    }

    /// A store remembering at most `capacity` conversations, each for at
    /// most `idle_ttl` after it was last touched.
    pub fn with_bounds(capacity: usize, idle_ttl: Duration) -> Self {
        MemoryStore {
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

    fn reserve_now(&self, key: &ConversationKey, cap: u32) -> bool {
        self.with_entry(key, |entry| {
            if entry.rescues_since_output >= cap {
                return false;
            }
            entry.rescues_since_output += 1;
            true
        })
    }

    fn output_now(&self, key: &ConversationKey) {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(key) else {
            return;
        };
        if entry.sticky.is_none() {
            // Nothing left to remember: an absent entry means the same,
            // and an empty store spares later requests their key.
            entries.remove(key);
            return;
        }
        entry.rescues_since_output = 0;
        entry.touched = Instant::now();
    }

    fn route_now(&self, key: &ConversationKey) -> StickyLookup {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(key) else {
            return StickyLookup::Unrouted;
        };
        match entry.sticky.take() {
            Some((model, until)) if Instant::now() < until => {
                entry.sticky = Some((model.clone(), until));
                StickyLookup::Routed(model)
            }
            Some((model, _)) => StickyLookup::Ended(model),
            None => StickyLookup::Unrouted,
        }
    }
}

impl ConversationStore for MemoryStore {
    fn reserve_rescue<'a>(&'a self, key: &'a ConversationKey, cap: u32) -> StoreFuture<'a, bool> {
        let reserved = self.reserve_now(key, cap);
        Box::pin(std::future::ready(reserved))
    }

    fn record_output<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, ()> {
        self.output_now(key);
        Box::pin(std::future::ready(()))
    }

    fn sticky_route<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, Option<String>> {
        let route = match self.route_now(key) {
            StickyLookup::Routed(model) => Some(model),
            _ => None,
        };
        Box::pin(std::future::ready(route))
    }

    fn sticky_lookup<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, StickyLookup> {
        Box::pin(std::future::ready(self.route_now(key)))
    }

    fn set_sticky_route<'a>(
        &'a self,
        key: &'a ConversationKey,
        model: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        self.with_entry(key, |entry| {
            entry.sticky = Some((model.to_owned(), Instant::now() + ttl));
        });
        Box::pin(std::future::ready(()))
    }

    fn may_hold_any(&self) -> bool {
        !self.is_empty()
    }
}

impl<T: ConversationStore + ?Sized> ConversationStore for std::sync::Arc<T> {
    fn reserve_rescue<'a>(&'a self, key: &'a ConversationKey, cap: u32) -> StoreFuture<'a, bool> {
        (**self).reserve_rescue(key, cap)
    }
    fn record_output<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, ()> {
        (**self).record_output(key)
    }
    fn sticky_route<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, Option<String>> {
        (**self).sticky_route(key)
    }
    fn sticky_lookup<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, StickyLookup> {
        (**self).sticky_lookup(key)
    }
    fn set_sticky_route<'a>(
        &'a self,
        key: &'a ConversationKey,
        model: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        (**self).set_sticky_route(key, model, ttl)
    }
    fn may_hold_any(&self) -> bool {
        (**self).may_hold_any()
    }
}
