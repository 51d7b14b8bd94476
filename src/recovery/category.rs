//! A recovery policy per refusal category: which steps of the default
//! `Ladder` (in `recovery`) a refusal of each category may take,
//! and in which order. Parsed from the proxy's `--policy` and
//! `REFUSAL_GUARD_POLICY`, or built in code.
//!
//! # Syntax
//!
//! Entries separated by `;`, each `CATEGORY=STEP[,STEP...]`, for example
//! `bio=stop;cyber=fallback,rescue;reasoning_extraction=fallback;*=fallback,rescue`.
//! Spaces around names are ignored; an empty entry (a trailing `;`) too.
//!
//! - A **category** is the provider's word, as it arrives: `cyber`, `bio`,
//!   `frontier_llm`, `reasoning_extraction` (Anthropic), `content_filter`
//!   (OpenAI, Azure), `SAFETY`, `PROHIBITED_CONTENT` (Gemini),
//!   `text_refusal` (prose refusals); or the crate's own word for a kind of
//!   stop several providers name differently: `recitation`. Names match **without regard to ASCII
//!   case**, because providers spell them in different cases (`SAFETY` and
//!   `safety` are the same category); two entries for the same name in any
//!   case are an error. `*` names every category without an entry of its
//!   own, and refusals that name no category. Without `*`, those take the
//!   default steps, `fallback,rescue` (what the guard does without a policy).
//! - OpenAI's policy errors name no category; each is recorded under a
//!   word for its code: `cyber` (`cyber_policy`), `bio` (`bio_policy`),
//!   `usage_policy` (`invalid_prompt`), `image_content`
//!   (`image_content_policy_violation`). So `cyber` and `bio` name the same
//!   policy on Anthropic and OpenAI.
//! - What a category is ([`CategoryKind`]) decides the steps of one
//!   without an entry of its own. Most are safety declines and take `*`'s
//!   steps (else the default). Two kinds are exceptions, each with its own
//!   entry still the first word:
//!   - **not safety**: `recitation` ([`RECITATION_CATEGORY`], a copyright
//!     stop) and `rerouted` ([`REROUTED_CATEGORY`], another model served,
//!     when the layer treats reroutes as refusals) take `*`'s steps (else
//!     the default) *less the rescue*, whose note tells the model a safety
//!     classifier stopped it; when nothing else recovers they are dead with
//!     reason `not_safety`;
//!   - **the operator's policy**: `guardrail_intervened` (an Amazon Bedrock
//!     guardrail, [`GUARDRAIL_CATEGORY`]) and `MODEL_ARMOR` (Vertex AI's
//!     Model Armor, [`MODEL_ARMOR_CATEGORY`]) stop; neither `*` nor the
//!     default steps work around a content policy the operator configured.
//!
//!   [`CategoryPolicy::treat`] changes what a category is, in code.
//! - A **step** is one of [`Step`]'s words: `retarget`, `fallback`, `rescue`,
//!   `stop`, tried in the order given, each at most once per refusal.
//!   `stop` stands alone.
//!
//! Anything else is a [`PolicyError`] naming the bad part.
//!
//! ```
//! use refusal_guard::recovery::category::{CategoryPolicy, Step};
//!
//! let policy: CategoryPolicy = "bio=stop; cyber=fallback,rescue; *=fallback".parse()?;
//! assert_eq!(policy.steps_for(Some("bio")), [Step::Stop]);
//! assert_eq!(policy.steps_for(Some("CYBER")), [Step::Fallback, Step::Rescue]);
//! assert_eq!(policy.steps_for(Some("SAFETY")), [Step::Fallback]);
//! assert_eq!(policy.steps_for(None), [Step::Fallback]);
//! // Not safety: `*` less the rescue. The operator's guardrail: stop.
//! let default = CategoryPolicy::new();
//! assert_eq!(default.steps_for(Some("recitation")), [Step::Fallback]);
//! assert_eq!(default.steps_for(Some("guardrail_intervened")), [Step::Stop]);
//!
//! let error = "bio=stop;cyber=fallback,explode".parse::<CategoryPolicy>().unwrap_err();
//! assert!(error.to_string().contains("explode"));
//! # Ok::<(), refusal_guard::recovery::category::PolicyError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use crate::refusal::{
    GUARDRAIL_CATEGORY, MODEL_ARMOR_CATEGORY, RECITATION_CATEGORY, REROUTED_CATEGORY,
};

