//! The request as the guard sends it: read from what the client sent
//! (its model, whether it streams, its conversation), rewritten for the
//! first send (sticky route, server-side fallbacks, fallback credit,
//! identity encoding), and the draft each recovery attempt starts from.
//! The client's body is parsed only once something rewrites it.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderValue, Request};
use serde_json::Value;

use crate::dialect::skim::Located;
use crate::dialect::{ComposedFallbacks, Dialect};
use crate::guard::request::conversation::{self, Conversation};
use crate::guard::request::Incoming;
use crate::guard::reroute::Asked;
use crate::refusal::StickyRoute;
use crate::replay::chunks::Chunks;
use crate::replay::reserve::Share;
use crate::replay::ReplayBody;
use crate::store::{ConversationKey, StickyLookup};
use crate::telemetry::RouteRestored;
use crate::tenant::Tenant;

/// A request body as the client sent it, parsed only once something
/// rewrites it: most requests go out as they came.
pub(crate) struct JsonBody {
    original: Chunks,
    parsed: Option<Value>,
}

impl JsonBody {
    /// The body as read; the caller has seen that it is a JSON object.
    pub(crate) fn new(original: Chunks) -> Self {
        JsonBody {
            original,
            parsed: None,
        }
    }

    /// The body as JSON to rewrite, parsed on the first call. `None` when it
    /// is JSON too deep for the parser, which the head read does not see.
    pub(crate) fn json_mut(&mut self) -> Option<&mut Value> {
        if self.parsed.is_none() {
            self.parsed = serde_json::from_slice(&self.original.join()).ok();
        }
        self.parsed.as_mut()
    }

    /// A copy of the body as JSON.
    pub(crate) fn to_json(&self) -> Option<Value> {
        match &self.parsed {
            Some(json) => Some(json.clone()),
            None => serde_json::from_slice(&self.original.join()).ok(),
        }
    }
}

/// The request as the guard sends it, and what the guard read of it;
/// recoveries start from a [`draft`](Original::draft) of it.
pub(crate) struct Original {
    pub(crate) parts: http::request::Parts,
    /// The body as the client sent it, sent as is unless rewritten.
    pub(crate) body: JsonBody,
    /// Whether an outbound rewrite changed the body.
    pub(crate) rewritten: bool,
    /// The server-side fallbacks the guard wrote into the request, to take
    /// back.
    pub(crate) composed: Option<ComposedFallbacks>,
    /// The model it asks for (after a sticky route, the route's).
    pub(crate) model: Option<String>,
    /// Whether it asks for a stream.
    pub(crate) streaming: bool,
    /// Whether the client's request carries server-side fallbacks.
    pub(crate) server_fallbacks: bool,
    /// The sticky route it took.
    pub(crate) route: Option<StickyRoute>,
    pub(crate) conversation: Conversation,
    /// The layer-wide pool's part for the buffered request body, given back
    /// when the call is decided.
    pub(crate) _share: Arc<Share>,
}

impl Original {
    /// The request `parts` heads with `body`, whose head is `head` and
    /// whose top-level members are at `members` when known; `share` holds
    /// the body's room in the pool.
    pub(crate) fn read(
        incoming: &Incoming,
        parts: http::request::Parts,
        head: &Value,
        body: Chunks,
        members: Option<Vec<Located>>,
        share: Share,
    ) -> Self {
        let Incoming {
            config, dialect, ..
        } = incoming;
        let mut json = JsonBody::new(body.clone());
        // Which conversation: the user's closure, then the header, then a
        // hash of what stays the same across the conversation, computed
        // only if asked for; each tenant's apart from the others'.
        let scope = Some(config.tenant.name()).filter(|name| *name != Tenant::DEFAULT_NAME);
        let conversation = match config
            .conversation_fn
            .as_ref()
            .and_then(|key| key(&parts, json.json_mut()?))
            .or_else(|| incoming.named.clone())
        {
            Some(key) => {
                let key = conversation::scoped(scope, key.as_bytes());
                Conversation::named(Some(ConversationKey::from_bytes(&key)))
            }
            None => Conversation::derived(*dialect, body, members).scoped(scope),
        };
        Original {
            model: dialect.request_model(incoming.path_model(), head),
            streaming: dialect.is_streaming(&parts.uri, head),
            server_fallbacks: dialect.features().carries_server_fallbacks(head),
            parts,
            body: json,
            rewritten: false,
            composed: None,
            route: None,
            conversation,
            _share: Arc::new(share),
        }
    }

    /// A request read whole before anything was sent, ready to send: read,
    /// routed (sticky fallback), then rewritten for the first send.
    pub(crate) async fn prepare(
        incoming: &Incoming,
        parts: http::request::Parts,
        head: &Value,
        body: Chunks,
        share: Share,
    ) -> Self {
        let mut original = Original::read(incoming, parts, head, body, None, share);
        original.route_sticky(incoming).await;
        original.rewrite(incoming);
        original
    }

