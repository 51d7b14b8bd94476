//! Deciding what a held response becomes: the original as it is, or the
//! steps the [`RecoveryPolicy`] asks for, each sent and held in turn, until
//! one recovers or the policy or the budget says stop. The answer is a
//! [`Decision`], a value: turning it into the client's response, the record
//! and the handle's settling is the next module's work (`respond.rs`).

use std::time::{Duration, Instant};

use http::Request;

use crate::dialect::cross::{self, BodyTranslation};
use crate::dialect::{AnthropicFeatures, Declined, Handoff, RefusalInfo};
use crate::guard::call::{millis, Call};
use crate::guard::exchange::Exchange;
use crate::guard::hold::{hold, Held, Verdict};
use crate::guard::request::original::{Original, Template};
use crate::guard::settle::{About, Settlement};
use crate::guard::timeout::{IdleTimeout, UpstreamTimeout};
use crate::guard::upstream::InnerService;
use crate::recovery::{hop_api, parse_entry, NextStep, RecoveryPolicy, RecoveryState, Rescue};
use crate::refusal::{
    Attempt, AttemptResult, AttemptStep, DeadReason, Outcome, Provider, Refusal, RefusalSignal,
    WireApi,
};
use crate::routing::RouteKey;
use crate::telemetry::metrics::AttemptSpan;

/// How long a fallback credit token stays redeemable after its refusal.
const CREDIT_TOKEN_LIFETIME: Duration = Duration::from_secs(5 * 60);

/// Steps in a row that could not be built before the climb gives up: a
/// policy that keeps asking for one must not spin.
const MAX_SKIPS: usize = 8;

/// What a held response becomes. Deciding records nothing and settles
/// nothing: the refusal and the attempts travel in the decision, and the
/// response, the record and the handle come from it afterwards.
pub(crate) enum Decision<B> {
    /// The upstream went quiet (or the deadline passed) before any output:
    /// nothing was sent yet, so the client gets a `504` of its API, never
    /// the bytes read so far framed as a response.
    TimedOut(UpstreamTimeout),
    /// Not a response the guard judges (an error status, another content
    /// type): served as it came, with nothing to record.
    Unjudged(Held<B>),
    /// Not an empty refusal (output, an end without output, a provider
    /// error, a hold bound): the original as sent; what it shows (a partial
    /// refusal, a server-side fallback) is recorded as it is seen.
    AsSent {
        original: Held<B>,
        request_id: Option<String>,
        /// The original's record last, after any request sent before it.
        attempts: Vec<Attempt>,
    },
    /// An empty refusal that was not recovered: the original as sent, and
    /// the refusal, dead with its reason.
    Dead {
        original: Held<B>,
        refusal: Refusal,
        attempts: Vec<Attempt>,
    },
    /// A recovery attempt with real output, served instead of the original.
    Recovered {
        attempt: Held<B>,
        refusal: Refusal,
        attempts: Vec<Attempt>,
        /// Set when the client should be told of a fallback's model change.
        handoff: Option<HandoffMark>,
    },
    /// A recovery attempt held as long as allowed without a decision: served,
    /// and the end of its stream decides the outcome.
    Committed {
        attempt: Held<B>,
        request_id: Option<String>,
        attempts: Vec<Attempt>,
        /// The original refusal, the outcome should the attempt produce
        /// output, and the model it was sent to.
        recovery: (RefusalInfo, Outcome, Option<String>),
    },
}

/// A fallback's change of model, to be marked in the response served.
pub(crate) struct HandoffMark {
    declined: Vec<Declined>,
    to: String,
    primary_id: Option<String>,
}

impl HandoffMark {
    /// The mark as the dialects write it.
    pub(crate) fn handoff(&self) -> Handoff<'_> {
        Handoff {
            declined: &self.declined,
            to: &self.to,
            primary_id: self.primary_id.as_deref(),
        }
    }
}

