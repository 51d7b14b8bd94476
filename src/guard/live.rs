//! Answering before the decision: keep-alive comments through a long hold,
//! and live thinking (the original's thinking streamed as it comes, a
//! recovered turn spliced into the same message). Work for a client that
//! went away stops at once: the decision is dropped with its upstream
//! requests and bodies.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use http::header::CONTENT_LENGTH;
use http::Response;

use crate::dialect::LiveSplice;
use crate::guard::body::{GuardBody, Splice};
use crate::guard::call::Call;
use crate::guard::errors::{timed_out, Shape};
use crate::guard::exchange::Exchange;
use crate::guard::hold::{hold, is_event_stream, LiveForward};
use crate::guard::partial::{decide_and_continue, Plan};
use crate::guard::respond::{decide_and_respond, pump, respond, unless_gone, ServedRecovery};
use crate::guard::timeout::IdleTimeout;
use crate::guard::upstream::{InnerBody, InnerService};

/// How a guarded call answers, chosen once from the configuration and the
/// original's head.
enum Mode {
    /// The original's thinking streamed at once, a recovery spliced in.
    LiveThinking(Box<dyn LiveSplice>),
    /// Held until decided (a response with output served so that a partial
    /// refusal in it can be continued, when `partial` says how); past
    /// `keepalive_after`, the original head and SSE comments meanwhile.
    Held {
        keepalive_after: Option<Duration>,
        partial: Option<Plan>,
    },
}

impl Mode {
    fn of<S, R>(exchange: &Exchange<S>, response: &Response<R>) -> Mode {
        let config = &exchange.call.config;
        let stream = response.status().is_success() && is_event_stream(response.headers());
        let splice = (config.live_thinking && stream)
            .then(|| exchange.call.dialect.anthropic()?.live_splice())
            .flatten();
        match splice {
            Some(splice) => Mode::LiveThinking(splice),
            None => Mode::Held {
                keepalive_after: config.keepalive_after.filter(|_| stream),
                partial: Plan::for_call(exchange, response),
            },
        }
    }
}

/// What the client gets for the original `response`: the decision, or,
/// when configured, an answer that begins before it. The one place the
/// mode is chosen.
pub(crate) async fn answer<U: InnerService>(
    exchange: Exchange<U>,
    response: Response<IdleTimeout<U::Out>>,
) -> Response<GuardBody<U::Out>> {
    let (after, partial) = match Mode::of(&exchange, &response) {
        Mode::LiveThinking(splice) => return live_thinking(exchange, response, splice),
        Mode::Held {
            keepalive_after,
            partial,
        } => (keepalive_after, partial),
    };
    let Some(after) = after else {
        return decide(exchange, response, partial).await;
    };
    let call = exchange.call.clone();
    let interval = call.config.keepalive_interval;
    let (parts, body) = response.into_parts();
    let early_head = parts.clone();
    // A long hold (minutes of extended thinking) must not starve the client:
    // past `after`, answer with the original head and keep the connection
    // busy with SSE comments until the decision is made.
    let mut decision = Box::pin(decide(exchange, Response::from_parts(parts, body), partial));
    let mut timer = Box::pin(tokio::time::sleep(after));
    let early = std::future::poll_fn(|cx| {
        if let Poll::Ready(served) = decision.as_mut().poll(cx) {
            return Poll::Ready(Some(served));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await;
    match early {
        Some(served) => served,
        None => keep_alive(early_head, decision, &call, interval),
    }
}

/// The decision as the client gets it once made: served so that a partial
/// refusal can be continued, when the call allows it.
async fn decide<U: InnerService>(
    exchange: Exchange<U>,
    response: Response<IdleTimeout<U::Out>>,
    partial: Option<Plan>,
) -> Response<GuardBody<U::Out>> {
    match partial {
        Some(plan) => decide_and_continue(exchange, response, plan).await,
        None => decide_and_respond(exchange, response).await,
    }
}

/// Answers with `head` now and streams the decision's response body when it
/// comes, SSE comments meanwhile. The decision is dropped, and with it every
/// upstream request it made, as soon as the client goes.
fn keep_alive<R, F>(
    mut head: http::response::Parts,
    decision: Pin<Box<F>>,
    call: &Call,
    interval: Duration,
) -> Response<GuardBody<R>>
where
    F: Future<Output = Response<GuardBody<R>>> + Send + 'static,
    R: InnerBody,
{
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        if let Some(served) = unless_gone(&sender, decision).await {
            pump(served, &sender, None).await;
        }
    });
    // The body that follows is not the one this length was for.
    head.headers.remove(CONTENT_LENGTH);
    let mut response = Response::from_parts(head, GuardBody::channel(receiver, Some(interval)));
    call.mark(&mut response);
    response
}

/// Live thinking: answers with the original head at once and streams the
/// original's thinking as it comes, holding back only what a decision
/// depends on (text, tool use, the stop). A recovered turn then continues
/// the same message: its blocks follow the thinking the client has seen.
fn live_thinking<U: InnerService>(
    exchange: Exchange<U>,
    response: Response<IdleTimeout<U::Out>>,
    splice: Box<dyn LiveSplice>,
) -> Response<GuardBody<U::Out>> {
    let call = exchange.call.clone();
    let config = call.config.clone();
    let streaming = exchange.streaming;
    let max_frame = config.max_hold_bytes.max(1);
    let (sender, receiver) = tokio::sync::mpsc::channel(64);
    let mut head = response.headers().clone();
    head.remove(CONTENT_LENGTH);
    let (parts, body) = response.into_parts();
    let mut client = Response::from_parts(parts.clone(), ());
    *client.headers_mut() = head;
    let marks = call.clone();
    let keepalive = config.keepalive_after.map(|_| config.keepalive_interval);
    tokio::spawn(async move {
        let mut forward = LiveForward::new(sender.clone(), splice, max_frame);
        let dialect = call.dialect;
        let original = Response::from_parts(parts, body);
        let work = async {
            let held = hold(original, dialect, &config, streaming, Some(&mut forward));
            let held = match call.within_deadline(held).await {
                Ok(held) => held,
                Err(timeout) => {
                    call.handle.settle(None);
                    return (timed_out(Shape::Api(dialect.wire_api()), timeout), None);
                }
            };
            let served = respond(exchange.conclude(held).await, &call);
            let continuation = served
                .extensions()
                .get::<ServedRecovery>()
                .map(|_| Splice::new(forward.splice.continuation(), max_frame));
            (served, continuation)
        };
        if let Some((served, continuation)) = unless_gone(&sender, work).await {
            pump(served, &sender, continuation).await;
        }
    });
    let (parts, ()) = client.into_parts();
    let mut response = Response::from_parts(parts, GuardBody::channel(receiver, keepalive));
    marks.mark(&mut response);
    response
}
