//! A checking skim of a JSON object's top level: where each member's value
//! lies, the whole document checked on the way, nothing built; and a
//! locating one ([`locate`]) for a body the provider has already been sent,
//! which only finds where the members lie.
//!
//! The request head (`head.rs`) needs a few small members of bodies that
//! are mostly conversation text. serde_json checks text at about three
//! instructions a byte, looking at every byte for a quote, a backslash or a
//! control character; the skim crosses strings with memchr's vector search
//! for the quote and the backslash, and checks control characters and the
//! document's UTF-8 in passes over the whole body that the compiler
//! vectorises.
//!
//! The skim answers only when it is sure the body is a JSON object. What it
//! does not handle (an escape in a member's name, nesting deeper than
//! [`DEPTH`]) and every malformed body make it answer `None`, and the
//! caller asks serde_json, which then decides: a body the skim accepts is
//! one serde_json accepts, with the same members (the tests hold the two to
//! that on every single-byte change of a set of documents).

use std::borrow::Cow;
use std::ops::Range;

/// The deepest nesting the skim follows (serde_json's own limit is 128).
const DEPTH: usize = 100;

/// The members of the JSON object `body` in document order, each as its
/// name and its value's bytes, when the skim is sure `body` is a JSON
/// object (whitespace around it allowed); `None` otherwise.
pub(crate) fn members(body: &[u8]) -> Option<Vec<(&str, &[u8])>> {
    if !body.is_ascii() {
        std::str::from_utf8(body).ok()?;
    }
    let mut skim = Skim {
        bytes: body,
        at: 0,
        spaces: 0,
    };
    let mut members = Vec::new();
    skim.space();
    if skim.bytes.get(skim.at) != Some(&b'{') {
        return None;
    }
    skim.items(b'}', |skim| {
        let member = skim.member(DEPTH)?;
        // An escaped name is decoded by serde_json; the skim leaves it.
        if member.escaped {
            return None;
        }
        let name = std::str::from_utf8(&body[member.name]).ok()?;
        members.push((name, &body[member.value]));
        Some(())
    })?;
    skim.space();
    // A control character is whitespace between tokens or an error in a
    // string: all of them, counted in one pass rather than looked for in
    // the text of each string, must be the whitespace passed over.
    (skim.at == body.len() && controls(body) == skim.spaces).then_some(members)
}

/// Where a member of a located object lies in the joined bytes.
#[derive(Debug, PartialEq)]
pub(crate) struct Located {
    /// The name's text, between its quotes.
    pub(crate) name: Range<usize>,
    pub(crate) value: Range<usize>,
}

/// The members of the JSON object whose bytes are `chunks` joined, in
/// document order, as [`members`] finds them in a valid document, without
/// checking the document: for a body already forwarded, which the provider
/// judges (a recovery parses the whole body before it builds anything from
/// it). The body is read in the pieces it arrived in, so that it need not
/// be copied into one buffer to be read.
///
/// Strings are crossed by a search for their closing quote alone, a quote
/// after an odd run of backslashes being part of the text, so the escapes
/// of conversation text (a `\n` every line) cost no stop of their own;
/// brackets are counted, not matched. An escaped name, or bytes that do
/// not have an object's shape, give `None`, for [`members`] and serde_json
/// to decide.
pub(crate) fn locate<C: AsRef<[u8]>>(chunks: &[C]) -> Option<Vec<Located>> {
    let mut locator = Locator {
        place: Place::Start,
        offset: 0,
        name: 0..0,
        value: 0,
        depth: 0,
        odd: false,
        members: Vec::new(),
    };
    for chunk in chunks {
        let chunk = chunk.as_ref();
        let mut at = 0;
        while at < chunk.len() && !matches!(locator.place, Place::Done) {
            at = locator.step(chunk, at)?;
        }
        locator.offset += chunk.len();
    }
    matches!(locator.place, Place::Done).then_some(locator.members)
}

