//! The guard: one guarded call from the request to the served response.
//!
//! The public types ([`layer`], [`service`], [`body`], [`replay`],
//! [`timeout`]) are re-exported at the crate root; the rest is the private
//! per-request pipeline, in the order one request meets it:
//!
//! ```text
//! layer      RefusalGuardLayer: the builder; config holds what it built
//! service    RefusalGuard::call: recognise the wire API, else pass through
//! request    read the body within bounds, name the conversation, rewrite
//! call       the per-call context; send the original (head timeout)
//! live       keep-alive or live thinking, if configured
//! partial    opt-in (Anthropic): continue a claimed partial refusal
//! respond    the decision as a response, the record, the handle
//! decide     hold the original (hold), then keep it or run the policy
//! body       held bytes, then the rest, still judged
//! ```

pub mod body;
pub(crate) mod call;
pub(crate) mod config;
pub(crate) mod decide;
pub(crate) mod hold;
pub mod layer;
pub(crate) mod live;
pub(crate) mod partial;
pub mod replay;
pub(crate) mod request;
pub(crate) mod reserve;
pub(crate) mod respond;
pub mod service;
pub mod timeout;
