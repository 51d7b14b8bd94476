//! The original sent, as its intake decided: read whole, then rewritten
//! and sent; or forwarded as it arrives, its head learnt from the copy
//! while the upstream answers. Either way the call starts here, and what
//! comes back is handed on as one [`SentOriginal`]; a request with nothing
//! to guard it by is sent as it is.

use std::future::Future;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};

use crate::dialect::skim::Located;
use crate::dialect::{self, Dialect};
use crate::guard::body::GuardBody;
use crate::guard::call::Call;
use crate::guard::errors::{overloaded, timed_out, unreadable, Shape};
use crate::guard::request::intake::Intake;
use crate::guard::request::original::{with_body, Original};
use crate::guard::request::Incoming;
use crate::guard::upstream::{InnerService, SendError, UpstreamBody};
use crate::refusal::{AttemptResult, AttemptStep, RefusalHandle};
use crate::replay::chunks::{unpin_request_head, Chunks};
use crate::replay::copy::{Copied, CopyOutcome};
use crate::replay::reserve::Share;
use crate::telemetry::metrics::{AttemptSpan, GuardedRequest};
use crate::BoxError;

/// What sending the original came to.
pub(crate) enum Sent<U: InnerService> {
    /// The original sent and answered: the exchange starts from it.
    Original(Box<SentOriginal<U>>),
    /// The call is over: passed through unguarded, refused, or failed.
    Answered(Result<Response<GuardBody<U::Out>>, U::Error>),
}

/// A guarded call whose original was sent and answered.
pub(crate) struct SentOriginal<U: InnerService> {
    pub(crate) call: Call,
    pub(crate) original: Original,
    pub(crate) response: Response<UpstreamBody<U::Out>>,
    pub(crate) attempt: AttemptSpan,
    /// When the original went.
    pub(crate) sent: Instant,
}

/// Sends the request `parts` heads, its body taken in as `intake`.
pub(crate) async fn send<U: InnerService>(
    upstream: &mut U,
    incoming: Incoming,
    parts: http::request::Parts,
    intake: Intake<U::Body>,
) -> Sent<U> {
    let api = Shape::Api(incoming.dialect.wire_api());
    match intake {
        Intake::Read { bytes, share } => rewritten(upstream, incoming, parts, bytes, share).await,
        Intake::Forwarded { body, copy } => {
            let request = Request::from_parts(parts, body);
            as_it_arrives(upstream, incoming, request, copy).await
        }
        Intake::Unguarded(body) => {
            Sent::Answered(pass(upstream, api, Request::from_parts(parts, body)).await)
        }
        Intake::Failed(error) => Sent::Answered(Ok(unreadable(api, &error))),
        Intake::NoRoom => Sent::Answered(Ok(overloaded(api))),
    }
}

/// A request read whole: its head read, its first request rewritten, then
/// sent.
async fn rewritten<U: InnerService>(
    upstream: &mut U,
    incoming: Incoming,
    mut parts: http::request::Parts,
    bytes: Bytes,
    share: Share,
) -> Sent<U> {
    let dialect = incoming.dialect;
    let api = Shape::Api(dialect.wire_api());
    let Some(head) = dialect::request_head(&bytes) else {
        // Not a JSON object: nothing to guard, forward the bytes as they were.
        return Sent::Answered(pass(upstream, api, with_body(parts, bytes, false)).await);
    };
    if unguardable(dialect, &head) {
        return Sent::Answered(pass(upstream, api, with_body(parts, bytes, false)).await);
    }
    // Kept for every recovery until the response has streamed.
    unpin_request_head(&mut parts);
    let original = Original::prepare(&incoming, parts, &head, Chunks::from(bytes), share).await;
    let call = Call::start(incoming, &original);
    let model = call.model.as_deref();
    let mut attempt = call.request.attempt(AttemptStep::Original, model, None);
    let sent = Instant::now();
    match upstream.send(original.request()).await {
        Ok(response) => Sent::Original(Box::new(SentOriginal {
            call,
            original,
            response,
            attempt,
            sent,
        })),
        Err(failed) => {
            attempt.end_with(AttemptResult::TransportError, None);
            Sent::Answered(failure(api, failed))
        }
    }
}

/// A request forwarded as it arrives: sent at once, its head read from
/// the copy once the copy is whole (while the upstream is still
/// answering). A request whose copy could not be kept (over the bounds,
/// cut short) is served unguarded, as a request too large to read is.
async fn as_it_arrives<U: InnerService>(
    upstream: &mut U,
    incoming: Incoming,
    request: Request<U::Body>,
    copy: CopyOutcome,
) -> Sent<U> {
    let dialect = incoming.dialect;
    let api = Shape::Api(dialect.wire_api());
    let (mut parts, body) = request.into_parts();
    // Kept for every recovery until the response has streamed, and from
    // the moment the request goes: the connection reads on (for the next
    // request, or to see the client leave) as soon as the body is in.
    unpin_request_head(&mut parts);
    let sent_parts = parts.clone();
    let sent = Instant::now();
    let mut attempt = AttemptSpan::forwarded(dialect.wire_api());
    let request = Request::from_parts(parts, body);
    let (response, learned) = send_learning(upstream, request, copy).await;
    let (response, head, bytes, members, share) = match (response, learned) {
        // The client's body failed after forwarding began: the upstream
        // request was aborted with its error, whatever it answered.
        (_, Learned::Failed) => {
            let error: BoxError = "the client's body failed while it was forwarded".into();
            return Sent::Answered(Ok(unreadable(api, &error)));
        }
        (Err(failed), learned) => {
            let model = match &learned {
                Learned::Head(learned) => learned.head.get("model").and_then(|m| m.as_str()),
                _ => None,
            };
            let model = model.or(incoming.path_model());
            never_settled(&incoming, model);
            if let Some(model) = model {
                attempt.model(model);
            }
            attempt.end_with(AttemptResult::TransportError, None);
            return Sent::Answered(failure(api, failed));
        }
        (Ok(response), Learned::Unguarded(reason)) => {
            tracing::debug!(wire_api = %dialect.wire_api(), reason, "forwarded unguarded");
            return Sent::Answered(Ok(response.map(GuardBody::unread)));
        }
        (Ok(response), Learned::Head(learned)) => {
            let LearnedHead {
                head,
                bytes,
                members,
                share,
            } = *learned;
            (response, head, bytes, members, share)
        }
    };
    if unguardable(dialect, &head) {
        return Sent::Answered(Ok(response.map(GuardBody::unread)));
    }
    let original = Original::read(&incoming, sent_parts, &head, bytes, members, share);
    let call = Call::start(incoming, &original);
    if let Some(model) = &call.model {
        attempt.model(model);
    }
    Sent::Original(Box::new(SentOriginal {
        call,
        original,
        response,
        attempt,
        sent,
    }))
}

