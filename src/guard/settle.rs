//! The settle step: the one record of a guarded call, made once. A
//! [`Settlement`] is made when the guard lets a response through before
//! what it shows is known (a stream served while it is still read), and
//! while the ladder works on a refusal; it records when the stream ends,
//! or, dropped first, when the client goes away.

use crate::dialect::RefusalInfo;
use crate::guard::call::Call;
use crate::guard::findings::{Findings, StreamJudge};
use crate::refusal::{
    Attempt, AttemptResult, DeadReason, Outcome, Refusal, RefusalKind, RefusalSignal,
};

/// How a served stream came to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// It ended as the upstream ended it.
    Complete,
    /// The upstream connection broke.
    Broken,
    /// The client went away before the end.
    Dropped,
}

/// What the record settles: how far the call's outcome was known when the
/// settlement was made.
pub(crate) enum About {
    /// The original, let through as it was: what it shows decides.
    Original,
    /// An empty refusal the ladder is still working on: settled undecided,
    /// the client went away.
    Recovering(RefusalInfo),
    /// A recovery attempt served before its outcome was known: the original
    /// refusal, the outcome should the attempt produce output, and the
    /// model it was sent to.
    Committed((RefusalInfo, Outcome, Option<String>)),
    /// A recovery attempt that produced output: the refusal is decided, and
    /// only what the rest of the stream says of the attempt is to come.
    Decided(Refusal),
}

/// The record of one guarded call, made exactly once: by [`settle`] when
/// what it waits for ends, else when it is dropped.
///
/// [`settle`]: Settlement::settle
pub(crate) struct Settlement {
    pub(crate) call: Call,
    pub(crate) request_id: Option<String>,
    /// The attempts so far, the one being served last.
    pub(crate) attempts: Vec<Attempt>,
    pub(crate) about: About,
    /// The judge that reads on in a stream served before its end.
    pub(crate) judge: Option<Box<StreamJudge>>,
    /// Whether output was seen before the stream was let through (and
    /// recorded then).
    pub(crate) output_before: bool,
    settled: bool,
}

impl Settlement {
    pub(crate) fn new(
        call: Call,
        request_id: Option<String>,
        attempts: Vec<Attempt>,
        about: About,
    ) -> Self {
        Settlement {
            call,
            request_id,
            attempts,
            about,
            judge: None,
            output_before: false,
            settled: false,
        }
    }

    /// The settlement of a stream that `judge` reads on; `output_before`
    /// when output was seen (and recorded) before it was let through.
    pub(crate) fn judged_by(
        mut self,
        judge: Option<Box<StreamJudge>>,
        output_before: bool,
    ) -> Self {
        self.judge = judge;
        self.output_before = output_before;
        self
    }

    /// The attempts, taken by a decision that records them itself: nothing
    /// is recorded here any more.
    pub(crate) fn take_attempts(&mut self) -> Vec<Attempt> {
        self.settled = true;
        std::mem::take(&mut self.attempts)
    }

    /// Whether the record is made (or left to a decision).
    pub(crate) fn is_settled(&self) -> bool {
        self.settled
    }

    /// What the judge found, its stream read to the end.
    pub(crate) fn finished_findings(&mut self) -> Option<&Findings> {
        let judge = self.judge.as_mut()?;
        judge.finish();
        Some(&judge.findings)
    }

    /// Records the call, once, with how what it waited for ended.
    pub(crate) fn settle(&mut self, ending: Ending) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        if let Some(judge) = self.judge.as_mut() {
            judge.finish();
        }
        let about = std::mem::replace(&mut self.about, About::Original);
        let attempts = std::mem::take(&mut self.attempts);
        match self.refusal(about, attempts, ending) {
            (Some(refusal), attempts) => self.call.emit(&refusal, attempts),
            (None, attempts) => self.call.settle_answered(attempts.len()),
        }
    }

    /// The refusal to record, if any, with the attempts as they ended.
    fn refusal(
        &self,
        about: About,
        mut attempts: Vec<Attempt>,
        ending: Ending,
    ) -> (Option<Refusal>, Vec<Attempt>) {
        let call = &self.call;
        if let About::Recovering(info) = about {
            let refusal = Refusal {
                reason: Some(DeadReason::ClientGone),
                served_model: call.model.clone(),
                ..call.refusal(&info, Outcome::Dead)
            };
            return (Some(refusal), attempts);
        }
        let Some(judge) = self.judge.as_deref() else {
            return match about {
                About::Decided(refusal) => (Some(refusal), attempts),
                _ => (None, attempts),
            };
        };
        let findings = &judge.findings;
        if findings.output && !self.output_before {
            call.record_output();
        }
        if let Some(last) = attempts.pop() {
            attempts.push(ended(seen_in(last, findings), ending));
        }
        let request_id = self.request_id.clone();
        let refusal = match about {
            About::Decided(refusal) => Some(refusal),
            About::Committed((original, success, served)) if findings.output => Some(Refusal {
                served_model: served,
                request_id,
                ..call.refusal(&original, success)
            }),
            About::Committed((original, _, served)) => {
                let reason = match ending {
                    _ if findings.empty_refusal.is_some() => DeadReason::StillRefused,
                    Ending::Complete => DeadReason::NoOutput,
                    Ending::Broken => DeadReason::UpstreamError,
                    Ending::Dropped => DeadReason::ClientGone,
                };
                Some(Refusal {
                    reason: Some(reason),
                    served_model: served,
                    request_id,
                    ..call.refusal(&original, Outcome::Dead)
                })
            }
            About::Original | About::Recovering(_) => refusal_of(call, findings, request_id, true),
        };
        (refusal, attempts)
    }
}

