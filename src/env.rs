//! Configuration from the environment, for proxies and drop-in users.
//!
//! | variable | meaning | example |
//! |---|---|---|
//! | `REFUSAL_GUARD_RESCUE` | rescue on or off | `on`, `off` |
//! | `REFUSAL_GUARD_FALLBACKS` | the server-side fallback retarget list | `claude-sonnet-4-5,claude-haiku-4-5` |
//! | `REFUSAL_GUARD_LOG` | JSONL log path, or an off value for no log | `~/.refusal-guard/refusals.jsonl` |
//! | `REFUSAL_GUARD_CHAIN` | client-side fallback chains | `claude-opus-4-7=claude-sonnet-4-5,claude-haiku-4-5;gpt-4o=gpt-4o-mini` |
//! | `REFUSAL_GUARD_POLICY` | the ladder's steps per refusal category ([`CategoryPolicy`] syntax) | `bio=stop;frontier_llm=stop;reasoning_extraction=stop;*=fallback,rescue` |
//!
//! For drop-in compatibility with pi-refusal-guard, `RESCUE`, `FALLBACKS` and
//! `LOG` are also read as `OMP_REFUSAL_*` and `PI_REFUSAL_*`. Precedence:
//! `REFUSAL_GUARD_*`, then `OMP_REFUSAL_*`, then `PI_REFUSAL_*`; only the
//! winning variable is read, so a stale lower one cannot fail the start.
//!
//! On values: `1`, `on`, `true`, `yes`; off values: `0`, `off`, `false`,
//! `no`; any case, surrounding spaces ignored. An off value for `FALLBACKS`
//! or `CHAIN` means none. Anything else is an [`EnvError`] naming the
//! variable.
//!
//! Chain syntax: entries separated by `;`, each `MODEL=FALLBACK[,FALLBACK...]`.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use crate::recovery::category::CategoryPolicy;
use crate::recovery::FallbackChains;
use crate::telemetry::JsonlSink;
use crate::RefusalGuardLayer;

/// The prefixes read, highest precedence first.
const PREFIXES: [&str; 3] = ["REFUSAL_GUARD_", "OMP_REFUSAL_", "PI_REFUSAL_"];

/// Every variable [`EnvConfig::from_vars`] reads, `HOME` included (for
/// `~/` in a log path).
pub fn variable_names() -> Vec<String> {
    /// The settings read under every prefix (`CHAIN` only as `REFUSAL_GUARD_CHAIN`).
    const NAMES: [&str; 4] = ["RESCUE", "FALLBACKS", "LOG", "CHAIN"];
    PREFIXES
        .iter()
        .flat_map(|prefix| NAMES.iter().map(move |name| format!("{prefix}{name}")))
        .chain(["HOME".to_owned()])
        .collect()
}

/// Where refusal records go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSetting {
    /// No log.
    Off,
    /// Append JSONL records to this file.
    Path(PathBuf),
}

/// A variable that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError {
    /// The variable's name, e.g. `OMP_REFUSAL_RESCUE`.
    pub variable: String,
    /// The value it had.
    pub value: String,
    /// What was expected.
    pub expected: &'static str,
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: invalid value {:?}: expected {}",
            self.variable, self.value, self.expected
        )
    }
}

impl std::error::Error for EnvError {}

