//! The tenants file (`--tenants PATH`): which client keys the proxy
//! admits, and each one's tenant with its own recovery settings.
//!
//! A TOML file of `[[tenant]]` tables:
//!
//! ```toml
//! [[tenant]]
//! name = "red-team"                       # letters, digits, `_`, `-`, `.`; at most 64
//! key_sha256 = ["9f86d081884c7d65..."]    # SHA-256 (hex) of each client key
//! policy = "cyber=fallback,rescue;*=stop" # steps per category (as --policy)
//! chains = { "claude-opus-4-7" = ["claude-sonnet-4-5", "openai:gpt-5"] }
//! allow_models = ["claude-sonnet-*", "gpt-5"]
//! allow_providers = ["anthropic", "openai"]
//! operator_keys = ["openai"]              # the operator's keys its fallbacks may spend
//! rescue = true
//! detect_text = false
//! recovery_attempts_per_hour = 200
//! ```
//!
//! Only `name` and `key_sha256` are required; whatever a tenant leaves out
//! is the proxy's flags' (operator keys: none). Keys are stored as hashes
//! (`refusal-guard tenants hash-key` reads a key on standard input and
//! prints its hash, as `printf %s "$KEY" | sha256sum` does) and compared in
//! constant time. The file is bounded: 1 MiB, 256 tenants, 16 keys per
//! tenant, 64 chains of at most 8 candidates, 64 allowlist entries.
//! Anything else (an unknown field, a key given twice, a bad policy) is an
//! error naming the tenant: at start the proxy does not start; on a reload
//! the last good file is kept, and stderr and `/readyz` say why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, SystemTime};

use http::HeaderMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::admin::{Probe, ProbeResult};
use super::client_key::presented;
use refusal_guard::recovery::category::CategoryPolicy;
use refusal_guard::recovery::{chain_prefix, parse_entry, providers, FallbackChains};
use refusal_guard::refusal::Provider;
use refusal_guard::tenant::{FallbackAllowlist, Tenant};

/// Largest tenants file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Most tenants in one file.
pub const MAX_TENANTS: usize = 256;
const MAX_KEYS: usize = 16;
const MAX_CHAINS: usize = 64;
const MAX_CANDIDATES: usize = 8;
const MAX_ALLOWED: usize = 64;
const MAX_NAME: usize = 64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileText {
    #[serde(default)]
    tenant: Vec<toml::Spanned<Entry>>,
}

/// The file read first only for its tables: where each tenant's begins
/// (its `[[tenant]]` line) and what it is named, so that an error the
/// reading of the tenants finds names its tenant. Whatever is wrong here
/// (not TOML, a table other than `[[tenant]]`) is outside any tenant.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantTables {
    #[serde(default)]
    tenant: Vec<toml::Spanned<toml::Table>>,
}