/// The bytes of `range` in `chunks` joined: borrowed when one chunk holds
/// them all.
pub(crate) fn cut<C: AsRef<[u8]>>(chunks: &[C], range: Range<usize>) -> Cow<'_, [u8]> {
    let mut start = 0;
    let mut pieces = chunks.iter().map(AsRef::as_ref).filter_map(|chunk| {
        let (from, to) = (start, start + chunk.len());
        start = to;
        let piece = &chunk[range.start.clamp(from, to) - from..range.end.clamp(from, to) - from];
        (!piece.is_empty()).then_some(piece)
    });
    match (pieces.next(), pieces.next()) {
        (None, _) => Cow::Borrowed(&[]),
        (Some(only), None) => Cow::Borrowed(only),
        (Some(first), Some(second)) => {
            let mut joined = [first, second].concat();
            pieces.for_each(|piece| joined.extend_from_slice(piece));
            Cow::Owned(joined)
        }
    }
}

/// Where the locating skim is in the object's grammar.
#[derive(Clone, Copy)]
enum Place {
    /// Before the opening brace.
    Start,
    /// After the opening brace: a name, or the closing brace.
    First,
    /// After a comma: a name.
    Name,
    /// In a name's text.
    InName,
    /// After a name: its colon.
    Colon,
    /// After a colon: a value.
    Value,
    /// In a string value's text.
    InString,
    /// In an object or array value, outside its strings.
    InNested,
    /// In a string within an object or array value.
    InNestedString,
    /// In a number, `true`, `false` or `null`.
    InScalar,
    /// After a value: a comma, or the closing brace.
    Next,
    /// After the closing brace; what follows is not read.
    Done,
}

/// The locating skim's state between chunks: all it must carry across a
/// chunk's end.
struct Locator {
    place: Place,
    /// Where the chunk being read begins in the joined bytes.
    offset: usize,
    /// The name of the member being read.
    name: Range<usize>,
    /// Where the value being read begins.
    value: usize,
    /// How deep in brackets, in an object or array value.
    depth: usize,
    /// In a string: whether the text read so far ends in an odd run of
    /// backslashes, which escapes a quote that comes next.
    odd: bool,
    members: Vec<Located>,
}

impl Locator {
    /// Reads `chunk` from `at` on, as far as one step of the grammar goes:
    /// where it stopped, or `None` for bytes without an object's shape.
    fn step(&mut self, chunk: &[u8], at: usize) -> Option<usize> {
        let byte = chunk[at];
        let here = self.offset + at;
        let next = at + 1;
        match self.place {
            Place::InName => return self.name_text(chunk, at),
            Place::InString | Place::InNestedString => return Some(self.string_text(chunk, at)),
            Place::InNested => return Some(self.nested(chunk, at)),
            Place::InScalar => return Some(self.scalar(chunk, at)),
            _ if matches!(byte, b' ' | b'\n' | b'\r' | b'\t') => {}
            Place::Start if byte == b'{' => self.place = Place::First,
            Place::First if byte == b'}' => self.place = Place::Done,
            Place::First | Place::Name if byte == b'"' => {
                self.name = here + 1..here + 1;
                self.place = Place::InName;
            }
            Place::Colon if byte == b':' => self.place = Place::Value,
            Place::Value => {
                self.value = here;
                self.odd = false;
                self.place = match byte {
                    b'"' => Place::InString,
                    b'{' | b'[' => {
                        self.depth = 1;
                        Place::InNested
                    }
                    b',' | b'}' | b']' => return None,
                    _ => Place::InScalar,
                };
            }
            Place::Next if byte == b',' => self.place = Place::Name,
            Place::Next if byte == b'}' => self.place = Place::Done,
            _ => return None,
        }
        Some(next)
    }

    /// A name's text up to its closing quote; an escape in it gives up.
    fn name_text(&mut self, chunk: &[u8], at: usize) -> Option<usize> {
        let Some(off) = memchr::memchr2(b'"', b'\\', &chunk[at..]) else {
            return Some(chunk.len());
        };
        if chunk[at + off] == b'\\' {
            return None;
        }
        self.name.end = self.offset + at + off;
        self.place = Place::Colon;
        Some(at + off + 1)
    }

    /// A string's text up to its closing quote, or to the chunk's end.
    fn string_text(&mut self, chunk: &[u8], at: usize) -> usize {
        let Some(quote) = closing_quote(&chunk[at..], &mut self.odd) else {
            return chunk.len();
        };
        let after = at + quote + 1;
        if matches!(self.place, Place::InString) {
            self.end_value(self.offset + after);
        } else {
            self.place = Place::InNested;
        }
        after
    }