/// The guard settings found in the environment. `None` means unset.
///
/// ```
/// use refusal_guard::env::{EnvConfig, LogSetting};
///
/// let config = EnvConfig::from_vars([
///     ("PI_REFUSAL_RESCUE", "on"),
///     ("OMP_REFUSAL_RESCUE", "OFF"), // OMP_ wins over PI_
///     ("REFUSAL_GUARD_CHAIN", "claude-opus-4-7=claude-sonnet-4-5"),
///     ("REFUSAL_GUARD_LOG", "no"),
/// ])
/// .unwrap();
/// assert_eq!(config.rescue, Some(false));
/// assert_eq!(config.log, Some(LogSetting::Off));
/// assert_eq!(
///     config.chains.unwrap().for_model("claude-opus-4-7"),
///     ["claude-sonnet-4-5".to_string()]
/// );
///
/// let error = EnvConfig::from_vars([("REFUSAL_GUARD_RESCUE", "maybe")]).unwrap_err();
/// assert_eq!(error.variable, "REFUSAL_GUARD_RESCUE");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvConfig {
    /// `*_RESCUE`.
    pub rescue: Option<bool>,
    /// `*_FALLBACKS`: the retarget list (empty when set to an off value).
    pub retarget: Option<Vec<String>>,
    /// `*_LOG`.
    pub log: Option<LogSetting>,
    /// `REFUSAL_GUARD_CHAIN`.
    pub chains: Option<FallbackChains>,
    /// `REFUSAL_GUARD_POLICY`: the steps per refusal category.
    pub policy: Option<CategoryPolicy>,
}

/// Reads an on/off value; `name` (a variable or a flag) goes in the error.
///
/// ```
/// assert_eq!(refusal_guard::env::parse_switch("--rescue", "OFF"), Ok(false));
/// assert!(refusal_guard::env::parse_switch("--rescue", "maybe").is_err());
/// ```
pub fn parse_switch(name: &str, value: &str) -> Result<bool, EnvError> {
    switch(value).ok_or_else(|| EnvError {
        variable: name.to_owned(),
        value: value.to_owned(),
        expected: SWITCH,
    })
}

/// Reads a comma-separated list of model names.
///
/// ```
/// assert_eq!(refusal_guard::env::parse_models("--retarget", "a, b").unwrap(), ["a", "b"]);
/// ```
pub fn parse_models(name: &str, value: &str) -> Result<Vec<String>, EnvError> {
    models(value).ok_or_else(|| EnvError {
        variable: name.to_owned(),
        value: value.to_owned(),
        expected: MODELS,
    })
}

/// Reads fallback chains: `MODEL=FALLBACK[,FALLBACK...]` entries separated
/// by `;`.
///
/// ```
/// let chains = refusal_guard::env::parse_chains("--chain", "a=b,c").unwrap();
/// assert_eq!(chains.for_model("a"), ["b", "c"]);
/// ```
pub fn parse_chains(name: &str, value: &str) -> Result<FallbackChains, EnvError> {
    chains(value).ok_or_else(|| EnvError {
        variable: name.to_owned(),
        value: value.to_owned(),
        expected: CHAINS,
    })
}

const SWITCH: &str = "on/off (1, on, true, yes / 0, off, false, no)";
const MODELS: &str = "a comma-separated list of model names";
const CHAINS: &str = "MODEL=FALLBACK[,FALLBACK...] entries separated by ';'";
const POLICY: &str = "CATEGORY=STEP[,STEP...] entries separated by ';', each category once \
(any case), steps retarget, fallback, rescue, stop (stop alone)";

fn switch(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => None,
    }
}

fn is_off(value: &str) -> bool {
    switch(value) == Some(false)
}

fn models(value: &str) -> Option<Vec<String>> {
    let list: Vec<String> = value.split(',').map(|m| m.trim().to_owned()).collect();
    (!list.iter().any(String::is_empty)).then_some(list)
}

fn chains(value: &str) -> Option<FallbackChains> {
    let mut chains = FallbackChains::new();
    for entry in value.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (model, fallbacks) = entry.split_once('=')?;
        let model = model.trim();
        if model.is_empty() {
            return None;
        }
        chains = chains.chain(model, models(fallbacks)?);
    }
    Some(chains)
}

fn expand_home(path: &str, home: Option<&str>) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

