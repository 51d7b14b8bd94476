//! The guard: one guarded call from the request to the served response.
//!
//! The public types ([`layer`], [`service`], [`body`], [`timeout`]) are
//! re-exported at the crate root; the rest is the private per-request
//! pipeline. This is its one description. Its steps, in the order one
//! request meets them: `service::guard` runs the request's side (each step
//! returning what the next takes), and `answer` runs the response's side,
//! the one chain judge -> decide -> respond. Each step's function is
//! called from one place.
//!
//! ```text
//! layer             RefusalGuardLayer: the builder; config holds what it built
//! service           RefusalGuard::call: recognise the wire API, else pass
//!                   through; guard(): the steps below, in order
//! request/mod       Incoming: what the call knows before the body (tenant,
//!                   dialect, path model, the conversation header taken off)
//!                   and the headers the first request goes out with
//! request/intake    take_in: the body taken in, decided once (Intake): read
//!                   whole first, or forwarded as it arrives, a bounded copy kept
//! send              the original sent: read whole then rewritten, or sent
//!                   at once with its head learnt from the copy; the call starts
//! request/original  Original::read: the request as sent (model, stream,
//!                   conversation), its rewrites, the draft of each attempt
//! exchange          Exchange::new: the per-request carrier the steps hand on
//! rejected          a 400 to the guard's own server-side fallbacks: sent again
//!                   without them; which response is the original is now known
//! answer            how the client is answered (held, keep-alive, live
//!                   thinking), chosen once; run: the chain below
//! hold              judge: the original held back until it shows output, a
//!                   refusal, its end or a bound
//! partial           opt-in (Anthropic): continue a claimed partial refusal
//! decide/           the original as it is, or the ladder on an empty refusal
//!                   (decide/climb.rs, decide/steps.rs): a Decision, a value
//! respond           the decision as the client's response, marked, recorded
//!                   now or handed a Settlement to make the record later
//! body              held bytes first, then the rest of the stream, still judged
//! settle            Settlement::settle: the record, made once, at the
//!                   stream's end or when the client goes
//! ```
//!
//! One streamed request with no refusal, traced (default configuration),
//! each function with its file:
//!
//! ```text
//! RefusalGuardLayer::layer                   layer
//! RefusalGuard::call, guard                  service
//! Incoming::new                              request/mod
//! take_in -> Intake::Forwarded               request/intake
//! send, as_it_arrives                        send  (Incoming::first_headers,
//!                                                   then sent at once and the
//!                                                   head learnt from the copy)
//! Original::read                             request/original
//! Call::start -> SentOriginal                send  (call: shared)
//! Exchange::new                              exchange
//! without_rejected_fallbacks -> Ready        rejected  (not a 400)
//! answer, Mode::of, run                      answer
//! Exchange::judge -> output seen             hold
//! Exchange::decide -> Decision::AsSent       decide/mod
//! respond, serve (with a Settlement)         respond
//! GuardBody::poll_frame, to the stream's end body
//! Settlement::settle                         settle
//! ```
//!
//! `service::guard` is where control returns between the request's steps;
//! within `send`, `Original::read` reads the copy that arrived while the
//! request went upstream, and `send` then starts the call. Types
//! of a later step are built by an earlier one in two places: `respond`
//! builds the `Settlement` the body carries to `settle`, and `decide`
//! reads the attempts the exchange already holds. `partial` is entered
//! only when continuations are opted in. A request read whole first
//! differs in one stop: `Intake::Read`, then `rewritten` in send reads,
//! routes and rewrites the original before sending it. A 400 that answers
//! the guard's own server-side fallbacks is held by `rejected`
//! (`Exchange::hold_original`, which the judge step runs too) and handed
//! to `run` already judged.
//!
//! Shared by the steps, calling none of them: `call` (the per-call context
//! every step and record reads, [`call::Call`]), `caller` (the
//! `CallHandle` a caller attached, filled once), `findings` (what judging
//! found, and the stream judge), `upstream` (the one alias of the inner
//! service, [`upstream::InnerService`], and its timeouts), `errors` (every
//! error the guard answers itself, in the API's shape), `timeout` and
//! `config`. The request body's copy is `crate::replay::copy`, the byte
//! pool `crate::replay::reserve`.
//!
//! One request's state is one [`exchange::Exchange`]: the inner service, the
//! call, the request as sent (which says whether it streams) and when it
//! went. Each
//! step takes the exchange and hands it on; the other types hold only what
//! their step adds:
//!
//! ```text
//! request::original::Original  the request as sent; Draft, an attempt's copy
//! send::SentOriginal    the original sent and answered, before the exchange
//! hold::Held            one response held back: head, bytes read, the rest
//! decide::Decision      what a held original becomes
//! decide::climb::Climb  the ladder's progress on one empty refusal
//! settle::Settlement    the record of a response let through, made once
//! ```

pub(crate) mod answer;
pub mod body;
pub(crate) mod call;
pub(crate) mod caller;
pub(crate) mod config;
pub(crate) mod decide;
pub(crate) mod errors;
pub(crate) mod exchange;
pub(crate) mod findings;
pub(crate) mod hold;
pub mod layer;
pub(crate) mod partial;
pub(crate) mod rejected;
pub(crate) mod request;
pub(crate) mod respond;
pub(crate) mod send;
pub mod service;
pub(crate) mod settle;
pub mod timeout;
pub(crate) mod upstream;
