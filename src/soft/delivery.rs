//! What follows a cue: a pivot to an offer, and whether the offer (or the
//! rest of the response) delivers content.

use super::text::{head, sentence_end_from, w, Tok, Words};
use super::words::FALSE_PREMISE;
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

/// Whether `tail` holds a list of at least three items.
pub(super) fn has_list(tail: &str) -> bool {
    tail.lines().filter(|l| is_list_item(l)).count() >= 3
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