impl EnvConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, EnvError> {
        Self::from_vars(std::env::vars())
    }

    /// Reads the given variables (for tests, or another source of settings).
    pub fn from_vars<I, K, V>(vars: I) -> Result<Self, EnvError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let vars: HashMap<String, String> = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let winner = |name: &str, prefixes: &[&str]| {
            prefixes.iter().find_map(|prefix| {
                let variable = format!("{prefix}{name}");
                vars.get(&variable).map(|value| (variable, value.clone()))
            })
        };
        let fail = |(variable, value): (String, String), expected| EnvError {
            variable,
            value,
            expected,
        };
        let mut config = EnvConfig::default();
        if let Some(found) = winner("RESCUE", &PREFIXES) {
            config.rescue = Some(
                switch(&found.1)
                    .ok_or_else(|| fail(found, "on/off (1, on, true, yes / 0, off, false, no)"))?,
            );
        }
        if let Some(found) = winner("FALLBACKS", &PREFIXES) {
            config.retarget = Some(if is_off(&found.1) {
                Vec::new()
            } else {
                models(&found.1)
                    .ok_or_else(|| fail(found, "a comma-separated list of model names"))?
            });
        }
        if let Some(found) = winner("LOG", &PREFIXES) {
            let value = found.1.trim();
            config.log = Some(if is_off(value) {
                LogSetting::Off
            } else if value.is_empty() {
                return Err(EnvError {
                    variable: found.0,
                    value: found.1,
                    expected: "a file path, or an off value",
                });
            } else {
                LogSetting::Path(expand_home(value, vars.get("HOME").map(String::as_str)))
            });
        }
        if let Some(found) = winner("CHAIN", &PREFIXES[..1]) {
            config.chains = Some(if is_off(&found.1) {
                FallbackChains::new()
            } else {
                chains(&found.1).ok_or_else(|| {
                    fail(
                        found,
                        "MODEL=FALLBACK[,FALLBACK...] entries separated by ';'",
                    )
                })?
            });
        }
        if let Some(found) = winner("POLICY", &PREFIXES[..1]) {
            let parsed = found.1.parse::<CategoryPolicy>();
            config.policy = Some(parsed.map_err(|error| {
                tracing::warn!(%error, "REFUSAL_GUARD_POLICY is invalid");
                fail(found, POLICY)
            })?);
        }
        Ok(config)
    }

    /// Applies the settings found to a layer. Opens the log file when one is
    /// set; that is the only way this fails.
    pub fn apply(&self, mut layer: RefusalGuardLayer) -> std::io::Result<RefusalGuardLayer> {
        if let Some(on) = self.rescue {
            layer = layer.rescue(on);
        }
        if let Some(models) = &self.retarget {
            layer = layer.retarget_fallbacks(models.clone());
        }
        if let Some(chains) = &self.chains {
            layer = layer.fallback_chains(chains.clone());
        }
        if let Some(policy) = &self.policy {
            layer = layer.category_policy(policy.clone());
        }
        if let Some(LogSetting::Path(path)) = &self.log {
            layer = layer.telemetry(JsonlSink::open(path.clone())?);
        }
        Ok(layer)
    }
}

impl RefusalGuardLayer {
    /// A layer configured from the environment (see [`crate::env`]).
    ///
    /// ```no_run
    /// let layer = refusal_guard::RefusalGuardLayer::from_env()?;
    /// # Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn from_env() -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(EnvConfig::from_env()?.apply(RefusalGuardLayer::new())?)
    }
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    #[test]
    fn the_policy_variable_is_read_and_a_bad_one_names_it() {
        let config =
            EnvConfig::from_vars([("REFUSAL_GUARD_POLICY", "bio=stop;*=fallback,rescue")]).unwrap();
        assert_eq!(
            config.policy.unwrap().to_string(),
            "bio=stop;*=fallback,rescue"
        );
        let error = EnvConfig::from_vars([("REFUSAL_GUARD_POLICY", "bio=halt")]).unwrap_err();
        assert_eq!(error.variable, "REFUSAL_GUARD_POLICY");
        assert!(error.to_string().contains("bio=halt"), "{error}");
        // Only under REFUSAL_GUARD_: pi-refusal-guard has no such setting.
        let config = EnvConfig::from_vars([("OMP_REFUSAL_POLICY", "bio=halt")]).unwrap();
        assert_eq!(config.policy, None);
    }
}
