//! Lectures, referrals and lead-ins: sentences that are not refusals on
//! their own but can open one.

use std::ops::Range;

use super::prepare::{any, w, Tok};
use super::words::{
    ATTRIBUTION, CONDEMN, HARM_ACTS, LEAD_IN, REFERRAL_TO, REFERRAL_VERBS, WAY_ADJ,
};

/// What the opening sentences said by way of a lecture.
#[derive(Default)]
pub(super) struct Lecture {
    /// Some sentence lectured ("X is illegal", "not a healthy way to ...").
    pub seen: bool,
    /// Span of the first condemnation of the act itself ("is never
    /// acceptable", "not only illegal but also unethical").
    pub strong: Option<Range<usize>>,
}

/// A lecture found in a sentence.
pub(super) struct Found {
    /// It condemns the act itself.
    pub strong: bool,
    pub first: usize,
    pub last: usize,
}

/// What a lecture matcher concluded at one word.
enum Lect {
    /// The sentence's lecture: stop looking.
    Final(Found),
    /// A weak lecture: keep looking for a stronger one.
    Weak(Found),
}

/// What every lecture matcher knows about the sentence.
struct Ctx {
    /// A view is attributed to someone else ("Gandhi believed ...").
    attributed: bool,
    /// The sentence names harm done to people.
    harm: bool,
}

