//! Text preparation: fenced code, sentences and word tokens.
//!
//! Everything the cue analysis reads goes through here: fenced regions are
//! skipped, the opening window is cut into sentences, and each sentence is
//! split into lower-cased [`Tok`]ens that know whether they sit inside
//! quotation marks.

use std::ops::Range;

use super::words::ABBREVIATIONS;
use super::DEFAULT_PREFIX_BYTES;

// ---------------------------------------------------------------------------
// Fenced code
// ---------------------------------------------------------------------------

/// The fenced code blocks of a text.
pub(super) struct Fences {
    /// Byte ranges of fenced blocks (opening line to closing line).
    pub regions: Vec<Range<usize>>,
    /// Whether some fence holds a non-blank line.
    pub has_code: bool,
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

/// Finds the fenced blocks. With `complete == false` a last line that may
/// still grow does not count as code yet.
pub(super) fn scan_fences(text: &str, complete: bool) -> Fences {
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

/// One sentence of the opening window.
pub(super) struct Sentence {
    pub range: Range<usize>,
    /// The sentence may still grow (streaming, no terminator seen yet).
    pub pending: bool,
}

/// The largest char boundary at or below `i`.
pub(super) fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// `text[..len]`, cut back to a char boundary.
pub(super) fn head(text: &str, len: usize) -> &str {
    &text[..floor_char_boundary(text, len.min(text.len()))]
}

fn in_regions(regions: &[Range<usize>], i: usize) -> Option<usize> {
    regions.iter().find(|r| r.contains(&i)).map(|r| r.end)
}

/// Where sentences are looked for, and whether the text may still grow.
pub(super) struct Reader<'t> {
    pub text: &'t str,
    pub fences: &'t [Range<usize>],
    pub complete: bool,
}

impl Reader<'_> {
    /// Finds the next sentence starting at or after `pos`, ending before
    /// `limit`.
    pub(crate) fn next_sentence(&self, pos: usize, limit: usize) -> Option<Sentence> {
        let start = self.skip_decoration(pos, limit)?;
        let (text, bytes) = (self.text, self.text.as_bytes());
        let done = |end: usize| Sentence {
            range: start..end,
            pending: false,
        };
        let mut i = start;
        while i < limit {
            if in_regions(self.fences, i).is_some() || bytes[i] == b'\n' {
                return Some(done(i));
            }
            let c = bytes[i];
            if matches!(c, b'.' | b'!' | b'?') {
                let j = after_closers(text, i + 1);
                if j >= text.len() {
                    return Some(Sentence {
                        range: start..text.len(),
                        pending: !self.complete,
                    });
                }
                if bytes[j].is_ascii_whitespace()
                    && !(c == b'.' && is_abbreviation(&text[start..i]))
                {
                    return Some(done(j));
                }
            }
            i += 1;
        }
        // Reached the window limit (or the end of the text).
        let at_cap = limit >= floor_char_boundary(text, DEFAULT_PREFIX_BYTES.min(text.len()))
            && text.len() >= DEFAULT_PREFIX_BYTES;
        Some(Sentence {
            range: start..limit,
            pending: !(self.complete || at_cap),
        })
    }

    /// Skips whitespace, markdown decoration and fenced regions.
    fn skip_decoration(&self, mut pos: usize, limit: usize) -> Option<usize> {
        let bytes = self.text.as_bytes();
        loop {
            if pos >= limit {
                return None;
            }
            if let Some(end) = in_regions(self.fences, pos) {
                pos = end;
                continue;
            }
            let c = bytes[pos];
            if c.is_ascii_whitespace() || matches!(c, b'#' | b'>' | b'*' | b'_' | b'-' | b'|') {
                pos += 1;
                continue;
            }
            return Some(pos);
        }
    }
}

