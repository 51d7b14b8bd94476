//! Learned routing: candidates ordered by how often each has served
//! instead of refusing a category, in decayed counts.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{RouteKey, RoutingFuture, RoutingSource};
use crate::telemetry::RefusalRecord;
use crate::BoxError;

/// Most candidates counted per key: a chain is short, and a key's counts
/// must stay small wherever they are kept.
pub(crate) const MAX_CANDIDATES: usize = 16;
/// Most keys (category, model) counted in memory; past it the key updated
/// longest ago is forgotten.
const MAX_KEYS: usize = 1024;

/// The wall clock the counts decay by. Wall time, not a monotonic clock:
/// replicas sharing counts must agree on when a count was made. Any
/// `Fn() -> SystemTime + Send + Sync + 'static` is one (tests use a fixed one).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use refusal_guard::routing::{Clock, LearnedRouting};
///
/// let noon = || UNIX_EPOCH + Duration::from_secs(1_800_000_000);
/// assert_eq!(noon.now(), UNIX_EPOCH + Duration::from_secs(1_800_000_000));
/// let routing = LearnedRouting::new().clock(noon);
/// # let _ = routing;
/// ```
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> SystemTime;
}

impl<F> Clock for F
where
    F: Fn() -> SystemTime + Send + Sync + 'static,
{
    fn now(&self) -> SystemTime {
        self()
    }
}

/// `SystemTime::now`.
struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Seconds since the epoch, as the counts' timestamps are kept.
pub(crate) fn seconds(time: SystemTime) -> f64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => after.as_secs_f64(),
        Err(_) => 0.0,
    }
}

/// `value`, counted at `then`, decayed to `now` (halved every `half_life`).
pub(crate) fn decayed(value: f64, then: f64, now: f64, half_life: Duration) -> f64 {
    let half_life = half_life.as_secs_f64().max(1.0);
    value * 0.5f64.powf((now - then).max(0.0) / half_life)
}

/// One candidate's decayed counts for a key: how often it served, and how
/// often it refused.
///
/// ```
/// use refusal_guard::routing::CandidateCounts;
///
/// let counts = CandidateCounts::new("claude-sonnet-4-5", 9.0, 1.0);
/// assert!((counts.score() - 10.0 / 12.0).abs() < 1e-9);
/// assert_eq!(CandidateCounts::new("unseen", 0.0, 0.0).score(), 0.5);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CandidateCounts {
    /// The chain entry.
    pub candidate: String,
    /// Times it served instead of refusing, decayed.
    pub served: f64,
    /// Times it refused too, decayed.
    pub refused: f64,
}

impl CandidateCounts {
    /// Counts for `candidate`.
    pub fn new(candidate: impl Into<String>, served: f64, refused: f64) -> Self {
        CandidateCounts {
            candidate: candidate.into(),
            served,
            refused,
        }
    }

    /// How likely it is to serve, a Laplace estimate: `(served + 1) /
    /// (served + refused + 2)`, one half for a candidate never tried, so
    /// that an untried one comes before one that mostly refuses.
    pub fn score(&self) -> f64 {
        (self.served + 1.0) / (self.served + self.refused + 2.0)
    }
}

/// Where a [`LearnedRouting`] keeps its counts: [`MemoryRouteStats`] (this
/// process), or `routing::redis::RedisRouteStats` (feature `redis`: every
/// replica's, in Redis). Counts decay: each halves every `half_life`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::{Duration, SystemTime};
/// use refusal_guard::routing::{MemoryRouteStats, RouteKey, RouteStats};
///
/// let stats = MemoryRouteStats::new();
/// let key = RouteKey::new(Some("bio"), "gpt-5");
/// let day = Duration::from_secs(86_400);
/// stats.add(&key, "gpt-5-mini", false, SystemTime::now(), day).await.unwrap();
/// let counts = stats.counts(&key, SystemTime::now(), day).await.unwrap();
/// assert_eq!((counts[0].served, counts[0].refused.round()), (0.0, 1.0));
/// # }
/// ```
pub trait RouteStats: Send + Sync + 'static {
    /// The counts of every candidate counted for `key`, decayed to `now`.
    fn counts<'a>(
        &'a self,
        key: &'a RouteKey,
        now: SystemTime,
        half_life: Duration,
    ) -> RoutingFuture<'a, Result<Vec<CandidateCounts>, BoxError>>;

    /// Counts one fallback to `candidate` that served (or refused) at `now`;
    /// returns its counts after.
    fn add<'a>(
        &'a self,
        key: &'a RouteKey,
        candidate: &'a str,
        served: bool,
        now: SystemTime,
        half_life: Duration,
    ) -> RoutingFuture<'a, Result<CandidateCounts, BoxError>>;
}

