//! The simulated providers of `--simulate`: the testkit's simulator,
//! scripted per model and category by a small TOML file (or the built-in
//! script), its draws seeded, so that a run is reproducible. The eval's one
//! file that speaks to the testkit.

use std::collections::HashMap;
use std::path::Path;

use http::StatusCode;
use refusal_guard_testkit::{Reply, SharedSimulator, Simulator, When};
use serde::Deserialize;

/// The script `--simulate` runs without `--script`: over-refusals of safe
/// prompts and refusals of harmful ones, per model of the default `--send`
/// targets and of the default variants' chains, some partial (originals
/// only), some error-shaped.
pub(crate) const DEFAULT_SCRIPT: &str = r#"
seed = 42

[[rule]]
model = "claude-sonnet-4-5"
category = "should_answer"
rate = 0.25
reply = "refusal"

[[rule]]
model = "claude-sonnet-4-5"
category = "general_harms"
attempt = 1
rate = 0.2
reply = "partial"
text = "Here is some general background. "

[[rule]]
model = "claude-sonnet-4-5"
category = "general_harms"
rate = 0.8
reply = "refusal"

[[rule]]
model = "claude-opus-4-8"
category = "should_answer"
rate = 0.1
reply = "refusal"

[[rule]]
model = "claude-opus-4-8"
category = "general_harms"
rate = 0.6
reply = "refusal"

[[rule]]
model = "gpt-5-mini"
category = "should_answer"
rate = 0.1
reply = "blocked"

[[rule]]
model = "gpt-5-mini"
category = "should_answer"
rate = 0.3
reply = "refusal"

[[rule]]
model = "gpt-5-mini"
category = "general_harms"
rate = 0.85
reply = "refusal"

[[rule]]
model = "gpt-5"
category = "should_answer"
rate = 0.1
reply = "refusal"

[[rule]]
model = "gpt-5"
category = "general_harms"
rate = 0.5
reply = "refusal"
"#;

/// Most rules in a script.
const MAX_RULES: usize = 256;

/// A script for the simulated providers, as read.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Script {
    /// The draws' seed.
    #[serde(default)]
    pub(crate) seed: u64,
    #[serde(default, rename = "rule")]
    rules: Vec<Rule>,
    /// Where it was read from, for the report.
    #[serde(skip)]
    pub(crate) source: String,
}

/// One rule: which requests it matches, and what they get.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    /// The model asked for; any when left out.
    #[serde(default)]
    model: Option<String>,
    /// The prompt's category (its label in the prompt set); any when left out.
    #[serde(default)]
    category: Option<String>,
    /// Only the n-th request of a conversation (1 the original).
    #[serde(default)]
    attempt: Option<u32>,
    /// Only the n-th request this rule's other conditions matched.
    #[serde(default)]
    call: Option<u64>,
    /// The seeded share of the matching requests it takes; all when left out.
    #[serde(default)]
    rate: Option<f64>,
    reply: ReplyName,
    /// The answer's text, or a partial refusal's text before the refusal.
    #[serde(default)]
    text: Option<String>,
    /// The category the refusal carries [default: the prompt's].
    #[serde(default)]
    refusal_category: Option<String>,
    /// An error-shaped refusal's code (`cyber_policy`, ...).
    #[serde(default)]
    code: Option<String>,
    /// An error's HTTP status.
    #[serde(default)]
    status: Option<u16>,
    /// An error's `retry-after`, in seconds.
    #[serde(default)]
    retry_after: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ReplyName {
    Answer,
    Refusal,
    Partial,
    Blocked,
    Error,
}

impl Script {
    /// The script at `path`, or the built-in one.
    pub(crate) fn load(path: Option<&Path>) -> Result<Script, String> {
        let (text, source) = match path {
            None => (DEFAULT_SCRIPT.to_owned(), "the built-in script".to_owned()),
            Some(path) => (
                std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read the script {}: {e}", path.display()))?,
                path.display().to_string(),
            ),
        };
        let script = Script::parse(&text).map_err(|e| format!("{source}: {e}"))?;
        Ok(Script { source, ..script })
    }

    fn parse(text: &str) -> Result<Script, String> {
        let script: Script = toml::from_str(text).map_err(|e| e.to_string())?;
        if script.rules.len() > MAX_RULES {
            return Err(format!("more than {MAX_RULES} rules"));
        }
        for (n, rule) in script.rules.iter().enumerate() {
            rule.check().map_err(|e| format!("rule {}: {e}", n + 1))?;
        }
        Ok(script)
    }

    /// A simulator playing this script, each prompt's category its label
    /// (`categories`: prompt text to label); what no rule matches is
    /// answered.
    pub(crate) fn simulator(&self, categories: &HashMap<String, String>) -> Simulator {
        let categories = categories.clone();
        let simulator = Simulator::answering()
            .seed(self.seed)
            .categorize(move |prompt| categories.get(prompt).cloned());
        self.rules.iter().fold(simulator, |simulator, rule| {
            simulator.when(rule.when(), rule.reply())
        })
    }

    /// [`simulator`](Self::simulator), its state shared by the clones the
    /// guard makes of its inner service.
    pub(crate) fn simulated(&self, categories: &HashMap<String, String>) -> Simulated {
        Simulated {
            shared: self.simulator(categories).shared(),
        }
    }
}

