//! The steps of the ladder, each built into the request it sends: a
//! fallback (on the same API, or translated to another provider's), a
//! server-side fallbacks retarget, a rescue; or skipped, with the reason.

use std::time::Instant;

use crate::dialect::cross;
use crate::dialect::Features;
use crate::guard::call::Call;
use crate::guard::request::original::Draft;
use crate::recovery::{parse_entry, Rescue};
use crate::refusal::{Attempt, AttemptResult, AttemptStep, DeadReason, Provider};

use super::climb::{Climb, CrossProvider, Prep, Prepared, CREDIT_TOKEN_LIFETIME};

impl Climb {
    pub(super) fn fallback(&mut self, call: &Call, mut next: Draft, model: String) -> Prep {
        self.fallbacks += 1;
        let dialect = call.dialect;
        if let Some(refused) = self.outside_allowlist(call, &model) {
            return refused;
        }
        if let Some(fallback) = parse_entry(&model) {
            return self.cross(call, next, fallback, &model);
        }
        if next.aim_at(dialect, &model).is_err() {
            self.reason = Some(DeadReason::Unrecoverable);
            return Prep::Skip;
        }
        let features = dialect.features();
        let presented = self.present_credit(call, features, &mut next);
        features.fit_prefill(&mut next.json, &model);
        Prep::Send(Box::new(Prepared {
            draft: next,
            kind: AttemptStep::Fallback,
            model: Some(model),
            fallback: None,
            presented,
        }))
    }

    /// A fallback's fallback credit: the token, redeemable once within its
    /// lifetime, with the fields a response named as keeping it from being
    /// redeemed left out; with fallback credit off, no token (even one the
    /// refusal offers anyway) and no credit beta. The token presented.
    pub(super) fn present_credit(
        &mut self,
        call: &Call,
        features: &dyn Features,
        next: &mut Draft,
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

    /// A fallback to the provider a chain entry names: the request translated into
    /// its API, to the operator's endpoint with the operator's key, or the
    /// entry skipped and recorded when there is no endpoint or the request
    /// cannot be expressed there.
    pub(super) fn cross(
        &mut self,
        call: &Call,
        mut next: Draft,
        (provider, model): (Provider, &str),
        entry: &str,
    ) -> Prep {
        let client = call.dialect.wire_api();
        let target = provider.fallback_api();
        if call.dialect.serves_entries_of(provider) {
            // The client's own API: an ordinary fallback, on its own credentials.
            if next.aim_at(call.dialect, model).is_err() {
                return self.skip(call, entry, None, DeadReason::Unrecoverable);
            }
            call.dialect.features().fit_prefill(&mut next.json, model);
            return Prep::Send(Box::new(Prepared {
                draft: next,
                kind: AttemptStep::Fallback,
                model: Some(model.to_owned()),
                fallback: None,
                presented: None,
            }));
        }
        let Some(endpoint) = call.config.cross_provider.get(&provider) else {
            tracing::info!(provider = %provider, model, "no endpoint for this provider; the fallback is skipped");
            return self.skip(call, entry, Some(target.provider()), DeadReason::NoEndpoint);
        };
        let streaming = call.dialect.is_streaming(&next.parts.uri, &next.json);
        let written = cross::read_request(client, &next.json, streaming)
            .and_then(|conversation| cross::write_request(target, &conversation, model));
        let (path, body) = match written {
            Ok(written) => written,
            Err(why) => {
                tracing::info!(provider = %provider, model, reason = %why, "the request has no translation; the fallback is skipped");
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
            cross::fallback_headers(target, endpoint.key().expose()),
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
        Prep::Send(Box::new(Prepared {
            draft: next,
            kind: AttemptStep::Fallback,
            model: Some(entry.to_owned()),
            fallback: Some(CrossProvider {
                target,
                include_usage,
            }),
            presented: None,
        }))
    }

    /// A fallback outside the tenant's allowlist, recorded and never sent;
    /// `None` for a fallback it allows.
    pub(super) fn outside_allowlist(&mut self, call: &Call, entry: &str) -> Option<Prep> {
        let own = call.dialect.provider();
        let (provider, model) = parse_entry(entry).unwrap_or((own, entry));
        let tenant = &call.config.tenant;
        if tenant.allowlist().allows(provider, model) {
            return None;
        }
        tracing::info!(tenant = tenant.name(), provider = %provider, model, "outside the tenant's allowlist; the fallback is skipped");
        let to = Some(provider).filter(|p| *p != own);
        Some(self.skip(call, entry, to, DeadReason::NotAllowed))
    }

    /// Records a fallback that was never sent, and why.
    pub(super) fn skip(
        &mut self,
        call: &Call,
        entry: &str,
        to: Option<Provider>,
        reason: DeadReason,
    ) -> Prep {
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
            rerouted_to: None,
            reason: Some(reason),
        };
        self.fail(record, reason);
        Prep::Skip
    }

    /// The refused request again, with the retarget list as server-side
    /// fallbacks: skipped without a list, for a request that carried
    /// fallbacks already (a list or `"default"`), and where the dialect or
    /// the platform has none.
    pub(super) fn retarget(&mut self, call: &Call, mut next: Draft) -> Prep {
        self.retargets += 1;
        let config = &call.config;
        let features = call.dialect.features();
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
        Prep::Send(Box::new(Prepared {
            draft: next,
            kind: AttemptStep::Retarget,
            model: call.model.clone(),
            fallback: None,
            presented: None,
        }))
    }

    pub(super) async fn rescue(&mut self, call: &Call, mut next: Draft, rescue: Rescue) -> Prep {
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
        Prep::Send(Box::new(Prepared {
            draft: next,
            kind: AttemptStep::Rescue,
            model,
            fallback: None,
            presented: None,
        }))
    }
}