impl<U: InnerService> Exchange<U> {
    /// The decide step: a held original as it is, or, on an empty refusal,
    /// what the ladder comes to.
    pub(crate) async fn decide(
        mut self,
        held: Held<IdleTimeout<U::Out>>,
    ) -> Decision<IdleTimeout<U::Out>> {
        let call = self.call.clone();
        let request_id = call.dialect.request_id(&held.parts.headers);
        let original_attempt = self.original_attempt(held.status(), AttemptResult::Served);

        // A broken connection is served as it came: what arrived, then its
        // error. A quiet one before any output is a timeout.
        if matches!(held.verdict, Verdict::Errored) {
            if let Some(timeout) = held.error.as_ref().and_then(UpstreamTimeout::find) {
                let status = Some(held.status());
                self.attempt.end_with(AttemptResult::TransportError, status);
                return Decision::TimedOut(timeout);
            }
        }
        match held.verdict {
            Verdict::Refused { ref info, complete } if complete => {
                let info = info.clone();
                let original_attempt = Attempt {
                    result: AttemptResult::Refused,
                    usage: info.usage,
                    ..original_attempt
                };
                self.attempt.end(&original_attempt);
                // Boxed: the ladder's state is most of this future's size,
                // and only a refused answer needs it; every request in
                // flight would otherwise carry it.
                Box::pin(self.recover(held, info, original_attempt, request_id)).await
            }
            Verdict::Refused { ref info, .. } => {
                // Too much came before or after the refusal to keep it whole:
                // the client gets it as it is, and the log says why.
                let refusal = Refusal {
                    reason: Some(DeadReason::HoldLimit),
                    served_model: call.model.clone(),
                    request_id,
                    ..call.refusal(info, Outcome::Dead)
                };
                let attempts = self.opening(Attempt {
                    result: AttemptResult::Refused,
                    usage: info.usage,
                    ..original_attempt
                });
                if let Some(original) = attempts.last() {
                    self.attempt.end(original);
                }
                Decision::Dead {
                    original: held,
                    refusal,
                    attempts,
                }
            }
            Verdict::Unjudged => {
                let result = match held.parts.status.is_success() {
                    true => AttemptResult::Served,
                    false => AttemptResult::HttpError,
                };
                self.attempt.end_with(result, Some(held.status()));
                Decision::Unjudged(held)
            }
            _ => {
                if matches!(held.verdict, Verdict::Output) {
                    call.record_output();
                }
                self.attempt.end(&original_attempt);
                Decision::AsSent {
                    original: held,
                    request_id,
                    attempts: self.opening(original_attempt),
                }
            }
        }
    }

    async fn recover(
        self,
        refused: Held<IdleTimeout<U::Out>>,
        info: RefusalInfo,
        original_attempt: Attempt,
        original_request_id: Option<String>,
    ) -> Decision<IdleTimeout<U::Out>> {
        let primary_id = refused.findings().and_then(|f| f.message_id.clone());
        let order = routing_order(&self.call, &info).await;
        let opening = self.opening(original_attempt);
        let mut climb = Climb::new(&self.call, info, opening, primary_id);
        climb.order = order;
        let Exchange {
            mut inner,
            call,
            original: request,
            streaming,
            ..
        } = self;
        let mut skips = 0;
        loop {
            let step = match climb.prepare(&call, &request).await {
                Prep::Send(step) => *step,
                Prep::Skip if skips < MAX_SKIPS => {
                    skips += 1;
                    continue;
                }
                Prep::Skip => {
                    climb.reason.get_or_insert(DeadReason::Unrecoverable);
                    break;
                }
                Prep::Stop => break,
            };
            skips = 0;
            let Some((held, record)) = climb.send(&mut *inner, &call, streaming, &step).await
            else {
                if climb.stopped {
                    break;
                }
                continue;
            };
            if let Some(decided) = climb.weigh(&call, held, record, step).await {
                return decided;
            }
        }
        let reason = climb.reason.unwrap_or(DeadReason::StillRefused);
        let refusal = Refusal {
            reason: Some(reason),
            served_model: call.model.clone(),
            request_id: original_request_id,
            ..call.refusal(&climb.info, Outcome::Dead)
        };
        Decision::Dead {
            original: refused,
            refusal,
            attempts: climb.finish(),
        }
    }
}

/// A step's request, built.
struct Step {
    draft: Template,
    kind: AttemptStep,
    model: Option<String>,
    /// Set for a hop to another provider's API: its answer is translated.
    hop: Option<CrossHop>,
    /// The fallback credit token the step presents, and when it was minted.
    presented: Option<(String, Instant)>,
}

/// A hop to another provider's API.
#[derive(Clone, Copy)]
struct CrossHop {
    target: WireApi,
    /// The client asked for usage in its stream (Chat `stream_options`).
    include_usage: bool,
}

/// What preparing a step came to.
enum Prep {
    Send(Box<Step>),
    /// This step could not be built; ask the policy again.
    Skip,
    Stop,
}