impl TenantTables {
    /// The tenant whose table holds the byte at `offset` (the last to begin
    /// before it: every table after a `[[tenant]]` line is its own, or an
    /// error found before), by name, else by its place in the file.
    fn named_at(&self, offset: usize) -> Option<String> {
        let index = self
            .tenant
            .iter()
            .rposition(|table| table.span().start <= offset)?;
        let table = self.tenant[index].get_ref();
        Some(match table.get("name").and_then(toml::Value::as_str) {
            Some(name) => format!("tenant `{name}`"),
            None => format!("tenant {} (no name)", index + 1),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    key_sha256: Vec<String>,
    policy: Option<String>,
    chains: Option<BTreeMap<String, Vec<String>>>,
    allow_models: Option<Vec<String>>,
    allow_providers: Option<Vec<String>>,
    operator_keys: Option<Vec<String>>,
    rescue: Option<bool>,
    detect_text: Option<bool>,
    // `hops_per_hour` is the key's earlier name: files written for it load.
    #[serde(alias = "hops_per_hour")]
    recovery_attempts_per_hour: Option<u32>,
}

/// The tenants of one reading of the file, and the hashes of their keys.
///
/// ```
/// use refusal_guard_proxy::TenantTable;
///
/// let text = r#"
/// [[tenant]]
/// name = "team-a"
/// key_sha256 = ["2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"]
/// rescue = false
/// "#;
/// let table = TenantTable::parse(text, None)?;
/// assert_eq!(table.names(), ["team-a"]);
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-refusal-guard-key", "foo".parse().unwrap()); // sha256("foo") above
/// assert_eq!(table.admit(&mut headers).unwrap().name(), "team-a");
/// assert!(headers.is_empty(), "the key never goes upstream");
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Default)]
pub struct TenantTable {
    tenants: Vec<Tenant>,
    /// Each key's hash and the index of its tenant.
    keys: Vec<([u8; 32], u32)>,
}

impl TenantTable {
    /// Reads a tenants file's text. Tenants named as in `earlier` (the
    /// table before a reload) keep counting their recovery attempts where they were.
    pub fn parse(text: &str, earlier: Option<&TenantTable>) -> Result<Self, String> {
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
        }
        let tables: TenantTables = toml::from_str(text).map_err(|e| said(text, &e, None))?;
        let file: FileText = toml::from_str(text).map_err(|e| said(text, &e, Some(&tables)))?;
        if file.tenant.len() > MAX_TENANTS {
            return Err(format!("more than {MAX_TENANTS} tenants"));
        }
        let mut table = TenantTable::default();
        for spanned in file.tenant {
            let line = line_of(text, spanned.span().start);
            let entry = spanned.into_inner();
            let name = entry.name.clone();
            let (tenant, hashes) = read_entry(entry)
                .map_err(|e| format!("tenant `{name}`: {e} (the table from line {line})"))?;
            if table.tenants.iter().any(|t| t.name() == name) {
                return Err(format!("tenant `{name}`: given twice (line {line})"));
            }
            let tenant = match earlier.and_then(|e| e.named(&name)) {
                Some(before) => tenant.counting_attempts_with(before),
                None => tenant,
            };
            let index = table.tenants.len() as u32;
            for hash in hashes {
                if let Some((_, other)) = table.keys.iter().find(|(known, _)| *known == hash) {
                    let other = table.tenants[*other as usize].name();
                    return Err(format!(
                        "tenant `{name}`: a key hash tenant `{other}` has too (line {line})"
                    ));
                }
                table.keys.push((hash, index));
            }
            table.tenants.push(tenant);
        }
        Ok(table)
    }

    /// The tenants' names, in the file's order.
    pub fn names(&self) -> Vec<&str> {
        self.tenants.iter().map(Tenant::name).collect()
    }

    /// The tenant named `name`.
    pub fn named(&self, name: &str) -> Option<&Tenant> {
        self.tenants.iter().find(|t| t.name() == name)
    }

    /// The fallbacks that read but can never be sent, one line each: a
    /// tenant whose own chains name another provider's models
    /// (`openai:gpt-5`) and whose `operator_keys` let it spend that
    /// provider's key, when `held` (the providers the proxy holds a key
    /// for) does not have it.
    ///
    /// ```
    /// use refusal_guard_proxy::TenantTable;
    /// use refusal_guard::refusal::Provider;
    ///
    /// let text = r#"
    /// [[tenant]]
    /// name = "red-team"
    /// key_sha256 = ["2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"]
    /// chains = { "claude-opus-4-7" = ["claude-sonnet-4-5", "openai:gpt-5"] }
    /// operator_keys = ["openai"]
    /// "#;
    /// let table = TenantTable::parse(text, None)?;
    /// assert!(table.unkeyed_fallbacks(&[Provider::OpenAi]).is_empty());
    /// let unkeyed = table.unkeyed_fallbacks(&[]);
    /// assert!(unkeyed[0].starts_with("tenant `red-team`: its chains name `openai:` models"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn unkeyed_fallbacks(&self, held: &[Provider]) -> Vec<String> {
        let mut unkeyed = Vec::new();
        for tenant in &self.tenants {
            let Some(chains) = tenant.chains_setting() else {
                continue;
            };
            for provider in providers() {
                let named = chains
                    .entries()
                    .any(|entry| parse_entry(entry).is_some_and(|(p, _)| p == provider));
                if named && tenant.may_use_operator_key(provider) && !held.contains(&provider) {
                    let prefix = chain_prefix(provider);
                    unkeyed.push(format!(
                        "tenant `{}`: its chains name `{prefix}:` models and its `operator_keys` \
                         {provider}, but the proxy holds no {provider} key (--{prefix}-api-key): \
                         those fallbacks will be skipped (no_endpoint)",
                        tenant.name()
                    ));
                }
            }
        }
        unkeyed
    }

    /// The tenant whose key `headers` present (`x-refusal-guard-key`,
    /// `x-api-key` or `Authorization: Bearer`, as
    /// [`ClientKey`](super::ClientKey) reads them); the header that carried
    /// it is removed, so the key never goes upstream.
    pub fn admit(&self, headers: &mut HeaderMap) -> Option<Tenant> {
        let index = presented(headers, |sent| self.find(sent))?;
        self.tenants.get(index as usize).cloned()
    }

    /// The index of the tenant whose key hashes as `sent` does: every hash
    /// is compared, in constant time, whichever matches.
    fn find(&self, sent: &[u8]) -> Option<u32> {
        let digest = Sha256::digest(sent);
        let mut found = 0u32;
        for (hash, index) in &self.keys {
            let equal = hash.ct_eq(digest.as_slice());
            found.conditional_assign(&(index + 1), equal);
        }
        found.checked_sub(1)
    }
}