/// Skips closing quotes and brackets after a terminator.
fn after_closers(text: &str, mut j: usize) -> usize {
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
    j
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

/// End of the sentence running through `pos` (the cue sentence's rest may
/// be empty, in which case the next sentence is taken). A colon ends a
/// sentence here: what follows it is what the sentence announces.
pub(super) fn sentence_end_from(text: &str, pos: usize, limit: usize) -> Option<usize> {
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

// ---------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------

/// One word of a sentence.
#[derive(Clone, Copy)]
pub(super) struct Tok<'a> {
    /// Lower-cased word with apostrophes normalised to `'`.
    pub w: &'a str,
    /// Byte offset of the word in the text.
    pub start: usize,
    /// Byte offset just past the word.
    pub end: usize,
    /// Inside quotation marks.
    pub quoted: bool,
}

/// Where a word sits: in the text and in the lower-cased buffer.
struct Placed {
    word: Range<usize>,
    start: usize,
    end: usize,
    quoted: bool,
}

/// The words of a span of text, lower-cased into one buffer.
pub(super) struct Words {
    buf: String,
    placed: Vec<Placed>,
}

/// Tracks quotation marks while words are read.
#[derive(Default)]
struct Quotes {
    double: bool,
    single: bool,
}

impl Quotes {
    fn open(&self) -> bool {
        self.double || self.single
    }

    /// Updates the state on a non-word character `c` between `prev` and
    /// `next`.
    fn see(&mut self, c: char, prev: Option<char>, next: Option<char>) {
        match c {
            '"' => self.double = !self.double,
            '\u{201c}' => self.double = true,
            '\u{201d}' => self.double = false,
            '\'' | '\u{2018}' | '\u{2019}' => {
                let at_word_start = prev.map_or(true, |p| {
                    p.is_whitespace() || matches!(p, '(' | '[' | '"' | '\u{201c}' | '-')
                });
                if at_word_start
                    && matches!(c, '\'' | '\u{2018}')
                    && next.is_some_and(|n| n.is_alphanumeric())
                {
                    self.single = true;
                } else if self.single {
                    self.single = false;
                }
            }
            _ => {}
        }
    }
}

impl Words {
    /// Splits `text[range]` into lower-cased words.
    pub(crate) fn new(text: &str, range: Range<usize>) -> Words {
        let mut buf = String::with_capacity(range.len());
        let mut placed = Vec::new();
        let mut quotes = Quotes::default();
        let mut prev: Option<char> = None;
        let mut word_start: Option<(usize, usize)> = None; // (in text, in buf)
        let base = range.start;
        let mut chars = text[range.clone()].char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            let next = chars.peek().map(|&(_, n)| n);
            let is_apos = matches!(c, '\'' | '\u{2019}' | '\u{2018}');
            if c.is_alphanumeric()
                || (is_apos && word_start.is_some() && next.is_some_and(|n| n.is_alphabetic()))
            {
                word_start.get_or_insert((base + i, buf.len()));
                if is_apos {
                    buf.push('\'');
                } else {
                    buf.extend(c.to_lowercase());
                }
            } else {
                if let Some((ws, bs)) = word_start.take() {
                    placed.push(Placed {
                        word: bs..buf.len(),
                        start: ws,
                        end: base + i,
                        quoted: quotes.open(),
                    });
                }
                quotes.see(c, prev, next);
            }
            prev = Some(c);
        }
        if let Some((ws, bs)) = word_start {
            placed.push(Placed {
                word: bs..buf.len(),
                start: ws,
                end: range.end,
                quoted: quotes.open(),
            });
        }
        Words { buf, placed }
    }

    /// The words, borrowing the buffer.
    pub(crate) fn toks(&self) -> Vec<Tok<'_>> {
        self.placed
            .iter()
            .map(|p| Tok {
                w: &self.buf[p.word.clone()],
                start: p.start,
                end: p.end,
                quoted: p.quoted,
            })
            .collect()
    }
}

/// The word at `i`, or `""` past the end.
pub(super) fn w<'a>(toks: &[Tok<'a>], i: usize) -> &'a str {
    toks.get(i).map_or("", |t| t.w)
}

/// Whether `word` is in `set`.
pub(super) fn any(word: &str, set: &[&str]) -> bool {
    set.contains(&word)
}
