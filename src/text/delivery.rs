//! What follows a cue: a pivot to an offer, and whether the offer (or the
//! rest of the response) delivers content.

use super::lecture::find_referral;
use super::prepare::{any, head, sentence_end_from, w, Tok, Words};
use super::words::{
    FALSE_PREMISE, HOTLINES, IMPERATIVES, OFFERS, REFERRAL_OTHERS, REFERRAL_TO, REFERRAL_VERBS,
    SOFT,
};
use super::DEFAULT_PREFIX_BYTES;

/// End of the sentence after the one holding byte `after`: how far an
/// offer may come and still answer the cue.
pub(super) fn pivot_reach(text: &str, after: usize) -> usize {
    let limit = head(text, after + DEFAULT_PREFIX_BYTES).len();
    let mut pos = after;
    for _ in 0..2 {
        match sentence_end_from(text, pos, limit) {
            Some(end) => pos = end,
            None => break,
        }
    }
    pos.max(after)
}

/// The text explains that the premise is false (a fictional person, a
/// nonsensical question): an inability phrase then answers the question.
pub(super) fn false_premise(rest: &str) -> bool {
    let lower = head(rest, DEFAULT_PREFIX_BYTES)
        .to_ascii_lowercase()
        .replace('\u{2019}', "'");
    FALSE_PREMISE.iter().any(|p| lower.contains(p))
}

/// Finds a pivot to an offer of help ("but here's", "however, I can",
/// "instead, let me"); returns the byte offset in `rest` where what is
/// offered begins.
pub(super) fn find_pivot(rest: &str) -> Option<usize> {
    let window = head(rest, DEFAULT_PREFIX_BYTES);
    let words = Words::new(window, 0..window.len());
    let toks = words.toks();
    for (i, t) in toks.iter().enumerate() {
        if !matches!(
            t.w,
            "but" | "however" | "instead" | "alternatively" | "that"
        ) {
            continue;
        }
        if t.w == "that"
            && !(w(&toks, i + 1) == "said"
                || (w(&toks, i + 1) == "being" && w(&toks, i + 2) == "said"))
        {
            continue;
        }
        if let Some(k) = (i + 1..toks.len().min(i + 12)).find(|&k| is_offer(&toks, k)) {
            return Some(toks[k].end);
        }
    }
    None
}

/// "here's", "below", "I can", "I'd be happy", "let me".
fn is_offer(toks: &[Tok<'_>], k: usize) -> bool {
    let (x, y) = (w(toks, k), w(toks, k + 1));
    matches!(x, "here's" | "below" | "following")
        || (x == "here" && matches!(y, "is" | "are"))
        || (x == "i" && matches!(y, "can" | "could"))
        || (matches!(x, "i'd" | "i'll" | "i'm")
            && matches!(
                y,
                "be" | "happy" | "glad" | "explain" | "provide" | "share" | "give"
            ))
        || (x == "let" && y == "me")
}

/// Whether `tail` carries real content: a list of at least three items, or
/// at least three more sentences and 250 bytes of prose.
pub(super) fn has_substance(tail: &str) -> bool {
    if has_list(tail) {
        return true;
    }
    let sentences = tail
        .as_bytes()
        .windows(2)
        .filter(|p| matches!(p[0], b'.' | b'!' | b'?' | b':') && p[1].is_ascii_whitespace())
        .count();
    sentences >= 3 && tail.trim().len() >= 250
}

/// Whether `tail` holds a list of at least three items, one a line or
/// numbered inline ("1. Report it. 2. Keep a record. 3. Ask ...").
pub(super) fn has_list(tail: &str) -> bool {
    tail.lines().filter(|l| is_list_item(l)).count() >= 3
        || ["1. ", "2. ", "3. "]
            .iter()
            .try_fold(0, |from, marker| {
                tail[from..].find(marker).map(|at| from + at + marker.len())
            })
            .is_some()
}

/// "- item", "* item", "• item", "1. item", "2) item".
fn is_list_item(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("- ")
        || t.starts_with("* ")
        || t.starts_with("• ")
        || t.split_once(['.', ')']).is_some_and(|(n, r)| {
            !n.is_empty()
                && n.len() <= 2
                && n.bytes().all(|b| b.is_ascii_digit())
                && r.starts_with(' ')
        })
}

/// How far past its start the delivered content of a response is looked
/// for.
pub(super) const DELIVERY_READ: usize = 4 * DEFAULT_PREFIX_BYTES;

/// What a stretch of text delivers.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Delivery {
    /// Weight of content, stopping at 2.
    pub weight: usize,
    /// Some sentence withheld: a lecture, reassurance, referral or offer in
    /// place of an answer.
    pub withheld: bool,
}

impl Delivery {
    /// Content was delivered.
    pub(crate) fn delivered(&self) -> bool {
        self.weight >= 2
    }
}