/// The ladder's progress on one refusal: what was tried, and why the last
/// step did not recover.
struct Climb {
    /// The original refusal.
    info: RefusalInfo,
    /// The attempts so far; records the client leaving if dropped undecided.
    settlement: Settlement,
    /// An Anthropic fallback credit token and when it was minted.
    credit: Option<(String, Instant)>,
    /// Request fields a response named as keeping its credit token from
    /// being redeemed (`remove_to_redeem`): later hops that present a
    /// token leave them out.
    unredeemable: Vec<String>,
    /// The client's model and each fallback hop that declined, in order:
    /// what a handoff marker names.
    declined: Vec<Declined>,
    /// The original's message id, kept on a marked handoff.
    primary_id: Option<String>,
    /// The latest retry model a refusal recommended.
    recommended: Option<String>,
    /// The latest refusal, which the policy is asked about.
    last: RefusalInfo,
    reason: Option<DeadReason>,
    fallbacks: usize,
    rescues: usize,
    retargets: usize,
    deadline: Instant,
    /// The budget ran out while an attempt was running.
    stopped: bool,
    /// The span of the attempt being sent or judged.
    attempt: AttemptSpan,
    /// The layer's chain for the model, as the routing source ordered it.
    order: Option<Vec<String>>,
}

impl Climb {
    fn new(
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
    fn finish(&mut self) -> Vec<Attempt> {
        self.settlement.take_attempts()
    }

    fn ask(&self, call: &Call) -> NextStep {
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
    async fn prepare(&mut self, call: &Call, original: &Original) -> Prep {
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
        if !tenant.take_hop() {
            tracing::info!(
                tenant = tenant.name(),
                "the tenant's recovery hops for the hour are used: the refusal is served as it came"
            );
            crate::telemetry::metrics::hops_capped(tenant.name());
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
            tenant.give_back_hop();
        }
        prep
    }

    fn fallback(&mut self, call: &Call, mut next: Template, model: String) -> Prep {
        self.fallbacks += 1;
        let dialect = call.dialect;
        if let Some(refused) = self.outside_allowlist(call, &model) {
            return refused;
        }
        if let Some(hop) = parse_entry(&model) {
            return self.cross(call, next, hop, &model);
        }
        if next.aim_at(dialect, &model).is_err() {
            self.reason = Some(DeadReason::Unrecoverable);
            return Prep::Skip;
        }
        let mut presented = None;
        if let Some(features) = dialect.anthropic() {
            presented = self.present_credit(call, features, &mut next);
            features.fit_prefill(&mut next.json, &model);
        }
        Prep::Send(Box::new(Step {
            draft: next,
            kind: AttemptStep::Fallback,
            model: Some(model),
            hop: None,
            presented,
        }))
    }

    /// A hop's fallback credit: the token, redeemable once within its
    /// lifetime, with the fields a response named as keeping it from being
    /// redeemed left out; with fallback credit off, no token (even one the
    /// refusal offers anyway) and no credit beta. The token presented.
    fn present_credit(
        &mut self,
        call: &Call,
        features: &dyn AnthropicFeatures,
        next: &mut Template,
    ) -> Option<(String, Instant)> {
        let (headers, json) = (&mut next.parts.headers, &mut next.json);
        if !call.config.fallback_credit {
            self.credit = None;
            features.withdraw_fallback_credit(headers, json);
        }
        let (token, minted) = self.credit.take()?;
        if minted.elapsed() >= CREDIT_TOKEN_LIFETIME {
            return None;
        }
        features.drop_unredeemable_fields(json, &self.unredeemable);
        features.attach_credit_token(headers, json, &token);
        Some((token, minted))
    }

    /// A hop to the provider a chain entry names: the request translated into
    /// its API, to the operator's endpoint with the operator's key, or the
    /// entry skipped and recorded when there is no endpoint or the request
    /// cannot be expressed there.
    fn cross(
        &mut self,
        call: &Call,
        mut next: Template,
        (provider, model): (Provider, &str),
        entry: &str,
    ) -> Prep {
        let client = call.dialect.wire_api();
        let target = hop_api(provider);
        // A Responses client's `openai:` entry names its own provider too:
        // translating it into Chat would lose what Responses alone carries.
        let own = client == WireApi::OpenAiResponses && provider == Provider::OpenAi;
        if target == client || own {
            // The client's own API: an ordinary hop, on its own credentials.
            if next.aim_at(call.dialect, model).is_err() {
                return self.skip(call, entry, None, DeadReason::Unrecoverable);
            }
            if let Some(features) = call.dialect.anthropic() {
                features.fit_prefill(&mut next.json, model);
            }
            return Prep::Send(Box::new(Step {
                draft: next,
                kind: AttemptStep::Fallback,
                model: Some(model.to_owned()),
                hop: None,
                presented: None,
            }));
        }
        let Some(endpoint) = call.config.cross_provider.get(&provider) else {
            tracing::info!(provider = %provider, model, "no endpoint for this provider; the hop is skipped");
            return self.skip(call, entry, Some(target.provider()), DeadReason::NoEndpoint);
        };
        let streaming = call.dialect.is_streaming(&next.parts.uri, &next.json);
        let written = cross::read_request(client, &next.json, streaming)
            .and_then(|conversation| cross::write_request(target, &conversation, model));
        let (path, body) = match written {
            Ok(written) => written,
            Err(why) => {
                tracing::info!(provider = %provider, model, reason = %why, "the request has no translation; the hop is skipped");
                return self.skip(
                    call,
                    entry,
                    Some(target.provider()),
                    DeadReason::Untranslatable,
                );
            }
        };
        let (Some(uri), Some(headers)) = (
            endpoint.uri(&path),
            cross::hop_headers(target, endpoint.key().expose()),
        ) else {
            return self.skip(
                call,
                entry,
                Some(target.provider()),
                DeadReason::Unrecoverable,
            );
        };
        let include_usage = next.json["stream_options"]["include_usage"].as_bool() == Some(true);
        next.parts.method = http::Method::POST;
        next.parts.uri = uri;
        next.parts.headers = headers;
        next.json = body;
        Prep::Send(Box::new(Step {
            draft: next,
            kind: AttemptStep::Fallback,
            model: Some(entry.to_owned()),
            hop: Some(CrossHop {
                target,
                include_usage,
            }),
            presented: None,
        }))
    }

    /// A hop outside the tenant's allowlist, recorded and never sent;
    /// `None` for a hop it allows.
    fn outside_allowlist(&mut self, call: &Call, entry: &str) -> Option<Prep> {
        let own = call.dialect.provider();
        let (provider, model) = parse_entry(entry).unwrap_or((own, entry));
        let tenant = &call.config.tenant;
        if tenant.allowlist().allows(provider, model) {
            return None;
        }
        tracing::info!(tenant = tenant.name(), provider = %provider, model, "outside the tenant's allowlist; the hop is skipped");
        let to = Some(provider).filter(|p| *p != own);
        Some(self.skip(call, entry, to, DeadReason::NotAllowed))
    }

    /// Records a hop that was never sent, and why.
    fn skip(&mut self, call: &Call, entry: &str, to: Option<Provider>, reason: DeadReason) -> Prep {
        self.attempt = call.request.attempt(AttemptStep::Fallback, Some(entry), to);
        let record = Attempt {
            step: AttemptStep::Fallback,
            model: Some(entry.to_owned()),
            provider: to,
            result: AttemptResult::Skipped,
            status: None,
            latency_ms: 0,
            usage: None,
            fallback_credit: None,
        };
        self.fail(record, reason);
        Prep::Skip
    }

    /// The refused request again, with the retarget list as server-side
    /// fallbacks: skipped without a list, for a request that carried
    /// fallbacks already (a list or `"default"`), and where the dialect or
    /// the platform has none.
    fn retarget(&mut self, call: &Call, mut next: Template) -> Prep {
        self.retargets += 1;
        let config = &call.config;
        let Some(features) = call.dialect.anthropic() else {
            return Prep::Skip;
        };
        if config.retarget.is_empty() || features.carries_server_fallbacks(&next.json) {
            return Prep::Skip;
        }
        let (uri, headers, json) = (&next.parts.uri, &mut next.parts.headers, &mut next.json);
        let retarget = config.retarget(call.model.as_deref(), true);
        if features
            .retarget_fallbacks(uri, headers, json, retarget)
            .is_none()
        {
            return Prep::Skip;
        }
        if !config.fallback_credit {
            features.withdraw_fallback_credit(headers, json);
        }
        Prep::Send(Box::new(Step {
            draft: next,
            kind: AttemptStep::Retarget,
            model: call.model.clone(),
            hop: None,
            presented: None,
        }))
    }

    async fn rescue(&mut self, call: &Call, mut next: Template, rescue: Rescue) -> Prep {
        self.rescues += 1;
        let config = &call.config;
        if !config.rescue.is_on() {
            self.reason.get_or_insert(DeadReason::RescueOff);
            return Prep::Stop;
        }
        if let Some(refused) = rescue.model().and_then(|m| self.outside_allowlist(call, m)) {
            return refused;
        }
        // Before the cap is reserved: a side call skipped here leaves the
        // conversation's one rescue for its real turns.
        if let Some(demand) = call.dialect.structured_output(&next.json) {
            tracing::info!(
                wire_api = %call.dialect.wire_api(),
                demand,
                "the request demands structured output; the rescue step is skipped"
            );
            self.reason = Some(DeadReason::StructuredOutput);
            return Prep::Skip;
        }
        if let Some(key) = call.conversation.key() {
            let reservation = config.store.reserve_rescue(key, config.rescue_cap);
            if !call.ask_store(reservation, false).await {
                self.reason = Some(DeadReason::RescueCap);
                return Prep::Stop;
            }
        }
        let dialect = call.dialect;
        let mut model = call.model.clone();
        if let Some(other) = rescue.model() {
            // The note is a user turn appended last: whatever the model,
            // the request does not end in an assistant turn.
            if next.aim_at(dialect, other).is_ok() {
                model = Some(other.to_owned());
            }
        }
        if dialect.append_note(&mut next.json, rescue.note()).is_err() {
            self.reason = Some(DeadReason::Unrecoverable);
            return Prep::Stop;
        }
        Prep::Send(Box::new(Step {
            draft: next,
            kind: AttemptStep::Rescue,
            model,
            hop: None,
            presented: None,
        }))
    }

    /// Sends a step and holds its response, within the deadline. `None`
    /// when it failed (recorded, with the reason set).
    async fn send<U: InnerService>(
        &mut self,
        upstream: &mut U,
        call: &Call,
        streaming: bool,
        step: &Step,
    ) -> Option<(Held<IdleTimeout<U::Out>>, Attempt)> {
        let request: Request<U::Body> = step.draft.request(&step.draft.json);
        let to = step.hop.map(|hop| hop.target.provider());
        self.attempt = call.request.attempt(step.kind, step.model.as_deref(), to);
        let sent = Instant::now();
        let remaining = self.deadline.saturating_duration_since(sent);
        let (dialect, config) = (call.dialect, &call.config);
        let attempt = tokio::time::timeout(remaining, async {
            match upstream.send(request).await {
                Ok(mut response) => {
                    if let Some(hop) = step.hop {
                        translate_answer(&mut response, hop, dialect.wire_api(), streaming, config);
                    }
                    Ok(hold(response, dialect, config, streaming, None).await)
                }
                Err(_) => Err(()),
            }
        })
        .await;
        let mut record = Attempt {
            step: step.kind,
            model: step.model.clone(),
            provider: step.hop.map(|hop| hop.target.provider()),
            result: AttemptResult::TransportError,
            status: None,
            latency_ms: millis(sent.elapsed()),
            usage: None,
            fallback_credit: None,
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
        // An error status the dialect reads as a refusal (Azure's 400
        // `content_filter`) is a refusal of this attempt, not an upstream error.
        if !held.parts.status.is_success() && !matches!(held.verdict, Verdict::Refused { .. }) {
            record.result = AttemptResult::HttpError;
            self.fail(record, DeadReason::UpstreamError);
            return None;
        }
        Some((held, record))
    }

    /// The token a refused hop presented, when its response said what to
    /// leave out for it to redeem: not redeemed, it may still be, by a
    /// request without those fields within its lifetime ("a corrected
    /// re-send inside the token's five-minute window can still redeem",
    /// anthropic-sdk-python `beta_fallback_credit_not_applied.py`).
    fn carried(&self, record: &Attempt, step: &Step) -> Option<(String, Instant)> {
        let credit = record.fallback_credit.as_ref()?;
        (!credit.remove_to_redeem().is_empty())
            .then(|| step.presented.clone())
            .flatten()
    }

    fn fail(&mut self, record: Attempt, reason: DeadReason) {
        self.attempt.end(&record);
        self.settlement.attempts.push(record);
        self.reason = Some(reason);
    }

    /// What a held attempt decides: the decision, or `None` to go on
    /// climbing.
    async fn weigh<R>(
        &mut self,
        call: &Call,
        held: Held<IdleTimeout<R>>,
        mut record: Attempt,
        step: Step,
    ) -> Option<Decision<IdleTimeout<R>>> {
        let outcome = match step.kind {
            AttemptStep::Fallback | AttemptStep::Retarget => Outcome::Fallback,
            _ => Outcome::Rescued,
        };
        let translated = step.hop.is_some();
        let served_model = held
            .judge
            .as_ref()
            .and_then(|w| w.findings.model.clone())
            .or_else(|| held.judged.as_deref().and_then(|f| f.model.clone()))
            .or(step.model.clone());
        // A hop to another provider is named by its chain entry, provider and all.
        let served_model = if translated {
            step.model.clone()
        } else {
            served_model
        };
        let request_id = call.dialect.request_id(&held.parts.headers);
        record.fallback_credit = held.findings().and_then(|f| f.fallback_credit.clone());
        if let Some(credit) = &record.fallback_credit {
            for field in credit.remove_to_redeem() {
                if !self.unredeemable.contains(field) {
                    self.unredeemable.push(field.clone());
                }
            }
        }
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

    /// Decides on a recovery attempt that produced real output: the sticky
    /// route is stored, and a fallback's model change marked if configured.
    async fn recovered<R>(
        &mut self,
        call: &Call,
        held: Held<IdleTimeout<R>>,
        refusal: Refusal,
        step: Step,
    ) -> Decision<IdleTimeout<R>> {
        call.record_output();
        let config = &call.config;
        let fallback = step.kind == AttemptStep::Fallback;
        // A sticky route swaps the model on the client's own API: a hop to
        // another provider cannot be one.
        if let (Some(ttl), Some(key), true, Some(model)) = (
            config.sticky_ttl,
            call.conversation.key(),
            fallback && step.hop.is_none(),
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

/// Rewrites a cross-provider hop's successful answer into the client's API
/// as it arrives. An error status stays as it came: the hop fails on it,
/// and its body is never served.
fn translate_answer<R>(
    response: &mut http::Response<IdleTimeout<R>>,
    hop: CrossHop,
    client: WireApi,
    streaming: bool,
    config: &crate::guard::config::Config,
) {
    if !response.status().is_success() {
        return;
    }
    let limit = config.max_response_body;
    match BodyTranslation::new(hop.target, client, streaming, hop.include_usage, limit) {
        Ok(translation) => {
            response.headers_mut().remove(http::header::CONTENT_LENGTH);
            response.body_mut().translate(translation);
        }
        Err(why) => tracing::warn!(reason = %why, "the hop's answer has no translation"),
    }
}

/// The routing source's order of the layer's chain for the refused model,
/// for this refusal's category, within the call's deadline; `None` when
/// there is nothing to order (no chain of two), or no answer in time.
async fn routing_order(call: &Call, info: &RefusalInfo) -> Option<Vec<String>> {
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
fn next_step(policy: &dyn RecoveryPolicy, state: &RecoveryState<'_>) -> NextStep {
    let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| policy.next_step(state)));
    asked.unwrap_or_else(|_| {
        tracing::warn!("recovery policy panicked; recovering no further");
        NextStep::Stop(DeadReason::Unrecoverable)
    })
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use bytes::{Bytes, BytesMut};
    use http::Method;
    use http_body_util::Full;

    use http::Response;

    use super::*;
    use crate::guard::upstream::{Inner, Timeouts};
    use crate::recovery::{NextStep, RecoveryState, Rescue};
    use crate::refusal::RefusalHandle;
    use crate::telemetry::MemorySink;
    // The layer is the only builder of a configuration; tests reach it
    // through the crate's public re-export.
    use crate::RefusalGuardLayer;

    const URL: &str = "https://api.anthropic.com/v1/messages";
    const MODEL: &str = "claude-opus-4-7";
    /// An empty Anthropic refusal, as a whole JSON body.
    const REFUSAL: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-7","content":[],"stop_reason":"refusal","stop_sequence":null,"stop_details":{"type":"refusal","category":"cyber","explanation":"Declined."},"usage":{"input_tokens":9,"output_tokens":0}}"#;

    type Upstream =
        tower::util::BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible>;

    /// The ladder's side of one call: the guard as configured by `layer`, an
    /// inner service that counts what is sent to it, and the refusal above
    /// as the original's response.
    /// What shows whether deciding did more than decide.
    struct Witness {
        handle: RefusalHandle,
        sent: Arc<AtomicUsize>,
    }

    fn setup(layer: RefusalGuardLayer) -> (Exchange<Inner<Upstream, Full<Bytes>>>, Witness) {
        let config = layer.config();
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = sent.clone();
        let inner = tower::service_fn(move |_: Request<Full<Bytes>>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::new()))) }
        });
        let uri: http::Uri = URL.parse().unwrap();
        let dialect = crate::dialect::recognise(&Method::POST, &uri)
            .unwrap()
            .dialect;
        let handle = RefusalHandle::default();
        let model = Some(MODEL.to_owned());
        let call = Call {
            request: crate::telemetry::metrics::GuardedRequest::start(
                dialect.provider(),
                dialect.wire_api(),
                model.as_deref(),
                false,
                &handle,
                config.tenant.name(),
            ),
            route: None,
            config: config.clone(),
            dialect,
            model,
            conversation: crate::guard::request::conversation::Conversation::named(None),
            started: Instant::now(),
            handle: handle.clone(),
        };
        let (parts, ()) = Request::post(uri).body(()).unwrap().into_parts();
        let json = serde_json::json!({"model": MODEL, "max_tokens": 64,
            "messages": [{"role": "user", "content": "Audit my SSH config"}]});
        let template = Original {
            parts,
            body: crate::guard::request::original::JsonBody::new(
                Bytes::from(json.to_string()).into(),
            ),
            rewritten: false,
            composed: None,
            _share: Arc::new(config.held.share()),
        };
        let upstream = Inner::primed(Upstream::new(inner), Timeouts::of(&config));
        let attempt = AttemptSpan::default();
        let exchange = Exchange::new(upstream, call, template, (false, Instant::now()), attempt);
        (exchange, Witness { handle, sent })
    }

    fn original() -> Response<IdleTimeout<Full<Bytes>>> {
        let body = IdleTimeout::new(Full::new(Bytes::from(REFUSAL)), Duration::from_secs(5));
        Response::builder()
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    }

    fn held_bytes<B>(held: &Held<B>) -> Bytes {
        let mut whole = BytesMut::new();
        for frame in &held.frames {
            whole.extend_from_slice(frame.data_ref().unwrap());
        }
        whole.freeze()
    }

    /// Asserts `decision` is the refusal left dead for `reason`, with the
    /// original as sent and nothing recorded or settled yet.
    fn assert_dead(
        decision: Decision<IdleTimeout<Full<Bytes>>>,
        witness: &Witness,
        reason: DeadReason,
    ) {
        let Decision::Dead {
            original,
            refusal,
            attempts,
        } = decision
        else {
            panic!("expected a dead refusal");
        };
        assert_eq!(refusal.reason, Some(reason));
        assert_eq!(refusal.outcome, Outcome::Dead);
        assert_eq!(refusal.category.as_deref(), Some("cyber"));
        assert_eq!(held_bytes(&original), REFUSAL.as_bytes());
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].result, AttemptResult::Refused);
        assert_eq!(
            witness.sent.load(Ordering::SeqCst),
            0,
            "nothing sent upstream"
        );
        assert!(!witness.handle.is_settled(), "deciding settles nothing");
    }

    #[tokio::test]
    async fn a_policy_that_stops_decides_dead_without_recording() {
        let sink = MemorySink::new();
        let stop = |_: &RecoveryState<'_>| NextStep::Stop(DeadReason::PolicyStop);
        let layer = RefusalGuardLayer::new().policy(stop);
        let (mut exchange, witness) = setup(layer.telemetry(sink.clone()));
        let held = exchange.judge(original(), None).await.ok().unwrap();
        let decision = exchange.decide(held).await;
        assert!(sink.is_empty(), "deciding records nothing");
        assert_dead(decision, &witness, DeadReason::PolicyStop);
    }

    #[tokio::test]
    async fn a_rescue_switched_off_decides_dead_before_sending() {
        let rescue = |_: &RecoveryState<'_>| NextStep::Rescue(Rescue::new("Say what you can do."));
        let (mut exchange, witness) = setup(RefusalGuardLayer::new().policy(rescue).rescue(false));
        let held = exchange.judge(original(), None).await.ok().unwrap();
        let decision = exchange.decide(held).await;
        assert_dead(decision, &witness, DeadReason::RescueOff);
    }
}
