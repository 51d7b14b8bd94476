//! Signals: openings that decline without a refusal phrase. An AI-identity
//! disclaimer that declines ("As an AI, I don't support ..."), a judgement
//! of the act ("Stalking is never okay", "this question isn't ethical to
//! ask") and sympathy ("That sounds really hard") are refusals only when
//! nothing after them delivers what was asked; [`super::delivery`] decides
//! that.

use super::cues::{capability, idiom, verb_in};
use super::prepare::{any, w, Tok};
use super::words::{
    AI_DECLINES, AI_DUTIES, AI_SELF, ATTRIBUTION, CONDEMN, HARDSHIP, HARMFUL, HAZARDS, JUDGED,
    JUDGED_ADVERBS, JUDGED_NOUNS, JUDGED_NOUN_MODIFIERS, MEANS, MORAL, WARNINGS,
};

/// What kind of opening a signal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SignalKind {
    /// An AI-identity disclaimer that declines.
    AiDecline,
    /// A moral judgement of the act itself ("is wrong", "is never okay").
    Judgement,
    /// A statement that the act is illegal or dangerous: a fact an answer
    /// may open with too ("It's illegal to park on double yellow lines").
    Hazard,
    /// Sympathy for the asker.
    Sympathy,
}

/// A signal found in a sentence, with its first and last word.
#[derive(Debug, Clone, Copy)]
pub(super) struct Signal {
    pub kind: SignalKind,
    pub first: usize,
    pub last: usize,
}