/// What a refusal category is: it decides the steps a category without an
/// entry of its own takes, and whether a rescue note, which speaks of a
/// safety classifier, fits it.
///
/// ```
/// use refusal_guard::recovery::category::{CategoryKind, CategoryPolicy};
///
/// let policy = CategoryPolicy::new();
/// assert_eq!(policy.kind_of(Some("cyber")), CategoryKind::Safety);
/// assert_eq!(policy.kind_of(Some("recitation")), CategoryKind::NotSafety);
/// assert_eq!(policy.kind_of(Some("MODEL_ARMOR")), CategoryKind::OperatorPolicy);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CategoryKind {
    /// A safety decline (every category the crate does not know otherwise):
    /// `*`'s steps, else the default ones.
    Safety,
    /// A stop that is no safety decline, such as a copyright stop
    /// (`recitation`) or a reroute (`rerouted`): `*`'s steps, else the default ones, less the rescue,
    /// whose note would tell the model a safety classifier stopped it.
    /// Dead with [`DeadReason::NotSafety`](crate::refusal::DeadReason::NotSafety)
    /// when the rescue was left out and nothing else recovered.
    NotSafety,
    /// The operator's own content policy (an Amazon Bedrock guardrail,
    /// Vertex AI's Model Armor): stop. The guard does not work around a
    /// policy its operator configured.
    OperatorPolicy,
}

/// What the crate knows each category it names to be; every other one is a
/// safety decline.
const KNOWN_KINDS: &[(&str, CategoryKind)] = &[
    (RECITATION_CATEGORY, CategoryKind::NotSafety),
    (REROUTED_CATEGORY, CategoryKind::NotSafety),
    (GUARDRAIL_CATEGORY, CategoryKind::OperatorPolicy),
    (MODEL_ARMOR_CATEGORY, CategoryKind::OperatorPolicy),
];

/// The steps a category takes, and whether the rescue was left out of them
/// because the category is not safety.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) steps: Vec<Step>,
    pub(crate) rescue_withheld: bool,
}

/// One step a category may take after an empty refusal.
///
/// ```
/// use refusal_guard::recovery::category::Step;
///
/// assert_eq!("Rescue".parse::<Step>(), Ok(Step::Rescue));
/// assert_eq!(Step::Retarget.as_str(), "retarget");
/// assert!("retry".parse::<Step>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Step {
    /// Send the refused request again with the layer's retarget list as
    /// Anthropic server-side `fallbacks`, so the provider climbs it (with
    /// its own credit semantics). Skipped when no retarget list is
    /// configured, when the request already carried server-side fallbacks
    /// (the provider climbed them already), and for other providers.
    Retarget,
    /// A fallback to each model of the client model's fallback chain in
    /// turn (none when no chain is configured for the model), recorded as
    /// attempts of step [`AttemptStep::Fallback`](crate::refusal::AttemptStep::Fallback).
    Fallback,
    /// One reframed rescue (subject to the rescue switch and the
    /// conversation's rescue cap).
    Rescue,
    /// Recover no further: the client gets the refusal as sent, recorded
    /// dead with [`DeadReason::PolicyStop`](crate::refusal::DeadReason::PolicyStop).
    Stop,
}

impl Step {
    /// Every step, in the words the syntax uses.
    pub const ALL: [Step; 4] = [Step::Retarget, Step::Fallback, Step::Rescue, Step::Stop];

    /// The step's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Retarget => "retarget",
            Step::Fallback => "fallback",
            Step::Rescue => "rescue",
            Step::Stop => "stop",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Step {
    type Err = PolicyError;

    /// `chain`, this step's word before it took the record's, still reads
    /// as [`Step::Fallback`], so a policy written for 0.1 keeps starting.
    ///
    /// ```
    /// use refusal_guard::recovery::category::Step;
    /// assert_eq!("chain".parse::<Step>().unwrap(), Step::Fallback);
    /// ```
    fn from_str(word: &str) -> Result<Self, Self::Err> {
        let word = word.trim();
        if word.eq_ignore_ascii_case("chain") {
            return Ok(Step::Fallback);
        }
        Step::ALL
            .into_iter()
            .find(|step| step.as_str().eq_ignore_ascii_case(word))
            .ok_or_else(|| PolicyError::new(format!("unknown step `{word}`")))
    }
}

/// A policy spec that could not be read. Its message names the bad part.
///
/// ```
/// use refusal_guard::recovery::category::CategoryPolicy;
///
/// let error = "bio=stop;BIO=fallback".parse::<CategoryPolicy>().unwrap_err();
/// assert!(error.to_string().contains("`BIO`"), "{error}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    message: String,
}

