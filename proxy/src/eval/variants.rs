//! The variants to compare: each a name and the proxy's own flags, read by
//! the proxy's own option parser (with its `REFUSAL_GUARD_*` variables, as
//! the proxy reads them), from a TOML or JSON file.

use std::fmt;
use std::path::Path;

use clap::CommandFactory;
use refusal_guard::env::LogSetting;
use serde::Deserialize;

use super::super::Options;
use super::results::fingerprint;

/// Most variants in one run.
const MAX_VARIANTS: usize = 16;

/// Flags a variant may not give, and why: the eval picks the target, and
/// keys come from the environment, never from a file.
const NOT_IN_A_VARIANT: [(&str, &str); 10] = [
    ("--simulate", "the target is the eval's own --simulate"),
    (
        "--strict",
        "the simulated providers always hold requests to the contract",
    ),
    ("--listen", "the eval serves nothing"),
    ("--admin", "the eval serves nothing"),
    ("--otlp", "the eval exports nothing"),
    (
        "--bedrock-region",
        "the eval does not drive Bedrock gateway mode",
    ),
    (
        "--client-key",
        "keys are never written in a file: name the variable with client_key_env",
    ),
    (
        "--anthropic-api-key",
        "keys come from the environment (ANTHROPIC_API_KEY)",
    ),
    (
        "--openai-api-key",
        "keys come from the environment (OPENAI_API_KEY)",
    ),
    (
        "--gemini-api-key",
        "keys come from the environment (GEMINI_API_KEY)",
    ),
];

/// One variant: a name and the proxy's options.
#[derive(Clone)]
pub(crate) struct Variant {
    pub(crate) name: String,
    /// As written, for the report.
    pub(crate) flags: Vec<String>,
    pub(crate) options: Options,
    /// The tenant key to present (with `--tenants`), from the variable
    /// `client_key_env` names. Never shown.
    pub(crate) client_key: Option<String>,
    /// The flags' (and a tenants file's) fingerprint.
    pub(crate) hash: String,
}

impl fmt::Debug for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Variant")
            .field("name", &self.name)
            .field("flags", &self.flags)
            .field("client_key", &self.client_key.as_ref().map(|_| ".."))
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    variant: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    flags: Vec<String>,
    #[serde(default)]
    client_key_env: Option<String>,
}

/// The variants when none are given: the proxy's defaults (rescue on, no
/// chain) against a fallback chain for each model `--send` names by
/// default, rescue off.
pub(crate) const DEFAULT: &str = r#"
[[variant]]
name = "rescue"
flags = []

[[variant]]
name = "chain"
flags = ["--chain", "claude-sonnet-4-5=claude-opus-4-8", "--chain", "gpt-5-mini=gpt-5", "--rescue", "off"]
"#;

