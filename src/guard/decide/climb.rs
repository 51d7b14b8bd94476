//! The climb on one empty refusal: each step the policy asks for,
//! prepared (`steps`), sent and held, then weighed: recovered, or on
//! to the next step.

use std::time::{Duration, Instant};

use http::Request;

use crate::dialect::cross::BodyTranslation;
use crate::dialect::{Declined, RefusalInfo};
use crate::guard::call::{millis, Call};
use crate::guard::hold::{hold, Held, Verdict};
use crate::guard::request::original::{Draft, Original};
use crate::guard::reroute::Asked;
use crate::guard::settle::{About, Settlement};
use crate::guard::upstream::{InnerService, UpstreamBody};
use crate::recovery::{NextStep, RecoveryPolicy, RecoveryState};
use crate::refusal::{
    Attempt, AttemptResult, AttemptStep, DeadReason, Outcome, Refusal, RefusalSignal, WireApi,
};
use crate::routing::RouteKey;
use crate::telemetry::metrics::AttemptSpan;

use super::{Decision, HandoffMark};

/// How long a fallback credit token stays redeemable after its refusal.
pub(super) const CREDIT_TOKEN_LIFETIME: Duration = Duration::from_secs(5 * 60);

/// Steps in a row that could not be built before the climb gives up: a
/// policy that keeps asking for one must not spin.
pub(super) const MAX_SKIPS: usize = 8;

/// A step's request, built.
pub(super) struct Prepared {
    pub(super) draft: Draft,
    pub(super) kind: AttemptStep,
    pub(super) model: Option<String>,
    /// Set for a fallback to another provider's API: its answer is translated.
    pub(super) fallback: Option<CrossProvider>,
    /// The fallback credit token the step presents, and when it was minted.
    pub(super) presented: Option<(String, Instant)>,
}

/// A fallback to another provider's API.
#[derive(Clone, Copy)]
pub(super) struct CrossProvider {
    pub(super) target: WireApi,
    /// The client asked for usage in its stream (Chat `stream_options`).
    pub(super) include_usage: bool,
}

/// What preparing a step came to.
pub(super) enum Prep {
    Send(Box<Prepared>),
    /// This step could not be built; ask the policy again.
    Skip,
    Stop,
}

/// The climb on one refusal: what was tried, and why the last
/// step did not recover.
pub(super) struct Climb {
    /// The original refusal.
    pub(super) info: RefusalInfo,
    /// The attempts so far; records the client leaving if dropped undecided.
    pub(super) settlement: Settlement,
    /// A fallback credit token and when it was minted.
    pub(super) credit: Option<(String, Instant)>,
    /// Request fields a response named as keeping its credit token from
    /// being redeemed (`remove_to_redeem`): later fallbacks that present a
    /// token leave them out.
    pub(super) unredeemable: Vec<String>,
    /// The client's model and each fallback that declined, in order:
    /// what a handoff marker names.
    pub(super) declined: Vec<Declined>,
    /// The original's message id, kept on a marked handoff.
    pub(super) primary_id: Option<String>,
    /// The latest retry model a refusal recommended.
    pub(super) recommended: Option<String>,
    /// The latest refusal, which the policy is asked about.
    pub(super) last: RefusalInfo,
    pub(super) reason: Option<DeadReason>,
    pub(super) fallbacks: usize,
    pub(super) rescues: usize,
    pub(super) retargets: usize,
    pub(super) deadline: Instant,
    /// The budget ran out while an attempt was running.
    pub(super) stopped: bool,
    /// The span of the attempt being sent or judged.
    pub(super) attempt: AttemptSpan,
    /// The layer's fallback chain for the model, as the routing source
    /// ordered it.
    pub(super) order: Option<Vec<String>>,
}

impl Climb {
    pub(super) fn new(
        call: &Call,
        info: RefusalInfo,
        opening: Vec<Attempt>,
        primary_id: Option<String>,
    ) -> Self {
        let declined = call.model.iter().map(|model| Declined {
            model: model.clone(),
            category: info.category.clone(),
            usage: info.usage,
        });
        Climb {
            credit: info
                .credit_token
                .clone()
                .map(|token| (token, Instant::now())),
            unredeemable: Vec::new(),
            declined: declined.collect(),
            primary_id,
            recommended: info.recommended_model.clone(),
            last: info.clone(),
            settlement: Settlement::new(
                call.clone(),
                None,
                opening,
                About::Recovering(info.clone()),
            ),
            info,
            reason: None,
            fallbacks: 0,
            rescues: 0,
            retargets: 0,
            deadline: call.deadline().into_std(),
            stopped: false,
            attempt: AttemptSpan::default(),
            order: None,
        }
    }