/// One candidate's counts as kept: decayed up to `at`.
#[derive(Debug, Clone)]
struct Kept {
    candidate: String,
    served: f64,
    refused: f64,
    at: f64,
}

impl Kept {
    fn at(&self, now: f64, half_life: Duration) -> CandidateCounts {
        CandidateCounts {
            candidate: self.candidate.clone(),
            served: decayed(self.served, self.at, now, half_life),
            refused: decayed(self.refused, self.at, now, half_life),
        }
    }
}

/// Counts in this process's memory, bounded: at most 1024 keys (the one
/// updated longest ago is forgotten first) of at most 16 candidates each.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use refusal_guard::routing::{MemoryRouteStats, RouteKey};
///
/// let stats = MemoryRouteStats::new();
/// let key = RouteKey::new(Some("cyber"), "a");
/// let day = Duration::from_secs(86_400);
/// stats.count(&key, "b", true, UNIX_EPOCH + day, day);
/// let counts = stats.counts_now(&key, UNIX_EPOCH + 2 * day, day);
/// assert_eq!(counts[0].served, 0.5, "halved after one half-life");
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryRouteStats {
    keys: Arc<Mutex<HashMap<RouteKey, Vec<Kept>>>>,
}

impl MemoryRouteStats {
    /// No counts.
    pub fn new() -> Self {
        Self::default()
    }

    /// [`RouteStats::add`], at once.
    pub fn count(
        &self,
        key: &RouteKey,
        candidate: &str,
        served: bool,
        now: SystemTime,
        half_life: Duration,
    ) -> CandidateCounts {
        let now = seconds(now);
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if !keys.contains_key(key) && keys.len() >= MAX_KEYS {
            let oldest = keys
                .iter()
                .min_by(|a, b| latest(a.1).total_cmp(&latest(b.1)))
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                keys.remove(&oldest);
            }
        }
        let kept = keys.entry(key.clone()).or_default();
        let at = match kept.iter().position(|k| k.candidate == candidate) {
            Some(at) => at,
            None if kept.len() < MAX_CANDIDATES => {
                kept.push(Kept {
                    candidate: candidate.to_owned(),
                    served: 0.0,
                    refused: 0.0,
                    at: now,
                });
                kept.len() - 1
            }
            None => return CandidateCounts::new(candidate, 0.0, 0.0),
        };
        let entry = &mut kept[at];
        let mut counts = entry.at(now.max(entry.at), half_life);
        match served {
            true => counts.served += 1.0,
            false => counts.refused += 1.0,
        }
        *entry = Kept {
            candidate: candidate.to_owned(),
            served: counts.served,
            refused: counts.refused,
            at: now.max(entry.at),
        };
        counts
    }

    /// [`RouteStats::counts`], at once.
    pub fn counts_now(
        &self,
        key: &RouteKey,
        now: SystemTime,
        half_life: Duration,
    ) -> Vec<CandidateCounts> {
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let now = seconds(now);
        keys.get(key)
            .map(|kept| kept.iter().map(|k| k.at(now, half_life)).collect())
            .unwrap_or_default()
    }

    /// Every key and its counts, decayed to `now`, each key's candidates
    /// best first.
    pub fn table(&self, now: SystemTime, half_life: Duration) -> RouteTable {
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let now = seconds(now);
        let mut rows: Vec<RouteRow> = keys
            .iter()
            .map(|(key, kept)| {
                let mut candidates: Vec<CandidateCounts> =
                    kept.iter().map(|k| k.at(now, half_life)).collect();
                candidates.sort_by(|a, b| b.score().total_cmp(&a.score()));
                RouteRow {
                    key: key.clone(),
                    candidates,
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            (a.key.category(), a.key.model()).cmp(&(b.key.category(), b.key.model()))
        });
        RouteTable { rows }
    }
}