/// The line (from 1) of the byte at `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    1 + text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
}

/// What a reading of the file found wrong, on one line: the tenant whose
/// table it is in (when `tables` are known), what is wrong, and where.
fn said(text: &str, error: &toml::de::Error, tables: Option<&TenantTables>) -> String {
    let message = error.message().trim_end();
    let Some(at) = error.span().map(|span| span.start.min(text.len())) else {
        return message.to_owned();
    };
    let line_start = text[..at].rfind('\n').map_or(0, |newline| newline + 1);
    let column = 1 + text[line_start..at].chars().count();
    // The line itself, so that a type error says which field it is in.
    let shown: String = text[line_start..]
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .chars()
        .take(80)
        .collect();
    let place = format!("line {}, column {column}: `{shown}`", line_of(text, at));
    match tables.and_then(|tables| tables.named_at(at)) {
        Some(tenant) => format!("{tenant}: {message} ({place})"),
        None => format!("{message} ({place})"),
    }
}

fn read_entry(entry: Entry) -> Result<(Tenant, Vec<[u8; 32]>), String> {
    let name = entry.name;
    if name.is_empty()
        || name.len() > MAX_NAME
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(format!(
            "a name is 1 to {MAX_NAME} letters, digits, `_`, `-` or `.`"
        ));
    }
    if entry.key_sha256.is_empty() || entry.key_sha256.len() > MAX_KEYS {
        return Err(format!("`key_sha256` lists 1 to {MAX_KEYS} hashes"));
    }
    let hashes = entry
        .key_sha256
        .iter()
        .map(|hex| key_hash(hex))
        .collect::<Result<Vec<_>, _>>()?;
    let mut tenant = Tenant::named(name);
    if let Some(policy) = entry.policy {
        let policy: CategoryPolicy = policy.parse().map_err(|e| format!("`policy`: {e}"))?;
        tenant = tenant.category_policy(policy);
    }
    if let Some(chains) = entry.chains {
        tenant = tenant.fallback_chains(read_chains(chains)?);
    }
    let mut allow = FallbackAllowlist::new();
    if let Some(models) = entry.allow_models {
        bounded("allow_models", &models)?;
        allow = allow.models(models);
    }
    if let Some(providers) = entry.allow_providers {
        bounded("allow_providers", &providers)?;
        allow = allow.providers(read_providers("allow_providers", &providers)?);
    }
    tenant = tenant.allow(allow);
    if let Some(providers) = entry.operator_keys {
        tenant = tenant.operator_keys(read_providers("operator_keys", &providers)?);
    }
    if let Some(on) = entry.rescue {
        tenant = tenant.rescue(on);
    }
    if let Some(on) = entry.detect_text {
        tenant = tenant.detect_text_refusals(on);
    }
    if let Some(attempts) = entry.recovery_attempts_per_hour {
        tenant = tenant.recovery_attempts_per_hour(attempts);
    }
    Ok((tenant, hashes))
}

/// A key's SHA-256, from its 64 hex digits.
fn key_hash(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    let digits = hex.as_bytes();
    let wrong =
        || "a `key_sha256` entry is 64 hex digits (refusal-guard tenants hash-key)".to_owned();
    if digits.len() != 64 {
        return Err(wrong());
    }
    let mut hash = [0u8; 32];
    for (byte, pair) in hash.iter_mut().zip(digits.chunks(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| wrong())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| wrong())?;
    }
    Ok(hash)
}

