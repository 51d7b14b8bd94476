//! Opt-in detection of refusals written as prose.
//!
//! Many refusals carry no provider signal: the model simply writes "I can't
//! help with that" and stops normally. [`detect`] recognises such text with a
//! hand-written, allocation-light matcher over the *opening* of a response,
//! and [`prefix_verdict`] lets a streaming caller commit an ordinary answer as
//! soon as its opening rules a refusal out.
//!
//! # How it decides
//!
//! * Refusals sit at the start of a response. Only the opening window is read:
//!   at most [`MAX_SENTENCES`] sentences inside the first
//!   [`DEFAULT_PREFIX_BYTES`] bytes. Everything after the window can only turn
//!   a refusal into a genuine answer (code, or a partial answer with
//!   substance), never the other way round.
//! * A sentence is either a **cue** (first-person inability or unwillingness
//!   plus an assistance verb, "I must decline", apology + "but I ...",
//!   policy or ethics framing such as "it is not appropriate to ..." or
//!   "goes against my guidelines", a request labelled harmful), a
//!   **lead-in** (first person, apology, "As an AI", or moral/safety
//!   vocabulary: a refusal may follow), or **neutral**. The first neutral
//!   sentence ends the search: the text is an answer.
//! * A response whose opening condemns the act itself and then only
//!   lectures or redirects ("violence towards anyone is never acceptable",
//!   "X is not only illegal, but also dangerous and unethical", "X is
//!   illegal and unethical") is a policy refusal, unless a list of steps or
//!   an offer with substance follows. "Never acceptable" counts as a
//!   condemnation only when the sentence names harm to people (violence,
//!   abuse, discrimination, ...) and does not report someone else's view
//!   ("Gandhi believed ..."). Stances against the premise ("I strongly
//!   condemn any form of ...", "I strongly disagree with that sentiment",
//!   "I do not condone ...", "it is not accurate or fair to say ...") are
//!   cues.
//! * Not cues: idioms ("can't help but", "I can't stress enough", "I'm sorry
//!   to hear that", "cannot recommend it highly enough"), phrases inside
//!   quotation marks, conditional clauses ("if I can't help"), capability
//!   disclaimers ("I'm unable to provide real-time weather updates", "I can't
//!   browse the internet") and opinion disclaimers ("I don't have personal
//!   opinions").
//! * Any fenced code block with content (```` ``` ```` or `~~~`) makes the
//!   response a genuine answer; phrases inside fences are never read.
//! * A cue followed by a pivot ("but here's", "however, you can", "instead,
//!   here are") and real substance (a list, or several further sentences) is
//!   a partial answer, not a refusal. A cue followed by an offer but no
//!   substance is a [`SoftKind::Deflection`].
//! * Matching is English only. Text in other languages has no cues and
//!   passes through as not-a-refusal.
//!
//! # Streaming
//!
//! [`prefix_verdict`] answers [`PrefixVerdict::RuledOut`] only when the
//! part of the window already received proves the full text cannot be a
//! refusal; it never depends on bytes it has not seen. Hence, for any text
//! `t` with `detect(t).is_refusal()`, `prefix_verdict(p)` is
//! [`PrefixVerdict::Undecided`] for every prefix `p` of `t`. A layer holds
//! at most [`DEFAULT_PREFIX_BYTES`] bytes: ordinary answers are usually
//! ruled out after their first sentence.

mod cues;
mod delivery;
mod lecture;
mod signals;
mod text;
mod verdict;
mod words;

use std::ops::Range;

use serde::Serialize;

use verdict::{analyze, Outcome};

/// How many bytes of a streamed response a caller should hold back at most
/// before calling [`detect`] on what it has. The detector never reads past
/// this many bytes of prose (only fenced code and the substance of partial
/// answers are looked for beyond it), so `detect` on a prefix of this length
/// gives the same cue analysis as on the full text.
pub const DEFAULT_PREFIX_BYTES: usize = 512;

/// How many opening sentences are searched for a refusal.
pub const MAX_SENTENCES: usize = 3;

/// What sort of non-answer the text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SoftKind {
    /// The model declined outright.
    Refusal,
    /// The model declined and offered something else instead, without
    /// substance ("I can't do X, but I can explain Y").
    Deflection,
}