impl PolicyError {
    fn new(message: String) -> Self {
        PolicyError { message }
    }

    fn within(self, entry: &str) -> Self {
        PolicyError::new(format!("{} in `{}`", self.message, entry.trim()))
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (expected CATEGORY=STEP[,STEP...] entries separated by ';', \
             steps retarget, fallback, rescue, stop)",
            self.message
        )
    }
}

impl std::error::Error for PolicyError {}

/// The steps each refusal category may take, and in which order, and what
/// each category is ([`CategoryKind`]).
///
/// The default (no entry at all) gives every safety category the default
/// steps, `fallback,rescue`: the whole ladder, as without a policy; a
/// category that is not safety the same less the rescue; the operator's
/// own policy `stop`. See the [module docs](self) for the syntax and case
/// handling.
///
/// ```
/// use refusal_guard::recovery::category::{CategoryPolicy, Step};
///
/// let policy = CategoryPolicy::new()
///     .category("bio", [Step::Stop])
///     .category("reasoning_extraction", [Step::Fallback]);
/// assert_eq!(policy.steps_for(Some("bio")), [Step::Stop]);
/// assert_eq!(policy.steps_for(Some("cyber")), CategoryPolicy::DEFAULT_STEPS);
/// assert_eq!(policy.to_string(), "bio=stop;reasoning_extraction=fallback");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CategoryPolicy {
    /// Entries in the order given, `*` among them.
    entries: Vec<(String, Vec<Step>)>,
    /// What a category is, where set in code (else [`KNOWN_KINDS`]).
    kinds: Vec<(String, CategoryKind)>,
}

impl CategoryPolicy {
    /// The steps of a category without an entry when there is no `*`.
    pub const DEFAULT_STEPS: &'static [Step] = &[Step::Fallback, Step::Rescue];

    /// The name of the entry for every other category.
    pub const OTHERS: &'static str = "*";

    /// No entries: every category takes the default steps.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the steps of `category` (`*` for every other one), replacing an
    /// earlier entry for the same name in any case. Steps after a
    /// [`Step::Stop`] are never reached; a step given twice is tried once.
    pub fn category<I>(mut self, category: impl Into<String>, steps: I) -> Self
    where
        I: IntoIterator<Item = Step>,
    {
        let category = category.into();
        let mut kept = Vec::new();
        for step in steps {
            if !kept.contains(&step) {
                kept.push(step);
            }
        }
        match self.position(&category) {
            Some(at) => self.entries[at].1 = kept,
            None => self.entries.push((category, kept)),
        }
        self
    }

    /// Makes `category` a category of this kind (replacing what the crate or
    /// an earlier call said of it, in any case): what it takes without an
    /// entry of its own follows from its kind.
    ///
    /// ```
    /// use refusal_guard::recovery::category::{CategoryKind, CategoryPolicy, Step};
    ///
    /// // SPII is a data-protection stop, not a harm: fall back, no note.
    /// let policy = CategoryPolicy::new()
    ///     .treat("SPII", CategoryKind::NotSafety)
    ///     .treat("recitation", CategoryKind::Safety);
    /// assert_eq!(policy.steps_for(Some("SPII")), [Step::Fallback]);
    /// assert_eq!(policy.steps_for(Some("recitation")), [Step::Fallback, Step::Rescue]);
    /// ```
    pub fn treat(mut self, category: impl Into<String>, kind: CategoryKind) -> Self {
        let category = category.into();
        let known = self
            .kinds
            .iter()
            .position(|(name, _)| name.eq_ignore_ascii_case(&category));
        match known {
            Some(at) => self.kinds[at].1 = kind,
            None => self.kinds.push((category, kind)),
        }
        self
    }

    /// What `category` is: as set with [`treat`](Self::treat), else what
    /// the crate knows it to be, else a safety decline (a refusal without
    /// a category too).
    pub fn kind_of(&self, category: Option<&str>) -> CategoryKind {
        let Some(category) = category else {
            return CategoryKind::Safety;
        };
        let set = self.kinds.iter().map(|(name, kind)| (name.as_str(), *kind));
        set.chain(KNOWN_KINDS.iter().copied())
            .find(|(name, _)| name.eq_ignore_ascii_case(category))
            .map_or(CategoryKind::Safety, |(_, kind)| kind)
    }