    /// The attempts, now that the call is decided.
    pub(super) fn finish(&mut self) -> Vec<Attempt> {
        self.settlement.take_attempts()
    }

    pub(super) fn ask(&self, call: &Call) -> NextStep {
        let state = RecoveryState {
            provider: call.dialect.provider(),
            wire_api: call.dialect.wire_api(),
            category: self.last.category.as_deref(),
            explanation: self.last.explanation.as_deref(),
            signal: self.last.signal.unwrap_or(RefusalSignal::StopReason),
            model: call.model.as_deref(),
            attempts: &self.settlement.attempts,
            elapsed: call.started.elapsed(),
            fallbacks: self.fallbacks,
            rescues: self.rescues,
            retargets: self.retargets,
            last_failure: self.reason,
            recommended: self.recommended.as_deref(),
            order: self.order.as_deref(),
        };
        next_step(call.config.policy(), &state)
    }

    /// Builds the request for the policy's next step, within the budget.
    pub(super) async fn prepare(&mut self, call: &Call, original: &Original) -> Prep {
        let step = self.ask(call);
        if let NextStep::Stop(why) = step {
            self.reason = Some(why);
            return Prep::Stop;
        }
        let budget = call.config.budget;
        if self.settlement.attempts.len() as u32 >= budget.max_attempts
            || Instant::now() >= self.deadline
        {
            self.reason = Some(DeadReason::BudgetExhausted);
            return Prep::Stop;
        }
        let Some(next) = original.draft() else {
            self.reason = Some(DeadReason::Unrecoverable);
            return Prep::Stop;
        };
        let tenant = &call.config.tenant;
        if !tenant.take_attempt() {
            tracing::info!(
                tenant = tenant.name(),
                "the tenant's recovery attempts for the hour are used: the refusal is served as it came"
            );
            crate::telemetry::metrics::recovery_capped(tenant.name());
            self.reason = Some(DeadReason::Capped);
            return Prep::Stop;
        }
        let prep = match step {
            NextStep::Fallback(model) => self.fallback(call, next, model),
            NextStep::Rescue(rescue) => self.rescue(call, next, rescue).await,
            NextStep::Retarget => self.retarget(call, next),
            NextStep::Stop(_) => Prep::Stop,
        };
        if !matches!(prep, Prep::Send(_)) {
            tenant.give_back_attempt();
        }
        prep
    }

    /// Sends a step and holds its response, within the deadline. `None`
    /// when it failed (recorded, with the reason set).
    pub(super) async fn send<U: InnerService>(
        &mut self,
        upstream: &mut U,
        call: &Call,
        streaming: bool,
        step: &Prepared,
    ) -> Option<(Held<UpstreamBody<U::Out>>, Attempt)> {
        let request: Request<U::Body> = step.draft.request(&step.draft.json);
        let to = step.fallback.map(|fallback| fallback.target.provider());
        self.attempt = call.request.attempt(step.kind, step.model.as_deref(), to);
        let sent = Instant::now();
        let remaining = self.deadline.saturating_duration_since(sent);
        let (dialect, config) = (call.dialect, &call.config);
        // A fallback to another provider's API answers in its own names.
        let asked = step.fallback.is_none().then(|| {
            let draft = &step.draft;
            let model = step.model.as_deref();
            let fallbacks = dialect.features().carries_server_fallbacks(&draft.json);
            Asked::new(model, &draft.parts.uri, streaming, fallbacks)
        });
        let asked = asked.flatten();
        let attempt = tokio::time::timeout(remaining, async {
            match upstream.send(request).await {
                Ok(mut response) => {
                    if let Some(fallback) = step.fallback {
                        translate_answer(
                            &mut response,
                            fallback,
                            dialect.wire_api(),
                            streaming,
                            config,
                        );
                    }
                    Ok(hold(response, dialect, config, (streaming, asked.as_ref()), None).await)
                }
                Err(_) => Err(()),
            }
        })
        .await;
        let mut record = Attempt {
            step: step.kind,
            model: step.model.clone(),
            provider: step.fallback.map(|fallback| fallback.target.provider()),
            result: AttemptResult::TransportError,
            status: None,
            latency_ms: millis(sent.elapsed()),
            usage: None,
            fallback_credit: None,
            rerouted_to: None,
            reason: None,
        };
        let held = match attempt {
            Err(_elapsed) => {
                self.stopped = true;
                self.fail(record, DeadReason::BudgetExhausted);
                return None;
            }
            Ok(Err(())) => {
                self.fail(record, DeadReason::UpstreamError);
                return None;
            }
            Ok(Ok(held)) => held,
        };
        record.status = Some(held.status());
        // An error status the dialect reads as a refusal (a content filter's
        // 400) is a refusal of this attempt, not an upstream error.
        if !held.parts.status.is_success() && !matches!(held.verdict, Verdict::Refused { .. }) {
            record.result = AttemptResult::HttpError;
            self.fail(record, DeadReason::UpstreamError);
            return None;
        }
        Some((held, record))
    }

