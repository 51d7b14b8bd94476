//! What every guarded call reads: the layer's whole configuration, shared
//! by every service the layer builds. The builder is
//! [`RefusalGuardLayer`](crate::RefusalGuardLayer).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::header::HeaderName;
use serde_json::Value;

use crate::recovery::{AllowedFallbacks, Budget, Endpoint, Ladder, RecoveryPolicy, RescueSwitch};
use crate::refusal::Provider;
use crate::replay::reserve::BytePool;
use crate::routing::RoutingSource;
use crate::store::ConversationStore;
use crate::telemetry::TelemetrySink;
use crate::tenant::{Tenant, TenantResolver};

/// A user hook that names the conversation a request belongs to.
pub(crate) type ConversationFn =
    dyn Fn(&http::request::Parts, &Value) -> Option<String> + Send + Sync;

/// Everything the service needs, shared by every clone.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) rescue: RescueSwitch,
    pub(crate) rescue_cap: u32,
    /// The default policy, which the shorthand builder methods configure.
    pub(crate) ladder: Ladder,
    /// A policy given with [`RefusalGuardLayer::policy`], used instead.
    pub(crate) policy: Option<Arc<dyn RecoveryPolicy>>,
    pub(crate) store: Arc<dyn ConversationStore>,
    pub(crate) telemetry: Arc<dyn TelemetrySink>,
    pub(crate) conversation_header: Option<HeaderName>,
    pub(crate) conversation_fn: Option<Arc<ConversationFn>>,
    pub(crate) max_request_body: usize,
    pub(crate) max_response_body: usize,
    pub(crate) max_hold_bytes: usize,
    pub(crate) max_hold_frames: usize,
    pub(crate) retarget: Vec<String>,
    pub(crate) inject_fallbacks: bool,
    /// The operator's limits on the server-side fallbacks a retarget names.
    pub(crate) allowed_fallbacks: AllowedFallbacks,
    pub(crate) fallback_credit: bool,
    pub(crate) budget: Budget,
    pub(crate) sticky_ttl: Option<Duration>,
    pub(crate) handoff_marker: bool,
    /// Whether a reroute is a refusal of category `rerouted`, decided at
    /// the response's first event, rather than only recorded.
    pub(crate) recover_reroutes: bool,
    /// Whether a response another model served than the one asked for
    /// says so in the `refusal-guard-reroute` header.
    pub(crate) reroute_header: bool,
    pub(crate) text_detection: bool,
    pub(crate) text_hold_bytes: usize,
    pub(crate) keepalive_after: Option<Duration>,
    pub(crate) keepalive_interval: Duration,
    pub(crate) live_thinking: bool,
    pub(crate) continue_partial: bool,
    pub(crate) head_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) held: Arc<BytePool>,
    /// The operator's endpoint for each provider cross-provider fallbacks may go to.
    pub(crate) cross_provider: HashMap<Provider, Endpoint>,
    /// Orders each refusal's fallback candidates.
    pub(crate) routing: Arc<dyn RoutingSource>,
    /// Names the tenant of each guarded request.
    pub(crate) resolver: Arc<dyn TenantResolver>,
    /// The tenant this configuration is for: the layer's own is the
    /// default one, and [`Config::for_tenant`] makes the others.
    pub(crate) tenant: Tenant,
    /// The configuration made for each tenant seen, by name.
    pub(crate) tenants: Arc<TenantConfigs>,
}

/// Most tenants whose configuration is kept made; past it (a resolver that
/// makes up names), the configuration is made again for each request.
const MAX_TENANT_CONFIGS: usize = 1024;

