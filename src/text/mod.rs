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
//! The module's files follow the method: `text` prepares the text (fenced
//! code, sentences, word tokens), `words` holds every word list, `cues`
//! and `signals` hold one small matcher per phrase kind, tried from a
//! table, `lecture` finds lectures and referrals, `delivery` weighs what
//! the rest of the response delivers, `classifier` scores what the rules
//! let through, and `verdict` puts them together.
//!
//! * Refusals sit at the start of a response. The opening window is read
//!   sentence by sentence: at most [`MAX_SENTENCES`] sentences inside the
//!   first [`DEFAULT_PREFIX_BYTES`] bytes.
//! * An opening sentence is a **cue** (first-person inability or
//!   unwillingness plus an assistance verb, "I must decline", "Can't help
//!   with that", apology + "but I ...", policy or ethics framing such as
//!   "it is not appropriate to ..." or "goes against my guidelines", a
//!   request labelled harmful, a stance against the premise), a
//!   **signal** (an AI-identity disclaimer that declines: "As an AI, I
//!   don't support ..."; a judgement of the act: "X is never okay", "this
//!   question isn't ethical to ask", "I must point out that the question
//!   is harmful"; sympathy: "That sounds really hard"), a **lead-in**
//!   (first person, apology, moral or safety vocabulary: a refusal may
//!   follow), or **neutral**. Before any signal, the first neutral
//!   sentence ends the search: the text is an answer.
//! * A cue is a refusal unless the response goes on to deliver: a pivot to
//!   an offer with substance ("but here's ...: 1. ... 2. ... 3. ..."), an
//!   explicit contrast followed at once by content ("I can't recommend a
//!   lawyer, but the Law Society's tool lets you search by postcode"), or,
//!   after an impersonal safety caveat, an instruction ("It is not safe to
//!   run it as root. Create a user with ..."). An offer without substance
//!   is a [`TextKind::Deflection`].
//! * A signal is a refusal only when nothing after it delivers content.
//!   Each later sentence (or list item) weighs 0 when it lectures,
//!   reassures, refers elsewhere ("please reach out to a professional"),
//!   offers something else or asks back; 1 when plain; 2 when concrete
//!   (digits, code, symbols, names, "here are", or long). A weight of 2 is
//!   an answer. Sympathy, and judgements that state a fact an answer may
//!   open with ("it's illegal to ..."), also need something said in place
//!   of an answer (a lecture, reassurance or referral): "That sounds
//!   frustrating! Try restarting the router." is a short answer.
//! * A response whose opening condemns the act itself ("violence towards
//!   anyone is never acceptable", "X is not only illegal, but also
//!   dangerous and unethical") and then only lectures or redirects is a
//!   policy refusal, unless a list of steps follows.
//! * Not cues: idioms ("can't help but", "I can't stress enough", "I'm sorry
//!   to hear that", "cannot recommend it highly enough"), phrases inside
//!   quotation marks, conditional clauses ("if I can't help"), capability
//!   disclaimers ("I'm unable to provide real-time weather updates", "I can't
//!   browse the internet") and opinion disclaimers ("I don't have personal
//!   opinions"). A view reported ("Gandhi believed ...") or explained ("X is
//!   wrong because ...") is not a judgement.
//! * An opening the rules read as an answer is scored by a trained
//!   [`TextClassifier`] (a logistic regression over hashed word n-grams,
//!   weights compiled in): a score at its threshold makes the text a
//!   refusal of reason [`TextReason::Classifier`]. It catches premise
//!   rebuttals and wordings no list holds ("There is no reason why X
//!   should not be allowed to ..."). `tools/train_text_classifier.py`
//!   trains it from `tests/corpus/` and the hand-written tables.
//! * Any fenced code block with content (```` ``` ```` or `~~~`) makes the
//!   response a genuine answer; phrases inside fences are never read.
//! * Matching is English only. Text in other languages has no cues and
//!   passes through as not-a-refusal.
//!
//! # Streaming
//!
//! [`prefix_verdict`] answers [`PrefixVerdict::RuledOut`] only when the
//! part of the window already received proves the full text cannot be a
//! refusal; it never depends on bytes it has not seen. Hence, for any text
//! `t` with `detect(t).is_refusal()`, `prefix_verdict(p)` is
//! [`PrefixVerdict::Undecided`] for every prefix `p` of `t`. Ordinary
//! answers are usually ruled out after their first sentence. An answer
//! that opens with a cue or a signal is undecided until its end or the
//! caller's hold cap, since only what follows can show it delivers; what
//! it delivers is looked for in the 2 KiB after the opening, the layer's
//! default hold.

mod classifier;
mod cues;
mod delivery;
mod lecture;
mod prepare;
mod signals;
mod verdict;
mod words;

use std::ops::Range;

use serde::Serialize;

pub use classifier::{feature_hashes, ClassifierFormatError, TextClassifier};
use verdict::{analyze, read_rules, Outcome};

/// The opening window: cues and signals are looked for only in this many
/// first bytes of prose, so `detect` on a prefix of this length finds the
/// same cues as on the full text. What the response delivers after them
/// (fenced code, a list, content after a signal) is looked for further on,
/// up to 2 KiB past the opening.
pub const DEFAULT_PREFIX_BYTES: usize = 512;

/// How many opening sentences are searched for a refusal.
pub const MAX_SENTENCES: usize = 3;

/// What sort of non-answer the text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TextKind {
    /// The model declined outright.
    Refusal,
    /// The model declined and offered something else instead, without
    /// substance ("I can't do X, but I can explain Y").
    Deflection,
}