fn latest(kept: &[Kept]) -> f64 {
    kept.iter().map(|k| k.at).fold(f64::MIN, f64::max)
}

impl RouteStats for MemoryRouteStats {
    fn counts<'a>(
        &'a self,
        key: &'a RouteKey,
        now: SystemTime,
        half_life: Duration,
    ) -> RoutingFuture<'a, Result<Vec<CandidateCounts>, BoxError>> {
        Box::pin(std::future::ready(Ok(self.counts_now(key, now, half_life))))
    }

    fn add<'a>(
        &'a self,
        key: &'a RouteKey,
        candidate: &'a str,
        served: bool,
        now: SystemTime,
        half_life: Duration,
    ) -> RoutingFuture<'a, Result<CandidateCounts, BoxError>> {
        let counts = self.count(key, candidate, served, now, half_life);
        Box::pin(std::future::ready(Ok(counts)))
    }
}

/// Every key's counts, for `refusal-guard report --routing`.
///
/// ```
/// use std::time::Duration;
/// use refusal_guard::routing::RouteTable;
///
/// let lines = [
///     r#"{"ts":"2026-11-29T17:00:00.000Z","model":"a","category":"cyber","outcome":"fallback","attempts":[{"step":"original","model":"a","result":"refused","latency_ms":1},{"step":"fallback","model":"b","result":"served","latency_ms":1}]}"#,
/// ];
/// let records = lines.iter().map(|l| serde_json::from_str(l).unwrap());
/// let table = RouteTable::from_records(records, Duration::from_secs(86_400));
/// assert_eq!(table.rows[0].candidates[0].candidate, "b");
/// assert!(table.to_string().contains("cyber on a"));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RouteTable {
    /// One row per (category, model), in that order.
    pub rows: Vec<RouteRow>,
}

/// One key's candidates, best first.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RouteRow {
    /// The category and the requested model.
    pub key: RouteKey,
    /// Its candidates, best first.
    pub candidates: Vec<CandidateCounts>,
}

impl RouteTable {
    /// The counts `records` (in log order) add up to, decayed to the last
    /// record's time: what learned routing would have learned from them.
    pub fn from_records<I>(records: I, half_life: Duration) -> RouteTable
    where
        I: IntoIterator<Item = RefusalRecord>,
    {
        let stats = MemoryRouteStats::new();
        let mut last = UNIX_EPOCH;
        for record in records {
            let Some(at) = crate::telemetry::parse_ts(&record.ts) else {
                continue;
            };
            let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(at).unwrap_or(0));
            last = last.max(at);
            if let Some((key, fallbacks)) = RouteKey::of_record(&record) {
                for (candidate, served) in fallbacks {
                    stats.count(&key, &candidate, served, at, half_life);
                }
            }
        }
        stats.table(last, half_life)
    }

    /// [`from_records`](Self::from_records) of several logs (one per
    /// replica, say) read as one: their records are put in time order
    /// first, since a count made after a later one would not be decayed. A
    /// missing log is no error (nothing was recorded there yet); lines that
    /// hold no record are skipped.
    ///
    /// ```
    /// use std::time::Duration;
    /// use refusal_guard::routing::RouteTable;
    ///
    /// let dir = std::env::temp_dir().join(format!("route-logs-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let line = |ts: &str, result: &str| format!(
    ///     r#"{{"ts":"{ts}","model":"a","category":"cyber","outcome":"dead","attempts":[{{"step":"original","model":"a","result":"refused","latency_ms":1}},{{"step":"fallback","model":"b","result":"{result}","latency_ms":1}}]}}"#
    /// );
    /// std::fs::write(dir.join("one.jsonl"), line("2026-11-29T18:00:00.000Z", "refused") + "\n")?;
    /// std::fs::write(dir.join("two.jsonl"), line("2026-11-29T17:00:00.000Z", "served") + "\n")?;
    /// let logs = [dir.join("one.jsonl"), dir.join("two.jsonl"), dir.join("missing.jsonl")];
    /// let table = RouteTable::from_logs(&logs, Duration::from_secs(3600))?;
    /// let b = &table.rows[0].candidates[0];
    /// // The later refusal counts whole, the earlier serve halved by an hour.
    /// assert_eq!((b.served, b.refused), (0.5, 1.0));
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_logs<P: AsRef<Path>>(paths: &[P], half_life: Duration) -> io::Result<RouteTable> {
        let mut records = Vec::new();
        for path in paths {
            let file = match File::open(path.as_ref()) {
                Ok(file) => file,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            for line in BufReader::new(file).split(b'\n') {
                if let Ok(record) = serde_json::from_slice::<RefusalRecord>(&line?) {
                    records.push(record);
                }
            }
        }
        // Stable: one log's records at the same time stay in its order.
        records.sort_by_cached_key(|record| crate::telemetry::parse_ts(&record.ts));
        Ok(RouteTable::from_records(records, half_life))
    }
}

