//! The per-request carrier: one guarded call once its original is sent,
//! handed from stage to stage by value.

use std::time::Instant;

use http::Response;

use crate::guard::call::{millis, Call};
use crate::guard::request::original::Original;
use crate::guard::send::SentOriginal;
use crate::guard::upstream::{InnerService, UpstreamBody};
use crate::refusal::{Attempt, AttemptResult, AttemptStep};
use crate::telemetry::metrics::AttemptSpan;

/// A guarded call once its original is sent: what deciding its response
/// needs, step after step.
///
/// The inner service and the request as sent are boxed: an exchange
/// moves through every future of the decision, and each future that holds
/// one is part of every request in flight, so it is kept small.
pub(crate) struct Exchange<U> {
    /// The wrapped client the attempts are sent through.
    pub(crate) inner: Box<U>,
    pub(crate) call: Call,
    /// The request as sent, before any recovery rewrite.
    pub(crate) original: Box<Original>,
    /// When the original was sent.
    pub(crate) sent: Instant,
    /// Requests sent before the one decided as the original: one whose
    /// server-side fallbacks the provider rejected.
    pub(crate) earlier: Vec<Attempt>,
    /// What the original decided is: the request as first sent, or sent
    /// again without the guard's fallbacks.
    pub(crate) first: AttemptStep,
    /// The original's attempt span, open until the original is judged.
    pub(crate) attempt: AttemptSpan,
}

impl<U: InnerService> Exchange<U> {
    /// The exchange of a call whose original was sent and answered, over
    /// `inner`, and the original's response to decide.
    pub(crate) fn new(sent: SentOriginal<U>, inner: U) -> (Self, Response<UpstreamBody<U::Out>>) {
        let SentOriginal {
            call,
            original,
            response,
            attempt,
            sent,
        } = sent;
        let exchange = Exchange {
            inner: Box::new(inner),
            call,
            original: Box::new(original),
            sent,
            earlier: Vec::new(),
            first: AttemptStep::Original,
            attempt,
        };
        (exchange, response)
    }
}

impl<U> Exchange<U> {
    /// The record of the original decided, answered with `status`.
    pub(crate) fn original_attempt(&self, status: u16, result: AttemptResult) -> Attempt {
        Attempt {
            step: self.first,
            model: self.call.model.clone(),
            provider: None,
            result,
            status: Some(status),
            latency_ms: millis(self.sent.elapsed()),
            usage: None,
            fallback_credit: None,
            rerouted_to: None,
            reason: None,
        }
    }

    /// The attempts up to the original decided: any earlier ones, then it.
    pub(crate) fn opening(&self, original: Attempt) -> Vec<Attempt> {
        let mut attempts = self.earlier.clone();
        attempts.push(original);
        attempts
    }
}