impl TextKind {
    /// The snake_case name used in logs (`refusal`, `deflection`).
    ///
    /// ```
    /// assert_eq!(refusal_guard::text::TextKind::Deflection.as_str(), "deflection");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            TextKind::Refusal => "refusal",
            TextKind::Deflection => "deflection",
        }
    }
}

/// Why the text was judged a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TextReason {
    /// A first-person refusal: "I can't help with that", "I must decline".
    DirectRefusal,
    /// A refusal framed by policy or ethics: "it is not appropriate to ...",
    /// "this goes against my guidelines".
    PolicyRefusal,
    /// A refusal followed by an offer of something else, with no substance.
    OffTopicDeflection,
    /// An opening the rules found no refusal in, which the trained
    /// [`TextClassifier`] reads as one ("Absolutely not.", "There is no
    /// reason why X should be denied ...").
    Classifier,
}

impl TextReason {
    /// The snake_case name used in logs (`direct_refusal`, `policy_refusal`,
    /// `off_topic_deflection`, `classifier`).
    ///
    /// ```
    /// use refusal_guard::text::TextReason;
    /// assert_eq!(TextReason::PolicyRefusal.as_str(), "policy_refusal");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            TextReason::DirectRefusal => "direct_refusal",
            TextReason::PolicyRefusal => "policy_refusal",
            TextReason::OffTopicDeflection => "off_topic_deflection",
            TextReason::Classifier => "classifier",
        }
    }
}

/// The verdict of [`detect`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Detection {
    /// Whether the text is a refusal (of either kind).
    pub refusal: bool,
    /// The kind of refusal, when `refusal` is true.
    pub kind: Option<TextKind>,
    /// Why, when `refusal` is true.
    pub reason: Option<TextReason>,
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
    /// hold reaches its cap (the layer holds up to 2 KiB of text by default,
    /// room for the opening window and what follows it) or the stream
    /// ends, call [`detect`] on what has been held.
    Undecided,
}

/// Detects a refusal written as prose.
///
/// ```
/// use refusal_guard::text::{detect, TextKind, TextReason};
///
/// let d = detect("I'm sorry, but I can't help with that request.");
/// assert!(d.is_refusal());
/// assert_eq!(d.kind, Some(TextKind::Refusal));
/// assert_eq!(d.reason, Some(TextReason::DirectRefusal));
/// let text = "I'm sorry, but I can't help with that request.";
/// assert_eq!(&text[d.span.unwrap()], "I can't help");
///
/// assert!(!detect("I can't help but smile: here is the recipe.").is_refusal());
/// assert!(!detect("To kill a Python process, run `kill <pid>`.").is_refusal());
/// ```
pub fn detect(text: &str) -> Detection {
    detect_with(text, TextClassifier::builtin())
}

/// [`detect`] with other classifier weights than the shipped ones.
///
/// ```
/// use refusal_guard::text::{detect_with, TextClassifier};
///
/// let model = TextClassifier::builtin();
/// assert!(detect_with("I won't help with that.", model).is_refusal());
/// ```
pub fn detect_with(text: &str, classifier: &TextClassifier) -> Detection {
    match analyze(text, true, classifier) {
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
/// use refusal_guard::text::{prefix_verdict, PrefixVerdict};
///
/// assert_eq!(prefix_verdict("Sure! Paris is the capital of France. It"), PrefixVerdict::RuledOut);
/// assert_eq!(prefix_verdict("I'm sorry, but I"), PrefixVerdict::Undecided);
/// ```
pub fn prefix_verdict(prefix: &str) -> PrefixVerdict {
    prefix_verdict_with(prefix, TextClassifier::builtin())
}

/// [`prefix_verdict`] with other classifier weights than the shipped ones.
///
/// ```
/// use refusal_guard::text::{prefix_verdict_with, PrefixVerdict, TextClassifier};
///
/// let model = TextClassifier::builtin();
/// assert_eq!(prefix_verdict_with("I'm sorry, but I", model), PrefixVerdict::Undecided);
/// ```
pub fn prefix_verdict_with(prefix: &str, classifier: &TextClassifier) -> PrefixVerdict {
    match analyze(prefix, false, classifier) {
        Outcome::Decided(d) if !d.refusal => PrefixVerdict::RuledOut,
        _ => PrefixVerdict::Undecided,
    }
}

/// What the rules make of a complete text, before the classifier: what
/// the training script learns from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesReading<'t> {
    /// The rules' own verdict.
    pub rules: Detection,
    /// The opening the rules read as prose and found no refusal in: the
    /// text the classifier scores. `None` when the rules decided otherwise
    /// (a refusal, fenced code, a refusal phrase that was only a caveat).
    pub opening: Option<&'t str>,
}

/// Reads a complete text with the rules alone.
///
/// ```
/// use refusal_guard::text::read_rules_only;
///
/// let r = read_rules_only("Paris is the capital of France. It is on the Seine.");
/// assert!(!r.rules.is_refusal());
/// assert!(r.opening.unwrap().starts_with("Paris"));
/// assert_eq!(read_rules_only("I can't help with that.").opening, None);
/// ```
pub fn read_rules_only(text: &str) -> RulesReading<'_> {
    let rules = read_rules(text, true);
    let verdict = match rules.outcome {
        Outcome::Decided(d) => d,
        Outcome::NeedMore => Detection::NONE,
    };
    RulesReading {
        rules: verdict,
        opening: rules.opening_end.map(|end| &text[..end]),
    }
}