/// The SHA-256 of a client key, in hex: what `key_sha256` lists.
///
/// ```
/// assert_eq!(
///     refusal_guard_proxy::hash_key("foo"),
///     "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
/// );
/// ```
pub fn hash_key(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn bounded(field: &str, list: &[String]) -> Result<(), String> {
    if list.len() > MAX_ALLOWED || list.iter().any(|m| m.trim().is_empty()) {
        return Err(format!(
            "`{field}` lists at most {MAX_ALLOWED} non-empty names"
        ));
    }
    Ok(())
}

fn read_providers(field: &str, names: &[String]) -> Result<Vec<Provider>, String> {
    names
        .iter()
        .map(|name| match name.trim() {
            "anthropic" => Ok(Provider::Anthropic),
            "openai" => Ok(Provider::OpenAi),
            "gemini" | "google" => Ok(Provider::Google),
            other => Err(format!(
                "`{field}`: unknown provider `{other}` (anthropic, openai, gemini)"
            )),
        })
        .collect()
}

fn read_chains(chains: BTreeMap<String, Vec<String>>) -> Result<FallbackChains, String> {
    if chains.len() > MAX_CHAINS {
        return Err(format!("more than {MAX_CHAINS} chains"));
    }
    let mut read = FallbackChains::new();
    for (model, candidates) in chains {
        let blank = |m: &String| m.trim().is_empty() || m.contains(char::is_whitespace);
        if candidates.is_empty() || candidates.len() > MAX_CANDIDATES {
            return Err(format!(
                "the chain of `{model}` lists 1 to {MAX_CANDIDATES} models"
            ));
        }
        if blank(&model) || candidates.iter().any(blank) {
            return Err(format!("the chain of `{model}` names a blank model"));
        }
        read = read.chain(model, candidates);
    }
    Ok(read)
}

/// How the file stood when last looked at: what changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// What the last reload came to, for `/readyz`.
#[derive(Debug, Default)]
struct Status {
    failed: Option<String>,
    seen: Option<Stamp>,
    /// Good reloads since start: that a change was taken up shows as this
    /// moving, since a file may change what no probe looks at.
    reloaded: u64,
}

/// The tenants file as the proxy serves it: the last good table, swapped
/// whole on a reload (requests in flight keep the one they started with),
/// and what the last reload came to.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), String> {
/// use std::time::Duration;
/// use refusal_guard_proxy::{Proxy, Tenants, Upstream};
/// use refusal_guard::tenant::FromExtensions;
/// use refusal_guard::RefusalGuardLayer;
///
/// let tenants = Tenants::load("/etc/refusal-guard/tenants.toml")?;
/// tenants.watch(Duration::from_secs(2)); // SIGHUP, and the file's changes
/// let layer = RefusalGuardLayer::new().tenants(FromExtensions);
/// let upstream = Upstream::parse("https://api.anthropic.com").unwrap();
/// let proxy = Proxy::new(upstream, &layer).unwrap().tenants(tenants);
/// # let _ = proxy;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Tenants {
    path: PathBuf,
    table: RwLock<Arc<TenantTable>>,
    status: Mutex<Status>,
    /// The providers the proxy holds an operator key for, once told: a
    /// reload then warns of the fallbacks its file names that no key serves.
    held: OnceLock<Vec<Provider>>,
}

impl Tenants {
    /// Reads the file at `path`; `Err` says why it cannot be served.
    pub fn load(path: impl Into<PathBuf>) -> Result<Arc<Tenants>, String> {
        let path = path.into();
        let seen = stamp(&path);
        let table = read_file(&path, None)?;
        Ok(Arc::new(Tenants {
            path,
            table: RwLock::new(Arc::new(table)),
            status: Mutex::new(Status {
                failed: None,
                seen,
                reloaded: 0,
            }),
            held: OnceLock::new(),
        }))
    }