impl Drop for Settlement {
    fn drop(&mut self) {
        self.settle(Ending::Dropped);
    }
}

/// The refusal, if any, in a response that was let through as it was.
pub(crate) fn refusal_of(
    call: &Call,
    findings: &Findings,
    request_id: Option<String>,
    held_back: bool,
) -> Option<Refusal> {
    let served_model = findings.model.clone().or_else(|| call.model.clone());
    if let Some(info) = &findings.partial_refusal {
        return Some(Refusal {
            kind: RefusalKind::Partial,
            served_model,
            request_id,
            ..call.refusal(info, Outcome::Partial)
        });
    }
    if let Some(info) = &findings.empty_refusal {
        // Only reachable when the hold bound forced the guard to let the
        // response through before the refusal arrived.
        return Some(Refusal {
            reason: Some(if held_back {
                DeadReason::HoldLimit
            } else {
                DeadReason::Unrecoverable
            }),
            served_model,
            request_id,
            ..call.refusal(info, Outcome::Dead)
        });
    }
    // The provider's own fallback: a `fallback` block, or a chain whose
    // iterations show a declined attempt. A fallback that served without
    // any model declining this turn (a sticky-routed turn lists only the
    // serving attempt) is no refusal.
    let chain = findings.iterations.as_ref();
    let declined = chain.and_then(|c| c.first_declined.clone());
    if findings.server_fallback.is_none() && declined.is_none() {
        return unknown_stop(call, findings, request_id, served_model);
    }
    let fallback = findings.server_fallback.clone().unwrap_or_default();
    let info = RefusalInfo {
        signal: Some(RefusalSignal::StopReason),
        category: fallback.category,
        ..RefusalInfo::default()
    };
    Some(Refusal {
        model: fallback.from.or(declined).or_else(|| call.model.clone()),
        served_model: chain
            .and_then(|c| c.served_by.clone())
            .or(fallback.to)
            .or(served_model),
        request_id,
        ..call.refusal(&info, Outcome::Fallback)
    })
}

/// A response that ended without output on a stop reason the dialect does
/// not know: recorded as it came, never recovered (it may be no policy
/// stop), so that it is seen.
fn unknown_stop(
    call: &Call,
    findings: &Findings,
    request_id: Option<String>,
    served_model: Option<String>,
) -> Option<Refusal> {
    if findings.output || findings.error {
        return None;
    }
    let info = RefusalInfo {
        signal: Some(RefusalSignal::StopReason),
        category: Some(findings.unknown_stop.clone()?),
        ..RefusalInfo::default()
    };
    Some(Refusal {
        reason: Some(DeadReason::UnknownStop),
        served_model,
        request_id,
        ..call.refusal(&info, Outcome::Dead)
    })
}

/// An attempt with what its response said of it: the fate of a credit
/// token it presented, and, for a provider's own chain, what the attempts
/// that declined inside it cost (the top-level usage covers only the one
/// that served).
pub(crate) fn seen_in(mut attempt: Attempt, findings: &Findings) -> Attempt {
    if attempt.fallback_credit.is_none() {
        attempt.fallback_credit = findings.fallback_credit.clone();
    }
    if attempt.usage.is_none() {
        attempt.usage = findings.iterations.as_ref().and_then(|c| c.declined_usage);
    }
    attempt
}

/// A served attempt whose upstream broke off is marked cut: it was not
/// served whole, and its end's figures are unknown. A client that goes
/// away does not mark it: SDKs close as soon as they read the stream's
/// last event, often before the upstream's end of body arrives, so a drop
/// cannot tell a finished stream from an abandoned one.
fn ended(mut attempt: Attempt, ending: Ending) -> Attempt {
    if ending == Ending::Broken && attempt.result == AttemptResult::Served {
        attempt.result = AttemptResult::Cut;
    }
    attempt
}