impl fmt::Display for RouteTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rows.is_empty() {
            return writeln!(f, "No fallbacks recorded yet.");
        }
        writeln!(f, "Fallback order learned per category and requested model (best first; served / refused, decayed):")?;
        for row in &self.rows {
            writeln!(f)?;
            writeln!(f, "{} on {}:", row.key.category(), row.key.model())?;
            for (rank, c) in row.candidates.iter().enumerate() {
                writeln!(
                    f,
                    "  {}. {}  served {:.1}, refused {:.1}, score {:.2}",
                    rank + 1,
                    c.candidate,
                    c.served,
                    c.refused,
                    c.score()
                )?;
            }
        }
        Ok(())
    }
}

/// The random draws of exploration, in `[0, 1)`.
type Random = dyn Fn() -> f64 + Send + Sync;

/// Orders a refusal's candidates by how often each served instead of
/// refusing its category on its model ([`CandidateCounts::score`]), best
/// first, the operator's order breaking ties; with probability
/// [`exploration`](Self::exploration) (default 0.1), one of the others,
/// drawn at random, goes first instead, so that a model that got better
/// is noticed. It learns from every record the guard makes.
///
/// Counts decay, each halving every [`half_life`](Self::half_life)
/// (default one day), and live in [`MemoryRouteStats`] unless given other
/// [`stats`](Self::stats). The clock and the random draws can be set, so
/// that tests are deterministic.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::{Duration, UNIX_EPOCH};
/// use refusal_guard::routing::{LearnedRouting, MemoryRouteStats, RouteKey, RoutingSource};
///
/// let stats = MemoryRouteStats::new();
/// let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
/// let routing = LearnedRouting::new()
///     .stats(stats.clone())
///     .clock(move || now)
///     .random(|| 0.99); // never explores
/// let key = RouteKey::new(Some("cyber"), "a");
/// for _ in 0..3 {
///     stats.count(&key, "b", false, now, Duration::from_secs(86_400));
///     stats.count(&key, "c", true, now, Duration::from_secs(86_400));
/// }
/// let chain = ["b".to_owned(), "c".to_owned()];
/// assert_eq!(routing.order(&key, &chain).await, ["c", "b"]);
/// # }
/// ```
#[derive(Clone)]
pub struct LearnedRouting {
    stats: Arc<dyn RouteStats>,
    clock: Arc<dyn Clock>,
    random: Arc<Random>,
    exploration: f64,
    half_life: Duration,
}

impl fmt::Debug for LearnedRouting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LearnedRouting")
            .field("exploration", &self.exploration)
            .field("half_life", &self.half_life)
            .finish_non_exhaustive()
    }
}

impl Default for LearnedRouting {
    fn default() -> Self {
        Self::new()
    }
}

impl LearnedRouting {
    /// The default share of refusals that try another candidate first.
    pub const DEFAULT_EXPLORATION: f64 = 0.1;
    /// The default time in which a count halves.
    pub const DEFAULT_HALF_LIFE: Duration = Duration::from_secs(86_400);

