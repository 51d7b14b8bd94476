//! Turning a decision into what the client and the log get: the response
//! (head, held bytes, the rest of the stream), the typed refusal in its
//! extensions, the telemetry record, and the settling of its handle.

use std::collections::VecDeque;
use std::future::Future;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http::{HeaderValue, Response};
use http_body::{Body, Frame};
use serde_json::Value;

use crate::dialect::{Dialect, Handoff};
use crate::guard::body::{GuardBody, Splice};
use crate::guard::call::Call;
use crate::guard::decide::{Decision, HandoffMark};
use crate::guard::errors::{timed_out, Shape};
use crate::guard::hold::Held;
use crate::guard::settle::{refusal_of, seen_in, About, Settlement};
use crate::guard::timeout::{IdleTimeout, UpstreamTimeout};
use crate::guard::upstream::InnerBody;
use crate::refusal::{Attempt, Outcome, Refusal};
use crate::BoxError;

/// Turns a decision into the response the client gets, recording the
/// refusal it carries and settling the handle (or leaving both to the end
/// of the stream, when that is what decides).
pub(crate) fn respond<R>(decision: Decision<IdleTimeout<R>>, call: &Call) -> Response<GuardBody<R>>
where
    R: InnerBody,
{
    match decision {
        Decision::TimedOut(timeout) => {
            call.settle_unjudged("the upstream timed out before a response could be judged");
            timed_out(Shape::Api(call.dialect.wire_api()), timeout)
        }
        Decision::Unjudged(original) => {
            call.settle_unjudged(
                "a response the guard does not judge (an error status, another type)",
            );
            serve(original, call, None, None, None)
        }
        Decision::AsSent {
            original,
            request_id,
            attempts,
        } => serve_as_sent(original, call, request_id, attempts),
        Decision::Dead {
            original,
            refusal,
            attempts,
        } => serve_settled(original, call, Some(refusal), attempts, None),
        Decision::Recovered {
            mut attempt,
            refusal,
            attempts,
            handoff,
        } => {
            let splice = handoff.and_then(|mark| mark_handoff(&mut attempt, call, &mark));
            let (outcome, category) = (refusal.outcome, refusal.category.clone());
            let served_by = refusal.served_model.clone();
            let mut response = serve_recovered(attempt, call, refusal, attempts, splice);
            let (category, served_by) = (category.as_deref(), served_by.as_deref());
            mark_recovered(&mut response, outcome, category, served_by);
            response
        }
        Decision::Committed {
            attempt,
            request_id,
            attempts,
            recovery,
        } => {
            let about = About::Committed(recovery);
            let settle = Settlement::new(call.clone(), request_id, attempts, about);
            let mut response = serve(attempt, call, Some(settle), None, None);
            // Not yet known to be a recovery: no recovery header, which
            // must never announce one that may still refuse.
            response.extensions_mut().insert(ServedRecovery);
            response
        }
    }
}

/// Serves an original that was not an empty refusal: output, an end
/// without output, a provider error or a hold bound. A whole JSON body is
/// settled now; a stream is settled by what the rest of it shows.
fn serve_as_sent<R>(
    held: Held<IdleTimeout<R>>,
    call: &Call,
    request_id: Option<String>,
    mut attempts: Vec<Attempt>,
) -> Response<GuardBody<R>>
where
    R: InnerBody,
{
    if let Some(findings) = held.judged.clone() {
        let refusal = refusal_of(call, &findings, request_id, false);
        if let Some(original) = attempts.pop() {
            attempts.push(seen_in(original, &findings));
        }
        return serve_settled(held, call, refusal, attempts, None);
    }
    // Decided: what streams from now on needs at most the key.
    call.conversation.compact();
    let settle = Settlement::new(call.clone(), request_id, attempts, About::Original);
    serve(held, call, Some(settle), None, None)
}

/// Serves a recovery attempt with real output. A whole JSON body is
/// recorded now; a stream when it ends, since its end carries what the
/// record says of the attempt (what became of a credit token, a chain's
/// iterations), or when it is cut short, marked so.
pub(crate) fn serve_recovered<R>(
    held: Held<IdleTimeout<R>>,
    call: &Call,
    refusal: Refusal,
    attempts: Vec<Attempt>,
    splice: Option<Splice>,
) -> Response<GuardBody<R>>
where
    R: InnerBody,
{
    if held.judge.is_none() || held.rest.is_none() {
        return serve_settled(held, call, Some(refusal), attempts, splice);
    }
    call.conversation.compact();
    let request_id = refusal.request_id.clone();
    let about = About::Decided(refusal.clone());
    let settle = Settlement::new(call.clone(), request_id, attempts, about);
    serve(held, call, Some(settle), Some(&refusal), splice)
}

/// Marks a fallback's model change in the response served: a stream through
/// the splice returned, a whole JSON body at once.
fn mark_handoff<R>(
    held: &mut Held<IdleTimeout<R>>,
    call: &Call,
    mark: &HandoffMark,
) -> Option<Splice> {
    let handoff = mark.handoff();
    if held.judge.is_none() {
        mark_json(held, call.dialect, &handoff);
        return None;
    }
    // The body that follows is not the one this length was for.
    held.parts.headers.remove(CONTENT_LENGTH);
    let max_frame = call.config.max_hold_bytes.max(1);
    call.dialect
        .anthropic()?
        .handoff_stream(&handoff)
        .map(|rewrite| Splice::new(rewrite, max_frame))
}

