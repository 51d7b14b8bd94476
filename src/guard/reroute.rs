//! Reroutes: a response another model served than the one its request
//! asked for, with no refusal and no fallback of the provider's own to say
//! so. The dialect tells another model from another name of the same one
//! ([`Dialect::is_reroute`]); here is what an attempt asked for, what a
//! reroute seen is, and how it is said (as a refusal of its own category
//! when the layer recovers reroutes, and in the opt-in header). Shared by
//! the steps that hold (`hold`), record (`settle`) and serve (`respond`);
//! it calls none of them.

use http::{HeaderValue, Uri};

use crate::dialect::{Dialect, RefusalInfo};
use crate::refusal::{RefusalSignal, REROUTED_CATEGORY};

/// The model one attempt asked for, which its response is held to.
#[derive(Debug, Clone)]
pub(crate) struct Asked {
    model: String,
    uri: Uri,
    /// Whether the response's first event may decide: not for a stream
    /// whose request carries the provider's own server-side fallbacks,
    /// which may open with the model it falls back to and say so only
    /// later (a `fallback` block, the iterations at the end).
    pub(crate) early: bool,
}

impl Asked {
    /// `model`, asked for by a request to `uri`. Its first event may decide
    /// unless a stream's request carries server-side fallbacks (the
    /// provider's own, or ones the guard wrote in). `None` without a model.
    pub(crate) fn new(
        model: Option<&str>,
        uri: &Uri,
        streaming: bool,
        server_fallbacks: bool,
    ) -> Option<Self> {
        Some(Asked {
            model: model?.to_owned(),
            uri: uri.clone(),
            early: !(streaming && server_fallbacks),
        })
    }

    /// The reroute a response that names `served` as its model is, if it
    /// is one.
    pub(crate) fn reroute(&self, dialect: &dyn Dialect, served: &str) -> Option<Rerouted> {
        dialect
            .is_reroute(&self.uri, &self.model, served)
            .then(|| Rerouted {
                requested: self.model.clone(),
                served: served.to_owned(),
            })
    }
}

/// A reroute seen: the model asked for and the one the response named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rerouted {
    pub(crate) requested: String,
    pub(crate) served: String,
}

impl Rerouted {
    /// The reroute as a refusal: signal `rerouted`, category `rerouted`.
    pub(crate) fn info(&self) -> RefusalInfo {
        RefusalInfo {
            signal: Some(RefusalSignal::Rerouted),
            category: Some(REROUTED_CATEGORY.to_owned()),
            explanation: Some(format!(
                "the provider served {} in place of {}",
                self.served, self.requested
            )),
            ..RefusalInfo::default()
        }
    }

    /// The `refusal-guard-reroute` header's value:
    /// `requested=M1; served=M2`, each made header-safe.
    pub(crate) fn header(&self) -> Option<HeaderValue> {
        let value = format!(
            "requested={}; served={}",
            crate::header::value_part(&self.requested),
            crate::header::value_part(&self.served)
        );
        HeaderValue::from_str(&value).ok()
    }
}