    /// Tells it which providers the proxy holds an operator key for (the
    /// first call counts), and returns what the table in force cannot do
    /// for want of one ([`TenantTable::unkeyed_fallbacks`]); every reload
    /// after it logs the same for its file as warnings.
    pub fn holding_keys_for(&self, providers: impl IntoIterator<Item = Provider>) -> Vec<String> {
        let held = self.held.get_or_init(|| providers.into_iter().collect());
        self.table().unkeyed_fallbacks(held)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The table in force.
    pub fn table(&self) -> Arc<TenantTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the file again: on success its table is served from now on;
    /// on failure the one before stays, and the error is kept for
    /// `/readyz` (and returned).
    pub fn reload(&self) -> Result<usize, String> {
        let seen = stamp(&self.path);
        let read = read_file(&self.path, Some(&self.table()));
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.seen = seen;
        match read {
            Ok(table) => {
                let count = table.tenants.len();
                *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
                status.failed = None;
                status.reloaded += 1;
                tracing::info!(path = %self.path.display(), tenants = count, "tenants file reloaded");
                if let Some(held) = self.held.get() {
                    for unkeyed in self.table().unkeyed_fallbacks(held) {
                        tracing::warn!(path = %self.path.display(), "{unkeyed}");
                    }
                }
                Ok(count)
            }
            Err(why) => {
                tracing::error!(
                    path = %self.path.display(),
                    error = %why,
                    "tenants file not reloaded: the last good one is kept"
                );
                status.failed = Some(why.clone());
                Err(why)
            }
        }
    }

    /// Why the last reload failed, while the one after it has not worked.
    pub fn last_error(&self) -> Option<String> {
        let status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.failed.clone()
    }

    /// How many reloads have been served since the file was first read
    /// (the failed ones not counted).
    pub fn reloads(&self) -> u64 {
        let status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.reloaded
    }

    /// Whether the file changed since it was last read.
    fn changed(&self) -> bool {
        let status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        stamp(&self.path) != status.seen
    }

    /// Reloads on SIGHUP and whenever the file's size or modification time
    /// changes, looked at every `every`, on a task of its own (inside a
    /// tokio runtime) for as long as the process runs.
    pub fn watch(self: &Arc<Self>, every: Duration) {
        let tenants = self.clone();
        // Listening for SIGHUP from now on, before any reload can be asked.
        let mut hangup = hangups();
        tokio::spawn(async move {
            // The first look one interval from now: the file was just read.
            let every = every.max(Duration::from_millis(10));
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {
                        if !tenants.changed() {
                            continue;
                        }
                    }
                    Some(()) = next_hangup(&mut hangup) => {}
                }
                let _ = tenants.reload();
            }
        });
    }
}

#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = Option<()>;

