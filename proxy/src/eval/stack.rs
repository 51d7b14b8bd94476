//! One variant's proxy, built in process as `refusal-guard` builds its own
//! (the layer from the options, the tenants file, the admission, the
//! routes, the client over the real network or the simulated providers
//! under the guard), and the records its guard makes, by conversation.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use clap::CommandFactory;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::Full;
use refusal_guard::env::LogSetting;
use refusal_guard::recovery::ApiKey;
use refusal_guard::refusal::Provider;
use refusal_guard::store::ConversationKey;
use refusal_guard::telemetry::{JsonlSink, RefusalRecord, TelemetrySink};
use refusal_guard::tenant::Tenant;
use tower_layer::Layer;

use super::super::run::{configure, layer, tenants};
use super::super::{Options, Proxy, ProxyBody, ServerLimits, Upstream, UpstreamService};
use super::simulated::{Script, Simulated};
use super::variants::Variant;

/// Records waiting for their call to collect them; past it, new ones are
/// dropped (a call that never collects its record is one that timed out).
const MAX_WAITING_RECORDS: usize = 4096;

/// A key the simulated providers take as they would a real one.
const SIMULATED_KEY: &str = "sk-simulated-no-network";

/// Where the calls go.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// The providers themselves, with the client keys of the environment.
    Providers(Keys),
    /// The testkit's simulated providers, as the script says.
    Simulated(Script),
}