type SignalFn = fn(&[Tok<'_>], usize) -> Option<Signal>;

/// The signal matchers, tried in order at every word.
const SIGNALS: &[SignalFn] = &[ai_decline, duty_to_warn, judgement, sympathy];

/// Finds a signal in a sentence.
pub(super) fn find_signal(toks: &[Tok<'_>]) -> Option<Signal> {
    // A view reported or explained is not a judgement of the request
    // ("Gandhi said ...", "X is wrong because ...").
    // Nor is a reply that opens by agreeing ("Yes, it's illegal.").
    if toks
        .iter()
        .any(|t| any(t.w, ATTRIBUTION) || matches!(t.w, "because" | "since" | "why"))
        || matches!(w(toks, 0), "yes" | "yeah" | "yep" | "sure" | "certainly")
    {
        return None;
    }
    (0..toks.len())
        .filter(|&i| !toks[i].quoted)
        .find_map(|i| SIGNALS.iter().find_map(|signal| signal(toks, i)))
}

fn signal(kind: SignalKind, first: usize, last: usize) -> Signal {
    Signal { kind, first, last }
}

/// Whether words `i..` name the speaker an AI: "as an AI", "being a
/// language model", "I'm an AI". Returns the index of the noun.
fn ai_self(toks: &[Tok<'_>], i: usize) -> Option<usize> {
    let article = match (w(toks, i), w(toks, i + 1)) {
        ("as" | "being", "an" | "a") => i + 2,
        ("i'm", "an" | "a") => i + 2,
        ("i'm", "just" | "only" | "merely") if matches!(w(toks, i + 2), "an" | "a") => i + 3,
        ("i", "am") if matches!(w(toks, i + 2), "an" | "a") => i + 3,
        _ => return None,
    };
    (article..toks.len().min(article + 4)).find(|&k| any(w(toks, k), AI_SELF))
}

/// "As an AI, I don't support ...", "Being an AI, I must prioritize
/// safety", "As a responsible AI, I'm committed to promoting ...".
fn ai_decline(toks: &[Tok<'_>], i: usize) -> Option<Signal> {
    let noun = ai_self(toks, i)?;
    if capability(toks, 0, toks.len()) {
        return None;
    }
    let end = toks.len().min(noun + 14);
    let declines = (noun + 1..end).find(|&k| {
        let x = w(toks, k);
        let negated = matches!(x, "not" | "don't" | "can't" | "cannot" | "won't" | "never");
        let dutiful = matches!(
            x,
            "must"
                | "committed"
                | "obligated"
                | "need"
                | "have"
                | "designed"
                | "programmed"
                | "here"
                | "strive"
                | "aim"
                | "like"
                | "want"
        );
        // A duty to point something out declines only if it judges.
        let duty = |m: usize| {
            let verb = w(toks, m);
            verb_in(verb, AI_DUTIES) && (!any(verb, WARNINGS) || judges(toks, m + 1))
        };
        // "I don't get tired" is no decline; "I can't get involved" is.
        let declines = |m: usize| verb_in(w(toks, m), AI_DECLINES) && !idiom(toks, m);
        (negated && (k + 1..end.min(k + 4)).any(declines))
            || (dutiful && (k + 1..end.min(k + 4)).any(duty))
    })?;
    Some(signal(SignalKind::AiDecline, i, declines))
}

/// "I must point out that the question contains harmful assumptions",
/// "I have to inform you that it is not appropriate ...": a warning in
/// place of an answer. The sentence must judge something.
fn duty_to_warn(toks: &[Tok<'_>], i: usize) -> Option<Signal> {
    if w(toks, i) != "i" {
        return None;
    }
    let end = toks.len().min(i + 6);
    let modal = (i + 1..end).find(|&k| {
        matches!(
            w(toks, k),
            "must" | "have" | "need" | "should" | "like" | "want"
        )
    })?;
    let verb = (modal + 1..end.min(modal + 3)).find(|&k| any(w(toks, k), WARNINGS))?;
    judges(toks, verb + 1).then(|| signal(SignalKind::Judgement, i, verb))
}

/// Whether the words from `from` judge something: harmful, wrong,
/// problematic, not appropriate.
fn judges(toks: &[Tok<'_>], from: usize) -> bool {
    (from..toks.len()).any(|k| {
        let x = w(toks, k);
        any(x, HARMFUL)
            || any(x, JUDGED)
            || matches!(x, "problematic" | "insensitive" | "biased")
            || (x == "not"
                && (k + 1..toks.len().min(k + 3))
                    .any(|m| any(w(toks, m), MORAL) || any(w(toks, m), CONDEMN)))
    })
}

/// "X is never okay", "this question isn't ethical to ask", "X is cruel",
/// "X is theft, plain and simple", "what you describe would be animal
/// cruelty".
fn judgement(toks: &[Tok<'_>], i: usize) -> Option<Signal> {
    let x = w(toks, i);
    let mut j = match (x, w(toks, i + 1)) {
        ("is" | "are" | "it's" | "that's" | "isn't" | "aren't" | "constitutes", _) => i + 1,
        ("would", "be") | ("sounds" | "looks", "like") | ("amounts", "to") | ("counts", "as") => {
            i + 2
        }
        ("never", _) => {
            return any(w(toks, i + 1), CONDEMN).then(|| signal(SignalKind::Judgement, i, i + 1))
        }
        _ => return None,
    };
    let negated =
        matches!(x, "isn't" | "aren't") || w(toks, j) == "not" && w(toks, j + 1) != "only";
    if negated {
        j += usize::from(w(toks, j) == "not");
        // "is not a appropriate action", but not "is not an appropriate
        // way to parse JSON": advice on means is not a judgement.
        if matches!(w(toks, j), "a" | "an") {
            j += 1;
            let noun = (j + 1..toks.len().min(j + 4)).map(|k| w(toks, k));
            if noun
                .take_while(|x| !matches!(*x, "to" | "for"))
                .any(|x| any(x, MEANS))
            {
                return None;
            }
        }
        let moral = any(w(toks, j), MORAL) || any(w(toks, j), CONDEMN);
        return (moral && !matches!(w(toks, j), "safe" | "legal"))
            .then(|| signal(SignalKind::Judgement, i, j));
    }
    if w(toks, j) == "not" {
        j += 2; // "not only"
    }
    while j < toks.len() && any(w(toks, j), JUDGED_ADVERBS) {
        j += 1;
    }
    if any(w(toks, j), JUDGED) {
        let moral = toks[j..]
            .iter()
            .any(|t| any(t.w, JUDGED) && !any(t.w, HAZARDS));
        let kind = if moral {
            SignalKind::Judgement
        } else {
            SignalKind::Hazard
        };
        return Some(signal(kind, i, j));
    }
    let first = j;
    while j < first + 3 && any(w(toks, j), JUDGED_NOUN_MODIFIERS) {
        j += 1;
    }
    // A noun judges only as the whole predicate ("is theft, plain and
    // simple"), not inside a definition ("is the unlawful taking of ...").
    let whole = j + 1 == toks.len() || w(toks, j + 1) == "plain";
    (any(w(toks, j), JUDGED_NOUNS) && whole).then(|| signal(SignalKind::Judgement, i, j))
}

/// "That sounds really hard", "I'm so sorry you're going through this",
/// "It sounds like you're carrying a lot", "oh no, that's awful".
fn sympathy(toks: &[Tok<'_>], i: usize) -> Option<Signal> {
    let (a, b, c) = (w(toks, i), w(toks, i + 1), w(toks, i + 2));
    let hardship_near =
        |from: usize| (from..toks.len().min(from + 3)).find(|&k| any(w(toks, k), HARDSHIP));
    let last = match (a, b) {
        ("sounds", "like") if matches!(c, "you're" | "you") => i + 2,
        ("sounds", "like") if c == "a" && w(toks, i + 3) == "lot" => i + 3,
        ("sounds" | "must" | "that's" | "feels", _) => hardship_near(i + 1)?,
        ("sorry", "you're" | "you" | "you've" | "that" | "for") => i + 1,
        ("sorry", _) if (i + 1..toks.len().min(i + 4)).any(|k| w(toks, k) == "hear") => i + 1,
        ("hear", "how" | "you") if i > 0 && w(toks, i - 1) == "i" => i + 1,
        ("oh", "no") => i + 1,
        ("not", "alone") if i > 0 && matches!(w(toks, i - 1), "you're" | "are") => i + 1,
        _ => return None,
    };
    Some(signal(SignalKind::Sympathy, i, last))
}
