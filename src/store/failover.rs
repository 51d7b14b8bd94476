//! A shared conversation store that never fails or slows a request: every
//! call is bounded by a short timeout, and a slow or unreachable server is
//! answered for by the replica's own in-memory store.
//!
//! The trade-off, during an outage: decisions are per replica, so a
//! conversation whose requests are spread over N replicas may get up to one
//! rescue per replica instead of one in total, and a sticky route set during
//! the outage is known only to the replica that set it. When the server
//! returns, sharing resumes without a restart (the connection manager
//! reconnects by itself); what replicas decided alone meanwhile is not
//! written back.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::store::redis::{RedisStore, StoreError};
use crate::store::{ConversationKey, ConversationStore, MemoryStore, StickyLookup, StoreFuture};

/// Why a call was answered from memory.
enum Failure {
    Error(StoreError),
    TimedOut(Duration),
    Resting,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Error(error) => error.fmt(f),
            Failure::TimedOut(after) => write!(f, "conversation store: no answer within {after:?}"),
            Failure::Resting => f.write_str("conversation store: resting after a failure"),
        }
    }
}

/// When the shared store last failed and when that was last logged.
#[derive(Default)]
struct Health {
    resting_until: Option<Instant>,
    warned_at: Option<Instant>,
    failing: bool,
}

/// [`RedisStore`] with a timeout on every call and the replica's
/// [`MemoryStore`] as the fallback.
///
/// While the server answers, it decides and the memory store mirrors what
/// this replica learned (so that a fallback starts from it). A call that
/// errs or takes longer than the timeout (default 50 ms) is answered from
/// memory instead; the store then rests (default 1 s): calls go straight to
/// memory, without waiting, until one tries the server again. A warning is
/// logged at most once per interval (default 30 s) and every fallback is
/// counted ([`fallbacks`](Self::fallbacks)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), refusal_guard::store::redis::StoreError> {
/// use std::time::Duration;
/// use refusal_guard::store::{ConversationKey, ConversationStore};
/// use refusal_guard::store::redis::RedisStore;
/// use refusal_guard::store::failover::FailoverStore;
///
/// // Nothing listens on port 1: every decision comes from memory.
/// let store = FailoverStore::new(RedisStore::open("redis://127.0.0.1:1/0")?)
///     .timeout(Duration::from_millis(50))
///     .warn_every(Duration::from_secs(30));
/// let key = ConversationKey::from_bytes(b"conversation");
/// assert!(store.reserve_rescue(&key, 1).await);
/// assert!(!store.reserve_rescue(&key, 1).await);
/// assert_eq!(store.fallbacks(), 2);
/// # Ok(())
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub struct FailoverStore {
    shared: RedisStore,
    local: Arc<MemoryStore>,
    timeout: Duration,
    rest: Duration,
    warn_every: Duration,
    health: Mutex<Health>,
    fallbacks: AtomicU64,
}

impl std::fmt::Debug for FailoverStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailoverStore")
            .field("shared", &self.shared)
            .field("timeout", &self.timeout)
            .field("rest", &self.rest)
            .field("warn_every", &self.warn_every)
            .field("fallbacks", &self.fallbacks())
            .finish_non_exhaustive()
    }
}

impl FailoverStore {
    /// Default bound on every call to the shared store.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
    /// Default time calls skip the shared store after it failed.
    pub const DEFAULT_REST: Duration = Duration::from_secs(1);
    /// Default least interval between two warnings.
    pub const DEFAULT_WARN_EVERY: Duration = Duration::from_secs(30);

    /// `shared` guarded by the defaults, falling back to a fresh
    /// [`MemoryStore`].
    pub fn new(shared: RedisStore) -> Self {
        FailoverStore {
            shared,
            local: Arc::new(MemoryStore::new()),
            timeout: Self::DEFAULT_TIMEOUT,
            rest: Self::DEFAULT_REST,
            warn_every: Self::DEFAULT_WARN_EVERY,
            health: Mutex::new(Health::default()),
            fallbacks: AtomicU64::new(0),
        }
    }

