//! The request side of a guarded call: reading the body (bounded, never
//! forwarding a broken one), naming the conversation, and the outbound
//! rewrites (sticky route, server-side fallbacks, fallback credit, identity
//! encoding).

use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{ACCEPT_ENCODING, CONTENT_LENGTH};
use http::{HeaderMap, HeaderValue, Request};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::body::BoxError;
use crate::call::{Call, JsonBody, Original};
use crate::config::Config;
use crate::conversation::Conversation;
use crate::dialect::Dialect;
use crate::refusal::{RefusalHandle, StickyRoute};
use crate::replay::ReplayBody;
use crate::reserve::Share;
use crate::store::{ConversationKey, StickyLookup};
use crate::telemetry::RouteRestored;

pub(crate) enum RequestBody<B> {
    Read(Bytes),
    /// Too large to guard: forward as it is, streaming.
    Unguarded(B),
    /// The client's body failed while read: nothing goes upstream.
    Failed(BoxError),
    /// The layer-wide bound on held bytes leaves no room to buffer it.
    NoRoom,
}

pub(crate) async fn read_request_body<B>(
    headers: &HeaderMap,
    mut body: B,
    limit: usize,
    share: &mut Share,
) -> RequestBody<B>
where
    B: ReplayBody,
    B::Error: Into<BoxError>,
{
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .or_else(|| body.size_hint().exact());
    if declared.is_some_and(|len| len > limit as u64) {
        return RequestBody::Unguarded(body);
    }
    let mut buffer = BytesMut::new();
    loop {
        match body.frame().await {
            None => return RequestBody::Read(buffer.freeze()),
            Some(Ok(frame)) => {
                if let Ok(mut data) = frame.into_data() {
                    if !share.grow(data.remaining()) {
                        tracing::warn!(
                            "the bound on bytes held across requests is reached: request refused"
                        );
                        return RequestBody::NoRoom;
                    }
                    while data.has_remaining() {
                        let chunk = data.chunk();
                        buffer.extend_from_slice(chunk);
                        let n = chunk.len();
                        data.advance(n);
                    }
                }
                if buffer.len() > limit {
                    tracing::debug!(limit, "request body over the limit: forwarded unguarded");
                    return RequestBody::Unguarded(B::prefixed(buffer.freeze(), body));
                }
            }
            Some(Err(error)) => {
                // A truncated request must never reach the upstream as if
                // it were complete.
                let error: BoxError = error.into();
                tracing::warn!(%error, "request body failed while read: not forwarded");
                return RequestBody::Failed(error);
            }
        }
    }
}

/// A guardable request on its way out: its head and body as they will be
/// sent, and what the guard knows of it.
pub(crate) struct Outbound {
    pub(crate) parts: http::request::Parts,
    /// The body as the client sent it, sent as is unless rewritten.
    body: JsonBody,
    rewritten: bool,
    pub(crate) model: Option<String>,
    pub(crate) streaming: bool,
    route: Option<StickyRoute>,
    conversation: Conversation,
}

impl Outbound {
    /// Reads what the guard needs from a guardable request: its parts, its
    /// `head` ([`request_head`](crate::dialect::request_head)) and its body.
    /// `named` is the conversation the client named in the guard's header,
    /// if it did.
    pub(crate) fn new(
        config: &Config,
        dialect: &'static dyn Dialect,
        path_model: Option<&str>,
        request: (http::request::Parts, Value, Bytes),
        named: Option<String>,
    ) -> Self {
        let (mut parts, head, bytes) = request;
        let mut body = JsonBody::new(bytes.clone());
        // The guard must read what comes back: a compressed stream would
        // pass unjudged.
        parts
            .headers
            .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        // Which conversation: the user's closure, then the header, then a
        // hash of what stays the same across the conversation, computed
        // only if asked for.
        let conversation = match config
            .conversation_fn
            .as_ref()
            .and_then(|key| key(&parts, body.json_mut()?))
            .or(named)
        {
            Some(key) => Conversation::named(Some(ConversationKey::from_bytes(key.as_bytes()))),
            None => Conversation::derived(dialect, bytes),
        };
        Outbound {
            model: dialect.request_model(path_model, &head),
            streaming: dialect.is_streaming(&parts.uri, &head),
            parts,
            body,
            rewritten: false,
            route: None,
            conversation,
        }
    }

    /// Sticky fallback: a conversation a fallback served goes there
    /// directly.
    pub(crate) async fn route_sticky(&mut self, config: &Config, dialect: &'static dyn Dialect) {
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
                return restored(config, dialect, key, self.model.clone(), routed_to);
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
        tracing::info!(from = ?self.model, to = %sticky, "sticky fallback route");
        self.route = Some(StickyRoute {
            requested: self.model.clone(),
            routed_to: sticky.clone(),
        });
        self.model = Some(sticky);
        self.rewritten = true;
    }

    /// Server-side fallbacks and fallback credit.
    pub(crate) fn rewrite(&mut self, config: &Config, dialect: &'static dyn Dialect) {
        let retarget = !config.retarget.is_empty();
        if let Some(json) = retarget.then(|| self.body.json_mut()).flatten() {
            self.rewritten |= dialect.retarget_fallbacks(
                &mut self.parts.headers,
                json,
                &config.retarget,
                self.model.as_deref(),
                config.inject_fallbacks,
            );
        }
        // Fallback credit is asked for when the default ladder has a chain
        // to redeem it on.
        let chain = match (&config.policy, self.model.as_deref()) {
            (None, Some(model)) => config.ladder.chains().for_model(model),
            _ => &[],
        };
        if config.fallback_credit && !chain.is_empty() {
            dialect.request_fallback_credit(&mut self.parts.headers);
        }
    }

    /// The call, the template recoveries start from, and the original
    /// request to send.
    pub(crate) fn into_call<B: ReplayBody>(
        self,
        config: Arc<Config>,
        dialect: &'static dyn Dialect,
        started: Instant,
        share: Share,
    ) -> (Call, Original, Request<B>) {
        let handle = RefusalHandle::default();
        let request = crate::metrics::GuardedRequest::start(
            dialect,
            self.model.as_deref(),
            self.streaming,
            &handle,
        );
        let call = Call {
            request,
            route: self.route,
            config,
            dialect,
            model: self.model,
            conversation: self.conversation,
            started,
            handle,
        };
        let template = Original {
            parts: self.parts,
            body: self.body,
            rewritten: self.rewritten,
            _share: Arc::new(share),
        };
        let original = template.request();
        (call, template, original)
    }
}

/// A sticky route ended: this request goes to its own (primary) model
/// again. Leaves a trace in the log, the metrics and the telemetry sink.
fn restored(
    config: &Config,
    dialect: &'static dyn Dialect,
    conversation: Option<String>,
    model: Option<String>,
    routed_to: String,
) {
    tracing::info!(
        model = ?model,
        routed_to = %routed_to,
        "sticky route ended: primary model restored"
    );
    crate::metrics::route_restored(dialect.wire_api());
    let event = RouteRestored::new(conversation, model, routed_to);
    let sink = &config.telemetry;
    let told =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.route_restored(&event)));
    if told.is_err() {
        tracing::warn!("telemetry sink panicked on route_restored");
    }
}