    /// The token a refused fallback presented, when its response said what to
    /// leave out for it to redeem: not redeemed, it may still be, by a
    /// request without those fields within its lifetime ("a corrected
    /// re-send inside the token's five-minute window can still redeem", as
    /// the dialect that reads `remove_to_redeem` cites).
    pub(super) fn carried(&self, record: &Attempt, step: &Prepared) -> Option<(String, Instant)> {
        let credit = record.fallback_credit.as_ref()?;
        (!credit.remove_to_redeem().is_empty())
            .then(|| step.presented.clone())
            .flatten()
    }

    pub(super) fn fail(&mut self, record: Attempt, reason: DeadReason) {
        self.attempt.end(&record);
        self.settlement.attempts.push(record);
        self.reason = Some(reason);
    }

    /// Notes on `record` what `held` said of its attempt (another model
    /// than the one asked for, the fate of a credit token it presented),
    /// and the request fields that token's response named as keeping it
    /// from being redeemed.
    fn note_seen<R>(&mut self, record: &mut Attempt, held: &Held<R>) {
        record.rerouted_to = super::rerouted_to(held);
        record.fallback_credit = held.findings().and_then(|f| f.fallback_credit.clone());
        self.note_unredeemable(record);
    }

    /// What a held attempt decides: the decision, or `None` to go on
    /// climbing.
    pub(super) async fn weigh<R>(
        &mut self,
        call: &Call,
        held: Held<UpstreamBody<R>>,
        mut record: Attempt,
        step: Prepared,
    ) -> Option<Decision<UpstreamBody<R>>> {
        let outcome = match step.kind {
            AttemptStep::Fallback | AttemptStep::Retarget => Outcome::Fallback,
            _ => Outcome::Rescued,
        };
        let served_model = served_model(&held, &step);
        let request_id = call.dialect.request_id(&held.parts.headers);
        self.note_seen(&mut record, &held);
        let (result, reason) = match &held.verdict {
            Verdict::Output => {
                record.result = AttemptResult::Served;
                self.attempt.end(&record);
                self.settlement.attempts.push(record);
                let refusal = Refusal {
                    served_model,
                    request_id,
                    ..call.refusal(&self.info, outcome)
                };
                return Some(self.recovered(call, held, refusal, step).await);
            }
            Verdict::Limit => {
                // Held as long as allowed without a decision: serve it and
                // let the end of its stream decide the outcome.
                record.result = AttemptResult::Served;
                self.attempt.end(&record);
                self.settlement.attempts.push(record);
                return Some(Decision::Committed {
                    attempt: held,
                    request_id,
                    attempts: self.finish(),
                    recovery: (self.info.clone(), outcome, served_model),
                });
            }
            Verdict::Refused { info: again, .. } => {
                let fresh = again.credit_token.clone().map(|t| (t, Instant::now()));
                self.credit = fresh.or_else(|| self.carried(&record, &step));
                self.last = again.clone();
                record.usage = again.usage;
                if again.recommended_model.is_some() {
                    self.recommended = again.recommended_model.clone();
                }
                if let (AttemptStep::Fallback, Some(model)) = (step.kind, &step.model) {
                    self.declined.push(Declined {
                        model: model.clone(),
                        category: again.category.clone(),
                        usage: again.usage,
                    });
                }
                (AttemptResult::Refused, DeadReason::StillRefused)
            }
            Verdict::Ended => (AttemptResult::NoOutput, DeadReason::NoOutput),
            Verdict::Errored | Verdict::Unjudged => {
                (AttemptResult::HttpError, DeadReason::UpstreamError)
            }
        };
        record.result = result;
        self.fail(record, reason);
        None
    }

