//! The request side of a guarded call: forwarding the body as it arrives
//! while a bounded copy is kept, or reading it whole first when a rewrite
//! of the first request may need it (bounded, never forwarding a broken
//! one); naming the conversation; and the outbound rewrites (sticky route,
//! server-side fallbacks, fallback credit, identity encoding).

pub(crate) mod conversation;
pub(crate) mod original;

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use http::header::ACCEPT_ENCODING;
use http::{HeaderMap, HeaderValue, Uri};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::chunks::Chunks;
use crate::dialect::skim::Located;
use crate::dialect::{ComposedFallbacks, Dialect};
use crate::guard::config::Config;
use crate::refusal::StickyRoute;
use crate::replay::copy::{declared_length, room_for, Copied, CopyOutcome, RequestCopy};
use crate::replay::{ForwardedBody, ReplayBody};
use crate::reserve::Share;
use crate::store::{ConversationKey, StickyLookup};
use crate::telemetry::RouteRestored;
use crate::tenant::Tenant;
use crate::BoxError;
use conversation::Conversation;
use original::{JsonBody, Original};

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
{
    let declared = declared_length(headers, &body);
    if declared.is_some_and(|len| len > limit as u64) {
        return RequestBody::Unguarded(body);
    }
    let mut buffer = BytesMut::new();
    // Bytes of `buffer` already counted against the layer-wide bound.
    let mut counted = 0;
    loop {
        match body.frame().await {
            None => return RequestBody::Read(buffer.freeze()),
            Some(Ok(frame)) => {
                if let Ok(mut data) = frame.into_data() {
                    let wanted = room_for(buffer.len(), data.remaining(), declared);
                    if wanted > counted {
                        if !share.grow(wanted - counted) {
                            tracing::warn!(
                                "the bound on bytes held across requests is reached: request refused"
                            );
                            return RequestBody::NoRoom;
                        }
                        counted = wanted;
                    }
                    // At the first bytes, room for all that were declared:
                    // one allocation, no copies as the buffer grows.
                    buffer.reserve(wanted - buffer.len());
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

/// Whether a request must be read whole before anything is sent: a rewrite
/// of its first request may depend on what it holds. That is a sticky
/// route (any wire API), server-side fallbacks to retarget or inject (only
/// Anthropic's, only where the platform behind `uri` has them), or the
/// fallback credit beta when only the body names the model (the header
/// goes out before a body whose `model` may come after everything else).
/// Every other request, whatever the layer configures for other wire APIs,
/// is forwarded as it arrives.
pub(crate) fn read_first(
    config: &Config,
    dialect: &dyn Dialect,
    uri: &Uri,
    path_model: Option<&str>,
) -> bool {
    let sticky = config.sticky_ttl.is_some() && config.store.may_hold_any();
    let anthropic = dialect.anthropic();
    let fallbacks =
        !config.retarget.is_empty() && anthropic.is_some_and(|f| f.server_fallbacks_on(uri));
    let credit = path_model.is_none()
        && anthropic.is_some_and(|f| f.asks_fallback_credit())
        && config.fallback_credit
        && config.policy.is_none()
        && !config.ladder.chains().is_empty();
    sticky || fallbacks || credit
}

/// Whether the first request asks for fallback credit: when the default
/// ladder has a chain for `model` to redeem it on.
fn asks_fallback_credit(config: &Config, model: Option<&str>) -> bool {
    let chain = match (&config.policy, model) {
        (None, Some(model)) => config.ladder.chains().for_model(model),
        _ => &[],
    };
    config.fallback_credit && !chain.is_empty()
}

/// A guardable request body on its way to being forwarded.
pub(crate) enum Forwarding<B> {
    /// The body type cannot carry a copying body: read it whole first.
    ReadFirst(B, Share),
    /// Declared larger than the limit: forward it as it is, unguarded.
    Unguarded(B),
    /// The body to send and where its copy will be told.
    Sending { body: B, copy: CopyOutcome },
    /// The client's body failed before anything was sent.
    Failed(BoxError),
    /// The layer-wide bound on held bytes leaves no room to copy it.
    NoRoom,
}

/// Readies `body` to be forwarded as it arrives, a copy kept. Its first
/// bytes are awaited first, so that a body that fails at once, or that the
/// layer-wide bound has no room for, is answered before anything goes
/// upstream (a client that declares a length and sends nothing holds
/// nothing).
pub(crate) async fn forward_request_body<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
    share: Share,
) -> Forwarding<B>
where
    B: ReplayBody,
{
    let declared = declared_length(headers, &body);
    if declared.is_some_and(|len| len > limit as u64) {
        return Forwarding::Unguarded(body);
    }
    let (copy, mut later) = RequestCopy::new(declared, limit, share);
    let mut body = match B::forwarded(ForwardedBody::new(body, copy)) {
        Ok(body) => body,
        Err(forwarded) => {
            let (body, copy) = forwarded.into_parts();
            let share = copy.into_share().expect("nothing was copied yet");
            return Forwarding::ReadFirst(body, share);
        }
    };
    let first = body.frame().await;
    let early = later.try_recv().ok();
    match (first, early) {
        (Some(Err(error)), _) => {
            let error: BoxError = error.into();
            tracing::warn!(%error, "request body failed while read: not forwarded");
            Forwarding::Failed(error)
        }
        (_, Some(Copied::NoRoom)) => {
            tracing::warn!("the bound on bytes held across requests is reached: request refused");
            Forwarding::NoRoom
        }
        (first, early) => {
            let prefix = match first.map(|frame| frame.map(http_body::Frame::into_data)) {
                Some(Ok(Ok(mut data))) => data.copy_to_bytes(data.remaining()),
                _ => Bytes::new(),
            };
            Forwarding::Sending {
                body: B::prefixed(prefix, body),
                copy: CopyOutcome::new(early, later),
            }
        }
    }
}

/// The head of a request forwarded as it arrives: the guard's identity
/// encoding and, when the path names the model, the fallback credit the
/// first request asks for (the body, still arriving, is sent as it is).
pub(crate) fn prepare_forwarded(
    parts: &mut http::request::Parts,
    config: &Config,
    dialect: &'static dyn Dialect,
    path_model: Option<&str>,
) {
    parts
        .headers
        .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    if let Some(features) = dialect.anthropic() {
        if asks_fallback_credit(config, path_model) {
            features.request_fallback_credit(&mut parts.headers);
        }
    }
}

/// A guardable request on its way out: its head and body as they will be
/// sent, and what the guard knows of it.
/// A guardable request as the guard read it: its parts, its head
/// ([`request_head`](crate::dialect::request_head)), its body, and where
/// the body's top-level members are when the head's skim located them.
pub(crate) struct ReadRequest {
    pub(crate) parts: http::request::Parts,
    pub(crate) head: Value,
    pub(crate) body: Chunks,
    pub(crate) members: Option<Vec<Located>>,
}

pub(crate) struct Outbound {
    pub(crate) parts: http::request::Parts,
    /// The body as the client sent it, sent as is unless rewritten.
    body: JsonBody,
    rewritten: bool,
    pub(crate) model: Option<String>,
    pub(crate) streaming: bool,
    route: Option<StickyRoute>,
    conversation: Conversation,
    /// The server-side fallbacks a retarget wrote, to take back.
    composed: Option<ComposedFallbacks>,
}

impl Outbound {
    /// Reads what the guard needs from a guardable request. `named` is the
    /// conversation the client named in the guard's header, if it did.
    pub(crate) fn new(
        config: &Config,
        dialect: &'static dyn Dialect,
        path_model: Option<&str>,
        request: ReadRequest,
        named: Option<String>,
    ) -> Self {
        let ReadRequest {
            mut parts,
            head,
            body: bytes,
            members,
        } = request;
        // Kept for every recovery until the response has streamed.
        crate::chunks::unpin_headers(&mut parts.headers);
        let mut body = JsonBody::new(bytes.clone());
        // The guard must read what comes back: a compressed stream would
        // pass unjudged.
        parts
            .headers
            .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        // Which conversation: the user's closure, then the header, then a
        // hash of what stays the same across the conversation, computed
        // only if asked for; each tenant's apart from the others'.
        let scope = Some(config.tenant.name()).filter(|name| *name != Tenant::DEFAULT_NAME);
        let conversation = match config
            .conversation_fn
            .as_ref()
            .and_then(|key| key(&parts, body.json_mut()?))
            .or(named)
        {
            Some(key) => {
                let key = conversation::scoped(scope, key.as_bytes());
                Conversation::named(Some(ConversationKey::from_bytes(&key)))
            }
            None => Conversation::derived(dialect, bytes, members).scoped(scope),
        };
        Outbound {
            model: dialect.request_model(path_model, &head),
            streaming: dialect.is_streaming(&parts.uri, &head),
            parts,
            body,
            rewritten: false,
            route: None,
            conversation,
            composed: None,
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
        if let Some(features) = dialect.anthropic() {
            features.fit_prefill(json, &sticky);
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
        let Some(features) = dialect.anthropic() else {
            return;
        };
        let retarget = !config.retarget.is_empty();
        if let Some(json) = retarget.then(|| self.body.json_mut()).flatten() {
            let retarget = config.retarget(self.model.as_deref(), config.inject_fallbacks);
            let (uri, headers) = (&self.parts.uri, &mut self.parts.headers);
            self.composed = features.retarget_fallbacks(uri, headers, json, retarget);
            self.rewritten |= self.composed.is_some();
        }
        if asks_fallback_credit(config, self.model.as_deref()) {
            features.request_fallback_credit(&mut self.parts.headers);
        }
    }

    /// What the call reads of the request, and the original as it will
    /// be sent (recoveries start from a draft of it).
    pub(crate) fn into_original(self, share: Share) -> (Named, Original) {
        let named = Named {
            model: self.model,
            streaming: self.streaming,
            route: self.route,
            conversation: self.conversation,
        };
        let original = Original {
            parts: self.parts,
            body: self.body,
            rewritten: self.rewritten,
            composed: self.composed,
            _share: Arc::new(share),
        };
        (named, original)
    }
}

/// What the call reads of a guardable request: its model, whether it
/// streams, the sticky route it took and its conversation.
pub(crate) struct Named {
    pub(crate) model: Option<String>,
    pub(crate) streaming: bool,
    pub(crate) route: Option<StickyRoute>,
    pub(crate) conversation: Conversation,
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
    crate::telemetry::metrics::route_restored(dialect.wire_api());
    let event = RouteRestored::new(conversation, model, routed_to);
    let sink = &config.telemetry;
    let told =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.route_restored(&event)));
    if told.is_err() {
        tracing::warn!("telemetry sink panicked on route_restored");
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use http_body::Frame;
    use http_body_util::combinators::BoxBody;

    use http::header::CONTENT_LENGTH;

    use super::*;
    use crate::reserve::BytePool;

    /// A body of `chunks` that then ends or, if `open`, never does.
    struct SentChunks {
        chunks: VecDeque<Bytes>,
        open: bool,
    }

    impl http_body::Body for SentChunks {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.chunks.pop_front() {
                Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
                None if self.open => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
    }

    fn body(chunks: &[&'static str], open: bool) -> BoxBody<Bytes, Infallible> {
        let chunks = chunks.iter().map(|c| Bytes::from_static(c.as_bytes()));
        BoxBody::new(SentChunks {
            chunks: chunks.collect(),
            open,
        })
    }

    fn declaring(len: usize) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
        headers
    }

    async fn read(
        headers: &HeaderMap,
        body: BoxBody<Bytes, Infallible>,
        pool: &Arc<BytePool>,
    ) -> (RequestBody<BoxBody<Bytes, Infallible>>, Share) {
        let mut share = pool.share();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            read_request_body(headers, body, 1 << 20, &mut share),
        )
        .await
        .expect("the read ended");
        (read, share)
    }

    #[tokio::test]
    async fn the_declared_length_is_counted_when_the_first_bytes_come() {
        let pool = BytePool::new(1 << 20);
        let (read, share) = read(&declaring(10), body(&["0123", "456789"], false), &pool).await;
        assert!(matches!(read, RequestBody::Read(bytes) if bytes == "0123456789"));
        assert_eq!(pool.used(), 10, "counted once, as declared");
        drop(share);
        assert_eq!(pool.used(), 0);
    }

    #[tokio::test]
    async fn a_declared_length_the_pool_cannot_hold_is_refused_at_the_first_bytes() {
        // The client is still sending: the answer does not wait for it.
        let pool = BytePool::new(64);
        let (read, _share) = read(&declaring(100), body(&["{"], true), &pool).await;
        assert!(matches!(read, RequestBody::NoRoom));
        assert_eq!(pool.used(), 0);
    }

    #[tokio::test]
    async fn a_declared_length_with_no_bytes_yet_holds_nothing() {
        let pool = BytePool::new(64);
        let mut share = pool.share();
        let headers = declaring(60);
        let reading = read_request_body(&headers, body(&[], true), 1 << 20, &mut share);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), reading).await;
        assert!(waited.is_err(), "still waiting for the body");
        assert_eq!(pool.used(), 0);
    }

    #[tokio::test]
    async fn a_body_longer_than_declared_is_read_whole_and_counted() {
        let pool = BytePool::new(1 << 20);
        let (read, _share) = read(&declaring(4), body(&["01", "2345", "67"], false), &pool).await;
        assert!(matches!(read, RequestBody::Read(bytes) if bytes == "01234567"));
        assert_eq!(pool.used(), 8);
    }

    #[tokio::test]
    async fn without_a_declared_length_the_bytes_are_counted_as_they_come() {
        let pool = BytePool::new(1 << 20);
        let (read, _share) = read(&HeaderMap::new(), body(&["01", "2345"], false), &pool).await;
        assert!(matches!(read, RequestBody::Read(bytes) if bytes == "012345"));
        assert_eq!(pool.used(), 6);
    }

    #[tokio::test]
    async fn a_forwarded_body_yields_what_the_client_sent_and_its_copy_is_whole() {
        let pool = BytePool::new(1 << 20);
        let long = Bytes::from(format!("\"{}\"}}", "m".repeat(70_000)));
        let sent = BoxBody::new(SentChunks {
            chunks: [Bytes::from_static(b"{\"model\":"), long.clone()].into(),
            open: false,
        });
        let headers = HeaderMap::new();
        let forwarding = forward_request_body(&headers, sent, 1 << 20, pool.share());
        let Forwarding::Sending { body, copy } = forwarding.await else {
            panic!("a boxed body is forwarded as it arrives");
        };
        let forwarded = body.collect().await.unwrap().to_bytes();
        assert_eq!(forwarded, [&b"{\"model\":"[..], &long].concat());
        let Some(Copied::Whole(copied, _share)) = copy.wait().await else {
            panic!("the copy is whole");
        };
        assert_eq!(copied.join(), forwarded);
        // A long body's long chunk is kept itself, not its bytes again.
        assert_eq!(copied.as_slice()[1].as_ptr(), long.as_ptr());
    }

    #[tokio::test]
    async fn a_declared_length_the_pool_cannot_hold_is_refused_before_anything_is_sent() {
        let pool = BytePool::new(64);
        let headers = declaring(100);
        let forwarding = forward_request_body(&headers, body(&["{"], true), 1 << 20, pool.share());
        let forwarding = tokio::time::timeout(std::time::Duration::from_secs(5), forwarding)
            .await
            .expect("answered at the first bytes");
        assert!(matches!(forwarding, Forwarding::NoRoom));
        assert_eq!(pool.used(), 0);
    }
}