    /// An object or array value outside its strings: brackets counted to
    /// the one that closes it.
    fn nested(&mut self, chunk: &[u8], at: usize) -> usize {
        for (i, &byte) in chunk.iter().enumerate().skip(at) {
            match byte {
                b'"' => {
                    self.odd = false;
                    self.place = Place::InNestedString;
                    return i + 1;
                }
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        self.end_value(self.offset + i + 1);
                        return i + 1;
                    }
                }
                _ => {}
            }
        }
        chunk.len()
    }

    /// A scalar up to the comma, bracket or whitespace after it.
    fn scalar(&mut self, chunk: &[u8], at: usize) -> usize {
        let ends = |b: &u8| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t');
        match chunk[at..].iter().position(ends) {
            Some(len) => {
                self.end_value(self.offset + at + len);
                at + len
            }
            None => chunk.len(),
        }
    }

    fn end_value(&mut self, end: usize) {
        self.members.push(Located {
            name: self.name.clone(),
            value: self.value..end,
        });
        self.place = Place::Next;
    }
}

/// Where the JSON value that starts at `at` in `bytes` ends, found as
/// [`locate`] finds a member's value (strings crossed by their closing
/// quote, brackets counted, nothing else checked); `None` when `bytes` ends
/// first.
pub(crate) fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' => closing_quote(&bytes[at + 1..], &mut false).map(|quote| at + quote + 2),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while let Some(&byte) = bytes.get(i) {
                match byte {
                    b'"' => i += closing_quote(&bytes[i + 1..], &mut false)? + 1,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let ends = |b: &u8| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t');
            bytes[at..].iter().position(ends).map(|len| at + len)
        }
    }
}

/// Where in `text`, a string's text after `odd` (whether what came before
/// it ends in an odd run of backslashes), the string's closing quote lies:
/// the first quote not after an odd run of backslashes. `None` when the
/// string runs past `text`, `odd` then told for the text after it.
fn closing_quote(text: &[u8], odd: &mut bool) -> Option<usize> {
    let mut from = 0;
    loop {
        let Some(off) = memchr::memchr(b'"', &text[from..]) else {
            *odd = ends_odd(text, *odd);
            return None;
        };
        let quote = from + off;
        if !ends_odd(&text[..quote], *odd) {
            *odd = false;
            return Some(quote);
        }
        from = quote + 1;
    }
}

/// Whether `text`, after text that ends in an odd run of backslashes
/// (`odd`), ends in one.
fn ends_odd(text: &[u8], odd: bool) -> bool {
    let run = text.iter().rev().take_while(|&&b| b == b'\\').count();
    (run % 2 == 1) != (run == text.len() && odd)
}

/// How many control characters (below U+0020) `bytes` holds. Counted in
/// blocks small enough for a one-byte count, which the compiler turns into
/// a count of many bytes per instruction.
fn controls(bytes: &[u8]) -> usize {
    bytes
        .chunks(255)
        .map(|block| block.iter().fold(0u8, |n, &byte| n + u8::from(byte < 0x20)))
        .map(usize::from)
        .sum()
}

/// A position in the bytes being skimmed.
struct Skim<'a> {
    bytes: &'a [u8],
    at: usize,
    /// How many control characters (LF, CR, tab) passed as whitespace.
    spaces: usize,
}

/// Where an object's member lies in the bytes.
struct Member {
    /// The name's text, between its quotes.
    name: Range<usize>,
    /// Whether the name holds an escape.
    escaped: bool,
    value: Range<usize>,
}

