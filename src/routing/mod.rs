//! Routing: in which order a refusal's fallback candidates are tried.
//!
//! The default ladder climbs the requested model's fallback chain. A
//! [`RoutingSource`] orders that chain for each refusal, from its category
//! and the requested model ([`RouteKey`]): [`FixedRouting`] (the default)
//! keeps the operator's order; [`LearnedRouting`] tries first the candidate
//! that has most often served instead of refusing that category, with a
//! small share of exploration. A routing source only ever reorders: the
//! chain stays the set of candidates, never widened (the guard drops any
//! name that is not in it).
//!
//! A source learns from the guard's own records: every
//! [`RefusalRecord`] is shown to it.
//!
//! ```
//! use refusal_guard::recovery::FallbackChains;
//! use refusal_guard::routing::LearnedRouting;
//! use refusal_guard::RefusalGuardLayer;
//!
//! let layer = RefusalGuardLayer::new()
//!     .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["claude-sonnet-4-5", "openai:gpt-5"]))
//!     .route_by(LearnedRouting::new());
//! # let _ = layer;
//! ```

mod learned;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;

pub use learned::{
    CandidateCounts, Clock, LearnedRouting, MemoryRouteStats, RouteRow, RouteStats, RouteTable,
};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::refusal::{AttemptResult, AttemptStep, RefusalKind};
use crate::telemetry::RefusalRecord;

/// The future a routing source answers with.
pub type RoutingFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a refusal's candidates are ordered for: its category (lower-cased;
/// `none` when the provider gave none) and the model the client asked for.
///
/// ```
/// use refusal_guard::routing::RouteKey;
///
/// let key = RouteKey::new(Some("CYBER"), "claude-opus-4-7");
/// assert_eq!(key.category(), "cyber");
/// assert_eq!(RouteKey::new(None, "m").category(), "none");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteKey {
    category: String,
    model: String,
}

impl RouteKey {
    /// The key of a refusal of `category` on `model`.
    pub fn new(category: Option<&str>, model: impl Into<String>) -> Self {
        RouteKey {
            category: category.unwrap_or("none").to_ascii_lowercase(),
            model: model.into(),
        }
    }

    /// The refusal's category, lower-cased.
    pub fn category(&self) -> &str {
        &self.category
    }

    /// The model the client asked for.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The key of a record, and the fallbacks it shows that served
    /// (`true`) or refused (`false`): what a source learns from it. Fallbacks
    /// that failed otherwise (an upstream error, skipped) say nothing of
    /// what the model accepts; partial refusals are left out.
    ///
    /// ```
    /// use refusal_guard::routing::RouteKey;
    ///
    /// let record = serde_json::from_str(
    ///     r#"{"ts":"2026-01-01T00:00:00.000Z","model":"a","category":"cyber","outcome":"fallback","attempts":[
    ///         {"step":"original","model":"a","result":"refused","latency_ms":3},
    ///         {"step":"fallback","model":"b","result":"refused","latency_ms":3},
    ///         {"step":"fallback","model":"c","result":"served","latency_ms":9}]}"#,
    /// ).unwrap();
    /// let (key, fallbacks) = RouteKey::of_record(&record).unwrap();
    /// assert_eq!((key.category(), key.model()), ("cyber", "a"));
    /// assert_eq!(fallbacks, [("b".to_owned(), false), ("c".to_owned(), true)]);
    /// ```
    pub fn of_record(record: &RefusalRecord) -> Option<(RouteKey, Vec<(String, bool)>)> {
        if record.kind == RefusalKind::Partial {
            return None;
        }
        let model = record.model.as_deref()?;
        let fallbacks: Vec<(String, bool)> = record
            .attempts
            .iter()
            .filter(|a| a.step == AttemptStep::Fallback)
            .filter_map(|a| {
                let served = match a.result {
                    AttemptResult::Served => true,
                    AttemptResult::Refused => false,
                    _ => return None,
                };
                Some((a.model.clone()?, served))
            })
            .collect();
        if fallbacks.is_empty() {
            return None;
        }
        Some((RouteKey::new(record.category.as_deref(), model), fallbacks))
    }
}

/// Orders a refusal's fallback candidates, best first, and learns from
/// what became of them. [`FixedRouting`] is the default.
///
/// The guard asks once per refusal, before its first fallback, within the
/// call's recovery deadline (past it, the operator's order); what it
/// answers is kept to the candidates it was given, any missing ones
/// following in the operator's order.
///
/// ```
/// use refusal_guard::routing::{RouteKey, RoutingFuture, RoutingSource};
///
/// /// Tries the chain backwards.
/// struct Backwards;
///
/// impl RoutingSource for Backwards {
///     fn order<'a>(&'a self, _key: &'a RouteKey, candidates: &'a [String]) -> RoutingFuture<'a, Vec<String>> {
///         Box::pin(async move { candidates.iter().rev().cloned().collect() })
///     }
/// }
/// let layer = refusal_guard::RefusalGuardLayer::new().route_by(Backwards);
/// # let _ = layer;
/// ```
pub trait RoutingSource: Send + Sync + 'static {
    /// `candidates` (the operator's chain, in its order), best first.
    fn order<'a>(
        &'a self,
        key: &'a RouteKey,
        candidates: &'a [String],
    ) -> RoutingFuture<'a, Vec<String>>;

    /// Told every record the guard makes (default: nothing learned). It
    /// must not block: a source that writes elsewhere does so on a task of
    /// its own.
    fn learn(&self, record: &RefusalRecord) {
        let _ = record;
    }
}

impl<R: RoutingSource + ?Sized> RoutingSource for Arc<R> {
    fn order<'a>(
        &'a self,
        key: &'a RouteKey,
        candidates: &'a [String],
    ) -> RoutingFuture<'a, Vec<String>> {
        (**self).order(key, candidates)
    }

    fn learn(&self, record: &RefusalRecord) {
        (**self).learn(record)
    }
}

/// The operator's order, as the chain was written: the default.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use refusal_guard::routing::{FixedRouting, RouteKey, RoutingSource};
///
/// let chain = ["b".to_owned(), "c".to_owned()];
/// let order = FixedRouting.order(&RouteKey::new(Some("cyber"), "a"), &chain).await;
/// assert_eq!(order, chain);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct FixedRouting;

impl RoutingSource for FixedRouting {
    fn order<'a>(
        &'a self,
        _key: &'a RouteKey,
        candidates: &'a [String],
    ) -> RoutingFuture<'a, Vec<String>> {
        Box::pin(std::future::ready(candidates.to_vec()))
    }
}

/// `order` kept to `candidates`, each once, then the candidates it left
/// out in their order: a source may reorder the chain, never widen it.
pub(crate) fn within(order: Vec<String>, candidates: &[String]) -> Vec<String> {
    let mut kept: Vec<String> = Vec::with_capacity(candidates.len());
    for name in order {
        if candidates.contains(&name) && !kept.contains(&name) {
            kept.push(name);
        }
    }
    for name in candidates {
        if !kept.contains(name) {
            kept.push(name.clone());
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_is_kept_to_the_candidates_and_completed() {
        let chain: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let order = ["c", "x", "c", "a"].map(String::from).to_vec();
        assert_eq!(within(order, &chain), ["c", "a", "b"]);
        assert_eq!(within(Vec::new(), &chain), chain);
    }
}
