//! Learned routing's counts in Redis, shared by every replica that names
//! the same server.
//!
//! One small hash per (category, requested model), named
//! `{prefix}route:{hash}` (a SHA-256 of the two, never prompt text), with
//! three fields per candidate: `{candidate}|s` and `{candidate}|r`, its
//! decayed served and refused counts, and `{candidate}|t`, when they were
//! last decayed (seconds since the epoch). A Lua script decays and counts
//! atomically on the server, so replicas racing on one key add up; a hash
//! holds at most 16 candidates and expires after ten half-lives without a
//! count.

use std::fmt;
use std::time::{Duration, SystemTime};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};

use super::learned::{decayed, seconds, MAX_CANDIDATES};
use super::{CandidateCounts, RouteKey, RouteStats, RoutingFuture};
use crate::store::ConversationKey;
use crate::BoxError;

/// Decays a candidate's counts to now and adds one fallback, atomically; a new
/// candidate is not counted once the hash holds the most it may.
///
/// KEYS[1]: the hash. ARGV: candidate, served (1/0), now (s), half-life (s),
/// most candidates, expiry (ms). Returns `{served, refused}` as strings
/// (empty when not counted).
const COUNT_FALLBACK: &str = r"
local c = ARGV[1]
local now = tonumber(ARGV[3])
local t = tonumber(redis.call('HGET', KEYS[1], c .. '|t'))
if not t then
    if redis.call('HLEN', KEYS[1]) >= 3 * tonumber(ARGV[5]) then
        return {}
    end
    t = now
end
if now < t then now = t end
local f = 0.5 ^ ((now - t) / tonumber(ARGV[4]))
local s = tonumber(redis.call('HGET', KEYS[1], c .. '|s') or '0') * f
local r = tonumber(redis.call('HGET', KEYS[1], c .. '|r') or '0') * f
if ARGV[2] == '1' then s = s + 1 else r = r + 1 end
redis.call('HSET', KEYS[1], c .. '|s', tostring(s), c .. '|r', tostring(r), c .. '|t', tostring(now))
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {tostring(s), tostring(r)}
";

/// Learned routing's counts in a Redis server (or Valkey). Cheap to clone:
/// clones share one multiplexed connection, which reconnects by itself.
/// Every call is bounded by [`timeout`](Self::timeout) (default 100 ms):
/// past it, the refusal is tried in the operator's order and the count is
/// lost, never waited for.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), refusal_guard::BoxError> {
/// use refusal_guard::routing::redis::RedisRouteStats;
/// use refusal_guard::routing::LearnedRouting;
///
/// let stats = RedisRouteStats::open("redis://127.0.0.1:6379/0")?;
/// let layer = refusal_guard::RefusalGuardLayer::new().route_by(LearnedRouting::new().stats(stats));
/// # let _ = layer;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisRouteStats {
    connection: ConnectionManager,
    count: Script,
    prefix: String,
    timeout: Duration,
}

impl fmt::Debug for RedisRouteStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisRouteStats")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisRouteStats {
    /// Counts on the server at `url`, under the conversation store's
    /// default prefix. Connects lazily (the server need not be up yet);
    /// must be called inside a tokio runtime. Fails only on a malformed
    /// address.
    pub fn open(url: &str) -> Result<Self, BoxError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1))
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(1)));
        let connection = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(RedisRouteStats {
            connection,
            count: Script::new(COUNT_FALLBACK),
            prefix: crate::store::redis::RedisStore::DEFAULT_KEY_PREFIX.to_owned(),
            timeout: Duration::from_millis(100),
        })
    }

    /// Prefixes every key with `prefix`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The longest wait for the server on each call.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn hash_key(&self, key: &RouteKey) -> String {
        let named = format!("{}\0{}", key.category(), key.model());
        let hashed = ConversationKey::from_bytes(named.as_bytes());
        format!("{}route:{}", self.prefix, hashed.as_str())
    }

    async fn bounded<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, redis::RedisError>>,
    ) -> Result<T, BoxError> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(done) => Ok(done?),
            Err(_) => Err(format!("routing counts: no answer within {:?}", self.timeout).into()),
        }
    }
}

impl RouteStats for RedisRouteStats {
    fn counts<'a>(
        &'a self,
        key: &'a RouteKey,
        now: SystemTime,
        half_life: Duration,
    ) -> RoutingFuture<'a, Result<Vec<CandidateCounts>, BoxError>> {
        Box::pin(async move {
            let mut connection = self.connection.clone();
            let fields: Vec<(String, String)> =
                self.bounded(connection.hgetall(self.hash_key(key))).await?;
            Ok(read_counts(&fields, seconds(now), half_life))
        })
    }

    fn add<'a>(
        &'a self,
        key: &'a RouteKey,
        candidate: &'a str,
        served: bool,
        now: SystemTime,
        half_life: Duration,
    ) -> RoutingFuture<'a, Result<CandidateCounts, BoxError>> {
        Box::pin(async move {
            if candidate.contains('|') {
                return Err("routing counts: a candidate named with `|`".into());
            }
            let expiry = half_life.saturating_mul(10);
            let mut connection = self.connection.clone();
            let mut invocation = self.count.key(self.hash_key(key));
            invocation
                .arg(candidate)
                .arg(u8::from(served))
                .arg(seconds(now))
                .arg(half_life.as_secs_f64().max(1.0))
                .arg(MAX_CANDIDATES)
                .arg(u64::try_from(expiry.as_millis()).unwrap_or(u64::MAX).max(1));
            let counted: Vec<String> = self
                .bounded(invocation.invoke_async(&mut connection))
                .await?;
            let number = |at: usize| counted.get(at).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            Ok(CandidateCounts::new(candidate, number(0), number(1)))
        })
    }
}

/// The counts a hash's fields hold, decayed to `now`.
fn read_counts(fields: &[(String, String)], now: f64, half_life: Duration) -> Vec<CandidateCounts> {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(f, _)| f == name)
            .and_then(|(_, v)| v.parse::<f64>().ok())
    };
    let mut counts = Vec::new();
    for (name, _) in fields {
        let Some(candidate) = name.strip_suffix("|t") else {
            continue;
        };
        let at = field(name).unwrap_or(now);
        let served = field(&format!("{candidate}|s")).unwrap_or(0.0);
        let refused = field(&format!("{candidate}|r")).unwrap_or(0.0);
        counts.push(CandidateCounts::new(
            candidate,
            decayed(served, at, now, half_life),
            decayed(refused, at, now, half_life),
        ));
    }
    counts
}
