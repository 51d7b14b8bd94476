//! The request side of a guarded call, in the order it is met: what the
//! call knows before the body ([`Incoming`]); how the body is taken in,
//! decided once ([`intake`]: read whole first, or forwarded as it arrives
//! with a bounded copy kept); and the request as the guard sends it
//! ([`original`]: the client's body, the rewrites of the first request,
//! and the draft every recovery attempt starts from). The conversation a
//! call belongs to is named in [`conversation`].

pub(crate) mod conversation;
pub(crate) mod intake;
pub(crate) mod original;

use std::sync::Arc;
use std::time::Instant;

use http::header::ACCEPT_ENCODING;
use http::{HeaderMap, HeaderValue};

use crate::dialect::Dialect;
use crate::guard::caller::Caller;
use crate::guard::config::Config;

/// A guardable request as it arrived, before its body: what the call knows
/// of itself from its head and the layer.
pub(crate) struct Incoming {
    /// The layer's configuration with the tenant's settings applied.
    pub(crate) config: Arc<Config>,
    pub(crate) dialect: &'static dyn Dialect,
    /// The model its path names (Gemini, Bedrock, Vertex).
    pub(crate) path_model: Option<String>,
    /// The conversation the guard's header named.
    pub(crate) named: Option<String>,
    /// When it arrived.
    pub(crate) started: Instant,
    /// The handle the caller attached to the request, if any.
    pub(crate) caller: Option<Arc<Caller>>,
}

impl Incoming {
    /// The request whose head is `parts`, under the tenant it names. The
    /// conversation header is the guard's own: it is taken off here and
    /// never goes upstream, whether or not the request turns out to be
    /// guardable.
    pub(crate) fn new(
        config: &Arc<Config>,
        dialect: &'static dyn Dialect,
        path_model: Option<String>,
        parts: &mut http::request::Parts,
    ) -> Self {
        let started = Instant::now();
        let config = config.for_request(parts);
        let named = config
            .conversation_header
            .as_ref()
            .and_then(|name| parts.headers.remove(name))
            .and_then(|v| v.to_str().ok().map(str::to_owned));
        Incoming {
            config,
            dialect,
            path_model,
            named,
            started,
            caller: Caller::of(parts),
        }
    }

    /// The model its path names, if any.
    pub(crate) fn path_model(&self) -> Option<&str> {
        self.path_model.as_deref()
    }

    /// The headers of the first request as the guard sends it, whether its
    /// body was read first or is forwarded as it arrives: the identity
    /// encoding, and the fallback credit when the default ladder has a
    /// chain for `model` to redeem it on. The one place they are written.
    pub(crate) fn first_headers(&self, headers: &mut HeaderMap, model: Option<&str>) {
        // The guard must read what comes back: a compressed stream would
        // pass unjudged.
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let Some(features) = self.dialect.anthropic() else {
            return;
        };
        let config = &self.config;
        let chain = match (&config.policy, model) {
            (None, Some(model)) => config.ladder.chains().for_model(model),
            _ => &[],
        };
        if config.fallback_credit && !chain.is_empty() {
            features.request_fallback_credit(headers);
        }
    }
}
