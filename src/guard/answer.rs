//! The answer stage: how the client is answered, chosen once, and the
//! stages every answer runs: judge the original (`judge`), continue a
//! partial refusal (`partial`, opt-in), decide (`decide`), respond
//! (`respond`). Keep-alive comments through a long hold and live thinking
//! (the original's thinking streamed as it comes, a recovered turn spliced
//! into the same message) answer before those stages end. Work for a client
//! that went away stops at once: the stages are dropped with their upstream
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
use crate::guard::decide::Decision;
use crate::guard::exchange::Exchange;
use crate::guard::hold::{is_event_stream, Held, LiveForward};
use crate::guard::partial::{Continued, Plan};
use crate::guard::rejected::Resent;
use crate::guard::respond::{pump, respond, unless_gone, ServedRecovery};
use crate::guard::timeout::UpstreamTimeout;
use crate::guard::upstream::{InnerBody, InnerService, UpstreamBody};

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
            .then(|| exchange.call.dialect.features().live_splice())
            .flatten();
        match splice {
            Some(splice) => Mode::LiveThinking(splice),
            None => Mode::Held {
                keepalive_after: config.keepalive_after.filter(|_| stream),
                // Only a call opted in to continuations is planned for.
                partial: config
                    .continue_partial
                    .then(|| Plan::for_call(exchange, response))
                    .flatten(),
            },
        }
    }
}

/// What the client gets for the original, once it is known which response
/// is the original (`rejected`): what the stages answer, or, when configured,
/// an answer that begins before it. The one place the mode is chosen.
pub(crate) async fn answer<U: InnerService>(
    resent: Resent<U>,
) -> Result<Response<GuardBody<U::Out>>, U::Error> {
    let (exchange, response) = match resent {
        Resent::Ready(exchange, response) => (*exchange, response),
        // A refusal the provider answered with a 400: held already.
        Resent::Judged(exchange, judged) => {
            return Ok(exchange
                .run(Opening::Held(Box::new(judged)), None, None)
                .await)
        }
        Resent::Answered(response) => return Ok(response),
        Resent::Failed(error) => return Err(error),
    };
    let (after, partial) = match Mode::of(&exchange, &response) {
        Mode::LiveThinking(splice) => return Ok(live_thinking(exchange, response, splice)),
        Mode::Held {
            keepalive_after,
            partial,
        } => (keepalive_after, partial),
    };
    let Some(after) = after else {
        return Ok(exchange
            .run(Opening::Response(response), None, partial)
            .await);
    };
    let call = exchange.call.clone();
    let interval = call.config.keepalive_interval;
    let (parts, body) = response.into_parts();
    let early_head = parts.clone();
    // A long hold (minutes of extended thinking) must not starve the client:
    // past `after`, answer with the original head and keep the connection
    // busy with SSE comments until the decision is made.
    let response = Response::from_parts(parts, body);
    let opening = Opening::Response(response);
    let mut decision = Box::pin(exchange.run(opening, None, partial));
    let mut timer = Box::pin(tokio::time::sleep(after));
    let early = std::future::poll_fn(|cx| {
        if let Poll::Ready(served) = decision.as_mut().poll(cx) {
            return Poll::Ready(Some(served));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await;
    Ok(match early {
        Some(served) => served,
        None => keep_alive(early_head, decision, &call, interval),
    })
}

/// The original response as the stages receive it.
enum Opening<R> {
    /// As the upstream sent it: judged first.
    Response(Response<R>),
    /// Held and judged already (a 400 `rejected` read), or its timeout.
    Held(Box<Result<Held<R>, UpstreamTimeout>>),
}

impl<U: InnerService> Exchange<U> {
    /// The stages, from the original response to the client's: judge it
    /// (its thinking forwarded through `live` meanwhile); a partial refusal
    /// continued when `partial` allows and the original claims one, else
    /// decided; then the response the decision comes to.
    async fn run(
        mut self,
        opening: Opening<UpstreamBody<U::Out>>,
        live: Option<&mut LiveForward>,
        partial: Option<Plan>,
    ) -> Response<GuardBody<U::Out>> {
        let judged = match opening {
            Opening::Response(response) => self.judge(response, live).await,
            Opening::Held(judged) => *judged,
        };
        let call = self.call.clone();
        let decision = match judged {
            Err(timeout) => Decision::TimedOut(timeout),
            Ok(held) => {
                let (exchange, held) = match partial {
                    None => (self, held),
                    Some(plan) => match self.continue_partial(held, plan).await {
                        Continued::Served(response) => return response,
                        Continued::Not(exchange, held) => (*exchange, *held),
                    },
                };
                exchange.decide(held).await
            }
        };
        respond(decision, &call)
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
    let handle = call.handle.clone();
    tokio::spawn(async move {
        if let Some(served) = unless_gone(&sender, decision).await {
            pump(served, &sender, None).await;
        }
        // The client holds the handle already: a client that left before
        // anything was judged settles it too, with nothing recorded (the
        // first settling wins).
        handle.settle(None);
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
    response: Response<UpstreamBody<U::Out>>,
    splice: Box<dyn LiveSplice>,
) -> Response<GuardBody<U::Out>> {
    let call = exchange.call.clone();
    let config = call.config.clone();
    let max_frame = config.max_hold_bytes.max(1);
    let (sender, receiver) = tokio::sync::mpsc::channel(64);
    let mut head = response.headers().clone();
    head.remove(CONTENT_LENGTH);
    let (parts, body) = response.into_parts();
    let mut client = Response::from_parts(parts.clone(), ());
    *client.headers_mut() = head;
    let keepalive = config.keepalive_after.map(|_| config.keepalive_interval);
    let handle = call.handle.clone();
    tokio::spawn(async move {
        let mut forward = LiveForward::new(sender.clone(), splice, max_frame);
        let original = Response::from_parts(parts, body);
        let work = async {
            let opening = Opening::Response(original);
            let served = exchange.run(opening, Some(&mut forward), None).await;
            let continuation = served
                .extensions()
                .get::<ServedRecovery>()
                .map(|_| Splice::new(forward.splice.continuation(), max_frame));
            (served, continuation)
        };
        if let Some((served, continuation)) = unless_gone(&sender, work).await {
            pump(served, &sender, continuation).await;
        }
        // As in keep-alive: settled even when the client left first.
        handle.settle(None);
    });
    let (parts, ()) = client.into_parts();
    let mut response = Response::from_parts(parts, GuardBody::channel(receiver, keepalive));
    call.mark(&mut response);
    response
}
