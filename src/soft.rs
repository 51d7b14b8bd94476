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

use std::ops::Range;

use serde::Serialize;

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

// ---------------------------------------------------------------------------
// Analysis
// ---------------------------------------------------------------------------

enum Outcome {
    Decided(Detection),
    NeedMore,
}

/// Analyzes `text`. With `complete == false` the text may continue, and the
/// function returns `Decided` only on evidence no continuation can change.
fn analyze(text: &str, complete: bool) -> Outcome {
    let fences = scan_fences(text, complete);
    if fences.has_code {
        return Outcome::Decided(Detection::NONE);
    }
    let window_end = floor_char_boundary(text, DEFAULT_PREFIX_BYTES.min(text.len()));
    let mut pos = 0;
    let mut lecture = Lecture::default();
    for _ in 0..MAX_SENTENCES {
        let Some(sentence) = next_sentence(text, pos, window_end, &fences.regions, complete) else {
            // The window (or the text) holds no further complete sentence.
            if complete || text.len() >= DEFAULT_PREFIX_BYTES {
                return conclude(text, &lecture, complete, &fences.regions);
            }
            return Outcome::NeedMore;
        };
        if sentence.pending {
            return Outcome::NeedMore;
        }
        pos = sentence.range.end;
        match classify(text, sentence.range.clone(), &mut lecture) {
            Class::Neutral => return Outcome::Decided(Detection::NONE),
            Class::LeadIn => continue,
            Class::Cue(reason, span) => {
                if !complete {
                    // A refusal has started; only the whole text decides.
                    return Outcome::NeedMore;
                }
                return Outcome::Decided(finish(text, span.end, reason, span, &fences.regions));
            }
        }
    }
    conclude(text, &lecture, complete, &fences.regions)
}

/// The opening window held no cue and no neutral sentence. A response that
/// opens by condemning the act itself ("violence is never acceptable") and
/// only lectures or redirects from there is a policy refusal, unless
/// substance (a list of steps, an offer with content) follows.
fn conclude(text: &str, lecture: &Lecture, complete: bool, fences: &[Range<usize>]) -> Outcome {
    let Some(span) = lecture.strong.clone() else {
        return Outcome::Decided(Detection::NONE);
    };
    if !complete {
        return Outcome::NeedMore;
    }
    let tail_end = floor_char_boundary(text, (span.end + 4 * DEFAULT_PREFIX_BYTES).min(text.len()));
    if has_list(&text[span.end..tail_end]) {
        return Outcome::Decided(Detection::NONE);
    }
    Outcome::Decided(finish(
        text,
        span.end,
        SoftReason::PolicyRefusal,
        span,
        fences,
    ))
}

/// What the opening sentences said by way of a lecture.
#[derive(Default)]
struct Lecture {
    /// Some sentence lectured ("X is illegal", "not a healthy way to ...").
    seen: bool,
    /// Span of the first condemnation of the act itself ("is never
    /// acceptable", "not only illegal but also unethical").
    strong: Option<Range<usize>>,
}

/// Turns a cue into a verdict, looking at what follows for substance.
fn finish(
    text: &str,
    after: usize,
    reason: SoftReason,
    span: Range<usize>,
    fences: &[Range<usize>],
) -> Detection {
    let rest = &text[after..];
    let limit = floor_char_boundary(text, (after + DEFAULT_PREFIX_BYTES).min(text.len()));
    let cue_sentence_end = next_sentence_from(text, after, limit, fences).unwrap_or(after);
    if false_premise(&text[span.start..]) || false_premise(&text[cue_sentence_end..]) {
        return Detection::NONE;
    }
    // The offer must come right away: in the rest of the cue sentence or
    // in the next one. Offers made after a lecture are deflections.
    let reach = pivot_reach(text, after, fences);
    if let Some(pivot_end) = find_pivot(&rest[..reach - after]) {
        let tail = &rest[pivot_end..];
        if has_substance(tail, fences, after + pivot_end) {
            return Detection::NONE;
        }
        return Detection {
            refusal: true,
            kind: Some(SoftKind::Deflection),
            reason: Some(SoftReason::OffTopicDeflection),
            span: Some(span),
        };
    }
    let kind = if reason == SoftReason::OffTopicDeflection {
        SoftKind::Deflection
    } else {
        SoftKind::Refusal
    };
    Detection {
        refusal: true,
        kind: Some(kind),
        reason: Some(reason),
        span: Some(span),
    }
}

// ---------------------------------------------------------------------------
// Fenced code
// ---------------------------------------------------------------------------

struct Fences {
    /// Byte ranges of fenced blocks (opening line to closing line).
    regions: Vec<Range<usize>>,
    /// Whether some fence holds a non-blank line.
    has_code: bool,
}

fn fence_marker(line: &str) -> Option<&'static str> {
    let t = line.trim_start_matches([' ', '\t']);
    if t.starts_with("```") {
        Some("```")
    } else if t.starts_with("~~~") {
        Some("~~~")
    } else {
        None
    }
}

