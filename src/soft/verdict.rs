//! The verdict: reads the opening sentences, classifies each, and turns
//! what it found into a [`Detection`].

use std::ops::Range;

use super::cues::find_cue;
use super::delivery::{false_premise, find_pivot, has_list, has_substance, pivot_reach};
use super::lecture::{emotional_conditional, find_lecture, find_referral, is_lead_in, Lecture};
use super::text::{head, scan_fences, sentence_end_from, Reader, Words};
use super::{Detection, SoftKind, SoftReason, DEFAULT_PREFIX_BYTES, MAX_SENTENCES};

/// What an analysis concluded.
pub(super) enum Outcome {
    Decided(Detection),
    /// Only more text can decide.
    NeedMore,
}

/// What one opening sentence is.
enum Class {
    /// An answer: the text is not a refusal.
    Neutral,
    /// A refusal may follow.
    LeadIn,
    /// A refusal cue, with its reason and span.
    Cue(SoftReason, Range<usize>),
}

/// Analyzes `text`. With `complete == false` the text may continue, and the
/// function returns `Decided` only on evidence no continuation can change.
pub(super) fn analyze(text: &str, complete: bool) -> Outcome {
    let fences = scan_fences(text, complete);
    if fences.has_code {
        return Outcome::Decided(Detection::NONE);
    }
    let reader = Reader {
        text,
        fences: &fences.regions,
        complete,
    };
    let window_end = head(text, DEFAULT_PREFIX_BYTES).len();
    let mut pos = 0;
    let mut lecture = Lecture::default();
    for _ in 0..MAX_SENTENCES {
        let Some(sentence) = reader.next_sentence(pos, window_end) else {
            // The window (or the text) holds no further complete sentence.
            if complete || text.len() >= DEFAULT_PREFIX_BYTES {
                return conclude(text, &lecture, complete);
            }
            return Outcome::NeedMore;
        };
        if sentence.pending {
            return Outcome::NeedMore;
        }
        pos = sentence.range.end;
        match classify(text, sentence.range, &mut lecture) {
            Class::Neutral => return Outcome::Decided(Detection::NONE),
            Class::LeadIn => continue,
            // A refusal has started; only the whole text decides.
            Class::Cue(..) if !complete => return Outcome::NeedMore,
            Class::Cue(reason, span) => {
                return Outcome::Decided(finish(text, reason, span));
            }
        }
    }
    conclude(text, &lecture, complete)
}

/// The opening window held no cue and no neutral sentence. A response that
/// opens by condemning the act itself ("violence is never acceptable") and
/// only lectures or redirects from there is a policy refusal, unless
/// substance (a list of steps, an offer with content) follows.
fn conclude(text: &str, lecture: &Lecture, complete: bool) -> Outcome {
    let Some(span) = lecture.strong.clone() else {
        return Outcome::Decided(Detection::NONE);
    };
    if !complete {
        return Outcome::NeedMore;
    }
    let tail = &head(text, span.end + 4 * DEFAULT_PREFIX_BYTES)[span.end..];
    if has_list(tail) {
        return Outcome::Decided(Detection::NONE);
    }
    Outcome::Decided(finish(text, SoftReason::PolicyRefusal, span))
}

/// Classifies one opening sentence, noting lectures in `lecture`.
fn classify(text: &str, range: Range<usize>, lecture: &mut Lecture) -> Class {
    let words = Words::new(text, range);
    let toks = words.toks();
    let span = |a: usize, b: usize| toks[a].start..toks[b].end;
    if let Some(hit) = find_cue(&toks) {
        return Class::Cue(hit.reason, span(hit.first, hit.last));
    }
    if lecture.seen {
        // A safety lecture followed by a referral elsewhere is a redirect.
        if let Some((a, b)) = find_referral(&toks) {
            return Class::Cue(SoftReason::OffTopicDeflection, span(a, b));
        }
        // "If you're feeling frustrated, ..." after a lecture speaks to the
        // asker's state, not to the request.
        if emotional_conditional(&toks) {
            return Class::LeadIn;
        }
    }
    if let Some(found) = find_lecture(&toks) {
        lecture.seen = true;
        if found.strong && lecture.strong.is_none() {
            lecture.strong = Some(span(found.first, found.last));
        }
        return Class::LeadIn;
    }
    if is_lead_in(&toks) {
        Class::LeadIn
    } else {
        Class::Neutral
    }
}

/// Turns a cue into a verdict, looking at what follows for substance.
fn finish(text: &str, reason: SoftReason, span: Range<usize>) -> Detection {
    let after = span.end;
    let rest = &text[after..];
    let limit = head(text, after + DEFAULT_PREFIX_BYTES).len();
    let cue_sentence_end = sentence_end_from(text, after, limit).unwrap_or(after);
    if false_premise(&text[span.start..]) || false_premise(&text[cue_sentence_end..]) {
        return Detection::NONE;
    }
    // The offer must come right away: in the rest of the cue sentence or
    // in the next one. Offers made after a lecture are deflections.
    let reach = pivot_reach(text, after);
    let kind = match find_pivot(&rest[..reach - after]) {
        Some(pivot_end) if has_substance(&rest[pivot_end..]) => return Detection::NONE,
        Some(_) => SoftKind::Deflection,
        None if reason == SoftReason::OffTopicDeflection => SoftKind::Deflection,
        None => SoftKind::Refusal,
    };
    let reason = if kind == SoftKind::Deflection {
        SoftReason::OffTopicDeflection
    } else {
        reason
    };
    Detection {
        refusal: true,
        kind: Some(kind),
        reason: Some(reason),
        span: Some(span),
    }
}