    /// The steps a refusal of `category` takes: its entry, else what its
    /// [kind](Self::kind_of) gives it: `*`'s steps, else
    /// [`DEFAULT_STEPS`](Self::DEFAULT_STEPS) (without the rescue for a
    /// category that is not safety), or `stop` for the operator's own
    /// policy. A refusal without a category takes `*`'s.
    ///
    /// ```
    /// use refusal_guard::recovery::category::{CategoryPolicy, Step};
    ///
    /// let policy: CategoryPolicy = "*=retarget,fallback,rescue".parse()?;
    /// assert_eq!(policy.steps_for(Some("guardrail_intervened")), [Step::Stop]);
    /// assert_eq!(policy.steps_for(Some("recitation")), [Step::Retarget, Step::Fallback]);
    /// let opted_in: CategoryPolicy = "guardrail_intervened=fallback;recitation=fallback,rescue".parse()?;
    /// assert_eq!(opted_in.steps_for(Some("guardrail_intervened")), [Step::Fallback]);
    /// assert_eq!(opted_in.steps_for(Some("recitation")), [Step::Fallback, Step::Rescue]);
    /// # Ok::<(), refusal_guard::recovery::category::PolicyError>(())
    /// ```
    pub fn steps_for(&self, category: Option<&str>) -> Vec<Step> {
        self.plan(category).steps
    }

    /// [`steps_for`](Self::steps_for), and whether the rescue was left out
    /// because the category is not safety.
    pub(crate) fn plan(&self, category: Option<&str>) -> Plan {
        let plan = |steps: &[Step], rescue_withheld| Plan {
            steps: steps.to_vec(),
            rescue_withheld,
        };
        if let Some(at) = category.and_then(|name| self.position(name)) {
            return plan(&self.entries[at].1, false);
        }
        let others = self
            .position(Self::OTHERS)
            .map_or(Self::DEFAULT_STEPS, |at| &self.entries[at].1);
        match self.kind_of(category) {
            CategoryKind::OperatorPolicy => plan(&[Step::Stop], false),
            CategoryKind::NotSafety => Plan {
                steps: others
                    .iter()
                    .copied()
                    .filter(|s| *s != Step::Rescue)
                    .collect(),
                rescue_withheld: others.contains(&Step::Rescue),
            },
            CategoryKind::Safety => plan(others, false),
        }
    }

    /// Whether there is no entry (every category takes what its kind gives
    /// it).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, category: &str) -> Option<usize> {
        self.entries
            .iter()
            .position(|(name, _)| name.eq_ignore_ascii_case(category))
    }
}

impl fmt::Display for CategoryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (category, steps)) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{category}=")?;
            for (j, step) in steps.iter().enumerate() {
                if j > 0 {
                    f.write_str(",")?;
                }
                f.write_str(step.as_str())?;
            }
        }
        Ok(())
    }
}

impl FromStr for CategoryPolicy {
    type Err = PolicyError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let mut policy = CategoryPolicy::new();
        for entry in spec.split(';').filter(|e| !e.trim().is_empty()) {
            let (category, steps) = parse_entry(entry).map_err(|e| e.within(entry))?;
            if policy.position(category).is_some() {
                let message = format!("category `{category}` given twice (names ignore case)");
                return Err(PolicyError::new(message));
            }
            policy.entries.push((category.to_owned(), steps));
        }
        if policy.is_empty() {
            return Err(PolicyError::new("empty policy".to_owned()));
        }
        Ok(policy)
    }
}