/// The client's key for each provider, read from the variables the proxy
/// reads its own from (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`,
/// `GEMINI_API_KEY`). `Debug` never shows them.
#[derive(Clone, Default)]
pub(crate) struct Keys(HashMap<Provider, String>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Keys {
    /// The keys `env` holds.
    pub(crate) fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Keys {
        let keys = [Provider::Anthropic, Provider::OpenAi, Provider::Google]
            .into_iter()
            .filter_map(|p| Some((p, env(&key_variable(p)).filter(|k| !k.trim().is_empty())?)))
            .map(|(p, key)| (p, key.trim().to_owned()))
            .collect();
        Keys(keys)
    }

    pub(crate) fn get(&self, provider: Provider) -> Option<&str> {
        self.0.get(&provider).map(String::as_str)
    }
}

/// The variable the proxy reads `provider`'s key from (its option's).
pub(crate) fn key_variable(provider: Provider) -> String {
    let id = match provider {
        Provider::Anthropic => "anthropic_api_key",
        Provider::OpenAi => "openai_api_key",
        _ => "gemini_api_key",
    };
    Options::command()
        .get_arguments()
        .find(|arg| arg.get_id() == id)
        .and_then(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .unwrap_or_else(|| id.to_ascii_uppercase())
}

/// What one call hands the proxy, and what it gets back.
type Handle = Arc<
    dyn Fn(Request<Full<Bytes>>) -> Pin<Box<dyn Future<Output = Response<ProxyBody>> + Send>>
        + Send
        + Sync,
>;

/// One variant's proxy.
pub(crate) struct Stack {
    handle: Handle,
    records: Records,
    /// The simulated providers under this variant's guard, if simulated.
    pub(crate) simulated: Option<Simulated>,
    /// The tenant the variant's client key is admitted as.
    tenant: Option<String>,
}

impl Stack {
    /// The proxy `variant` describes, in front of `target`. Runs in the
    /// runtime (a tenants file is watched from a task).
    pub(crate) fn build(
        variant: &Variant,
        target: &Target,
        categories: &HashMap<String, String>,
    ) -> Result<Stack, String> {
        let mut options = variant.options.clone();
        if let Target::Simulated(_) = target {
            // Cross-provider chain entries need the operator's key to be
            // tried at all; offline any key does.
            for key in [
                &mut options.anthropic_api_key,
                &mut options.openai_api_key,
                &mut options.gemini_api_key,
            ] {
                key.get_or_insert_with(|| ApiKey::new(SIMULATED_KEY));
            }
        } else if options.routes.is_none() && options.upstream == default_upstream() {
            // Each API to its provider, unless the variant says where.
            options.routes = Some(true);
        }
        let tenants = tenants(&options)?;
        let tenant = match (&tenants, &variant.client_key) {
            (Some(tenants), Some(key)) => Some(admitted_as(&tenants.table(), key)?),
            _ => None,
        };
        let records = Records::default();
        let (guard, _) = layer(&options)?;
        let guard = match options.log_setting() {
            LogSetting::Path(path) => {
                let log = JsonlSink::open(&path)
                    .map_err(|e| format!("cannot open the refusal log {}: {e}", path.display()))?;
                guard.telemetry((log, records.clone()))
            }
            _ => guard.telemetry(records.clone()),
        };
        let limits = ServerLimits::default();
        let (handle, simulated) = match target {
            Target::Simulated(script) => {
                let simulated = script.simulated(categories);
                let upstream = Upstream::parse("http://simulated.invalid").expect("a valid URL");
                let proxy = Proxy::with_service(upstream, guard.layer(simulated.service()));
                (
                    handle(configure(proxy, &options, limits, tenants)),
                    Some(simulated),
                )
            }
            Target::Providers(_) => {
                let proxy = Proxy::new(options.routes(), &guard)
                    .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
                (handle(configure(proxy, &options, limits, tenants)), None)
            }
        };
        Ok(Stack {
            handle,
            records,
            simulated,
            tenant,
        })
    }

    /// Hands `request` to the proxy, as a client's request would arrive.
    pub(crate) fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> impl Future<Output = Response<ProxyBody>> {
        (self.handle)(request)
    }

    /// The record of the conversation the eval named `name`, once.
    pub(crate) fn take_record(&self, name: &str) -> Option<RefusalRecord> {
        self.records
            .take(&conversation_key(self.tenant.as_deref(), name))
    }
}

/// The proxy's default `--upstream`.
fn default_upstream() -> Upstream {
    Upstream::parse("https://api.anthropic.com").expect("a valid URL")
}

/// The name of the tenant `key` is admitted as.
fn admitted_as(table: &super::super::TenantTable, key: &str) -> Result<String, String> {
    let mut headers = HeaderMap::new();
    let value =
        HeaderValue::from_str(key).map_err(|_| "the client key is no header value".to_owned())?;
    headers.insert(refusal_guard::header::CLIENT_KEY, value);
    table
        .admit(&mut headers)
        .map(|tenant| tenant.name().to_owned())
        .ok_or_else(|| "the client key client_key_env names is not in the tenants file".to_owned())
}

fn handle<S: UpstreamService>(proxy: Proxy<S>) -> Handle {
    Arc::new(move |request| {
        let proxy = proxy.clone();
        Box::pin(async move { proxy.handle(request).await })
    })
}

/// The key the guard gives a conversation its header names: the name
/// hashed, within its tenant's scope (none for the default tenant), as
/// every record's `conversation` holds it.
fn conversation_key(tenant: Option<&str>, name: &str) -> String {
    let scoped = match tenant.filter(|t| *t != Tenant::DEFAULT_NAME) {
        Some(tenant) => [tenant.as_bytes(), b"\0", name.as_bytes()].concat(),
        None => name.as_bytes().to_vec(),
    };
    ConversationKey::from_bytes(&scoped).as_str().to_owned()
}

/// The guard's records, kept by conversation until their call takes them.
#[derive(Clone, Default)]
struct Records(Arc<Mutex<HashMap<String, RefusalRecord>>>);

impl Records {
    fn take(&self, key: &str) -> Option<RefusalRecord> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key)
    }
}

impl TelemetrySink for Records {
    fn record(&self, record: &RefusalRecord) {
        let Some(key) = record.conversation.clone() else {
            return;
        };
        let mut waiting = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if waiting.len() < MAX_WAITING_RECORDS {
            waiting.insert(key, record.clone());
        } else {
            tracing::warn!("eval: too many refusal records waiting for their calls; one dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_proxys_variables() {
        assert_eq!(key_variable(Provider::OpenAi), "OPENAI_API_KEY");
        let env = |k: &str| (k == "GEMINI_API_KEY").then(|| " g-key ".to_owned());
        let keys = Keys::from_env(&env);
        assert_eq!(keys.get(Provider::Google), Some("g-key"));
        assert_eq!(keys.get(Provider::Anthropic), None);
        assert!(!format!("{keys:?}").contains("g-key"));
    }
}
