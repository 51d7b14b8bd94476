//! The guard: one guarded call from the request to the served response.
//!
//! The public types ([`layer`], [`service`], [`body`], [`timeout`]) are
//! re-exported at the crate root; the rest is the private per-request
//! pipeline. This is its one description. Its stages, in the order one
//! request meets them: `service::guard` runs the request's side (each stage
//! returning what the next takes), and `answer` the response's side, the
//! stages judge -> decide -> respond run by `Exchange::run`. Each stage is
//! one file, entered once, and its function is called from one place.
//!
//! ```text
//! layer             RefusalGuardLayer: the builder; config holds what it built
//! service           RefusalGuard::call: recognise the wire API, else pass
//!                   through; guard(): the stages below, in order
//! request/mod       Incoming: what the call knows before the body (tenant,
//!                   dialect, path model, the conversation header taken off)
//!                   and the headers the first request goes out with
//! request/intake    take_in: the body taken in, decided once (Intake): read
//!                   whole first, or forwarded as it arrives (its first
//!                   headers written), a bounded copy kept
//! send              the original sent: read whole then prepared, or sent
//!                   at once with its head learnt from the copy; the call starts
//! request/original  Original: the request as sent (model, stream,
//!                   conversation), prepared (routed, rewritten) when read
//!                   whole first; the draft of each attempt
//! exchange          Exchange::new: the per-request carrier the stages hand on
//! rejected          a 400 to the guard's own server-side fallbacks: sent again
//!                   without them; which response is the original is now known
//! answer            how the client is answered (held, keep-alive, live
//!                   thinking), chosen once; run: the stages below
//! judge             Exchange::judge: the original held back until it shows
//!                   output, a refusal, its end or a bound, within the deadline
//! partial           opt-in: continue a claimed partial refusal (the dialect's
//!                   PartialContinuation)
//! decide/           the original as it is, or a climb of the policy's steps
//!                   on an empty refusal (decide/climb.rs, decide/steps.rs):
//!                   a Decision, a value
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
//! take_in -> Intake::Forwarded               request/intake  (first headers)
//! send, as_it_arrives                        send  (sent at once, the head
//!                                                   learnt from the copy)
//! Original::read                             request/original
//! Call::start -> SentOriginal                send  (call: shared)
//! Exchange::new                              exchange
//! without_rejected_fallbacks -> Ready        rejected  (not a 400)
//! answer, Mode::of, run                      answer
//! Exchange::judge -> output seen             judge  (hold: shared)
//! Exchange::decide -> Decision::AsSent       decide/mod
//! respond, serve (with a Settlement)         respond
//! GuardBody::poll_frame, to the stream's end body
//! Settlement::settle                         settle
//! ```
//!
//! `service::guard` is where control returns between the request's stages,
//! and `Exchange::run` (in `answer`) between judge, decide and respond.
//! Within `send`, `Original::read` reads the copy that arrived while the
//! request went upstream, and `send` then starts the call: the one stop
//! that goes back to a file it left. Types of a later stage are built by
//! an earlier one in two places: `respond` builds the `Settlement` the
//! body carries to `settle`, and `decide` reads the attempts the exchange
//! already holds. `partial` is entered only when continuations are opted
//! in. A request read whole first differs in one stop: `Intake::Read`,
//! then `rewritten` in send has `Original::prepare` read, route and
//! rewrite the original before sending it. A 400 that answers the guard's
//! own server-side fallbacks is judged by `rejected` (with
//! `Exchange::judge`, before it is known which response is the original)
//! and handed to `run` already judged.
//!
//! Shared by the stages, calling none of them: `call` (the per-call context
//! every stage and record reads, [`call::Call`]), `caller` (the
//! `CallHandle` a caller attached, filled once), `hold` (holding a
//! response back: `Held`, `Verdict`, `hold()`, which judge, the climb and
//! `partial` use), `findings` (what judging found, and the stream judge),
//! `reroute` (what an attempt asked for, and a response another model
//! served), `upstream` (the one alias of the inner service,
//! [`upstream::InnerService`], its timeouts and the body every stage
//! reads, `UpstreamBody`), `errors` (every error the guard answers itself,
//! in the API's shape), `timeout` and `config`. The request body's copy is
//! `crate::replay::copy`, the byte pool `crate::replay::reserve`.
//!
//! One request's state is one [`exchange::Exchange`]: the inner service, the
//! call, the request as sent (which says whether it streams) and when it
//! went. Each stage takes the exchange and hands it on, its `impl` block in
//! the stage's file (`exchange`, `rejected`, `answer`, `judge`, `partial`,
//! `decide`); the other types hold only what their stage adds:
//!
//! ```text
//! request::original::Original  the request as sent; Draft, an attempt's copy
//! send::SentOriginal    the original sent and answered, before the exchange
//! hold::Held            one response held back: head, bytes read, the rest
//! decide::Decision      what a held original becomes
//! decide::climb::Climb  the climb's progress on one empty refusal
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
pub(crate) mod judge;
pub mod layer;
pub(crate) mod partial;
pub(crate) mod rejected;
pub(crate) mod request;
pub(crate) mod reroute;
pub(crate) mod respond;
pub(crate) mod send;
pub mod service;
pub(crate) mod settle;
pub mod timeout;
pub(crate) mod upstream;
