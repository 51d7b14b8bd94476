//! The judge stage: the original response held back (its thinking
//! forwarded meanwhile, with live thinking on) until there is something to
//! decide, within the call's recovery deadline. What holding is, and what
//! it shows, is `hold`'s.

use http::Response;

use crate::guard::exchange::Exchange;
use crate::guard::hold::{hold, Held, LiveForward};
use crate::guard::timeout::UpstreamTimeout;
use crate::guard::upstream::{InnerService, UpstreamBody};
use crate::refusal::AttemptResult;

impl<U: InnerService> Exchange<U> {
    /// Judges the original `response`: holds it (its thinking forwarded
    /// through `live`, when given) until it shows output, a refusal, its
    /// end or a bound, within the call's recovery deadline. Past the
    /// deadline, the original's attempt ends as a transport error and the
    /// timeout is what is left to answer. `rejected` judges a 400 with it
    /// too, before it knows which response is the original.
    pub(crate) async fn judge(
        &mut self,
        response: Response<UpstreamBody<U::Out>>,
        live: Option<&mut LiveForward>,
    ) -> Result<Held<UpstreamBody<U::Out>>, UpstreamTimeout> {
        let call = &self.call;
        let status = response.status().as_u16();
        let asked = self.original.asked();
        let held = hold(
            response,
            call.dialect,
            &call.config,
            (self.original.streaming, asked.as_ref()),
            live,
        );
        let timeout = match call.within_deadline(held).await {
            Ok(held) => return Ok(held),
            Err(timeout) => timeout,
        };
        self.attempt
            .end_with(AttemptResult::TransportError, Some(status));
        Err(timeout)
    }
}