    /// Notes the fields `record`'s response named as keeping its credit
    /// token from being redeemed: later fallbacks leave them out.
    fn note_unredeemable(&mut self, record: &Attempt) {
        let Some(credit) = &record.fallback_credit else {
            return;
        };
        for field in credit.remove_to_redeem() {
            if !self.unredeemable.contains(field) {
                self.unredeemable.push(field.clone());
            }
        }
    }

    /// Decides on a recovery attempt that produced real output: the sticky
    /// route is stored, and a fallback's model change marked if configured.
    pub(super) async fn recovered<R>(
        &mut self,
        call: &Call,
        held: Held<UpstreamBody<R>>,
        refusal: Refusal,
        step: Prepared,
    ) -> Decision<UpstreamBody<R>> {
        call.record_output();
        let config = &call.config;
        let fallback = step.kind == AttemptStep::Fallback;
        // A sticky route swaps the model on the client's own API: a fallback to
        // another provider cannot be one.
        if let (Some(ttl), Some(key), true, Some(model)) = (
            config.sticky_ttl,
            call.conversation.key(),
            fallback && step.fallback.is_none(),
            &step.model,
        ) {
            let route = config.store.set_sticky_route(key, model, ttl);
            call.ask_store(route, ()).await;
        }
        let handoff = match (config.handoff_marker, fallback, step.model) {
            (true, true, Some(to)) if !self.declined.is_empty() => Some(HandoffMark {
                declined: std::mem::take(&mut self.declined),
                to,
                primary_id: self.primary_id.take(),
            }),
            _ => None,
        };
        Decision::Recovered {
            attempt: held,
            refusal,
            attempts: self.finish(),
            handoff,
        }
    }
}

/// The model that served a held attempt: the one its response names, else
/// the one the step asked for. A fallback to another provider is named by
/// its chain entry, provider and all.
fn served_model<R>(held: &Held<R>, step: &Prepared) -> Option<String> {
    if step.fallback.is_some() {
        return step.model.clone();
    }
    held.judge
        .as_ref()
        .and_then(|judge| judge.findings.model.clone())
        .or_else(|| held.judged.as_deref().and_then(|f| f.model.clone()))
        .or(step.model.clone())
}

/// Rewrites a cross-provider fallback's successful answer into the client's API
/// as it arrives. An error status stays as it came: the fallback fails on it,
/// and its body is never served.
pub(super) fn translate_answer<R>(
    response: &mut http::Response<UpstreamBody<R>>,
    fallback: CrossProvider,
    client: WireApi,
    streaming: bool,
    config: &crate::guard::config::Config,
) {
    if !response.status().is_success() {
        return;
    }
    let limit = config.max_response_body;
    match BodyTranslation::new(
        fallback.target,
        client,
        streaming,
        fallback.include_usage,
        limit,
    ) {
        Ok(translation) => {
            response.headers_mut().remove(http::header::CONTENT_LENGTH);
            response.body_mut().translate(translation);
        }
        Err(why) => tracing::warn!(reason = %why, "the fallback's answer has no translation"),
    }
}

/// The routing source's order of the layer's chain for the refused model,
/// for this refusal's category, within the call's deadline; `None` when
/// there is nothing to order (no chain of two), or no answer in time.
pub(super) async fn routing_order(call: &Call, info: &RefusalInfo) -> Option<Vec<String>> {
    let model = call.model.as_deref()?;
    let config = &call.config;
    let chain = config.ladder.chains().for_model(model);
    if chain.len() < 2 {
        return None;
    }
    let key = RouteKey::new(info.category.as_deref(), model);
    let asked = config.routing.order(&key, chain);
    let order = tokio::time::timeout_at(call.deadline(), asked).await.ok()?;
    Some(crate::routing::within(order, chain))
}

/// Asks the policy, which must not take the call down if it panics.
pub(super) fn next_step(policy: &dyn RecoveryPolicy, state: &RecoveryState<'_>) -> NextStep {
    let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| policy.next_step(state)));
    asked.unwrap_or_else(|_| {
        tracing::warn!("recovery policy panicked; recovering no further");
        NextStep::Stop(DeadReason::Unrecoverable)
    })
}