/// What `text[from..]` delivers: steps, facts, code, concrete
/// instructions. Each sentence (or list item) is weighed: lectures,
/// reassurance, referrals, offers and questions back weigh nothing; a
/// plain sentence weighs 1, a concrete one (digits, code, symbols, names,
/// an announcement, or long) 2. Content is delivered from a weight of 2.
pub(super) fn delivery(text: &str, from: usize) -> Delivery {
    weigh(text, from, usize::MAX)
}

/// Whether the two sentences from `from` deliver content on their own: a
/// refusal phrase right before them was a caveat ("I can't give legal
/// advice. In general, though, ...").
pub(super) fn delivers_at_once(text: &str, from: usize) -> bool {
    weigh(text, from, 2).delivered()
}

/// Whether one of the two sentences from `from` instructs: opens with a
/// verb of doing ("Create a user with ...", "Bake for 25 minutes") or holds
/// code. Stricter than [`delivers_at_once`]: names and numbers are not
/// enough after a moral judgement, since lectures cite them too.
pub(super) fn instructs_at_once(text: &str, from: usize) -> bool {
    let limit = head(text, from + DELIVERY_READ).len();
    let mut pos = from;
    for _ in 0..2 {
        let Some(end) = sentence_end_from(text, pos, limit) else {
            return false;
        };
        let sentence = &text[pos..end];
        let words = Words::new(sentence, 0..sentence.len());
        let toks = words.toks();
        let code = sentence.contains(['`', '=']);
        if !gives_nothing(&toks) && (code || any(w(&toks, 0), IMPERATIVES)) {
            return true;
        }
        pos = end;
    }
    false
}

/// Weighs at most `sentences` sentences from `from`.
fn weigh(text: &str, from: usize, sentences: usize) -> Delivery {
    let limit = head(text, from + DELIVERY_READ).len();
    let mut pos = from;
    let mut out = Delivery::default();
    let mut read = 0;
    while let Some(end) = sentence_end_from(text, pos, limit) {
        match sentence_weight(&text[pos..end]) {
            Weight::Empty => {}
            Weight::Withheld => out.withheld = true,
            Weight::Content(n) => out.weight += n,
        }
        read += 1;
        if out.delivered() || read >= sentences {
            break;
        }
        pos = end;
    }
    out
}

/// What one sentence weighs as content.
enum Weight {
    /// Too short to tell, or a question back.
    Empty,
    /// A lecture, reassurance, referral or offer.
    Withheld,
    /// Content: 1 plain, 2 concrete.
    Content(usize),
}

fn sentence_weight(sentence: &str) -> Weight {
    let words = Words::new(sentence, 0..sentence.len());
    let toks = words.toks();
    if toks.len() <= 3 && toks.iter().any(|t| any(t.w, SOFT)) {
        return Weight::Withheld; // "You matter."
    }
    if toks.len() <= 3 || sentence.trim_end().ends_with('?') {
        return Weight::Empty;
    }
    if gives_nothing(&toks) {
        return Weight::Withheld;
    }
    let code = sentence.contains(['`', '=', '/', '%', '$', '\u{b0}'])
        || toks.iter().any(|t| t.w.bytes().any(|b| b.is_ascii_digit()));
    let soft = toks.iter().filter(|t| any(t.w, SOFT)).count();
    if !code && soft * 8 >= toks.len().max(8) {
        return Weight::Withheld;
    }
    // A name inside the sentence is a fact ("In London, Leake Street
    // tunnel ..."); "I" is not a name.
    let names = toks[1..].iter().any(|t| {
        sentence[t.start..].starts_with(char::is_uppercase) && t.w != "i" && !t.w.starts_with("i'")
    });
    // "Here are the steps:" announces what follows.
    let announces = toks.iter().enumerate().any(|(i, t)| {
        t.w == "here's" || (t.w == "here" && matches!(w(&toks, i + 1), "is" | "are"))
    });
    Weight::Content(1 + usize::from(code || names || announces || toks.len() >= 20))
}

/// A referral, a hotline, or an offer / change of subject.
fn gives_nothing(toks: &[Tok<'_>]) -> bool {
    let referral = toks.iter().any(|t| any(t.w, REFERRAL_TO))
        && toks
            .iter()
            .any(|t| any(t.w, REFERRAL_VERBS) || matches!(t.w, "see" | "call" | "visit" | "ask"));
    referral
        || find_referral(toks).is_some()
        || toks.iter().enumerate().any(|(i, t)| {
            any(t.w, HOTLINES)
                || any(t.w, OFFERS)
                || (any(t.w, REFERRAL_VERBS)
                    && toks[i + 1..toks.len().min(i + 8)]
                        .iter()
                        .any(|u| any(u.w, REFERRAL_OTHERS)))
                || (t.w == "i" && matches!(w(toks, i + 1), "can" | "could" | "hope"))
                || matches!(t.w, "i'd" | "i'll")
        })
}