impl Skim<'_> {
    /// Passes over JSON whitespace.
    fn space(&mut self) {
        while let Some(&byte @ (b' ' | b'\n' | b'\r' | b'\t')) = self.bytes.get(self.at) {
            self.spaces += usize::from(byte != b' ');
            self.at += 1;
        }
    }

    /// Passes over `byte` if it comes next.
    fn eat(&mut self, byte: u8) -> bool {
        let next = self.bytes.get(self.at) == Some(&byte);
        self.at += usize::from(next);
        next
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    /// Passes over one value, nested at most `depth` deep.
    fn value(&mut self, depth: usize) -> Option<()> {
        match *self.bytes.get(self.at)? {
            b'"' => self.string().map(drop),
            b'{' => self.object(depth.checked_sub(1)?),
            b'[' => self.array(depth.checked_sub(1)?),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        self.items(b'}', |skim| skim.member(depth).map(drop))
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.items(b']', |skim| skim.value(depth))
    }

    /// Passes over an object or an array from its opening byte to `close`,
    /// each of its comma-separated items read by `item`.
    fn items(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.at += 1;
        self.space();
        if self.eat(close) {
            return Some(());
        }
        loop {
            self.space();
            item(self)?;
            self.space();
            if !self.eat(b',') {
                return self.expect(close);
            }
        }
    }

    /// Passes over an object's member, its value nested at most `depth`
    /// deep.
    fn member(&mut self, depth: usize) -> Option<Member> {
        if self.bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        let start = self.at;
        let escaped = self.string()?;
        let name = start + 1..self.at - 1;
        self.space();
        self.expect(b':')?;
        self.space();
        let start = self.at;
        self.value(depth)?;
        Some(Member {
            name,
            escaped,
            value: start..self.at,
        })
    }

    /// Passes over a string; `true` if it holds an escape.
    fn string(&mut self) -> Option<bool> {
        self.at += 1;
        let mut escaped = false;
        loop {
            let rest = &self.bytes[self.at..];
            let off = memchr::memchr2(b'"', b'\\', rest)?;
            self.at += off + 1;
            if rest[off] == b'"' {
                return Some(escaped);
            }
            self.escape()?;
            escaped = true;
        }
    }

    /// Passes over what follows a backslash in a string.
    fn escape(&mut self) -> Option<()> {
        let len = match *self.bytes.get(self.at)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 1,
            b'u' => {
                let hex = self.bytes.get(self.at + 1..self.at + 5)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                5
            }
            _ => return None,
        };
        self.at += len;
        Some(())
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        let found = self.bytes.get(self.at..self.at + word.len())? == word;
        self.at += word.len();
        found.then_some(())
    }

    /// `-`? (`0` | [1-9][0-9]*) (`.` [0-9]+)? ([eE] [+-]? [0-9]+)?
    fn number(&mut self) -> Option<()> {
        self.eat(b'-');
        match *self.bytes.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.') {
            self.some_digits()?;
        }
        if self.eat(b'e') || self.eat(b'E') {
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
    }

    /// At least one digit.
    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_cut_into_its_members() {
        let body = br#" { "model" : "m", "n":-1.5e+3, "messages":[{"content":"a\"b\u00e9 \n"}],
            "stream" :true,"x":null ,"y":false, "z":{"a":[[],{}]} } "#;
        let members = members(body).unwrap();
        let names: Vec<&str> = members.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["model", "n", "messages", "stream", "x", "y", "z"]);
        assert_eq!(members[1].1, b"-1.5e+3");
        assert_eq!(members[2].1, br#"[{"content":"a\"b\u00e9 \n"}]"#);
        assert_eq!(members[6].1, br#"{"a":[[],{}]}"#);
        assert_eq!(super::members(b"{}"), Some(vec![]));
    }

    #[test]
    fn every_control_character_is_counted_however_many() {
        let mut body = vec![b'\n'; 1000];
        body.extend_from_slice(b"\x00\x1f \x7f");
        assert_eq!(controls(&body), 1002);
        let spaced = format!("{{{}\"a\":\"b\"}}", "\n".repeat(600));
        assert!(members(spaced.as_bytes()).is_some());
        let broken = format!("{{{}\"a\":\"b\tc\"}}", "\n".repeat(600));
        assert_eq!(members(broken.as_bytes()), None);
    }

    #[test]
    fn the_skim_is_unsure_of_what_it_leaves_to_serde_json() {
        let deep = format!(
            "{{\"a\":{}{}}}",
            "[".repeat(DEPTH + 1),
            "]".repeat(DEPTH + 1)
        );
        for body in [
            &br#"{"mo\u0064el":"m"}"#[..],
            deep.as_bytes(),
            b"[1]",
            b"{\"a\":\"\x01\"}",
            b"{\"a\":\"\xff\"}",
            b"{\"a\":01}",
            b"{\"a\":1.}",
            b"{\"a\":tru}",
            b"{\"a\":1,}",
            b"{\"a\":\"\\x\"}",
            b"{\"a\":\"\\u12g4\"}",
            b"{\"a\":1} x",
        ] {
            assert_eq!(members(body), None, "{}", String::from_utf8_lossy(body));
        }
    }
}