/// Reads the variants at `path` (`.json` as JSON, anything else as TOML),
/// or the default two; `env` is the environment the proxy would read.
pub(crate) fn load(
    path: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Variant>, String> {
    let Some(path) = path else {
        return parse(DEFAULT, false, env);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the variants {}: {e}", path.display()))?;
    let json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    parse(&text, json, env).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a variants file's text.
pub(crate) fn parse(
    text: &str,
    json: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Variant>, String> {
    let file: File = if json {
        serde_json::from_str(text).map_err(|e| e.to_string())?
    } else {
        toml::from_str(text).map_err(|e| e.to_string())?
    };
    if file.variant.is_empty() || file.variant.len() > MAX_VARIANTS {
        return Err(format!(
            "give 1 to {MAX_VARIANTS} variants ([[variant]] name, flags)"
        ));
    }
    let mut variants: Vec<Variant> = Vec::new();
    for entry in file.variant {
        let name = entry.name.trim().to_owned();
        let fine = |c: char| c.is_ascii_alphanumeric() || "-_.+".contains(c);
        if name.is_empty() || name.len() > 64 || !name.chars().all(fine) {
            return Err(format!(
                "variant `{name}`: a name is 1 to 64 letters, digits and -_.+"
            ));
        }
        if variants.iter().any(|v| v.name == name) {
            return Err(format!("variant `{name}` is given twice"));
        }
        let variant = variant(name.clone(), entry.flags, entry.client_key_env, env)
            .map_err(|e| format!("variant `{name}`: {e}"))?;
        variants.push(variant);
    }
    Ok(variants)
}

fn variant(
    name: String,
    flags: Vec<String>,
    client_key_env: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Variant, String> {
    for flag in &flags {
        let bare = flag.split_once('=').map_or(flag.as_str(), |(f, _)| f);
        if let Some((_, why)) = NOT_IN_A_VARIANT.iter().find(|(f, _)| *f == bare) {
            return Err(format!("{bare} is not a variant's flag: {why}"));
        }
    }
    let args: Vec<String> = std::iter::once("refusal-guard".to_owned())
        .chain(flags.iter().cloned())
        .collect();
    let mut options = Options::matches_from(Options::command(), &args)
        .and_then(|matches| Options::from_matches(&matches, env))
        .map_err(|e| first_line(&e.to_string()))?;
    // The refusal log only when the variant asks for one: an eval is no
    // traffic of the proxy's, and the default log is the proxy's.
    let logs = flags
        .iter()
        .any(|f| f == "--log" || f.starts_with("--log="));
    if !logs {
        options.log = Some(LogSetting::Off);
    }
    options.quiet = true;
    let client_key = match (&options.tenants, client_key_env) {
        (Some(_), None) => {
            return Err(
                "with --tenants, name the variable holding the client key to present \
                        (client_key_env = \"VAR\")"
                    .to_owned(),
            )
        }
        (None, Some(_)) => return Err("client_key_env goes with --tenants".to_owned()),
        (None, None) => None,
        (Some(_), Some(var)) => Some(
            env(&var)
                .filter(|k| !k.is_empty())
                .ok_or_else(|| format!("client_key_env names {var}, which is not set"))?,
        ),
    };
    let mut seed = flags.join("\0");
    if let Some(path) = &options.tenants {
        let text = std::fs::read(path)
            .map_err(|e| format!("--tenants: cannot read {}: {e}", path.display()))?;
        seed.push_str(&fingerprint(&text));
    }
    Ok(Variant {
        name,
        hash: fingerprint(seed.as_bytes()),
        flags,
        options,
        client_key,
    })
}

/// clap's error without its usage lines.
fn first_line(error: &str) -> String {
    let line = error.lines().next().unwrap_or(error);
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_default_variants_differ_in_their_ladders() {
        let variants = parse(DEFAULT, false, &none).unwrap();
        assert_eq!(variants.len(), 2);
        let chain = &variants[1].options;
        assert_eq!(
            chain.fallback_chains().for_model("claude-sonnet-4-5"),
            ["claude-opus-4-8"]
        );
        assert_eq!(chain.rescue, Some(false));
        assert_eq!(variants[0].options.log, Some(LogSetting::Off));
        assert_ne!(variants[0].hash, variants[1].hash);
    }

    #[test]
    fn bad_variants_say_which_and_why() {
        for (text, says) in [
            (
                "[[variant]]\nname = \"a\"\nflags = [\"--chain\", \"nomodels\"]",
                "variant `a`",
            ),
            (
                "[[variant]]\nname = \"a\"\nflags = [\"--simulate\"]",
                "eval's own --simulate",
            ),
            (
                "[[variant]]\nname = \"a\"\nflags = [\"--openai-api-key=sk\"]",
                "environment",
            ),
            (
                "[[variant]]\nname = \"a\"\n[[variant]]\nname = \"a\"",
                "twice",
            ),
            ("[[variant]]\nname = \"a b\"", "a name is"),
            (
                "[[variant]]\nname = \"a\"\nflags = [\"--tenants\", \"t.toml\"]",
                "client_key_env",
            ),
            ("variant = []", "1 to 16"),
        ] {
            let error = parse(text, false, &none).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
        let json = r#"{"variant":[{"name":"j","flags":["--rescue=off"]}]}"#;
        assert_eq!(
            parse(json, true, &none).unwrap()[0].options.rescue,
            Some(false)
        );
    }
}
