//! Conversation state in Redis, shared by several proxy replicas.
//!
//! [`RedisStore`] keeps the same per-conversation state as
//! [`MemoryStore`] (the rescue count since the
//! last real output, and the sticky fallback route) in a Redis server (or
//! Valkey, which speaks the same protocol), so that a conversation whose
//! requests land on different replicas still gets one rescue, not one per
//! replica.
//!
//! It talks to the server through redis-rs's tokio
//! [`ConnectionManager`], which multiplexes
//! every call over one connection and reconnects by itself. It fails when the
//! server does: wrap it in a `store_fallback::FailoverStore` to bound every
//! call by a short timeout and answer from memory meanwhile.
//!
//! # Keys
//!
//! Three keys per conversation, named after the hashed
//! [`ConversationKey`] only (never prompt text):
//!
//! - `{prefix}{key}:rescues`: rescues since the last real output; expires
//!   after [`MemoryStore::DEFAULT_IDLE_TTL`]
//!   without a refusal, like an idle conversation in memory;
//! - `{prefix}{key}:sticky`: the model a fallback served the conversation
//!   with; expires with the sticky route's own TTL;
//! - `{prefix}{key}:sticky-was`: the same model, kept for the idle TTL past
//!   the route's end, so that the first lookup after the end can report it
//!   (once: the lookup deletes it).
//!
//! The prefix defaults to [`RedisStore::DEFAULT_KEY_PREFIX`].

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};

use crate::store::{ConversationKey, ConversationStore, MemoryStore, StickyLookup, StoreFuture};

/// Reserves a rescue if the conversation is below the cap, atomically on the
/// server: replicas racing on one conversation are serialised by Redis, so
/// at most `cap` of them succeed. Either way the conversation was touched,
/// so its idle expiry starts again.
///
/// KEYS[1]: the rescue count. ARGV[1]: the cap. ARGV[2]: the idle TTL in ms.
const RESERVE_RESCUE: &str = r"
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used >= tonumber(ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 0
end
redis.call('SET', KEYS[1], used + 1, 'PX', ARGV[2])
return 1
";

/// The sticky route, or its end reported once: a route still set answers
/// `routed`; otherwise a remembered route is taken (deleted) and answers
/// `ended`. Atomic, so that of replicas racing only one reports the end.
///
/// KEYS[1]: the route. KEYS[2]: the remembered route.
const LOOKUP_ROUTE: &str = r"
local routed = redis.call('GET', KEYS[1])
if routed then
    return {'routed', routed}
end
local was = redis.call('GET', KEYS[2])
if was then
    redis.call('DEL', KEYS[2])
    return {'ended', was}
end
return {}
";

/// A call to the store failed: the server is unreachable, answered with an
/// error, or the address is malformed.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use refusal_guard::store::redis::RedisStore;
///
/// let error = RedisStore::open("not a url").unwrap_err();
/// assert!(error.to_string().starts_with("conversation store: "));
/// # }
/// ```
#[derive(Debug)]
pub struct StoreError(redis::RedisError);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conversation store: {}", self.0)
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl From<redis::RedisError> for StoreError {
    fn from(error: redis::RedisError) -> Self {
        StoreError(error)
    }
}

/// Per-conversation state in Redis. Cheap to clone: clones share one
/// multiplexed connection.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), refusal_guard::store::redis::StoreError> {
/// use std::time::Duration;
/// use refusal_guard::store::ConversationKey;
/// use refusal_guard::store::redis::RedisStore;
///
/// let store = RedisStore::open("redis://127.0.0.1:6379/0")?.key_prefix("team-a:");
/// let key = ConversationKey::from_bytes(b"conversation");
/// if store.reserve_rescue(&key, 1).await? {
///     // ... rescue; later, a real answer arrives:
///     store.record_output(&key).await?;
/// }
/// store.set_sticky_route(&key, "claude-fallback", Duration::from_secs(600)).await?;
/// assert_eq!(store.sticky_route(&key).await?.as_deref(), Some("claude-fallback"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub struct RedisStore {
    connection: ConnectionManager,
    reserve: Script,
    lookup: Script,
    prefix: String,
    idle_ttl: Duration,
    /// When a failure was last logged (shared by clones).
    warned_at: Arc<Mutex<Option<Instant>>>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("idle_ttl", &self.idle_ttl)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Prefix of every key the store writes, unless [`key_prefix`](Self::key_prefix) says otherwise.
    pub const DEFAULT_KEY_PREFIX: &'static str = "refusal-guard:";

    /// A store on the server at `url` (`redis://HOST:PORT/DB`, or
    /// `rediss://` and `unix://` where redis-rs supports them).
    ///
    /// Connects lazily: the server need not be up yet, and a replica started
    /// during an outage starts anyway. Must be called inside a tokio runtime
    /// (the connection manager spawns its reconnection task there). Fails
    /// only on a malformed address.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url)?;
        // A failed connection is retried quickly and at most a second apart,
        // so sharing resumes soon after the server returns.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(4)
            .set_max_delay(Duration::from_secs(1))
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(1)));
        let connection = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(RedisStore {
            connection,
            reserve: Script::new(RESERVE_RESCUE),
            lookup: Script::new(LOOKUP_ROUTE),
            prefix: Self::DEFAULT_KEY_PREFIX.to_owned(),
            idle_ttl: MemoryStore::DEFAULT_IDLE_TTL,
            warned_at: Arc::new(Mutex::new(None)),
        })
    }

    /// Whether the server answers `PING` now (for readiness probes).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await?;
        Ok(())
    }

    /// Prefixes every key with `prefix`, so several deployments can share
    /// one server.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Forgets a conversation's rescue count after `idle_ttl` without a
    /// refusal (default: the in-memory store's
    /// [`DEFAULT_IDLE_TTL`](MemoryStore::DEFAULT_IDLE_TTL)).
    pub fn idle_ttl(mut self, idle_ttl: Duration) -> Self {
        self.idle_ttl = idle_ttl;
        self
    }

    /// Reserves a rescue for the conversation: `false` when it already had
    /// `cap` rescues since its last real output.
    ///
    /// Atomic on the server: however many replicas race on one conversation,
    /// at most `cap` reservations succeed. Refreshes the idle expiry.
    pub async fn reserve_rescue(
        &self,
        key: &ConversationKey,
        cap: u32,
    ) -> Result<bool, StoreError> {
        let reserved: i64 = self
            .reserve
            .key(self.rescues_key(key))
            .arg(cap)
            .arg(millis(self.idle_ttl))
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(reserved == 1)
    }

    /// Records that a response of the conversation produced real output,
    /// which clears its rescue count.
    pub async fn record_output(&self, key: &ConversationKey) -> Result<(), StoreError> {
        let _: usize = self.connection.clone().del(self.rescues_key(key)).await?;
        Ok(())
    }

    /// The model a fallback served this conversation with, if still sticky.
    pub async fn sticky_route(&self, key: &ConversationKey) -> Result<Option<String>, StoreError> {
        Ok(self.connection.clone().get(self.sticky_key(key)).await?)
    }

    /// The sticky route as the conversation's next request finds it: still
    /// routed, ended (reported once), or none.
    pub async fn sticky_lookup(&self, key: &ConversationKey) -> Result<StickyLookup, StoreError> {
        let found: Vec<String> = self
            .lookup
            .key(self.sticky_key(key))
            .key(self.sticky_was_key(key))
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(match found.as_slice() {
            [word, model] if word == "routed" => StickyLookup::Routed(model.clone()),
            [word, model] if word == "ended" => StickyLookup::Ended(model.clone()),
            _ => StickyLookup::Unrouted,
        })
    }

    /// Routes the conversation to `model` for `ttl` (the server expires it),
    /// and remembers the route for the idle TTL past its end.
    pub async fn set_sticky_route(
        &self,
        key: &ConversationKey,
        model: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let () = redis::pipe()
            .atomic()
            .pset_ex(self.sticky_key(key), model, millis(ttl))
            .ignore()
            .pset_ex(self.sticky_was_key(key), model, millis(ttl + self.idle_ttl))
            .ignore()
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(())
    }

    /// The answer of a failed call as a [`ConversationStore`]: `closed`,
    /// with a warning at most every [`WARN_EVERY`].
    fn or_closed<T>(&self, operation: &str, result: Result<T, StoreError>, closed: T) -> T {
        let error = match result {
            Ok(answer) => return answer,
            Err(error) => error,
        };
        let now = Instant::now();
        let mut warned_at = self.warned_at.lock().unwrap_or_else(|e| e.into_inner());
        if warned_at.map_or(true, |at| now.duration_since(at) >= WARN_EVERY) {
            *warned_at = Some(now);
            tracing::warn!(
                target: "refusal_guard::store",
                operation,
                %error,
                "conversation store failed; no rescue or route for this call"
            );
        }
        closed
    }

    fn rescues_key(&self, key: &ConversationKey) -> String {
        format!("{}{}:rescues", self.prefix, key.as_str())
    }

    fn sticky_key(&self, key: &ConversationKey) -> String {
        format!("{}{}:sticky", self.prefix, key.as_str())
    }

    fn sticky_was_key(&self, key: &ConversationKey) -> String {
        format!("{}{}:sticky-was", self.prefix, key.as_str())
    }
}