impl SoftKind {
    /// The snake_case name used in logs (`refusal`, `deflection`).
    ///
    /// ```
    /// assert_eq!(refusal_guard::soft::SoftKind::Deflection.as_str(), "deflection");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            SoftKind::Refusal => "refusal",
            SoftKind::Deflection => "deflection",
        }
    }
}

/// Why the text was judged a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SoftReason {
    /// A first-person refusal: "I can't help with that", "I must decline".
    DirectRefusal,
    /// A refusal framed by policy or ethics: "it is not appropriate to ...",
    /// "this goes against my guidelines".
    PolicyRefusal,
    /// A refusal followed by an offer of something else, with no substance.
    OffTopicDeflection,
}

impl SoftReason {
    /// The snake_case name used in logs (`direct_refusal`, `policy_refusal`,
    /// `off_topic_deflection`).
    ///
    /// ```
    /// use refusal_guard::soft::SoftReason;
    /// assert_eq!(SoftReason::PolicyRefusal.as_str(), "policy_refusal");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            SoftReason::DirectRefusal => "direct_refusal",
            SoftReason::PolicyRefusal => "policy_refusal",
            SoftReason::OffTopicDeflection => "off_topic_deflection",
        }
    }
}

/// The verdict of [`detect`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Detection {
    /// Whether the text is a refusal (of either kind).
    pub refusal: bool,
    /// The kind of refusal, when `refusal` is true.
    pub kind: Option<SoftKind>,
    /// Why, when `refusal` is true.
    pub reason: Option<SoftReason>,
    /// Byte range in the input of the phrase that matched, when `refusal`
    /// is true.
    pub span: Option<Range<usize>>,
}

impl Detection {
    /// A verdict of "not a refusal".
    pub const NONE: Detection = Detection {
        refusal: false,
        kind: None,
        reason: None,
        span: None,
    };

    /// Whether the text is a refusal (same as the `refusal` field).
    pub fn is_refusal(&self) -> bool {
        self.refusal
    }
}

/// What a streaming caller may conclude from the bytes received so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PrefixVerdict {
    /// The text can no longer turn out to be a refusal, whatever follows:
    /// flush and commit.
    RuledOut,
    /// Keep holding: a refusal is still possible (or has started). Once the
    /// hold reaches its cap ([`DEFAULT_PREFIX_BYTES`] by default) or the
    /// stream ends, call [`detect`] on what has been held.
    Undecided,
}

/// Detects a refusal written as prose.
///
/// ```
/// use refusal_guard::soft::{detect, SoftKind, SoftReason};
///
/// let d = detect("I'm sorry, but I can't help with that request.");
/// assert!(d.is_refusal());
/// assert_eq!(d.kind, Some(SoftKind::Refusal));
/// assert_eq!(d.reason, Some(SoftReason::DirectRefusal));
/// let text = "I'm sorry, but I can't help with that request.";
/// assert_eq!(&text[d.span.unwrap()], "I can't help");
///
/// assert!(!detect("I can't help but smile: here is the recipe.").is_refusal());
/// assert!(!detect("To kill a Python process, run `kill <pid>`.").is_refusal());
/// ```
pub fn detect(text: &str) -> Detection {
    match analyze(text, true) {
        Outcome::Decided(d) => d,
        // Cannot happen with `complete == true`; be conservative anyway.
        Outcome::NeedMore => Detection::NONE,
    }
}

/// Tells a streaming caller, from the first bytes of a response's text,
/// whether the response can still turn out to be a refusal.
///
/// Returns [`PrefixVerdict::RuledOut`] only when no continuation of `prefix`
/// can make [`detect`] report a refusal.
///
/// ```
/// use refusal_guard::soft::{prefix_verdict, PrefixVerdict};
///
/// assert_eq!(prefix_verdict("Sure! Paris is the capital of France. It"), PrefixVerdict::RuledOut);
/// assert_eq!(prefix_verdict("I'm sorry, but I"), PrefixVerdict::Undecided);
/// ```
pub fn prefix_verdict(prefix: &str) -> PrefixVerdict {
    match analyze(prefix, false) {
        Outcome::Decided(d) if !d.refusal => PrefixVerdict::RuledOut,
        _ => PrefixVerdict::Undecided,
    }
}