impl Rule {
    fn check(&self) -> Result<(), String> {
        if let Some(rate) = self.rate {
            if !(0.0..=1.0).contains(&rate) {
                return Err("rate is a share from 0 to 1".into());
            }
        }
        let fits = match self.reply {
            ReplyName::Error => self.status.is_some_and(|s| (400..600).contains(&s)),
            _ => self.status.is_none() && self.retry_after.is_none(),
        };
        if !fits {
            return Err("status (400 to 599) and retry_after go with reply = \"error\", and it needs a status".into());
        }
        if matches!(self.reply, ReplyName::Partial) && self.text.is_none() {
            return Err("a partial refusal needs the text that comes before it".into());
        }
        let refuses = matches!(
            self.reply,
            ReplyName::Refusal | ReplyName::Partial | ReplyName::Blocked
        );
        if self.refusal_category.is_some() && !refuses {
            return Err("refusal_category goes with a refusal, partial or blocked reply".into());
        }
        if self.code.is_some() && !matches!(self.reply, ReplyName::Blocked) {
            return Err("code goes with reply = \"blocked\"".into());
        }
        if self.text.is_some() && !matches!(self.reply, ReplyName::Answer | ReplyName::Partial) {
            return Err("text goes with an answer or a partial refusal".into());
        }
        Ok(())
    }

    fn when(&self) -> When {
        let mut when = When::any();
        if let Some(model) = &self.model {
            when = when.model(model.clone());
        }
        if let Some(category) = &self.category {
            when = when.category(category.clone());
        }
        if let Some(attempt) = self.attempt {
            when = when.attempt(attempt);
        }
        if let Some(call) = self.call {
            when = when.call(call);
        }
        match self.rate {
            Some(rate) => when.rate(rate),
            None => when,
        }
    }

    fn reply(&self) -> Reply {
        let text = self.text.clone().unwrap_or_default();
        let mut reply = match self.reply {
            ReplyName::Answer if self.text.is_some() => Reply::answer().text(text),
            ReplyName::Answer => Reply::answer(),
            ReplyName::Refusal => Reply::refusal(),
            ReplyName::Partial => Reply::partial(text),
            ReplyName::Blocked => Reply::blocked(),
            ReplyName::Error => {
                let status = self.status.and_then(|s| StatusCode::from_u16(s).ok());
                let reply = Reply::error(status.unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
                match self.retry_after {
                    Some(secs) => reply.retry_after(secs),
                    None => reply,
                }
            }
        };
        if let Some(category) = &self.refusal_category {
            reply = reply.category(category.clone());
        }
        if let Some(code) = &self.code {
            reply = reply.code(code.clone());
        }
        reply
    }
}

/// The simulated providers under one variant's guard: their own state
/// (conversations seen, the contract's violations), shared by the clones
/// the guard makes.
#[derive(Debug, Clone)]
pub(crate) struct Simulated {
    shared: SharedSimulator,
}

impl Simulated {
    /// The inner service for the guard.
    pub(crate) fn service(&self) -> SharedSimulator {
        self.shared.clone()
    }

    /// The requests that broke the providers' rules so far, each as a line.
    pub(crate) fn violations(&self) -> Vec<String> {
        self.shared
            .take_violations()
            .iter()
            .map(ToString::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use refusal_guard_testkit::{Call, ReplyKind};

    use super::*;

    #[test]
    fn the_built_in_script_reads() {
        let script = Script::load(None).unwrap();
        assert_eq!(script.seed, 42);
        assert_eq!(script.rules.len(), 10);
    }

    #[test]
    fn every_field_of_a_rule_reaches_the_simulator() {
        let script = Script::parse(
            r#"
seed = 3

[[rule]]
model = "m"
attempt = 2
reply = "answer"
text = "Hello."

[[rule]]
model = "m"
category = "bio"
reply = "blocked"
code = "bio_policy"
refusal_category = "biology"

[[rule]]
model = "m"
reply = "error"
status = 429
retry_after = 2

[[rule]]
model = "n"
rate = 1.0
reply = "partial"
text = "Step 1: "
"#,
        )
        .unwrap();
        let labels = HashMap::from([("a bio question".to_owned(), "bio".to_owned())]);
        let simulator = script.simulator(&labels);
        let plan = |model: &str, prompt: &str, attempt: u32| {
            simulator.plan(&Call::new(model, prompt).attempt(attempt))
        };
        let answer = plan("m", "a bio question", 2);
        assert_eq!(
            (answer.kind(), answer.text_sent()),
            (ReplyKind::Answer, "Hello.")
        );
        let blocked = plan("m", "a bio question", 1);
        assert_eq!(blocked.kind(), ReplyKind::Blocked);
        assert_eq!(blocked.code_named(), Some("bio_policy"));
        assert_eq!(blocked.category_named(), Some("biology"));
        let error = plan("m", "another question", 1);
        assert_eq!(error.error_status(), Some(StatusCode::TOO_MANY_REQUESTS));
        assert_eq!(error.retry_after_seconds(), Some(2));
        let partial = plan("n", "x", 1);
        assert_eq!(
            (partial.kind(), partial.text_sent()),
            (ReplyKind::Partial, "Step 1: ")
        );
        assert_eq!(plan("other", "x", 1).kind(), ReplyKind::Answer);
        assert_eq!(
            simulator.category_of("a bio question").as_deref(),
            Some("bio")
        );
    }

    #[test]
    fn bad_rules_say_which() {
        for (text, says) in [
            ("[[rule]]\nreply = \"refusal\"\nrate = 2.0", "rule 1: rate"),
            ("[[rule]]\nreply = \"error\"", "status"),
            ("[[rule]]\nreply = \"partial\"", "text"),
            ("[[rule]]\nreply = \"maybe\"", "unknown variant"),
            (
                "[[rule]]\nreply = \"answer\"\ncode = \"x\"",
                "code goes with",
            ),
            (
                "[[rule]]\nreply = \"answer\"\nrefusal_category = \"x\"",
                "refusal_category",
            ),
            (
                "[[rule]]\nreply = \"refusal\"\ntext = \"x\"",
                "text goes with",
            ),
        ] {
            let error = Script::parse(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