    /// Falls back to `local` (the replica's own store) instead of a fresh one.
    pub fn local(mut self, local: Arc<MemoryStore>) -> Self {
        self.local = local;
        self
    }

    /// Bounds every call to the shared store by `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// After a failure, answers from memory without trying the shared store
    /// for `rest` (zero: try it on every call).
    pub fn rest(mut self, rest: Duration) -> Self {
        self.rest = rest;
        self
    }

    /// Logs a failing shared store at most once per `interval`.
    pub fn warn_every(mut self, interval: Duration) -> Self {
        self.warn_every = interval;
        self
    }

    /// How many calls were answered from memory so far.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// Runs one shared-store call within the timeout; `None` means "answer
    /// from memory", already counted and logged.
    async fn attempt<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Option<T> {
        if self.resting() {
            self.fell_back(operation, Failure::Resting);
            return None;
        }
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(answer)) => {
                self.recovered();
                Some(answer)
            }
            Ok(Err(error)) => {
                self.fell_back(operation, Failure::Error(error));
                None
            }
            Err(_) => {
                self.fell_back(operation, Failure::TimedOut(self.timeout));
                None
            }
        }
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        // Every update is a single assignment: consistent even after a panic.
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn resting(&self) -> bool {
        let health = self.health();
        health
            .resting_until
            .is_some_and(|until| Instant::now() < until)
    }

    fn fell_back(&self, operation: &'static str, failure: Failure) {
        let fallbacks = self.fallbacks.fetch_add(1, Ordering::Relaxed) + 1;
        crate::telemetry::metrics::store_fallback("redis");
        if !matches!(failure, Failure::Resting) {
            crate::telemetry::metrics::store_error("redis", operation);
        }
        let now = Instant::now();
        let mut health = self.health();
        health.failing = true;
        if !matches!(failure, Failure::Resting) {
            health.resting_until = Some(now + self.rest);
        }
        let due = health
            .warned_at
            .map_or(true, |at| now.duration_since(at) >= self.warn_every);
        if due {
            health.warned_at = Some(now);
            tracing::warn!(
                target: "refusal_guard::store",
                operation,
                error = %failure,
                fallbacks,
                "shared conversation store failed; deciding from this replica's memory \
                 (a conversation may get one rescue per replica until it returns)"
            );
        }
    }

    fn recovered(&self) {
        let mut health = self.health();
        if health.failing {
            health.failing = false;
            health.resting_until = None;
            tracing::info!(
                target: "refusal_guard::store",
                "shared conversation store answers again; replicas share state"
            );
        }
    }
}

/// Every call answers within the timeout, from the shared store or from
/// memory; none fails.
impl ConversationStore for FailoverStore {
    fn reserve_rescue<'a>(&'a self, key: &'a ConversationKey, cap: u32) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let shared = self.shared.reserve_rescue(key, cap);
            match self.attempt("reserve_rescue", shared).await {
                Some(true) => {
                    // Mirrored without a cap: memory only needs to know it happened.
                    self.local.reserve_rescue(key, u32::MAX).await;
                    true
                }
                Some(false) => false,
                None => self.local.reserve_rescue(key, cap).await,
            }
        })
    }

    fn record_output<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.local.record_output(key).await;
            self.attempt("record_output", self.shared.record_output(key))
                .await;
        })
    }

    fn sticky_route<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            match self
                .attempt("sticky_route", self.shared.sticky_route(key))
                .await
            {
                Some(route) => route,
                None => self.local.sticky_route(key).await,
            }
        })
    }

    fn sticky_lookup<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, StickyLookup> {
        Box::pin(async move {
            let local = self.local.sticky_lookup(key).await;
            match self
                .attempt("sticky_lookup", self.shared.sticky_lookup(key))
                .await
            {
                Some(route) => route,
                None => local,
            }
        })
    }

    fn set_sticky_route<'a>(
        &'a self,
        key: &'a ConversationKey,
        model: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.local.set_sticky_route(key, model, ttl).await;
            let shared = self.shared.set_sticky_route(key, model, ttl);
            self.attempt("set_sticky_route", shared).await;
        })
    }
}