/// Marks a handoff inside a whole (already read) JSON body.
fn mark_json<R>(
    held: &mut Held<IdleTimeout<R>>,
    dialect: &'static dyn Dialect,
    handoff: &Handoff<'_>,
) {
    if held.rest.is_some() {
        return;
    }
    let mut whole = BytesMut::new();
    for frame in &held.frames {
        if let Some(data) = frame.data_ref() {
            whole.extend_from_slice(data);
        }
    }
    let Ok(mut json) = serde_json::from_slice::<Value>(&whole) else {
        return;
    };
    let marked = dialect
        .anthropic()
        .is_some_and(|features| features.handoff_json(&mut json, handoff));
    if marked {
        let bytes = Bytes::from(serde_json::to_vec(&json).unwrap_or_default());
        held.parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        held.frames = VecDeque::from([Frame::data(bytes)]);
    }
}

/// Marks a response that is a recovery attempt rather than the original, so
/// that live thinking knows to continue the message the client has begun.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServedRecovery;

/// Marks a recovered response for the client: the `refusal-guard-recovery`
/// header (see [`header::RECOVERY`](crate::header::RECOVERY)) and [`ServedRecovery`].
pub(crate) fn mark_recovered<B>(
    response: &mut Response<B>,
    outcome: Outcome,
    category: Option<&str>,
    served_by: Option<&str>,
) {
    let mut value = outcome.as_str().to_owned();
    for (name, part) in [("category", category), ("served-by", served_by)] {
        if let Some(part) = part.map(header_safe).filter(|p| !p.is_empty()) {
            value.push_str(&format!("; {name}={part}"));
        }
    }
    if let Ok(value) = HeaderValue::from_str(&value) {
        response
            .headers_mut()
            .insert(crate::header::RECOVERY, value);
    }
    response.extensions_mut().insert(ServedRecovery);
}

/// A provider's word as a header value part: the characters a model or
/// category name is made of, anything else as `_`, at most 100 of them.
fn header_safe(word: &str) -> String {
    word.chars()
        .take(100)
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | ':' | '/' | '@' | '+' | '-' => c,
            _ => '_',
        })
        .collect()
}

/// The sending side of a body answered before its decision.
pub(crate) type FrameSender = tokio::sync::mpsc::Sender<Result<Frame<Bytes>, BoxError>>;

/// Runs `work` until it ends or the client reading `sender`'s channel goes
/// away; then `work` is dropped, and with it every upstream request and body
/// it holds, so that nothing more is done for a client that left.
pub(crate) async fn unless_gone<T>(
    sender: &FrameSender,
    work: impl Future<Output = T>,
) -> Option<T> {
    let mut work = std::pin::pin!(work);
    let mut gone = std::pin::pin!(sender.closed());
    std::future::poll_fn(|cx| {
        if let Poll::Ready(done) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(done));
        }
        gone.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// Streams a decided response's body into a channel (a body answered before
/// its decision), through `splice` when given. Stops when the client goes.
///
/// The client already has a head, so an answer the guard made itself (a
/// timeout) cannot be sent as such: the stream is cut with its error.
pub(crate) async fn pump<R>(
    served: Response<GuardBody<R>>,
    sender: &FrameSender,
    mut splice: Option<Splice>,
) where
    R: Body,
    R::Error: Into<BoxError>,
{
    use http_body_util::BodyExt;
    if let Some(timeout) = served.extensions().get::<UpstreamTimeout>() {
        let _ = sender.send(Err(Box::new(*timeout))).await;
        return;
    }
    let mut body = served.into_body();
    while let Some(frame) = unless_gone(sender, body.frame()).await.flatten() {
        let frame = match (splice.as_mut(), frame) {
            (Some(splice), Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    let out = splice.push(data);
                    if out.is_empty() {
                        continue;
                    }
                    Ok(http_body::Frame::data(out))
                }
                Err(frame) => Ok(frame),
            },
            (_, frame) => frame,
        };
        if sender.send(frame).await.is_err() {
            // The client went away: dropping the body cancels upstream.
            return;
        }
    }
    if let Some(tail) = splice.as_mut().map(Splice::finish) {
        if !tail.is_empty() {
            let _ = sender.send(Ok(http_body::Frame::data(tail))).await;
        }
    }
}

/// Turns a held response into the response the client gets.
pub(crate) fn serve<R>(
    held: Held<IdleTimeout<R>>,
    call: &Call,
    settle: Option<Settlement>,
    decided: Option<&Refusal>,
    splice: Option<Splice>,
) -> Response<GuardBody<R>>
where
    R: InnerBody,
{
    let Held {
        parts,
        frames,
        share,
        rest,
        error,
        judge,
        ..
    } = held;
    let mut response = Response::from_parts(
        parts,
        GuardBody::guarded(frames, Some(share), rest, error, judge, settle, splice),
    );
    call.mark(&mut response);
    if let Some(refusal) = decided {
        response.extensions_mut().insert(refusal.clone());
    }
    response
}

/// A response whose refusal question is settled now (JSON, or a decision
/// made before serving).
pub(crate) fn serve_settled<R>(
    held: Held<IdleTimeout<R>>,
    call: &Call,
    refusal: Option<Refusal>,
    attempts: Vec<Attempt>,
    splice: Option<Splice>,
) -> Response<GuardBody<R>>
where
    R: InnerBody,
{
    match &refusal {
        Some(refusal) => call.emit(refusal, attempts),
        None => call.settle_answered(attempts.len()),
    }
    let mut held = held;
    // The decision is made; nothing more to judge.
    held.judge = None;
    serve(held, call, None, refusal.as_ref(), splice)
}