/// Whether the dialect will not guard a request whose head is `head`
/// (said in the log).
fn unguardable(dialect: &dyn Dialect, head: &serde_json::Value) -> bool {
    let Some(reason) = dialect.unguardable(head) else {
        return false;
    };
    tracing::debug!(
        wire_api = %dialect.wire_api(),
        reason,
        "request cannot be guarded: forwarded unguarded"
    );
    true
}

/// Counts and logs a guarded request whose original failed in transport
/// before its call started, as one whose call had started is.
fn never_settled(incoming: &Incoming, model: Option<&str>) {
    let handle = RefusalHandle::default();
    let tenant = incoming.config.tenant.name();
    let api = incoming.dialect.wire_api();
    drop(GuardedRequest::start(api, model, false, &handle, tenant));
}

/// What a forwarded request's copy told of it.
enum Learned {
    /// The whole body and what was read of it.
    Head(Box<LearnedHead>),
    /// Nothing to guard it with, and why.
    Unguarded(&'static str),
    /// The client's body failed.
    Failed,
}

/// A forwarded request's whole copy: its head, its bytes, where its
/// top-level members are when the skim found them, and the pool's part
/// for them.
struct LearnedHead {
    head: serde_json::Value,
    bytes: Chunks,
    members: Option<Vec<Located>>,
    share: Share,
}

impl Learned {
    fn of(copied: Option<Copied>) -> Self {
        match copied {
            Some(Copied::Whole(bytes, share)) => match dialect::forwarded_head(bytes.as_slice()) {
                Some((head, members)) => Learned::Head(Box::new(LearnedHead {
                    head,
                    bytes,
                    members,
                    share,
                })),
                None => Learned::Unguarded("not a JSON object"),
            },
            Some(Copied::OverLimit) => Learned::Unguarded("over max_request_body: no copy kept"),
            Some(Copied::NoRoom) => Learned::Unguarded("no room left for a copy"),
            Some(Copied::Failed) => Learned::Failed,
            None => Learned::Unguarded("the upstream answered before the request was whole"),
        }
    }
}

/// Sends `request` and, meanwhile, reads the head of its body from the
/// copy as soon as the copy is whole: usually while the upstream is still
/// answering, so the read adds nothing to the wait. A response that comes
/// before the copy is whole leaves the call with nothing to guard it with
/// (`Unguarded`).
async fn send_learning<U: InnerService>(
    upstream: &mut U,
    request: Request<U::Body>,
    copy: CopyOutcome,
) -> (
    Result<Response<UpstreamBody<U::Out>>, SendError<U::Error>>,
    Learned,
) {
    let mut sending = std::pin::pin!(upstream.send(request));
    // Unconstrained: tokio's cooperative budget would otherwise make a copy
    // already told look pending once a busy task has spent its budget, and
    // a request whose copy is whole would go unguarded.
    let learning = tokio::task::unconstrained(async move { Learned::of(copy.wait().await) });
    let mut learning = std::pin::pin!(learning);
    let mut learned = None;
    let response = std::future::poll_fn(|cx| {
        let mut learn = |cx: &mut Context<'_>| {
            if learned.is_none() {
                if let Poll::Ready(known) = learning.as_mut().poll(cx) {
                    learned = Some(known);
                }
            }
        };
        learn(cx);
        let response = ready!(sending.as_mut().poll(cx));
        // Sending may have ended the body within this poll.
        learn(cx);
        Poll::Ready(response)
    })
    .await;
    let learned = learned.unwrap_or(Learned::Unguarded(
        "the upstream answered before the request was whole",
    ));
    (response, learned)
}

/// Forwards a request the guard will not judge.
pub(crate) async fn pass<U: InnerService>(
    upstream: &mut U,
    api: Shape<'_>,
    request: Request<U::Body>,
) -> Result<Response<GuardBody<U::Out>>, U::Error> {
    match upstream.send(request).await {
        Ok(response) => Ok(response.map(GuardBody::unread)),
        Err(failed) => failure(api, failed),
    }
}

/// A send that failed: the inner service's error as it is, or the
/// timeout answered in the API's shape.
fn failure<B, E>(api: Shape<'_>, failed: SendError<E>) -> Result<Response<GuardBody<B>>, E> {
    match failed {
        SendError::Inner(error) => Err(error),
        SendError::Timeout(timeout) => Ok(timed_out(api, timeout)),
    }
}