    /// Counts in memory, the system clock, exploration 0.1, half-life one day.
    pub fn new() -> Self {
        LearnedRouting {
            stats: Arc::new(MemoryRouteStats::new()),
            clock: Arc::new(SystemClock),
            random: Arc::new(fastrand::f64),
            exploration: Self::DEFAULT_EXPLORATION,
            half_life: Self::DEFAULT_HALF_LIFE,
        }
    }

    /// Keeps the counts in `stats`.
    pub fn stats(mut self, stats: impl RouteStats) -> Self {
        self.stats = Arc::new(stats);
        self
    }

    /// Reads the time from `clock`.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Draws exploration from `random` (values in `[0, 1)`).
    pub fn random<F>(mut self, random: F) -> Self
    where
        F: Fn() -> f64 + Send + Sync + 'static,
    {
        self.random = Arc::new(random);
        self
    }

    /// The share of refusals (`0.0..=1.0`) whose first try is another
    /// candidate than the best.
    pub fn exploration(mut self, share: f64) -> Self {
        self.exploration = share.clamp(0.0, 1.0);
        self
    }

    /// The time in which a count halves (at least a second).
    pub fn half_life(mut self, half_life: Duration) -> Self {
        self.half_life = half_life.max(Duration::from_secs(1));
        self
    }

    fn draw(&self) -> f64 {
        (self.random)().clamp(0.0, 1.0 - f64::EPSILON)
    }

    /// `candidates` best first, from `counts`.
    fn rank(&self, candidates: &[String], counts: &[CandidateCounts]) -> Vec<String> {
        let score = |name: &String| {
            counts
                .iter()
                .find(|c| &c.candidate == name)
                .map_or(0.5, CandidateCounts::score)
        };
        let mut ranked: Vec<String> = candidates.to_vec();
        // Stable: equal scores keep the operator's order.
        ranked.sort_by(|a, b| score(b).total_cmp(&score(a)));
        if ranked.len() > 1 && self.draw() < self.exploration {
            let others = ranked.len() - 1;
            let pick = 1 + ((self.draw() * others as f64) as usize).min(others - 1);
            let explored = ranked.remove(pick);
            ranked.insert(0, explored);
            crate::telemetry::metrics::route_explored();
        }
        ranked
    }
}

impl RoutingSource for LearnedRouting {
    fn order<'a>(
        &'a self,
        key: &'a RouteKey,
        candidates: &'a [String],
    ) -> RoutingFuture<'a, Vec<String>> {
        Box::pin(async move {
            if candidates.len() < 2 {
                return candidates.to_vec();
            }
            let now = self.clock.now();
            let counts = match self.stats.counts(key, now, self.half_life).await {
                Ok(counts) => counts,
                Err(error) => {
                    tracing::warn!(%error, "routing counts unavailable: the operator's order");
                    return candidates.to_vec();
                }
            };
            for c in &counts {
                show(key, c);
            }
            self.rank(candidates, &counts)
        })
    }

    fn learn(&self, record: &RefusalRecord) {
        let Some((key, fallbacks)) = RouteKey::of_record(record) else {
            return;
        };
        let (stats, half_life, now) = (self.stats.clone(), self.half_life, self.clock.now());
        let work = async move {
            for (candidate, served) in fallbacks {
                match stats.add(&key, &candidate, served, now, half_life).await {
                    Ok(counts) => show(&key, &counts),
                    Err(error) => tracing::warn!(%error, "routing counts not updated"),
                }
            }
        };
        detach(Box::pin(work));
    }
}

/// Puts a candidate's counts in the metrics.
fn show(key: &RouteKey, counts: &CandidateCounts) {
    let key = (key.category(), key.model());
    crate::telemetry::metrics::route_counts(key, &counts.candidate, counts.served, counts.refused);
}

/// Runs `work` as far as it goes now, and the rest on a task of its own
/// (counts in memory are done at once; counts elsewhere are never waited
/// for by the call that made them).
fn detach(mut work: RoutingFuture<'static, ()>) {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = std::task::Waker::from(Arc::new(Noop));
    let mut cx = std::task::Context::from_waker(&waker);
    if std::future::Future::poll(work.as_mut(), &mut cx).is_ready() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(work);
        }
        Err(_) => tracing::warn!("no runtime to finish a routing count update on"),
    }
}
