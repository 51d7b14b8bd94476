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

use crate::dialect::{Dialect, Retarget};
use crate::guard::call::{Call, JsonBody, Original};
use crate::guard::config::Config;
use crate::guard::replay::ReplayBody;
use crate::guard::reserve::Share;
use crate::refusal::{RefusalHandle, StickyRoute};
use crate::store::key::Conversation;
use crate::store::{ConversationKey, StickyLookup};
use crate::telemetry::RouteRestored;
use crate::BoxError;

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
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .or_else(|| body.size_hint().exact());
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
                    let wanted = room_for(&buffer, data.remaining(), declared);
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

/// How many bytes the request buffer needs to take `more`: all the
/// declared length (already checked to be within the limit) once any byte
/// came, and more only if the body runs past it. Reserved only when bytes
/// arrive, so a client that declares a length and sends nothing holds
/// nothing.
fn room_for(buffer: &BytesMut, more: usize, declared: Option<u64>) -> usize {
    let declared = declared.map_or(0, |len| len as usize);
    (buffer.len() + more).max(if more > 0 { declared } else { 0 })
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
            let retarget = Retarget {
                models: &config.retarget,
                own_model: self.model.as_deref(),
                inject: config.inject_fallbacks,
            };
            self.rewritten |= dialect.retarget_fallbacks(
                &self.parts.uri,
                &mut self.parts.headers,
                json,
                retarget,
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
        let request = crate::telemetry::metrics::GuardedRequest::start(
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

    use super::*;
    use crate::guard::reserve::BytePool;

    /// A body of `chunks` that then ends or, if `open`, never does.
    struct Chunks {
        chunks: VecDeque<Bytes>,
        open: bool,
    }

    impl http_body::Body for Chunks {
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
        BoxBody::new(Chunks {
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
}
