//! Refusal cues: one small matcher per kind of phrase, tried in order from
//! [`CUES`] at every word of a sentence.
//!
//! A matcher looks at the word at `i` (and the words around it) and returns
//! a [`Hit`] naming the reason and the words that matched. Adding a cue is
//! adding a function and a row to the table.

use super::prepare::{any, w, Tok};
use super::words::{
    ASSIST, CAPABILITY, CONDITIONAL, FILLER, HABITUAL, HARMFUL, MORAL, MORAL_COMPANIONS, NEGATIONS,
    PREMISE, REACH, RULES, RULE_OWNERS, WITHHELD,
};
use super::TextReason;

/// A matched cue: why, and its first and last word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hit {
    pub reason: TextReason,
    pub first: usize,
    pub last: usize,
}

impl Hit {
    fn direct(first: usize, last: usize) -> Hit {
        Hit {
            reason: TextReason::DirectRefusal,
            first,
            last,
        }
    }

    fn policy(first: usize, last: usize) -> Hit {
        Hit {
            reason: TextReason::PolicyRefusal,
            first,
            last,
        }
    }
}

/// A cue matcher: the sentence's words and the index to try.
type Cue = fn(&[Tok<'_>], usize) -> Option<Hit>;

/// The cues, most specific first.
const CUES: &[Cue] = &[
    inability,
    clipped_inability,
    decline,
    not_something_i_can,
    beyond_me,
    habitual,
    stance,
    not_an_appropriate_question,
    not_appropriate_to,
    doubt_appropriate,
    against_rules,
    rules_forbid,
    harmful_request,
    apology_but,
];

/// Finds a refusal cue in a sentence. A specific phrase ("I can't help")
/// wins over a generic apology cue ("sorry, but I ... not") in the same
/// sentence, so the span points at it.
pub(super) fn find_cue(toks: &[Tok<'_>]) -> Option<Hit> {
    let mut apology = None;
    for i in 0..toks.len() {
        if toks[i].quoted {
            continue;
        }
        let Some(hit) = CUES.iter().find_map(|cue| cue(toks, i)) else {
            continue;
        };
        if !matches!(toks[i].w, "sorry" | "apologize" | "apologise" | "apologies") {
            return Some(hit);
        }
        apology.get_or_insert(hit);
    }
    apology
}

/// Whether `word` is a verb of `set`, or its -ing form ("drafting",
/// "generating", "getting").
pub(super) fn verb_in(word: &str, set: &[&str]) -> bool {
    if any(word, set) {
        return true;
    }
    let Some(stem) = word.strip_suffix("ing").filter(|s| s.len() >= 2) else {
        return false;
    };
    let undoubled = &stem[..stem.len() - 1];
    any(stem, set)
        || set.iter().any(|v| v.strip_suffix('e') == Some(stem))
        || (stem.as_bytes()[stem.len() - 1] == stem.as_bytes()[stem.len() - 2]
            && any(undoubled, set))
}

/// Whether the `n` words from `from` name something the assistant simply
/// lacks ("real-time weather", "browse the internet", "up-to-date prices",
/// "current events"): a capability disclaimer, not a refusal. "look up
/// someone's address" or "their current address" is no such thing.
pub(super) fn capability(toks: &[Tok<'_>], from: usize, n: usize) -> bool {
    let end = toks.len().min(from.saturating_add(n));
    (from..end).any(|k| {
        let (x, y, z) = (w(toks, k), w(toks, k + 1), w(toks, k + 2));
        match x {
            "real" => y == "time",
            "up" => y == "to" && z == "date",
            "current" => matches!(
                y,
                "events" | "weather" | "news" | "prices" | "date" | "time" | "information" | "data"
            ),
            _ => any(x, CAPABILITY),
        }
    })
}

/// Whether the word at `i` sits in a conditional or subordinate clause
/// ("if I can't help", "why I cannot").
fn conditional(toks: &[Tok<'_>], i: usize) -> bool {
    let prev = if i > 0 { w(toks, i - 1) } else { "" };
    any(prev, CONDITIONAL) || (i > 1 && any(w(toks, i - 2), &["if", "when", "unless"]))
}

/// Length (in words) of a first-person inability phrase starting at `i`:
/// "I can't", "I am not able to", "I'm not in a", "I don't think I can".
fn inability_len(toks: &[Tok<'_>], i: usize) -> Option<usize> {
    let at = |k: usize| w(toks, i + k);
    let not_able = |k: usize| {
        matches!(
            at(k),
            "able"
                | "allowed"
                | "permitted"
                | "going"
                | "designed"
                | "programmed"
                | "willing"
                | "prepared"
                | "here"
        ) && at(k + 1) == "to"
    };
    match (at(0), at(1), at(2), at(3)) {
        ("i", "can't" | "cannot" | "cant" | "won't" | "shouldn't", _, _) => Some(2),
        ("i", "can" | "will" | "should", "not", _) => Some(3),
        ("i", "am", "unable", "to") => Some(4),
        ("i", "am", "not", "comfortable") => Some(3),
        ("i", "am", "not", _) if not_able(3) => Some(5),
        ("i", "am", "not", "in") if at(4) == "a" => Some(5),
        ("i", "do", "not", "feel") => Some(4),
        ("i", "don't", "feel", _) => Some(3),
        ("i", "don't", "think" | "believe", "i") if matches!(at(4), "can" | "should") => Some(5),
        ("i", "do", "not", "think" | "believe")
            if at(4) == "i" && matches!(at(5), "can" | "should") =>
        {
            Some(6)
        }
        ("i'm", "unable" | "unwilling", "to", _) => Some(3),
        ("i", "am", "unwilling", "to") => Some(4),
        ("i'm", "not", "comfortable", _) => Some(2),
        ("i'm", "not", _, _) if not_able(2) => Some(4),
        ("i'm", "not", "in", "a") => Some(4),
        ("i'm", "not", "gonna", _) => Some(3),
        ("i'd", "rather", "not", _) => Some(3),
        ("i", "would", "rather", "not") => Some(4),
        ("i'd", "prefer", "not", "to") => Some(4),
        ("i'll", "not", _, _) => Some(2),
        _ => None,
    }
}

/// First-person inability plus an assistance verb: "I can't help with
/// that", "I'm not able to provide", "I'm not comfortable writing".
fn inability(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    let n = inability_len(toks, i)?;
    if conditional(toks, i) {
        return None;
    }
    let mut j = i + n;
    if w(toks, j) == "comfortable" {
        return Some(Hit::direct(i, j));
    }
    if w(toks, i + n - 1) == "a" && w(toks, j) == "position" {
        j += 1;
    }
    // "I won't be able to help", "I won't be in a position to".
    if w(toks, j) == "be" {
        match (w(toks, j + 1), w(toks, j + 2), w(toks, j + 3)) {
            ("able", "to", _) => j += 3,
            ("in", "a", "position") => j += 4,
            _ => {}
        }
    }
    let mut skipped = 0;
    while skipped < 6 && any(w(toks, j), FILLER) {
        j += 1;
        skipped += 1;
    }
    // "I won't be drafting ..."
    if w(toks, j) == "be" && w(toks, j + 1).ends_with("ing") && verb_in(w(toks, j + 1), ASSIST) {
        j += 1;
    }
    let verb = w(toks, j);
    if !verb_in(verb, ASSIST) || idiom(toks, j) {
        return None;
    }
    if capability(toks, j, 8) {
        return None;
    }
    Some(Hit::direct(i, j))
}

/// A clipped refusal with no subject, opening its sentence: "Can't help
/// with that", "not gonna help with that one", "won't be writing that".
fn clipped_inability(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    let opener = i == 0
        || (i == 1
            && matches!(
                w(toks, 0),
                "nah" | "sorry" | "nope" | "unfortunately" | "afraid" | "yeah" | "honestly"
            ));
    if !opener {
        return None;
    }
    if (w(toks, i), w(toks, i + 1), w(toks, i + 2)) == ("no", "can", "do") {
        return Some(Hit::direct(i, i + 2));
    }
    let n = match (w(toks, i), w(toks, i + 1)) {
        ("can't" | "cannot" | "won't", _) => 1,
        ("not", "gonna" | "going" | "able") => 2 + usize::from(w(toks, i + 2) == "to"),
        ("not", x) if x.ends_with("ing") => 1,
        _ => return None,
    };
    let mut j = i + n;
    if matches!(w(toks, j), "be" | "really") && w(toks, j + 1) != "a" {
        j += 1;
    }
    let verb = w(toks, j);
    let object = matches!(
        w(toks, j + 1),
        "with" | "that" | "this" | "you" | "it" | "on" | "here"
    );
    let assisting = verb_in(verb, ASSIST) || verb == "doing";
    (assisting && !idiom(toks, j) && object).then(|| Hit::direct(i, j))
}

/// Whether the assistance verb at `j` is part of an idiom or of an
/// ordinary statement ("can't help but", "won't tell a soul", "can't
/// recommend it enough", "can't go wrong").
pub(super) fn idiom(toks: &[Tok<'_>], j: usize) -> bool {
    let (verb, after, after2) = (w(toks, j), w(toks, j + 1), w(toks, j + 2));
    let enough = || toks[j..].iter().take(10).any(|t| t.w == "enough");
    match verb {
        "help" => matches!(after, "but" | "it" | "myself") || after.ends_with("ing"),
        "tell" => !matches!(after, "you" | "anyone"),
        "do" => !matches!(after, "that" | "this" | "so" | "it"),
        "go" => !matches!(after, "into" | "along"),
        "be" => {
            !matches!(after, "of" | "a" | "party" | "involved" | "complicit")
                || (after == "a" && !matches!(after2, "part" | "party"))
        }
        "recommend" => enough(),
        "walk" => !matches!(after, "you" | "through"),
        "explain" | "describe" | "detail" | "outline" => !matches!(
            after,
            "how"
                | "the"
                | "that"
                | "this"
                | "those"
                | "these"
                | "methods"
                | "ways"
                | "steps"
                | "what"
                | "where"
                | "in"
                | "any"
        ),
        "take" => after != "part",
        "get" => !matches!(after, "involved" | "into"),
        _ => false,
    }
}

/// "I must decline", "I'll have to refuse", "we respectfully decline".
fn decline(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    // "..., so I must decline" concludes; it is not a condition.
    let so = i > 0 && w(toks, i - 1) == "so";
    if !matches!(w(toks, i), "i" | "i'll" | "i'm" | "we") || (conditional(toks, i) && !so) {
        return None;
    }
    let mut j = i + 1;
    while j < toks.len()
        && j < i + 5
        && matches!(
            w(toks, j),
            "must"
                | "have"
                | "to"
                | "will"
                | "respectfully"
                | "politely"
                | "need"
                | "going"
                | "afraid"
                | "would"
                | "therefore"
        )
    {
        j += 1;
    }
    // "I'll pass on this", "I'll sit this one out".
    let (next, after) = (w(toks, j + 1), w(toks, j + 2));
    let declines = match w(toks, j) {
        "decline" | "refuse" => true,
        "pass" => j + 1 == toks.len() || matches!(next, "on" | "this" | "here"),
        "sit" => matches!(next, "this" | "that") && after == "one" || next == "out",
        "say" => next == "no",
        _ => false,
    };
    (declines && j > i).then(|| Hit::direct(i, j))
}

/// "That's not something I can help with."
fn not_something_i_can(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    if !matches!(w(toks, i), "that's" | "this" | "that" | "it's")
        || conditional(toks, i)
        || !toks[i + 1..]
            .iter()
            .take(3)
            .any(|t| matches!(t.w, "not" | "isn't" | "wasn't"))
    {
        return None;
    }
    let k = (i + 1..toks.len().min(i + 5)).find(|&k| toks[k].w == "something")?;
    let me = match w(toks, k + 1) {
        "i" => matches!(w(toks, k + 2), "can" | "can't" | "will" | "am"),
        me => matches!(me, "i'll" | "i'm" | "i'd"),
    };
    me.then(|| Hit::direct(i, (k + 3).min(toks.len() - 1)))
}

/// "That is outside (of) my capabilities", "beyond what I'm able to help
/// with", "beyond my scope".
fn beyond_me(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    if !matches!(w(toks, i), "outside" | "beyond") || conditional(toks, i) {
        return None;
    }
    let mut j = i + 1;
    if w(toks, j) == "of" {
        j += 1;
    }
    let last = match (w(toks, j), w(toks, j + 1), w(toks, j + 2)) {
        ("my", x, _) if any(x, REACH) => j + 1,
        ("what", "i'm" | "i", "able" | "can" | "allowed" | "am") => j + 2,
        _ => return None,
    };
    Some(Hit::direct(i, last))
}

/// "I don't provide instructions for ...", "I do not help with that".
fn habitual(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    let verb = match (w(toks, i), w(toks, i + 1), w(toks, i + 2)) {
        ("i", "don't", _) => i + 2,
        ("i", "do", "not") => i + 3,
        _ => return None,
    };
    let withheld = (verb + 1..toks.len().min(verb + 3)).any(|k| any(w(toks, k), WITHHELD));
    (any(w(toks, verb), HABITUAL) && withheld && !conditional(toks, i))
        .then(|| Hit::direct(i, verb))
}

/// "I strongly condemn any form of ...", "I strongly disagree with that
/// sentiment", "I do not condone ...": the model takes a stand against
/// the request instead of answering it.
fn stance(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    if w(toks, i) != "i" || conditional(toks, i) {
        return None;
    }
    let mut j = i + 1;
    let firm = matches!(
        w(toks, j),
        "strongly" | "firmly" | "unequivocally" | "absolutely" | "vehemently" | "must"
    );
    if firm {
        j += 1;
    }
    let (v, x) = (w(toks, j), w(toks, j + 1));
    let pointed = |k: usize| {
        matches!(w(toks, k), "that" | "this" | "the" | "your" | "such")
            && any(w(toks, k + 1), PREMISE)
    };
    let last = match (v, x) {
        // A plain "I disagree with the premise that X is slow" is an
        // opinion; declining the premise comes with emphasis.
        ("condemn" | "denounce" | "oppose" | "reject", _)
            if (matches!(x, "any" | "all" | "such") || pointed(j + 1))
                && (firm || v != "reject") =>
        {
            j
        }
        ("disagree", "with") if firm && pointed(j + 2) => j + 3,
        ("do", "not") if matches!(w(toks, j + 2), "condone" | "endorse") => j + 2,
        ("don't", "condone" | "endorse") => j + 1,
        _ => return None,
    };
    Some(Hit::policy(i, last))
}

/// "X is not an appropriate question."
fn not_an_appropriate_question(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    let prev = if i > 0 { w(toks, i - 1) } else { "" };
    (w(toks, i) == "not"
        && matches!(prev, "is" | "was" | "isn't")
        && matches!(w(toks, i + 1), "a" | "an")
        && matches!(
            w(toks, i + 2),
            "appropriate" | "acceptable" | "ethical" | "responsible"
        )
        && matches!(w(toks, i + 3), "question" | "request" | "thing")
        && !conditional(toks, i))
    .then(|| Hit::policy(i, i + 3))
}

/// "It is not appropriate to ...", "it would not be responsible to ...",
/// "it's unethical to ...", "not accurate or fair to say".
fn not_appropriate_to(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    let a = w(toks, i);
    if !matches!(a, "it's" | "it" | "that's" | "that" | "this") || conditional(toks, i) {
        return None;
    }
    let mut j = i + 1;
    if matches!(a, "it" | "that" | "this") {
        if !matches!(w(toks, j), "is" | "would") {
            return None;
        }
        j += 1;
        if w(toks, j) == "be" {
            j += 1;
        }
    }
    if matches!(w(toks, j), "not" | "never") {
        if let Some(k) = moral_run(toks, j + 1) {
            return Some(Hit::policy(i, k.saturating_sub(1)));
        }
    }
    (matches!(w(toks, j), "inappropriate" | "unethical") && matches!(w(toks, j + 1), "to" | "for"))
        .then(|| Hit::policy(i, j))
}

/// After a negation at `j - 1`: a run of adjectives holding a moral one
/// (or the pair "accurate ... fair"), followed by "to" / "for". Returns
/// the index of that "to" / "for".
fn moral_run(toks: &[Tok<'_>], mut j: usize) -> Option<usize> {
    if w(toks, j) == "be" {
        j += 1;
    }
    let mut saw_moral = false;
    // "not accurate or fair to say": the pair rejects a premise as both
    // false and unjust; either word alone is ordinary.
    let (mut accurate, mut fair) = (false, false);
    let mut k = j;
    while k < toks.len() && k < j + 6 {
        let t = w(toks, k);
        accurate |= t == "accurate";
        fair |= t == "fair";
        saw_moral |= accurate && fair;
        if any(t, MORAL) {
            saw_moral = true;
        } else if !matches!(
            t,
            "or" | "and"
                | "nor"
                | "morally"
                | "ethically"
                | "legally"
                | "a"
                | "good"
                | "idea"
                | "advisable"
        ) && !any(t, MORAL_COMPANIONS)
        {
            break;
        }
        k += 1;
    }
    (saw_moral && matches!(w(toks, k), "to" | "for")).then_some(k)
}

/// "I don't think it's appropriate to ...", "I'm not sure that it is
/// ethical ...".
fn doubt_appropriate(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    if conditional(toks, i) {
        return None;
    }
    let j = match (w(toks, i), w(toks, i + 1), w(toks, i + 2), w(toks, i + 3)) {
        ("i", "don't", "think" | "believe", _) => i + 2,
        ("i", "do", "not", "think" | "believe") => i + 3,
        ("i'm", "not", "sure", "that") => i + 3,
        ("i'm", "not", "sure", _) => i + 2,
        _ => return None,
    };
    let k = j + 1;
    let adj_at = match (w(toks, k), w(toks, k + 1), w(toks, k + 2)) {
        ("it's", _, _) => k + 1,
        ("it", "is", _) => k + 2,
        ("it", "would", "be") => k + 3,
        _ => return None,
    };
    matches!(
        w(toks, adj_at),
        "appropriate" | "ethical" | "responsible" | "right"
    )
    .then(|| Hit::policy(i, adj_at))
}

/// "goes against my guidelines", "violates the content policy", "not
/// within my principles".
fn against_rules(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    let a = w(toks, i);
    if !matches!(
        a,
        "against" | "violates" | "violate" | "violation" | "within" | "breach"
    ) {
        return None;
    }
    let prev = if i > 0 { w(toks, i - 1) } else { "" };
    let window = &toks[i + 1..toks.len().min(i + 6)];
    let owner = window.iter().take(2).any(|t| any(t.w, RULE_OWNERS));
    let k = window.iter().position(|t| any(t.w, RULES))?;
    if !owner || (a == "within" && prev != "not") {
        return None;
    }
    let start = if matches!(prev, "goes" | "go" | "is" | "be" | "not") {
        i - 1
    } else {
        i
    };
    Some(Hit::policy(start, i + 1 + k))
}

/// "My guidelines prevent me ...", "our policies do not allow ...".
fn rules_forbid(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    let (a, b, v, v2) = (w(toks, i), w(toks, i + 1), w(toks, i + 2), w(toks, i + 3));
    (matches!(a, "my" | "our")
        && any(b, RULES)
        && (matches!(
            v,
            "prevent" | "prohibit" | "forbid" | "don't" | "doesn't" | "won't"
        ) || (matches!(v, "do" | "does") && v2 == "not")))
        .then(|| Hit::policy(i, i + 2))
}

/// "The question contains harmful ...", "your request promotes
/// discrimination".
fn harmful_request(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    if !matches!(
        w(toks, i),
        "question" | "request" | "prompt" | "statement" | "query"
    ) || i == 0
        || !matches!(w(toks, i - 1), "the" | "your" | "this" | "that")
    {
        return None;
    }
    if !matches!(
        w(toks, i + 1),
        "contains"
            | "promotes"
            | "perpetuates"
            | "is"
            | "seems"
            | "appears"
            | "asks"
            | "involves"
            | "implies"
    ) {
        return None;
    }
    // "promotes discrimination": the noun names the harm only as the object
    // of such a verb ("is about discrimination law" is not a judgement).
    let end = toks.len().min(i + 9);
    let k = (i + 1..end).find(|&k| {
        any(toks[k].w, HARMFUL)
            || (matches!(toks[k].w, "discrimination" | "hatred" | "violence")
                && matches!(
                    w(toks, k - 1),
                    "promotes" | "perpetuates" | "encourages" | "incites" | "endorses"
                ))
    })?;
    Some(Hit::policy(i - 1, k))
}

/// "Sorry, but I don't ...", "I apologize, but I'm not ...".
fn apology_but(toks: &[Tok<'_>], i: usize) -> Option<Hit> {
    if !matches!(
        w(toks, i),
        "sorry" | "apologize" | "apologise" | "apologies"
    ) {
        return None;
    }
    let mut j = i + 1;
    while j < toks.len() && j < i + 6 && w(toks, j) != "but" {
        if matches!(w(toks, j), "to" | "hear" | "about") {
            return None; // "sorry to hear", "sorry about"
        }
        j += 1;
    }
    if w(toks, j) != "but" || !matches!(w(toks, j + 1), "i" | "i'm" | "i've") {
        return None;
    }
    let k = j
        + 1
        + toks[j + 1..toks.len().min(j + 6)]
            .iter()
            .position(|t| any(t.w, NEGATIONS))?;
    if capability(toks, k, 8) {
        return None;
    }
    Some(Hit::direct(i, k))
}