type LectureFn = fn(&[Tok<'_>], usize, &Ctx) -> Option<Lect>;

/// The lecture matchers, tried in order at every word.
const LECTURES: &[LectureFn] = &[
    never_acceptable,
    not_only_but_also,
    illegal_and_unethical,
    is_illegal,
    not_a_way,
];

/// Finds a lecture:
///
/// * strong: "X is never acceptable / okay / justified / the answer",
///   "X is not only illegal ... but also unethical", "X is illegal and
///   unethical", "not an appropriate or acceptable way to ...";
/// * weak: "X is illegal", "not a healthy or productive way to ...".
pub(super) fn find_lecture(toks: &[Tok<'_>]) -> Option<Found> {
    let attributed = toks.iter().any(|t| any(t.w, ATTRIBUTION));
    // "never acceptable" alone is also said of bad engineering practice
    // ("hard-coding secrets is never acceptable"); as a condemnation it
    // names the harm.
    let ctx = Ctx {
        attributed,
        harm: !attributed && toks.iter().any(|t| any(t.w, HARM_ACTS)),
    };
    let mut weak = None;
    for i in (0..toks.len()).filter(|&i| !toks[i].quoted) {
        for lecture in LECTURES {
            match lecture(toks, i, &ctx) {
                Some(Lect::Final(found)) => return Some(found),
                Some(Lect::Weak(found)) => {
                    weak.get_or_insert(found);
                }
                None => {}
            }
        }
    }
    weak
}

fn found(strong: bool, first: usize, last: usize) -> Found {
    Found {
        strong,
        first,
        last,
    }
}

/// "never acceptable", "never the answer".
fn never_acceptable(toks: &[Tok<'_>], i: usize, ctx: &Ctx) -> Option<Lect> {
    if w(toks, i) != "never" {
        return None;
    }
    let (b, c) = (w(toks, i + 1), w(toks, i + 2));
    if any(b, CONDEMN) {
        return Some(Lect::Final(found(ctx.harm, i, i + 1)));
    }
    (b == "the" && c == "answer").then(|| Lect::Final(found(ctx.harm, i, i + 2)))
}

/// The index of the predicate after "is" / "are" (past "both", "also").
fn predicate(toks: &[Tok<'_>], i: usize) -> Option<usize> {
    if !matches!(w(toks, i), "is" | "are") {
        return None;
    }
    Some(if matches!(w(toks, i + 1), "both" | "also") {
        i + 2
    } else {
        i + 1
    })
}

/// "is not only illegal ..., but (it is also) ... unethical".
fn not_only_but_also(toks: &[Tok<'_>], i: usize, ctx: &Ctx) -> Option<Lect> {
    let j = predicate(toks, i)?;
    if w(toks, j) != "not" || w(toks, j + 1) != "only" {
        return None;
    }
    let k = j + 2;
    if !matches!(w(toks, k), "illegal" | "unethical" | "immoral" | "wrong") {
        return None;
    }
    let end = toks.len().min(k + 12);
    let m = (k + 1..end).find(|&m| {
        toks[m].w == "but"
            && toks[m + 1..end].iter().any(|t| {
                matches!(
                    t.w,
                    "unethical" | "immoral" | "dangerous" | "harmful" | "illegal"
                )
            })
    })?;
    Some(Lect::Final(found(!ctx.attributed, i, m)))
}

/// "is illegal and unethical", "is unethical and illegal".
fn illegal_and_unethical(toks: &[Tok<'_>], i: usize, ctx: &Ctx) -> Option<Lect> {
    let j = predicate(toks, i)?;
    let (x, y) = (w(toks, j), w(toks, j + 2));
    (matches!(x, "illegal" | "unethical" | "immoral")
        && w(toks, j + 1) == "and"
        && matches!(y, "illegal" | "unethical" | "immoral" | "unacceptable")
        && x != y)
        .then(|| Lect::Final(found(!ctx.attributed, i, j + 2)))
}

/// "is illegal": a weak lecture.
fn is_illegal(toks: &[Tok<'_>], i: usize, _: &Ctx) -> Option<Lect> {
    let j = predicate(toks, i)?;
    (w(toks, j) == "illegal").then(|| Lect::Weak(found(false, i, j)))
}

/// "not a/an ADJ (or ADJ) way/solution/approach": strong when an
/// adjective is moral and the sentence names harm.
fn not_a_way(toks: &[Tok<'_>], i: usize, ctx: &Ctx) -> Option<Lect> {
    if w(toks, i) != "not" || !matches!(w(toks, i + 1), "a" | "an") {
        return None;
    }
    let mut k = i + 2;
    let mut moral = false;
    let mut adjs = 0;
    while any(w(toks, k), WAY_ADJ) {
        moral |= any(w(toks, k), CONDEMN);
        adjs += 1;
        k += 1;
        if matches!(w(toks, k), "or" | "and" | "nor") && any(w(toks, k + 1), WAY_ADJ) {
            k += 1;
        }
    }
    if adjs == 0 || !matches!(w(toks, k), "way" | "solution" | "approach" | "response") {
        return None;
    }
    Some(if moral && ctx.harm {
        Lect::Final(found(true, i, k))
    } else {
        Lect::Weak(found(false, i, k))
    })
}

/// "If you're feeling overwhelmed ...", "If you feel threatened ...".
pub(super) fn emotional_conditional(toks: &[Tok<'_>]) -> bool {
    let mut i = 0;
    if matches!(w(toks, i), "and" | "but" | "so" | "also" | "however") {
        i += 1;
    }
    if w(toks, i) != "if" {
        return false;
    }
    i += 1;
    match w(toks, i) {
        "you're" => i += 1,
        "you" if w(toks, i + 1) == "are" => i += 2,
        "you" => i += 1,
        _ => return false,
    }
    matches!(
        w(toks, i),
        "feel" | "feeling" | "struggling" | "experiencing" | "having" | "going"
    )
}

/// "seek professional help", "reach out to a crisis hotline". Returns the
/// first and last word.
pub(super) fn find_referral(toks: &[Tok<'_>]) -> Option<(usize, usize)> {
    (0..toks.len()).find_map(|i| {
        if !any(toks[i].w, REFERRAL_VERBS) {
            return None;
        }
        if toks[i].w.starts_with("seek") && w(toks, i + 1) == "help" {
            return Some((i, i + 1));
        }
        toks[i + 1..toks.len().min(i + 10)]
            .iter()
            .position(|t| any(t.w, REFERRAL_TO))
            .map(|k| (i, i + 1 + k))
    })
}

/// Whether a sentence may lead in to a refusal (first person, apology,
/// moral or safety vocabulary, or too short to tell).
pub(super) fn is_lead_in(toks: &[Tok<'_>]) -> bool {
    toks.len() <= 3 || toks.iter().any(|t| any(t.w, LEAD_IN))
}

/// "It's important to remember / note / understand that ...", "Please
/// remember that ...", "Keep in mind that ...": a lecture opens.
pub(super) fn lecture_marker(toks: &[Tok<'_>]) -> bool {
    let at = |k: usize| w(toks, k);
    let start = usize::from(matches!(
        at(0),
        "but" | "however" | "first" | "please" | "and"
    ));
    matches!(
        (at(start), at(start + 1), at(start + 2)),
        ("it's" | "it", "important" | "crucial" | "essential", _)
            | ("it", "is", "important" | "crucial" | "essential")
            | ("remember" | "understand", "that", _)
            | ("keep", "in", "mind")
    )
}