    /// Sticky fallback: a conversation a fallback served goes there
    /// directly.
    async fn route_sticky(&mut self, incoming: &Incoming) {
        let Incoming {
            config, dialect, ..
        } = incoming;
        // An empty store routes nothing: the key is not worth computing.
        if config.sticky_ttl.is_none() || !config.store.may_hold_any() {
            return;
        }
        let Some(key) = self.conversation.key() else {
            return;
        };
        let asked = config.store.sticky_lookup(key);
        let bound = config.budget.deadline;
        let sticky = match tokio::time::timeout(bound, asked).await {
            Ok(StickyLookup::Routed(model)) => model,
            Ok(StickyLookup::Ended(routed_to)) => {
                let key = Some(key.as_str().to_owned());
                return restored(incoming, key, self.model.clone(), routed_to);
            }
            _ => return,
        };
        if self.model.as_deref() == Some(sticky.as_str()) {
            return;
        }
        let Some(json) = self.body.json_mut() else {
            return;
        };
        if dialect
            .swap_model(&mut self.parts.uri, json, &sticky)
            .is_err()
        {
            return;
        }
        dialect.features().fit_prefill(json, &sticky);
        tracing::info!(from = ?self.model, to = %sticky, "sticky fallback route");
        self.route = Some(StickyRoute {
            requested: self.model.clone(),
            routed_to: sticky.clone(),
        });
        self.model = Some(sticky);
        self.rewritten = true;
    }

    /// The first request's rewrites: its headers, then the server-side
    /// fallbacks a retarget list writes.
    fn rewrite(&mut self, incoming: &Incoming) {
        let Incoming {
            config, dialect, ..
        } = incoming;
        incoming.first_headers(&mut self.parts.headers, self.model.as_deref());
        let features = dialect.features();
        if config.retarget.is_empty() {
            return;
        }
        if let Some(json) = self.body.json_mut() {
            let retarget = config.retarget(self.model.as_deref(), config.inject_fallbacks);
            let (uri, headers) = (&self.parts.uri, &mut self.parts.headers);
            self.composed = features.retarget_fallbacks(uri, headers, json, retarget);
            self.rewritten |= self.composed.is_some();
        }
    }

    /// Takes back the server-side fallbacks the guard wrote, if it wrote
    /// any, leaving the request as the client wrote it there.
    pub(crate) fn withdraw_composed_fallbacks(&mut self, dialect: &dyn Dialect) {
        let composed = self.composed.take();
        if let (Some(composed), Some(json)) = (composed, self.body.json_mut()) {
            let headers = &mut self.parts.headers;
            dialect
                .features()
                .restore_fallbacks(headers, json, &composed);
        }
    }

    /// The request to send: the client's bytes, or the rewritten JSON.
    pub(crate) fn request<B: ReplayBody>(&self) -> Request<B> {
        match (&self.body.parsed, self.rewritten) {
            (Some(json), true) => request_of(self.parts.clone(), json),
            _ => with_body(self.parts.clone(), self.body.original.join(), false),
        }
    }

    /// The model it asks for, which its response is held to.
    pub(crate) fn asked(&self) -> Option<Asked> {
        let server_fallbacks = self.server_fallbacks || self.composed.is_some();
        let uri = &self.parts.uri;
        Asked::new(self.model.as_deref(), uri, self.streaming, server_fallbacks)
    }

    /// A copy for a recovery step to rewrite; `None` when the body cannot
    /// be parsed whole.
    pub(crate) fn draft(&self) -> Option<Draft> {
        Some(Draft {
            parts: self.parts.clone(),
            json: self.body.to_json()?,
            composed: self.composed.clone(),
            _share: self._share.clone(),
        })
    }
}

/// A recovery attempt's request, before it is sent.
#[derive(Clone)]
pub(crate) struct Draft {
    pub(crate) parts: http::request::Parts,
    pub(crate) json: Value,
    /// The server-side fallbacks the guard wrote into the original.
    pub(crate) composed: Option<ComposedFallbacks>,
    /// The layer-wide pool's part for the buffered request body, given back
    /// when the call is decided.
    pub(crate) _share: Arc<Share>,
}

impl Draft {
    /// Aims the request at another model: the server-side fallbacks the
    /// guard wrote for the requested model (within its allowlist, never
    /// naming it) taken back first, the client's own kept for the dialect
    /// to fit to the new model.
    pub(crate) fn aim_at(
        &mut self,
        dialect: &dyn Dialect,
        model: &str,
    ) -> Result<(), crate::dialect::RewriteError> {
        if let Some(composed) = self.composed.take() {
            let (headers, json) = (&mut self.parts.headers, &mut self.json);
            dialect
                .features()
                .restore_fallbacks(headers, json, &composed);
        }
        dialect.swap_model(&mut self.parts.uri, &mut self.json, model)
    }

    pub(crate) fn request<B: ReplayBody>(&self, json: &Value) -> Request<B> {
        request_of(self.parts.clone(), json)
    }
}

fn request_of<B: ReplayBody>(parts: http::request::Parts, json: &Value) -> Request<B> {
    let bytes = Bytes::from(serde_json::to_vec(json).unwrap_or_default());
    with_body(parts, bytes, true)
}

/// Builds a request, making its length headers true of the new body.
pub(crate) fn with_body<B: ReplayBody>(
    mut parts: http::request::Parts,
    bytes: Bytes,
    rewritten: bool,
) -> Request<B> {
    if rewritten {
        parts.headers.remove(TRANSFER_ENCODING);
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    }
    Request::from_parts(parts, B::from_bytes(bytes))
}

/// A sticky route ended: this request goes to its own (primary) model
/// again. Leaves a trace in the log, the metrics and the telemetry sink.
fn restored(
    incoming: &Incoming,
    conversation: Option<String>,
    model: Option<String>,
    routed_to: String,
) {
    tracing::info!(
        model = ?model,
        routed_to = %routed_to,
        "sticky route ended: primary model restored"
    );
    crate::telemetry::metrics::route_restored(incoming.dialect.wire_api());
    let event = RouteRestored::new(conversation, model, routed_to);
    let sink = &incoming.config.telemetry;
    let told =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.route_restored(&event)));
    if told.is_err() {
        tracing::warn!("telemetry sink panicked on route_restored");
    }
}