fn scan_fences(text: &str, complete: bool) -> Fences {
    let mut regions = Vec::new();
    let mut open: Option<(usize, &'static str)> = None;
    let mut has_code = false;
    let mut line_start = 0;
    while line_start < text.len() {
        let (line_end, next) = match text[line_start..].find('\n') {
            Some(i) => (line_start + i, line_start + i + 1),
            None => (text.len(), text.len()),
        };
        let line_done = next > line_end || complete;
        let line = &text[line_start..line_end];
        match open {
            None => {
                if let Some(m) = fence_marker(line) {
                    open = Some((line_start, m));
                }
            }
            Some((start, m)) => {
                if fence_marker(line) == Some(m) && line.trim() == m {
                    regions.push(start..next);
                    open = None;
                } else if !line.trim().is_empty() && line_done {
                    has_code = true;
                }
            }
        }
        line_start = next;
    }
    if let Some((start, _)) = open {
        regions.push(start..text.len());
    }
    Fences { regions, has_code }
}

// ---------------------------------------------------------------------------
// Sentences
// ---------------------------------------------------------------------------

struct Sentence {
    range: Range<usize>,
    /// The sentence may still grow (streaming, no terminator seen yet).
    pending: bool,
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn in_regions(regions: &[Range<usize>], i: usize) -> Option<usize> {
    regions.iter().find(|r| r.contains(&i)).map(|r| r.end)
}

const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "st", "vs", "etc", "e.g", "i.e", "jr", "sr", "prof", "no", "approx",
];

/// Finds the next sentence starting at or after `pos`, ending before `limit`.
fn next_sentence(
    text: &str,
    mut pos: usize,
    limit: usize,
    fences: &[Range<usize>],
    complete: bool,
) -> Option<Sentence> {
    let bytes = text.as_bytes();
    // Skip whitespace, markdown decoration and fenced regions.
    loop {
        if pos >= limit {
            return None;
        }
        if let Some(end) = in_regions(fences, pos) {
            pos = end;
            continue;
        }
        let c = bytes[pos];
        if c.is_ascii_whitespace() || matches!(c, b'#' | b'>' | b'*' | b'_' | b'-' | b'|') {
            pos += 1;
            continue;
        }
        break;
    }
    let start = pos;
    let mut i = pos;
    while i < limit {
        if in_regions(fences, i).is_some() {
            return Some(Sentence {
                range: start..i,
                pending: false,
            });
        }
        let c = bytes[i];
        if c == b'\n' {
            return Some(Sentence {
                range: start..i,
                pending: false,
            });
        }
        if matches!(c, b'.' | b'!' | b'?') {
            // Closing quotes/brackets may follow the terminator.
            let mut j = i + 1;
            while j < text.len() {
                let rest = &text[j..];
                if rest.starts_with(['"', '\'', ')']) {
                    j += 1;
                } else if rest.starts_with(['\u{201d}', '\u{2019}']) {
                    j += 3;
                } else {
                    break;
                }
            }
            if j >= text.len() {
                if complete {
                    return Some(Sentence {
                        range: start..text.len(),
                        pending: false,
                    });
                }
                return Some(Sentence {
                    range: start..text.len(),
                    pending: true,
                });
            }
            if bytes[j].is_ascii_whitespace() && !(c == b'.' && is_abbreviation(&text[start..i])) {
                return Some(Sentence {
                    range: start..j,
                    pending: false,
                });
            }
        }
        i += 1;
    }
    // Reached the window limit (or the end of the text).
    let at_cap = limit >= floor_char_boundary(text, DEFAULT_PREFIX_BYTES.min(text.len()))
        && text.len() >= DEFAULT_PREFIX_BYTES;
    Some(Sentence {
        range: start..limit,
        pending: !(complete || at_cap),
    })
}

fn is_abbreviation(before: &str) -> bool {
    let word = before
        .rsplit(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("");
    let lower = word.to_ascii_lowercase();
    if lower.len() == 1 && lower.as_bytes()[0].is_ascii_alphabetic() {
        return true;
    }
    ABBREVIATIONS.contains(&lower.as_str())
}

// ---------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Tok<'a> {
    /// Lower-cased word with apostrophes normalised to `'`.
    w: &'a str,
    start: usize,
    end: usize,
    /// Inside quotation marks.
    quoted: bool,
    /// A comma (or other clause punctuation) directly follows.
    comma_after: bool,
}

/// Splits `text[range]` into lower-cased word tokens. `buf` receives the
/// normalised words back to back.
fn tokenize(
    text: &str,
    range: Range<usize>,
    buf: &mut String,
) -> Vec<(Range<usize>, usize, usize, bool, bool)> {
    // (buf range, start, end, quoted, comma_after)
    let mut out = Vec::new();
    let s = &text[range.clone()];
    let mut double_open = false;
    let mut single_open = false;
    let mut prev: Option<char> = None;
    let mut word_start: Option<(usize, usize)> = None; // (byte in text, byte in buf)
    let mut chars = s.char_indices().peekable();
    let base = range.start;
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|&(_, n)| n);
        let is_apos = matches!(c, '\'' | '\u{2019}' | '\u{2018}');
        let inside_word = word_start.is_some();
        if c.is_alphanumeric()
            || (is_apos && inside_word && next.is_some_and(|n| n.is_alphabetic()))
        {
            if word_start.is_none() {
                word_start = Some((base + i, buf.len()));
            }
            if is_apos {
                buf.push('\'');
            } else {
                for l in c.to_lowercase() {
                    buf.push(l);
                }
            }
        } else {
            if let Some((ws, bs)) = word_start.take() {
                let quoted = double_open || single_open;
                out.push((
                    bs..buf.len(),
                    ws,
                    base + i,
                    quoted,
                    matches!(c, ',' | ';' | ':' | '('),
                ));
            }
            match c {
                '"' => double_open = !double_open,
                '\u{201c}' => double_open = true,
                '\u{201d}' => double_open = false,
                '\'' | '\u{2018}' | '\u{2019}' => {
                    let at_word_start = prev.map_or(true, |p| {
                        p.is_whitespace() || matches!(p, '(' | '[' | '"' | '\u{201c}' | '-')
                    });
                    if at_word_start
                        && matches!(c, '\'' | '\u{2018}')
                        && next.is_some_and(|n| n.is_alphanumeric())
                    {
                        single_open = true;
                    } else if single_open {
                        single_open = false;
                    }
                }
                _ => {}
            }
        }
        prev = Some(c);
    }
    if let Some((ws, bs)) = word_start.take() {
        let quoted = double_open || single_open;
        out.push((bs..buf.len(), ws, range.end, quoted, false));
    }
    out
}

