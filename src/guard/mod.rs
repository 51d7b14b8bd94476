//! The guard: one guarded call from the request to the served response.
//!
//! The public types ([`layer`], [`service`], [`body`], [`timeout`]) are
//! re-exported at the crate root; the rest is the private
//! per-request pipeline, in the order one request meets it:
//!
//! ```text
//! layer      RefusalGuardLayer: the builder; config holds what it built
//! service    RefusalGuard::call: recognise the wire API, else pass through;
//!            guard(): read whole first or forward as it arrives (request)
//! request/   the body within bounds (read whole, or forwarded with a copy
//!            kept), the conversation named (conversation.rs), the rewrites
//!            of the first request; the original as sent (original.rs)
//! call       Call::start, the per-call context every step and record reads
//! exchange   Exchange::new, the per-request carrier the steps hand on
//! rejected   a 400 to the guard's own server-side fallbacks: sent again without
//! live       keep-alive or live thinking, if configured
//! partial    opt-in (Anthropic): continue a claimed partial refusal
//! respond    decide_and_respond: the decision (decide), then its response,
//!            the record, the handle
//! decide     hold the original (hold), then keep it or run the policy
//! body       held bytes, then the rest, still judged; settled at the end
//! ```
//!
//! Shared by the steps, calling none of them: `upstream` (the one alias of
//! the inner service, [`upstream::InnerService`], and its timeouts),
//! `errors` (every error the guard answers itself, in the API's shape) and
//! `timeout`. The request body's copy is `crate::replay::copy`, the byte
//! pool `crate::reserve`.
//!
//! One request's state is one [`exchange::Exchange`]: the inner service, the
//! [`call::Call`] (what every step and record reads), the request as sent,
//! whether it streams and when it went. Each step takes the exchange by
//! value and hands it on; the other types hold only what their step adds:
//!
//! ```text
//! hold::Held         one response held back: head, bytes read, the rest
//! decide::Climb      the ladder's progress on one empty refusal
//! partial::Hop       the exchange and the plan that continues a partial refusal
//! respond::Watched   the record of a response let through, settled at its end
//! partial::Tail      a continued stream's watch and its Watched, settled once
//! ```

pub(crate) mod answer;
pub mod body;
pub(crate) mod call;
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
pub mod service;
pub(crate) mod settle;
pub mod timeout;
pub(crate) mod upstream;