#[cfg(unix)]
fn hangups() -> Hangups {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::hangup()) {
        Ok(hangup) => Some(hangup),
        Err(error) => {
            tracing::warn!(%error, "no SIGHUP reload: the file's changes still reload it");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangups() -> Hangups {
    None
}

/// The next SIGHUP, or never.
async fn next_hangup(hangups: &mut Hangups) -> Option<()> {
    #[cfg(unix)]
    if let Some(hangup) = hangups {
        return hangup.recv().await;
    }
    let _ = hangups;
    std::future::pending().await
}

fn read_file(path: &Path, earlier: Option<&TenantTable>) -> Result<TenantTable, String> {
    use std::io::Read;
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open {shown}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    TenantTable::parse(&text, earlier).map_err(|e| format!("{shown}: {e}"))
}

/// `/readyz`'s line for the tenants file: ready while a good table is
/// served (always, once started), and saying when the last reload failed.
pub(crate) struct TenantsProbe(pub(crate) Arc<Tenants>);

impl Probe for TenantsProbe {
    fn name(&self) -> String {
        format!("tenants {}", self.0.path.display())
    }

    fn check(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ProbeResult> + Send + '_>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn note(&self) -> Option<String> {
        let count = self.0.table().tenants.len();
        let reloads = self.0.reloads();
        Some(match self.0.last_error() {
            Some(why) => format!(
                "{count} tenants, reloaded {reloads} times; the last reload FAILED, the last good file is kept: {why}"
            ),
            None => format!("{count} tenants, reloaded {reloads} times"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOO: &str = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

    fn one(extra: &str) -> Result<TenantTable, String> {
        TenantTable::parse(
            &format!("[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{FOO}\"]\n{extra}"),
            None,
        )
    }

    #[test]
    fn every_error_in_a_tenants_table_names_the_tenant_and_its_line() {
        for (extra, says) in [
            ("colour = \"red\"", "unknown field `colour`"),
            (
                "policy = \"bio=explode\"",
                "`policy`: unknown step `explode`",
            ),
            ("allow_providers = [\"azure\"]", "unknown provider `azure`"),
            ("chains = { m = [] }", "lists 1 to 8 models"),
            (
                "recovery_attempts_per_hour = -1",
                "recovery_attempts_per_hour",
            ),
            ("rescue = \"yes\"", "invalid type"),
        ] {
            let text = format!(
                "# two tenants\n[[tenant]]\nname = \"ok\"\nkey_sha256 = [\"{}\"]\n\n\
                 [[tenant]]\nname = \"team-zed\"\nkey_sha256 = [\"{FOO}\"]\n{extra}\n",
                hash_key("another")
            );
            let error = TenantTable::parse(&text, None).unwrap_err();
            assert!(error.starts_with("tenant `team-zed`: "), "{extra}: {error}");
            assert!(error.contains(says), "{extra}: {error}");
            assert!(
                error.contains("line 6") || error.contains("line 9"),
                "{extra}: {error}"
            );
        }
        let unnamed = format!("[[tenant]]\nkey_sha256 = [\"{FOO}\"]\n");
        let error = TenantTable::parse(&unnamed, None).unwrap_err();
        assert!(error.starts_with("tenant 1 (no name): "), "{error}");
        assert!(
            error.ends_with("(line 1, column 1: `[[tenant]]`)"),
            "{error}"
        );
        assert!(error.contains("missing field `name`"), "{error}");
        let twice = format!("[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{FOO}\"]\n[[tenant]]\nname = \"b\"\nkey_sha256 = [\"{FOO}\"]\n");
        assert_eq!(
            TenantTable::parse(&twice, None).unwrap_err(),
            "tenant `b`: a key hash tenant `a` has too (line 4)"
        );
        let same_name = format!("[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{FOO}\"]\n[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\"]\n", hash_key("b"));
        assert_eq!(
            TenantTable::parse(&same_name, None).unwrap_err(),
            "tenant `a`: given twice (line 4)"
        );
        let short = "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"abc\"]\n";
        let error = TenantTable::parse(short, None).unwrap_err();
        assert!(error.starts_with("tenant `a`: "), "{error}");
        assert!(error.contains("64 hex digits"), "{error}");
        let bad_name = format!("[[tenant]]\nname = \"a b\"\nkey_sha256 = [\"{FOO}\"]\n");
        let error = TenantTable::parse(&bad_name, None).unwrap_err();
        assert!(
            error.starts_with("tenant `a b`: a name is 1 to 64"),
            "{error}"
        );
    }

    #[test]
    fn what_is_wrong_outside_any_tenant_is_said_with_its_line() {
        let typo = format!("[[tenants]]\nname = \"a\"\nkey_sha256 = [\"{FOO}\"]\n");
        let error = TenantTable::parse(&typo, None).unwrap_err();
        assert!(error.contains("unknown field `tenants`"), "{error}");
        assert!(error.contains("line 1"), "{error}");
        let unclosed = "[[tenant]]\nname = \"a\n";
        let error = TenantTable::parse(unclosed, None).unwrap_err();
        assert!(error.contains("line 2"), "{error}");
        let big = "#".repeat(MAX_FILE_BYTES as usize + 1);
        assert!(TenantTable::parse(&big, None)
            .unwrap_err()
            .contains("larger than"));
    }

    #[test]
    fn the_fallback_cap_loads_under_its_earlier_name_too() {
        for key in ["recovery_attempts_per_hour", "hops_per_hour"] {
            let table = one(&format!("{key} = 7")).unwrap();
            let tenant = table.named("a").unwrap();
            assert_eq!(
                tenant.recovery_attempts_per_hour_setting(),
                Some(7),
                "{key}"
            );
        }
        let both = one("recovery_attempts_per_hour = 7\nhops_per_hour = 8").unwrap_err();
        assert!(both.contains("duplicate"), "{both}");
    }

    #[test]
    fn each_header_admits_a_known_key_and_only_that_header_is_removed() {
        let table = one("").unwrap();
        for (name, value) in [
            ("x-refusal-guard-key", "foo"),
            ("x-api-key", "foo"),
            ("authorization", "Bearer foo"),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(name, value.parse().unwrap());
            headers.insert("x-goog-api-key", "provider-key".parse().unwrap());
            assert_eq!(table.admit(&mut headers).unwrap().name(), "a", "{name}");
            assert!(headers.get(name).is_none(), "{name}");
            assert!(headers.get("x-goog-api-key").is_some());
        }
        let mut own_key = HeaderMap::new();
        own_key.insert("x-refusal-guard-key", "foo".parse().unwrap());
        own_key.insert("x-api-key", "sk-ant-the-clients-own".parse().unwrap());
        assert!(table.admit(&mut own_key).is_some());
        assert_eq!(own_key["x-api-key"], "sk-ant-the-clients-own");
        let mut wrong = HeaderMap::new();
        wrong.insert("x-api-key", "fop".parse().unwrap());
        assert!(table.admit(&mut wrong).is_none());
        assert!(table.admit(&mut HeaderMap::new()).is_none());
    }
}