// ---------------------------------------------------------------------------
// Sentence classification
// ---------------------------------------------------------------------------

enum Class {
    Neutral,
    LeadIn,
    Cue(SoftReason, Range<usize>),
}

fn classify(text: &str, range: Range<usize>, lecture: &mut Lecture) -> Class {
    let mut buf = String::with_capacity(range.len());
    let raw = tokenize(text, range, &mut buf);
    let toks: Vec<Tok<'_>> = raw
        .iter()
        .map(|(r, s, e, q, c)| Tok {
            w: &buf[r.clone()],
            start: *s,
            end: *e,
            quoted: *q,
            comma_after: *c,
        })
        .collect();
    if let Some((reason, a, b)) = find_cue(&toks) {
        return Class::Cue(reason, toks[a].start..toks[b].end);
    }
    if lecture.seen {
        // A safety lecture followed by a referral elsewhere is a redirect.
        if let Some((a, b)) = find_referral(&toks) {
            return Class::Cue(SoftReason::OffTopicDeflection, toks[a].start..toks[b].end);
        }
        // "If you're feeling frustrated, ..." after a lecture speaks to the
        // asker's state, not to the request.
        if emotional_conditional(&toks) {
            return Class::LeadIn;
        }
    }
    if let Some((strong, a, b)) = find_lecture(&toks) {
        lecture.seen = true;
        if strong && lecture.strong.is_none() {
            lecture.strong = Some(toks[a].start..toks[b].end);
        }
        return Class::LeadIn;
    }
    if is_lead_in(&toks) {
        Class::LeadIn
    } else {
        Class::Neutral
    }
}

fn w<'a>(toks: &[Tok<'a>], i: usize) -> &'a str {
    toks.get(i).map_or("", |t| t.w)
}

fn any(word: &str, set: &[&str]) -> bool {
    set.contains(&word)
}

/// Verbs (and nouns) of assistance that follow an inability phrase.
const ASSIST: &[&str] = &[
    "help",
    "assist",
    "assistance",
    "provide",
    "give",
    "offer",
    "create",
    "write",
    "generate",
    "produce",
    "share",
    "fulfill",
    "fulfil",
    "comply",
    "support",
    "answer",
    "respond",
    "engage",
    "participate",
    "recommend",
    "suggest",
    "encourage",
    "condone",
    "promote",
    "facilitate",
    "discuss",
    "disclose",
    "reveal",
    "continue",
    "complete",
    "satisfy",
    "accommodate",
    "entertain",
    "draft",
    "compose",
    "endorse",
    "justify",
    "advise",
    "guide",
    "teach",
    "aid",
    "perform",
    "proceed",
    "partake",
    "contribute",
    "role",
    "roleplay",
    "pretend",
    "fulfilling",
    "helping",
    "assisting",
    "providing",
    "writing",
    "creating",
    "generating",
    "giving",
    "sharing",
    "discussing",
    "supply",
    "divulge",
    "release",
    "do",
    "tell",
    "go",
    "be",
];

/// Filler words allowed between the inability phrase and the verb.
const FILLER: &[&str] = &[
    "really",
    "actually",
    "in",
    "good",
    "conscience",
    "possibly",
    "directly",
    "personally",
    "ethically",
    "legally",
    "responsibly",
    "able",
    "to",
    "of",
    "any",
    "further",
    "simply",
    "just",
    "therefore",
    "currently",
    "comfortably",
    "and",
    "will",
    "not",
    "won't",
    "cannot",
    "morally",
    "safely",
    "fully",
    "in",
    "this",
    "case",
    "specifically",
    "otherwise",
    "ever",
];

/// Objects that make an inability a capability disclaimer, not a refusal.
const CAPABILITY: &[&str] = &[
    "real",
    "realtime",
    "browse",
    "browsing",
    "internet",
    "web",
    "live",
    "up",
    "current",
    "emotions",
    "feelings",
    "physical",
    "physically",
    "see",
    "hear",
    "images",
    "remember",
    "memory",
    "predict",
    "future",
    "weather",
    "stock",
    "websites",
    "urls",
    "links",
    "files",
    "attachments",
    "opinions",
    "opinion",
];

const CONDITIONAL: &[&str] = &[
    "if", "when", "whenever", "unless", "whether", "what", "why", "how", "where", "even",
    "because", "since", "though", "although", "wish", "hope", "so",
];

