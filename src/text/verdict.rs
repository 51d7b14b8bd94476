//! The verdict: reads the opening sentences, classifies each, and turns
//! what it found into a [`Detection`].

use std::ops::Range;

use super::classifier::TextClassifier;
use super::cues::find_cue;
use super::delivery::{
    delivers_at_once, delivery, false_premise, find_pivot, has_list, has_substance,
    instructs_at_once, pivot_reach,
};
use super::lecture::{
    emotional_conditional, find_lecture, find_referral, is_lead_in, lecture_marker, Lecture,
};
use super::prepare::{head, scan_fences, sentence_end_from, Reader, Words};
use super::signals::{find_signal, SignalKind};
use super::words::CONTRASTS;
use super::{Detection, TextKind, TextReason, DEFAULT_PREFIX_BYTES, MAX_SENTENCES};

/// What an analysis concluded.
pub(super) enum Outcome {
    Decided(Detection),
    /// Only more text can decide.
    NeedMore,
}

/// What the opening sentences have shown so far.
#[derive(Default)]
struct Opening {
    lecture: Lecture,
    /// The first signal (AI-identity decline, judgement, sympathy), its
    /// span, and where its sentence ends.
    signal: Option<(SignalKind, Range<usize>, usize)>,
}

/// What one opening sentence is.
enum Class {
    /// An answer: the text is not a refusal.
    Neutral,
    /// A refusal may follow.
    LeadIn,
    /// A refusal cue, with its reason and span.
    Cue(TextReason, Range<usize>),
}

/// What the rules concluded, and what of the text they read.
pub(super) struct Rules {
    pub outcome: Outcome,
    /// Where the opening the rules read as prose ends, when they found no
    /// refusal in it (and no fenced code): the classifier may still read
    /// that opening as one.
    pub opening_end: Option<usize>,
}

/// Analyzes `text` with the rules, then lets `classifier` read an opening
/// the rules found no refusal in. With `complete == false` the text may
/// continue, and the function returns `Decided` only on evidence no
/// continuation can change.
pub(super) fn analyze(text: &str, complete: bool, classifier: &TextClassifier) -> Outcome {
    let rules = read_rules(text, complete);
    let Some(end) = rules.opening_end else {
        return rules.outcome;
    };
    if !classifier.flags(&text[..end]) {
        return rules.outcome;
    }
    if !complete {
        return Outcome::NeedMore;
    }
    let start = text.len() - text.trim_start().len();
    Outcome::Decided(Detection {
        refusal: true,
        kind: Some(TextKind::Refusal),
        reason: Some(TextReason::Classifier),
        span: Some(start.min(end)..end),
    })
}

/// The rules alone.
pub(super) fn read_rules(text: &str, complete: bool) -> Rules {
    let decided = |outcome| Rules {
        outcome,
        opening_end: None,
    };
    let fences = scan_fences(text, complete);
    if fences.has_code {
        return decided(Outcome::Decided(Detection::NONE));
    }
    let reader = Reader {
        text,
        fences: &fences.regions,
        complete,
    };
    let window_end = head(text, DEFAULT_PREFIX_BYTES).len();
    let mut pos = 0;
    let mut opening = Opening::default();
    for _ in 0..MAX_SENTENCES {
        let Some(sentence) = reader.next_sentence(pos, window_end) else {
            // The window (or the text) holds no further complete sentence.
            if complete || text.len() >= DEFAULT_PREFIX_BYTES {
                return conclude(text, &opening, complete, pos);
            }
            return decided(Outcome::NeedMore);
        };
        if sentence.pending {
            return decided(Outcome::NeedMore);
        }
        pos = sentence.range.end;
        match classify(text, sentence.range, &mut opening) {
            Class::Neutral => return answer(pos),
            Class::LeadIn => continue,
            // A refusal has started; only the whole text decides.
            Class::Cue(..) if !complete => return decided(Outcome::NeedMore),
            Class::Cue(reason, span) => {
                return decided(Outcome::Decided(finish(text, reason, span)));
            }
        }
    }
    conclude(text, &opening, complete, pos)
}

/// The rules found no refusal in the opening, which ends at `end`.
fn answer(end: usize) -> Rules {
    Rules {
        outcome: Outcome::Decided(Detection::NONE),
        opening_end: Some(end),
    }
}

