//! A 400 that answers the server-side fallbacks the guard wrote into a
//! request. The provider checks a `fallbacks` list up front and rejects the
//! whole request for one entry it does not take (a model outside the
//! requested model's allowed fallbacks, one the request is not valid for;
//! platform docs "Refusals and fallback"), before any model runs. That 400
//! is of the guard's making, not the client's: the request goes once more
//! as the client wrote it, and that answer is the one served and decided,
//! the rejected attempt first in its record.

use std::time::Instant;

use http::{Response, StatusCode};

use crate::guard::errors::{timed_out, Shape};
use crate::guard::exchange::Exchange;
use crate::guard::hold::{Held, Verdict};
use crate::guard::timeout::UpstreamTimeout;
use crate::guard::upstream::{InnerService, SendError, UpstreamBody};
use crate::refusal::{AttemptResult, AttemptStep};
use crate::GuardBody;

/// What became of an original answered with a 400 its fallbacks may have
/// caused.
pub(crate) enum Resent<U: InnerService> {
    /// The response to decide as the original, and its exchange: the
    /// first one (no 400, or no fallbacks of the guard's), or the answer to
    /// the request sent again without them.
    Ready(Box<Exchange<U>>, Response<UpstreamBody<U::Out>>),
    /// The original, judged already: a refusal the provider sent as a 400,
    /// or the hold's timeout.
    Judged(
        Box<Exchange<U>>,
        Result<Held<UpstreamBody<U::Out>>, UpstreamTimeout>,
    ),
    /// Already answered: the request sent again timed out.
    Answered(Response<GuardBody<U::Out>>),
    /// The inner service failed on the request sent again.
    Failed(U::Error),
}

impl<U: InnerService> Exchange<U> {
    /// Sends the request again without the guard's server-side fallbacks
    /// when the provider answered it with a 400 that is no refusal.
    pub(crate) async fn without_rejected_fallbacks(
        mut self,
        response: Response<UpstreamBody<U::Out>>,
    ) -> Resent<U> {
        if response.status() != StatusCode::BAD_REQUEST || self.original.composed.is_none() {
            return Resent::Ready(Box::new(self), response);
        }
        let call = self.call.clone();
        let api = Shape::Api(call.dialect.wire_api());
        // Judged as the original is: a 400 that is no refusal is dropped,
        // and the answer to the request sent again is judged in its turn.
        let held = match self.judge(response, None).await {
            Ok(held) if matches!(held.verdict, Verdict::Unjudged) => held,
            // A refusal the provider sent as a 400 ("Output blocked by
            // content filtering policy"), or the deadline: decided as any
            // original is.
            judged => return Resent::Judged(Box::new(self), judged),
        };
        let rejected = self.original_attempt(held.status(), AttemptResult::HttpError);
        self.attempt.end(&rejected);
        drop(held);
        self.original.withdraw_composed_fallbacks(call.dialect);
        tracing::warn!(
            model = ?call.model,
            "the provider rejected the server-side fallbacks the guard wrote (HTTP 400); \
             the request is sent again as the client wrote it"
        );
        self.earlier.push(rejected);
        self.first = AttemptStep::WithoutFallbacks;
        self.sent = Instant::now();
        let model = call.model.as_deref();
        self.attempt = call.request.attempt(self.first, model, None);
        match self.inner.send(self.original.request()).await {
            Ok(response) => Resent::Ready(Box::new(self), response),
            Err(failed) => {
                self.attempt.end_with(AttemptResult::TransportError, None);
                match failed {
                    SendError::Inner(error) => Resent::Failed(error),
                    SendError::Timeout(timeout) => Resent::Answered(timed_out(api, timeout)),
                }
            }
        }
    }
}