/// Least interval between two warnings of a failing [`RedisStore`] used on
/// its own.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// On its own, a call that fails (the server is down or errs) fails closed,
/// as the trait asks: no rescue, no route; a warning is logged at most every
/// 30 s. Calls are bounded by the connection's 1 s response timeout and by
/// the guard's deadline. To keep deciding from memory during an outage, and
/// within 50 ms, wrap it in a `store_fallback::FailoverStore`.
impl ConversationStore for RedisStore {
    fn reserve_rescue<'a>(&'a self, key: &'a ConversationKey, cap: u32) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let reserved = RedisStore::reserve_rescue(self, key, cap).await;
            self.or_closed("reserve_rescue", reserved, false)
        })
    }

    fn record_output<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let recorded = RedisStore::record_output(self, key).await;
            self.or_closed("record_output", recorded, ())
        })
    }

    fn sticky_route<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            let route = RedisStore::sticky_route(self, key).await;
            self.or_closed("sticky_route", route, None)
        })
    }

    fn sticky_lookup<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, StickyLookup> {
        Box::pin(async move {
            let route = RedisStore::sticky_lookup(self, key).await;
            self.or_closed("sticky_lookup", route, StickyLookup::Unrouted)
        })
    }

    fn set_sticky_route<'a>(
        &'a self,
        key: &'a ConversationKey,
        model: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let set = RedisStore::set_sticky_route(self, key, model, ttl).await;
            self.or_closed("set_sticky_route", set, ())
        })
    }
}

/// A duration in whole milliseconds for `PX`/`PEXPIRE`, at least 1 (Redis
/// rejects 0).
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}