/// Finds a refusal cue; returns its reason and first/last token indices.
/// A specific phrase ("I can't help") wins over a generic apology cue
/// ("sorry, but I ... not") in the same sentence, so the span points at it.
fn find_cue(toks: &[Tok<'_>]) -> Option<(SoftReason, usize, usize)> {
    let mut apology = None;
    for i in 0..toks.len() {
        if toks[i].quoted {
            continue;
        }
        if let Some(hit) = cue_at(toks, i) {
            if !matches!(toks[i].w, "sorry" | "apologize" | "apologise" | "apologies") {
                return Some(hit);
            }
            apology.get_or_insert(hit);
        }
    }
    apology
}

/// Length (in tokens) of a first-person inability phrase starting at `i`.
fn inability_at(toks: &[Tok<'_>], i: usize) -> Option<usize> {
    let a = w(toks, i);
    let b = w(toks, i + 1);
    let c = w(toks, i + 2);
    let d = w(toks, i + 3);
    let e = w(toks, i + 4);
    match a {
        "i" => match b {
            "can't" | "cannot" | "cant" | "won't" | "shouldn't" => Some(2),
            "can" | "will" | "should" if c == "not" => Some(3),
            "am" => match c {
                "unable" if d == "to" => Some(4),
                "not" if d == "comfortable" => Some(3),
                "not"
                    if matches!(
                        d,
                        "able" | "allowed" | "permitted" | "going" | "designed" | "programmed"
                    ) && e == "to" =>
                {
                    Some(5)
                }
                "not" if d == "in" && e == "a" => Some(5),
                _ => None,
            },
            "do" if c == "not" && matches!(d, "feel") => Some(4),
            "don't" if c == "feel" => Some(3),
            "don't" | "do" if matches!(c, "think" | "believe") => {
                // "I don't think I can ...", "I do not think I can ..."
                let off = if b == "do" { 1 } else { 0 };
                let x = w(toks, i + 3 + off);
                let y = w(toks, i + 4 + off);
                if b == "do" && c != "not" {
                    return None;
                }
                if x == "i" && matches!(y, "can" | "should") {
                    Some(5 + off)
                } else {
                    None
                }
            }
            _ => None,
        },
        "i'm" => match b {
            "unable" if c == "to" => Some(3),
            "not" if c == "comfortable" => Some(2),
            "not"
                if matches!(
                    c,
                    "able" | "allowed" | "permitted" | "going" | "designed" | "programmed"
                ) && d == "to" =>
            {
                Some(4)
            }
            "not" if c == "in" && d == "a" => Some(4),
            _ => None,
        },
        "i'll" if b == "not" => Some(2),
        _ => None,
    }
}

fn cue_at(toks: &[Tok<'_>], i: usize) -> Option<(SoftReason, usize, usize)> {
    let a = w(toks, i);
    let prev = if i > 0 { w(toks, i - 1) } else { "" };
    let conditional =
        any(prev, CONDITIONAL) || (i > 1 && any(w(toks, i - 2), &["if", "when", "unless"]));

    // --- first-person inability + assistance verb -----------------------
    if let Some(n) = inability_at(toks, i) {
        if conditional {
            return None;
        }
        // "I'm not comfortable / I don't feel comfortable ..."
        let mut j = i + n;
        if matches!(w(toks, j), "comfortable") {
            return Some((SoftReason::DirectRefusal, i, j));
        }
        if w(toks, i + n - 1) == "a" && matches!(w(toks, j), "position") {
            j += 1;
        }
        let mut skipped = 0;
        while skipped < 6 && any(w(toks, j), FILLER) {
            j += 1;
            skipped += 1;
        }
        let verb = w(toks, j);
        if !any(verb, ASSIST) {
            // "I must decline" handled below; "I won't" + "be" etc. fall here.
            return None;
        }
        let after = w(toks, j + 1);
        let after2 = w(toks, j + 2);
        // Idioms.
        if verb == "help"
            && (after == "but" || after == "it" || after.ends_with("ing") || after == "myself")
        {
            return None;
        }
        if verb == "tell" && !matches!(after, "you" | "anyone") {
            return None;
        }
        if verb == "do" && !matches!(after, "that" | "this" | "so" | "it") {
            return None;
        }
        if verb == "go" && !matches!(after, "into" | "along") {
            return None;
        }
        if verb == "be" && !matches!(after, "of" | "a" | "party" | "involved" | "complicit") {
            return None;
        }
        if verb == "be" && after == "a" && !matches!(after2, "part" | "party") {
            return None;
        }
        if matches!(
            verb,
            "recommend" | "stress" | "thank" | "emphasize" | "emphasise" | "praise"
        ) && toks[j..].iter().take(10).any(|t| t.w == "enough")
        {
            return None;
        }
        if toks[j..].iter().take(8).any(|t| any(t.w, CAPABILITY)) {
            return None;
        }
        return Some((SoftReason::DirectRefusal, i, j));
    }

    // --- explicit decline -------------------------------------------------
    if matches!(a, "i" | "i'll" | "i'm" | "we") && !conditional {
        let mut j = i + 1;
        while j < toks.len()
            && j < i + 4
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
        if matches!(w(toks, j), "decline" | "refuse") && j > i {
            return Some((SoftReason::DirectRefusal, i, j));
        }
    }

    // --- "that's not something I can help with" ------------------------
    if matches!(a, "that's" | "this" | "that" | "it's")
        && !conditional
        && toks[i + 1..].iter().take(3).any(|t| t.w == "not")
    {
        if let Some(k) = (i + 1..toks.len().min(i + 5)).find(|&k| toks[k].w == "something") {
            if w(toks, k + 1) == "i" && matches!(w(toks, k + 2), "can" | "can't" | "will" | "am") {
                return Some((SoftReason::DirectRefusal, i, (k + 3).min(toks.len() - 1)));
            }
        }
    }

    // --- first-person stance against the premise -------------------------
    if a == "i" && !conditional {
        if let Some(end) = stance_at(toks, i) {
            return Some((SoftReason::PolicyRefusal, i, end));
        }
    }

    // --- "X is not an appropriate question" ------------------------------
    if a == "not"
        && matches!(prev, "is" | "was" | "isn't")
        && matches!(w(toks, i + 1), "a" | "an")
        && matches!(
            w(toks, i + 2),
            "appropriate" | "acceptable" | "ethical" | "responsible"
        )
        && matches!(w(toks, i + 3), "question" | "request" | "thing")
        && !conditional
    {
        return Some((SoftReason::PolicyRefusal, i, i + 3));
    }

    // --- policy / ethics framing: "it is not appropriate ... to" --------
    if matches!(a, "it's" | "it" | "that's" | "that" | "this") && !conditional {
        let mut j = i + 1;
        if matches!(a, "it" | "that" | "this") {
            if !matches!(w(toks, j), "is" | "would") {
                return policy_other(toks, i);
            }
            j += 1;
            if w(toks, j) == "be" {
                j += 1;
            }
        }
        if matches!(w(toks, j), "not" | "never") {
            j += 1;
            if w(toks, j) == "be" {
                j += 1;
            }
            let mut saw_moral = false;
            // "not accurate or fair to say": the pair rejects a premise as
            // both false and unjust; either word alone is ordinary.
            let (mut accurate, mut fair) = (false, false);
            let mut k = j;
            while k < toks.len() && k < j + 6 {
                let t = w(toks, k);
                accurate |= t == "accurate";
                fair |= t == "fair";
                saw_moral |= accurate && fair;
                if matches!(
                    t,
                    "appropriate"
                        | "ethical"
                        | "safe"
                        | "acceptable"
                        | "responsible"
                        | "okay"
                        | "ok"
                        | "legal"
                        | "right"
                ) {
                    saw_moral = true;
                } else if matches!(
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
                ) {
                } else if !matches!(
                    t,
                    "accurate"
                        | "fair"
                        | "kind"
                        | "helpful"
                        | "productive"
                        | "healthy"
                        | "respectful"
                        | "wise"
                ) {
                    break;
                }
                k += 1;
            }
            if saw_moral && matches!(w(toks, k), "to" | "for") {
                return Some((SoftReason::PolicyRefusal, i, k.saturating_sub(1)));
            }
        }
        if matches!(w(toks, j), "inappropriate" | "unethical")
            && matches!(w(toks, j + 1), "to" | "for")
        {
            return Some((SoftReason::PolicyRefusal, i, j));
        }
    }
    // "I don't think it's appropriate to ...", "I'm not sure that it's ..."
    let doubt = if a == "i" && matches!(w(toks, i + 1), "don't" | "do") {
        let mut j = i + 2;
        if w(toks, j) == "not" {
            j += 1;
        }
        matches!(w(toks, j), "think" | "believe").then_some(j)
    } else if a == "i'm" && w(toks, i + 1) == "not" && w(toks, i + 2) == "sure" {
        Some(if w(toks, i + 3) == "that" {
            i + 3
        } else {
            i + 2
        })
    } else {
        None
    };
    if let (Some(j), false) = (doubt, conditional) {
        {
            let k = j + 1;
            let (x, y) = (w(toks, k), w(toks, k + 1));
            let adj_at = if x == "it's" {
                k + 1
            } else if x == "it" && y == "is" {
                k + 2
            } else if x == "it" && y == "would" && w(toks, k + 2) == "be" {
                k + 3
            } else {
                usize::MAX
            };
            if adj_at != usize::MAX
                && matches!(
                    w(toks, adj_at),
                    "appropriate" | "ethical" | "responsible" | "right"
                )
            {
                return Some((SoftReason::PolicyRefusal, i, adj_at));
            }
        }
    }
    policy_other(toks, i)
}

/// "I strongly condemn any form of ...", "I strongly disagree with that
/// sentiment", "I do not condone ...": the model takes a stand against
/// the request instead of answering it. Returns the last token index.
fn stance_at(toks: &[Tok<'_>], i: usize) -> Option<usize> {
    const PREMISE: &[&str] = &[
        "sentiment",
        "statement",
        "premise",
        "idea",
        "notion",
        "view",
        "claim",
        "assertion",
        "assumption",
        "suggestion",
        "characterization",
        "framing",
    ];
    let mut j = i + 1;
    let firm = matches!(
        w(toks, j),
        "strongly" | "firmly" | "unequivocally" | "absolutely" | "vehemently" | "must"
    );
    if firm {
        j += 1;
    }
    let (v, x, y) = (w(toks, j), w(toks, j + 1), w(toks, j + 2));
    let pointed = |k: usize| {
        matches!(w(toks, k), "that" | "this" | "the" | "your" | "such")
            && any(w(toks, k + 1), PREMISE)
    };
    match v {
        // A plain "I disagree with the premise that X is slow" is an
        // opinion; declining the premise comes with emphasis.
        "condemn" | "denounce" | "oppose" | "reject"
            if (matches!(x, "any" | "all" | "such") || pointed(j + 1))
                && (firm || v != "reject") =>
        {
            Some(j)
        }
        "disagree" if firm && x == "with" && pointed(j + 2) => Some(j + 3),
        "do" | "don't" => {
            let k = if v == "do" && x == "not" {
                j + 2
            } else {
                j + 1
            };
            if v == "do" && x != "not" {
                return None;
            }
            let _ = y;
            matches!(w(toks, k), "condone" | "endorse").then_some(k)
        }
        _ => None,
    }
}

/// "goes against my guidelines", "violates the policy", "my guidelines
/// prevent me", "the request contains harmful ...".
fn policy_other(toks: &[Tok<'_>], i: usize) -> Option<(SoftReason, usize, usize)> {
    let a = w(toks, i);
    const RULES: &[&str] = &[
        "guidelines",
        "policy",
        "policies",
        "programming",
        "principles",
        "standards",
        "values",
        "terms",
        "rules",
        "guidelines",
        "ethics",
    ];
    if matches!(
        a,
        "against" | "violates" | "violate" | "violation" | "within" | "breach"
    ) {
        let window = &toks[i + 1..toks.len().min(i + 6)];
        let owner = window.iter().take(2).any(|t| {
            matches!(
                t.w,
                "my" | "our"
                    | "the"
                    | "ethical"
                    | "moral"
                    | "openai's"
                    | "content"
                    | "usage"
                    | "community"
            )
        });
        if let Some(k) = window.iter().position(|t| any(t.w, RULES)) {
            if owner && (a != "within" || (i > 0 && w(toks, i - 1) == "not")) {
                let start =
                    if i > 0 && matches!(w(toks, i - 1), "goes" | "go" | "is" | "be" | "not") {
                        i - 1
                    } else {
                        i
                    };
                return Some((SoftReason::PolicyRefusal, start, i + 1 + k));
            }
        }
    }
    if matches!(a, "my" | "our") && any(w(toks, i + 1), RULES) {
        let v = w(toks, i + 2);
        let v2 = w(toks, i + 3);
        if matches!(
            v,
            "prevent" | "prohibit" | "forbid" | "don't" | "doesn't" | "won't"
        ) || (matches!(v, "do" | "does") && v2 == "not")
        {
            return Some((SoftReason::PolicyRefusal, i, i + 2));
        }
    }
    // "the/your question/request/prompt contains/promotes ... harmful ..."
    if matches!(a, "question" | "request" | "prompt" | "statement" | "query")
        && i > 0
        && matches!(w(toks, i - 1), "the" | "your" | "this" | "that")
    {
        let v = w(toks, i + 1);
        if matches!(
            v,
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
            const HARM: &[&str] = &[
                "harmful",
                "offensive",
                "discriminatory",
                "stereotype",
                "stereotypes",
                "inappropriate",
                "unethical",
                "dangerous",
                "illegal",
                "hateful",
                "racist",
                "sexist",
                "bigoted",
                "prejudiced",
                "violent",
                "violence",
                "toxic",
                "derogatory",
            ];
            // "promotes discrimination": the noun names the harm only as
            // the object of such a verb ("is about discrimination law" is
            // not a judgement).
            let end = toks.len().min(i + 9);
            if let Some(k) = (i + 1..end)
                .find(|&k| {
                    any(toks[k].w, HARM)
                        || (matches!(toks[k].w, "discrimination" | "hatred" | "violence")
                            && matches!(
                                w(toks, k - 1),
                                "promotes" | "perpetuates" | "encourages" | "incites" | "endorses"
                            ))
                })
                .map(|k| k - i - 1)
            {
                return Some((SoftReason::PolicyRefusal, i - 1, i + 1 + k));
            }
        }
    }
    // "sorry, but I ..." / "I apologize, but I ..." with a negation.
    if matches!(a, "sorry" | "apologize" | "apologise" | "apologies") {
        let mut j = i + 1;
        while j < toks.len() && j < i + 6 && w(toks, j) != "but" {
            if matches!(w(toks, j), "to" | "hear" | "about" | "for") && w(toks, j) != "for" {
                return None; // "sorry to hear", "sorry about"
            }
            j += 1;
        }
        if w(toks, j) == "but" {
            let subj = w(toks, j + 1);
            if matches!(subj, "i" | "i'm" | "i've") {
                let neg = toks[j + 1..toks.len().min(j + 6)].iter().position(|t| {
                    matches!(
                        t.w,
                        "not"
                            | "don't"
                            | "can't"
                            | "cannot"
                            | "won't"
                            | "unable"
                            | "haven't"
                            | "didn't"
                    )
                });
                if let Some(k) = neg {
                    let k = j + 1 + k;
                    if toks[k..toks.len().min(k + 8)]
                        .iter()
                        .any(|t| any(t.w, CAPABILITY))
                    {
                        return None;
                    }
                    return Some((SoftReason::DirectRefusal, i, k));
                }
            }
        }
    }
    None
}

/// Words that attribute a view to someone else: a lecture inside such a
/// sentence reports it ("Gandhi believed violence is never the answer").
const ATTRIBUTION: &[&str] = &[
    "said",
    "says",
    "believed",
    "believes",
    "argued",
    "argues",
    "wrote",
    "writes",
    "according",
    "quote",
    "quoted",
    "taught",
    "teaches",
    "famously",
    "slogan",
    "motto",
    "phrase",
    "claimed",
    "claims",
];

/// Adjectives that condemn an act on moral grounds.
const CONDEMN: &[&str] = &[
    "appropriate",
    "acceptable",
    "ethical",
    "okay",
    "ok",
    "justified",
    "justifiable",
];

/// Harm done to people, named by a condemnation.
const HARM_ACTS: &[&str] = &[
    "violence",
    "violent",
    "harm",
    "harming",
    "hurt",
    "hurting",
    "abuse",
    "abusing",
    "assault",
    "attack",
    "attacking",
    "kill",
    "killing",
    "murder",
    "torture",
    "discrimination",
    "discriminating",
    "harassment",
    "bullying",
    "hatred",
    "racism",
    "punishment",
    "weapon",
    "weapons",
];

/// Finds a lecture; returns whether it condemns the act itself (strong)
/// and its first/last token indices.
///
/// * strong: "X is never acceptable / okay / justified / the answer",
///   "X is not only illegal ... but also unethical", "X is illegal and
///   unethical", "not an appropriate or acceptable way to ...";
/// * weak: "X is illegal", "not a healthy or productive way to ...".
fn find_lecture(toks: &[Tok<'_>]) -> Option<(bool, usize, usize)> {
    let attributed = toks.iter().any(|t| any(t.w, ATTRIBUTION));
    // "never acceptable" alone is also said of bad engineering practice
    // ("hard-coding secrets is never acceptable"); as a condemnation it
    // names the harm.
    let harm = !attributed && toks.iter().any(|t| any(t.w, HARM_ACTS));
    let mut weak = None;
    for i in 0..toks.len() {
        if toks[i].quoted {
            continue;
        }
        let (a, b, c) = (w(toks, i), w(toks, i + 1), w(toks, i + 2));
        // "never acceptable", "never the answer"
        if a == "never" {
            if any(b, CONDEMN) {
                return Some((harm, i, i + 1));
            }
            if b == "the" && c == "answer" {
                return Some((harm, i, i + 2));
            }
        }
        if matches!(a, "is" | "are") {
            let mut j = i + 1;
            if matches!(w(toks, j), "both" | "also") {
                j += 1;
            }
            // "is not only illegal ..., but (it is also) ... unethical"
            if w(toks, j) == "not" && w(toks, j + 1) == "only" {
                let k = j + 2;
                let first = w(toks, k);
                if matches!(first, "illegal" | "unethical" | "immoral" | "wrong") {
                    let end = toks.len().min(k + 12);
                    if let Some(m) = (k + 1..end).find(|&m| {
                        toks[m].w == "but"
                            && toks[m + 1..end].iter().any(|t| {
                                matches!(
                                    t.w,
                                    "unethical" | "immoral" | "dangerous" | "harmful" | "illegal"
                                )
                            })
                    }) {
                        return Some((!attributed, i, m));
                    }
                }
            }
            // "is illegal and unethical", "is unethical and illegal"
            let x = w(toks, j);
            let y = w(toks, j + 2);
            if matches!(x, "illegal" | "unethical" | "immoral")
                && w(toks, j + 1) == "and"
                && matches!(y, "illegal" | "unethical" | "immoral" | "unacceptable")
                && x != y
            {
                return Some((!attributed, i, j + 2));
            }
            if x == "illegal" {
                weak.get_or_insert((false, i, j));
            }
        }
        // "not a/an ADJ (or ADJ) way/solution/approach"
        if a == "not" && matches!(b, "a" | "an") {
            const ADJ: &[&str] = &[
                "appropriate",
                "acceptable",
                "ethical",
                "healthy",
                "effective",
                "productive",
                "constructive",
                "safe",
                "responsible",
            ];
            let mut k = i + 2;
            let mut moral = false;
            let mut adjs = 0;
            while any(w(toks, k), ADJ) {
                moral |= any(w(toks, k), CONDEMN);
                adjs += 1;
                k += 1;
                if matches!(w(toks, k), "or" | "and" | "nor") && any(w(toks, k + 1), ADJ) {
                    k += 1;
                }
            }
            if adjs > 0 && matches!(w(toks, k), "way" | "solution" | "approach" | "response") {
                if moral && harm {
                    return Some((true, i, k));
                }
                weak.get_or_insert((false, i, k));
            }
        }
    }
    weak
}

/// "If you're feeling overwhelmed ...", "If you feel threatened ...".
fn emotional_conditional(toks: &[Tok<'_>]) -> bool {
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

/// Whether `tail` holds a list of at least three items.
fn has_list(tail: &str) -> bool {
    tail.lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("- ")
                || t.starts_with("* ")
                || t.starts_with("• ")
                || t.split_once(['.', ')']).is_some_and(|(n, r)| {
                    !n.is_empty()
                        && n.len() <= 2
                        && n.bytes().all(|b| b.is_ascii_digit())
                        && r.starts_with(' ')
                })
        })
        .count()
        >= 3
}

/// "seek professional help", "reach out to a crisis hotline".
fn find_referral(toks: &[Tok<'_>]) -> Option<(usize, usize)> {
    const TO: &[&str] = &[
        "professional",
        "professionals",
        "therapist",
        "counselor",
        "counsellor",
        "mental",
        "authorities",
        "enforcement",
        "police",
        "hotline",
        "helpline",
        "crisis",
        "trusted",
        "doctor",
    ];
    (0..toks.len()).find_map(|i| {
        if !matches!(
            toks[i].w,
            "seek"
                | "seeking"
                | "reach"
                | "reaching"
                | "talk"
                | "talking"
                | "speak"
                | "speaking"
                | "consult"
                | "consulting"
                | "contact"
                | "contacting"
        ) {
            return None;
        }
        // "seek help", "seeking help"
        if toks[i].w.starts_with("seek") && w(toks, i + 1) == "help" {
            return Some((i, i + 1));
        }
        toks[i + 1..toks.len().min(i + 10)]
            .iter()
            .position(|t| any(t.w, TO))
            .map(|k| (i, i + 1 + k))
    })
}

/// Words whose presence makes a sentence a possible lead-in to a refusal.
const LEAD_IN: &[&str] = &[
    "i",
    "i'm",
    "i've",
    "i'd",
    "i'll",
    "me",
    "my",
    "sorry",
    "apologize",
    "apologise",
    "apologies",
    "unfortunately",
    "ai",
    "assistant",
    "illegal",
    "unethical",
    "harmful",
    "dangerous",
    "inappropriate",
    "appropriate",
    "ethical",
    "offensive",
    "discriminatory",
    "discrimination",
    "violence",
    "violent",
    "abuse",
    "crime",
    "criminal",
    "safety",
    "harm",
    "hurt",
    "sensitive",
    "respect",
    "respectful",
    "consent",
    "privacy",
    "private",
    "confidential",
    "understand",
    "understandable",
    "thank",
    "thanks",
    "hello",
    "hi",
    "hey",
    "however",
    "important",
    "serious",
    "concerned",
    "concern",
    "request",
    "question",
    "note",
    "never",
    "acceptable",
    "unacceptable",
];

fn is_lead_in(toks: &[Tok<'_>]) -> bool {
    toks.len() <= 3 || toks.iter().any(|t| any(t.w, LEAD_IN))
}

// ---------------------------------------------------------------------------
// Partial answers
// ---------------------------------------------------------------------------

/// End of the sentence after the one holding byte `after`.
fn pivot_reach(text: &str, after: usize, fences: &[Range<usize>]) -> usize {
    let limit = floor_char_boundary(text, (after + DEFAULT_PREFIX_BYTES).min(text.len()));
    let mut pos = after;
    for _ in 0..2 {
        match next_sentence_from(text, pos, limit, fences) {
            Some(end) => pos = end,
            None => break,
        }
    }
    pos.max(after)
}

/// End of the sentence running through `pos` (the cue sentence's rest may
/// be empty, in which case the next sentence is taken).
fn next_sentence_from(
    text: &str,
    pos: usize,
    limit: usize,
    fences: &[Range<usize>],
) -> Option<usize> {
    if pos >= limit {
        return None;
    }
    let bytes = text.as_bytes();
    let mut i = pos;
    while i < limit
        && (bytes[i].is_ascii_whitespace() || matches!(bytes[i], b'.' | b'!' | b'?' | b'"' | b','))
    {
        i += 1;
    }
    if i >= limit {
        return None;
    }
    let _ = fences;
    while i < limit {
        let c = bytes[i];
        if c == b'\n'
            || (matches!(c, b'.' | b'!' | b'?' | b':')
                && bytes.get(i + 1).map_or(true, |b| b.is_ascii_whitespace()))
        {
            return Some(i + 1);
        }
        i += 1;
    }
    Some(limit)
}

/// The text explains that the premise is false (a fictional person, a
/// nonsensical question): an inability phrase then answers the question.
fn false_premise(rest: &str) -> bool {
    let window = &rest[..floor_char_boundary(rest, rest.len().min(DEFAULT_PREFIX_BYTES))];
    let lower = window.to_ascii_lowercase().replace('\u{2019}', "'");
    [
        "fictional character",
        "is a fictional",
        "is fictional",
        "not a real person",
        "not a real character",
        "does not exist in real",
        "doesn't exist in real",
        "nonsensical",
        "absurd",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

/// Finds a pivot to an offer of help; returns the byte offset in `rest`
/// where what is offered begins.
fn find_pivot(rest: &str) -> Option<usize> {
    let window = &rest[..floor_char_boundary(rest, rest.len().min(DEFAULT_PREFIX_BYTES))];
    let mut buf = String::new();
    let raw = tokenize(window, 0..window.len(), &mut buf);
    let toks: Vec<Tok<'_>> = raw
        .iter()
        .map(|(r, s, e, q, c)| Tok {
            w: &buf[r.clone()],
            start: *s,
            end: *e,
            quoted: *q,
            comma_after: *c,
        })
        .collect();
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
        let _ = t.comma_after;
        for k in i + 1..toks.len().min(i + 12) {
            let x = w(&toks, k);
            let y = w(&toks, k + 1);
            let offer = matches!(x, "here's" | "below")
                || (x == "here" && matches!(y, "is" | "are"))
                || (x == "following")
                || (x == "i" && matches!(y, "can" | "could"))
                || (matches!(x, "i'd" | "i'll" | "i'm")
                    && matches!(
                        y,
                        "be" | "happy" | "glad" | "explain" | "provide" | "share" | "give"
                    ))
                || (x == "let" && y == "me");
            if offer {
                return Some(toks[k].end);
            }
        }
    }
    None
}

/// Whether `tail` (starting at `base` in the text) carries real content: a
/// list of at least three items, or at least three more sentences and
/// 250 bytes of prose.
fn has_substance(tail: &str, fences: &[Range<usize>], base: usize) -> bool {
    let _ = (fences, base);
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