/// One `CATEGORY=STEP[,STEP...]` entry.
fn parse_entry(entry: &str) -> Result<(&str, Vec<Step>), PolicyError> {
    let Some((category, list)) = entry.split_once('=') else {
        return Err(PolicyError::new("no `=`".to_owned()));
    };
    let category = category.trim();
    if category.is_empty() {
        return Err(PolicyError::new("empty category".to_owned()));
    }
    if category.contains([',', '=']) || category.contains(char::is_whitespace) {
        let message = format!("category `{category}` contains `,`, `=` or a space");
        return Err(PolicyError::new(message));
    }
    if list.trim().is_empty() {
        return Err(PolicyError::new(format!("no steps for `{category}`")));
    }
    let mut steps = Vec::new();
    for word in list.split(',') {
        if word.trim().is_empty() {
            return Err(PolicyError::new("empty step".to_owned()));
        }
        let step: Step = word.parse()?;
        if steps.contains(&step) {
            return Err(PolicyError::new(format!("step `{step}` given twice")));
        }
        steps.push(step);
    }
    if steps.len() > 1 && steps.contains(&Step::Stop) {
        let message = "`stop` combined with other steps (stop stands alone)".to_owned();
        return Err(PolicyError::new(message));
    }
    Ok((category, steps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_specs_name_the_bad_part() {
        for (spec, part) in [
            ("bio=explode", "unknown step `explode` in `bio=explode`"),
            ("=stop", "empty category in `=stop`"),
            (" =stop", "empty category"),
            ("bio=stop;BIO=fallback", "category `BIO` given twice"),
            (
                "bio=stop,fallback",
                "`stop` combined with other steps (stop stands alone) in `bio=stop,fallback`",
            ),
            (
                "bio=fallback,,rescue",
                "empty step in `bio=fallback,,rescue`",
            ),
            ("bio=fallback,fallback", "step `fallback` given twice"),
            ("bio", "no `=` in `bio`"),
            ("bio=", "no steps for `bio`"),
            ("", "empty policy"),
            (" ; ", "empty policy"),
            ("bi o=stop", "category `bi o` contains"),
            ("cyber=fallback;bio", "no `=` in `bio`"),
        ] {
            let error = spec.parse::<CategoryPolicy>().unwrap_err().to_string();
            assert!(error.contains(part), "{spec:?}: {error}");
        }
    }

    #[test]
    fn specs_round_trip_and_ignore_spaces_and_step_case() {
        let policy: CategoryPolicy = " bio = STOP ; cyber=Fallback, rescue ;*=retarget,fallback;"
            .parse()
            .unwrap();
        assert_eq!(
            policy.to_string(),
            "bio=stop;cyber=fallback,rescue;*=retarget,fallback"
        );
        assert_eq!(policy.to_string().parse::<CategoryPolicy>(), Ok(policy));
    }

    #[test]
    fn a_categorys_kind_gives_the_steps_of_one_without_an_entry() {
        let policy: CategoryPolicy = "*=retarget,fallback,rescue".parse().unwrap();
        let plan = |policy: &CategoryPolicy, category| {
            let plan = policy.plan(Some(category));
            (plan.steps, plan.rescue_withheld)
        };
        let all = vec![Step::Retarget, Step::Fallback, Step::Rescue];
        assert_eq!(plan(&policy, "SAFETY"), (all.clone(), false));
        for copyright in ["recitation", "Recitation"] {
            let less_rescue = vec![Step::Retarget, Step::Fallback];
            assert_eq!(plan(&policy, copyright), (less_rescue, true));
        }
        for operator in ["guardrail_intervened", "model_armor"] {
            assert_eq!(plan(&policy, operator), (vec![Step::Stop], false));
        }
        // Set in code, in any case, the last word kept; an entry still wins.
        let treated = policy
            .clone()
            .treat("SPII", CategoryKind::OperatorPolicy)
            .treat("spii", CategoryKind::NotSafety)
            .treat("RECITATION", CategoryKind::Safety)
            .category("MODEL_ARMOR", [Step::Fallback]);
        assert_eq!(treated.kind_of(Some("Spii")), CategoryKind::NotSafety);
        assert!(plan(&treated, "SPII").1);
        assert_eq!(plan(&treated, "recitation"), (all, false));
        assert_eq!(plan(&treated, "MODEL_ARMOR"), (vec![Step::Fallback], false));
        assert_eq!(treated.kind_of(None), CategoryKind::Safety);
        // No rescue to leave out: nothing withheld.
        let chain_only: CategoryPolicy = "*=fallback".parse().unwrap();
        assert_eq!(
            plan(&chain_only, "recitation"),
            (vec![Step::Fallback], false)
        );
    }

    #[test]
    fn the_builder_keeps_the_last_entry_for_a_name_and_each_step_once() {
        let policy = CategoryPolicy::new()
            .category("SAFETY", [Step::Stop])
            .category("safety", [Step::Fallback, Step::Fallback, Step::Rescue]);
        assert_eq!(
            policy.steps_for(Some("Safety")),
            [Step::Fallback, Step::Rescue]
        );
        assert_eq!(policy.to_string(), "SAFETY=fallback,rescue");
    }
}