/// The configurations made for tenants, by name: each is made once per
/// tenant (and again when the tenant is replaced, as on a reload).
#[derive(Default)]
pub(crate) struct TenantConfigs(RwLock<HashMap<String, (Tenant, Arc<Config>)>>);

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("rescue", &self.rescue.is_on())
            .field("rescue_cap", &self.rescue_cap)
            .field("ladder", &self.ladder)
            .field("custom_policy", &self.policy.is_some())
            .field("conversation_header", &self.conversation_header)
            .field("max_request_body", &self.max_request_body)
            .field("max_response_body", &self.max_response_body)
            .field("max_hold_bytes", &self.max_hold_bytes)
            .field("max_hold_frames", &self.max_hold_frames)
            .field("retarget", &self.retarget)
            .field("inject_fallbacks", &self.inject_fallbacks)
            .field("allowed_fallbacks", &self.allowed_fallbacks)
            .field("fallback_credit", &self.fallback_credit)
            .field("budget", &self.budget)
            .field("sticky_ttl", &self.sticky_ttl)
            .field("handoff_marker", &self.handoff_marker)
            .field("recover_reroutes", &self.recover_reroutes)
            .field("reroute_header", &self.reroute_header)
            .field("text_detection", &self.text_detection)
            .field("text_hold_bytes", &self.text_hold_bytes)
            .field("keepalive_after", &self.keepalive_after)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("live_thinking", &self.live_thinking)
            .field("continue_partial", &self.continue_partial)
            .field("head_timeout", &self.head_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_total_held_bytes", &self.held.limit())
            .field("cross_provider", &self.cross_provider)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// What a retarget of a request to `own_model` writes: the operator's
    /// models, within the requested model's allowlist when it has one.
    pub(crate) fn retarget<'a>(
        &'a self,
        own_model: Option<&'a str>,
        inject: bool,
    ) -> crate::dialect::Retarget<'a> {
        crate::dialect::Retarget {
            models: &self.retarget,
            own_model,
            inject,
            allowed: own_model.and_then(|model| self.allowed_fallbacks.for_model(model)),
        }
    }

    /// The configuration for the tenant of a request with this head: the
    /// layer's own for the default tenant, else the layer's with the
    /// tenant's settings in place of its own, made once per tenant.
    pub(crate) fn for_request(self: &Arc<Self>, head: &http::request::Parts) -> Arc<Config> {
        let tenant = self.resolver.tenant(head);
        if tenant.same(&self.tenant) {
            return self.clone();
        }
        let made = self.tenants.0.read().unwrap_or_else(|p| p.into_inner());
        if let Some((known, config)) = made.get(tenant.name()) {
            if known.same(&tenant) {
                return config.clone();
            }
        }
        drop(made);
        let config = Arc::new(self.with_tenant(tenant.clone()));
        let mut made = self.tenants.0.write().unwrap_or_else(|p| p.into_inner());
        if made.len() < MAX_TENANT_CONFIGS || made.contains_key(tenant.name()) {
            made.insert(tenant.name().to_owned(), (tenant, config.clone()));
        }
        config
    }

    /// This configuration with `tenant`'s settings in place of its own.
    fn with_tenant(&self, tenant: Tenant) -> Config {
        let mut config = self.clone();
        if let Some(policy) = tenant.policy_setting() {
            config.ladder = config.ladder.category_policy(policy.clone());
        }
        if let Some(chains) = tenant.chains_setting() {
            config.ladder = config.ladder.fallback_chains(chains.clone());
        }
        if tenant.rescue_setting() == Some(false) {
            config.rescue = RescueSwitch::new(false);
        }
        if let Some(on) = tenant.text_detection_setting() {
            config.text_detection = on;
        }
        // Server-side fallbacks go to the models of the providers whose
        // APIs take them.
        let allow = tenant.allowlist();
        config.retarget.retain(|model| {
            crate::dialect::server_fallback_providers().any(|p| allow.allows(p, model))
        });
        config
            .cross_provider
            .retain(|provider, _| tenant.may_use_operator_key(*provider));
        config.tenant = tenant;
        // Made for one tenant: it makes no others.
        config.tenants = Arc::default();
        config
    }

    /// The policy in force.
    pub(crate) fn policy(&self) -> &dyn RecoveryPolicy {
        match &self.policy {
            Some(policy) => policy.as_ref(),
            None => &self.ladder,
        }
    }
}