/// The opening window held no cue and no neutral sentence. A response that
/// opens by condemning the act itself ("violence is never acceptable") and
/// only lectures or redirects from there is a policy refusal, unless
/// substance (a list of steps, an offer with content) follows.
fn conclude(text: &str, opening: &Opening, complete: bool, end: usize) -> Rules {
    let decided = |outcome| Rules {
        outcome,
        opening_end: None,
    };
    if let Some(span) = opening.lecture.strong.clone() {
        if !complete {
            return decided(Outcome::NeedMore);
        }
        let tail = &head(text, span.end + 4 * DEFAULT_PREFIX_BYTES)[span.end..];
        if has_list(tail) {
            return answer(end);
        }
        return decided(Outcome::Decided(finish(
            text,
            TextReason::PolicyRefusal,
            span,
        )));
    }
    let Some((kind, span, sentence_end)) = opening.signal.clone() else {
        return answer(end);
    };
    if !complete {
        return decided(Outcome::NeedMore);
    }
    // Sympathy and hazards decline only with something said in place of an
    // answer (reassurance, a referral, a lecture): "That sounds
    // frustrating! Try restarting the router." is a short answer.
    let given = delivery(text, sentence_end);
    let needs_withheld = matches!(kind, SignalKind::Sympathy | SignalKind::Hazard);
    if given.delivered() || (needs_withheld && !given.withheld) {
        return answer(end);
    }
    let (kind, reason) = match kind {
        SignalKind::AiDecline => (TextKind::Refusal, TextReason::DirectRefusal),
        SignalKind::Judgement | SignalKind::Hazard => {
            (TextKind::Refusal, TextReason::PolicyRefusal)
        }
        SignalKind::Sympathy => (TextKind::Deflection, TextReason::OffTopicDeflection),
    };
    decided(Outcome::Decided(Detection {
        refusal: true,
        kind: Some(kind),
        reason: Some(reason),
        span: Some(span),
    }))
}

/// Classifies one opening sentence, noting lectures and signals in
/// `opening`. After a signal no sentence of the window is an answer on its
/// own: whether anything is delivered is judged on the whole text.
fn classify(text: &str, range: Range<usize>, opening: &mut Opening) -> Class {
    let end = range.end;
    let words = Words::new(text, range);
    let toks = words.toks();
    let span = |a: usize, b: usize| toks[a].start..toks[b].end;
    if let Some(hit) = find_cue(&toks) {
        return Class::Cue(hit.reason, span(hit.first, hit.last));
    }
    if opening.lecture.seen {
        // A safety lecture followed by a referral elsewhere is a redirect.
        if let Some((a, b)) = find_referral(&toks) {
            return Class::Cue(TextReason::OffTopicDeflection, span(a, b));
        }
        // "If you're feeling frustrated, ..." after a lecture speaks to the
        // asker's state, not to the request.
        if emotional_conditional(&toks) {
            return Class::LeadIn;
        }
    }
    if opening.signal.is_none() {
        if let Some(found) = find_signal(&toks) {
            opening.signal = Some((found.kind, span(found.first, found.last), end));
        }
    }
    if let Some(found) = find_lecture(&toks) {
        opening.lecture.seen = true;
        if found.strong && opening.lecture.strong.is_none() {
            let lecture = span(found.first, found.last);
            // A condemnation is a judgement: what follows it is judged as a
            // whole, not sentence by sentence.
            opening
                .signal
                .get_or_insert((SignalKind::Judgement, lecture.clone(), end));
            opening.lecture.strong = Some(lecture);
        }
        return Class::LeadIn;
    }
    // "It's important to remember that ...": a referral may follow.
    opening.lecture.seen |= lecture_marker(&toks);
    if opening.signal.is_some() || is_lead_in(&toks) {
        Class::LeadIn
    } else {
        Class::Neutral
    }
}

/// Turns a cue into a verdict, looking at what follows for substance.
fn finish(text: &str, reason: TextReason, span: Range<usize>) -> Detection {
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
        Some(_) => TextKind::Deflection,
        None if caveat_end(text, after, cue_sentence_end)
            .is_some_and(|from| delivers_at_once(text, from)) =>
        {
            return Detection::NONE
        }
        // "It is not safe to run it as root. Create a user with ...": a
        // safety caveat before real steps.
        None if reason == TextReason::PolicyRefusal
            && instructs_at_once(text, cue_sentence_end) =>
        {
            return Detection::NONE
        }
        None if reason == TextReason::OffTopicDeflection => TextKind::Deflection,
        None => TextKind::Refusal,
    };
    let reason = if kind == TextKind::Deflection {
        TextReason::OffTopicDeflection
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

/// Where the answer starts if a refusal phrase was only a caveat: after a
/// contrast in the rest of its sentence ("..., but the Law Society's tool
/// lets you ...") or at the start of the next one ("In general, though,
/// ..."). `None` without such a contrast.
fn caveat_end(text: &str, after: usize, sentence_end: usize) -> Option<usize> {
    let contrast = |from: usize, to: usize, words: usize| {
        let span = &text[from..to];
        let found = Words::new(span, 0..span.len())
            .toks()
            .iter()
            .take(words)
            .find(|t| CONTRASTS.contains(&t.w))
            .map(|t| from + t.end);
        found
    };
    let sentence_end = sentence_end.max(after);
    if let Some(at) = contrast(after, sentence_end, usize::MAX) {
        return Some(at);
    }
    let limit = head(text, sentence_end + DEFAULT_PREFIX_BYTES).len();
    let next_end = sentence_end_from(text, sentence_end, limit)?;
    contrast(sentence_end, next_end, 4).map(|_| sentence_end)
}
