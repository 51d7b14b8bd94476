//! Lenient leaf types for reading a provider's JSON straight from its bytes
//! into typed structs: a value of another JSON type reads as absent, as the
//! `Value`-based helpers ([`str_field`](super::str_field),
//! [`count`](super::count)) treat it, so a typed read fails only where the
//! shape around the leaves is unexpected.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A string field, borrowed from the body's bytes when it holds no escape;
/// `None` for null or a value of another type (or a missing field, with
/// `#[serde(default)]`).
#[derive(Debug, Default)]
pub(crate) struct Str<'a>(pub(crate) Option<Cow<'a, str>>);

impl<'a> Str<'a> {
    pub(crate) fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }

    pub(crate) fn is(&self, value: &str) -> bool {
        self.as_deref() == Some(value)
    }

    pub(crate) fn owned(&self) -> Option<String> {
        self.as_deref().map(str::to_owned)
    }
}

/// A non-negative integer field, as [`Value::as_u64`](serde_json::Value::as_u64)
/// reads it: `None` for negative numbers, fractions and other types.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Count(pub(crate) Option<u64>);

/// Visits any JSON value; the function makes the result from a string or
/// an unsigned integer, everything else (nested values read to their end)
/// is `Default`.
struct Lenient<'de, T>(fn(Leaf<'de>) -> T);

enum Leaf<'de> {
    Str(Cow<'de, str>),
    Unsigned(u64),
    Bool(bool),
}

impl<'de, T: Default> Visitor<'de> for Lenient<'de, T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<T, E> {
        Ok((self.0)(Leaf::Str(Cow::Borrowed(v))))
    }

    fn visit_str<E>(self, v: &str) -> Result<T, E> {
        Ok((self.0)(Leaf::Str(Cow::Owned(v.to_owned()))))
    }

    fn visit_string<E>(self, v: String) -> Result<T, E> {
        Ok((self.0)(Leaf::Str(Cow::Owned(v))))
    }

    fn visit_u64<E>(self, v: u64) -> Result<T, E> {
        Ok((self.0)(Leaf::Unsigned(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<T, E> {
        // A non-negative integer is a count whatever its Rust type.
        Ok(u64::try_from(v).map_or_else(|_| T::default(), |v| (self.0)(Leaf::Unsigned(v))))
    }

    fn visit_f64<E>(self, _: f64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_bool<E>(self, v: bool) -> Result<T, E> {
        Ok((self.0)(Leaf::Bool(v)))
    }

    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_none<E>(self) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(T::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(T::default())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = d.deserialize_any(Lenient(|leaf| match leaf {
            Leaf::Str(text) => Some(text),
            Leaf::Unsigned(_) | Leaf::Bool(_) => None,
        }))?;
        Ok(Str(text))
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Lenient(|leaf| match leaf {
            Leaf::Unsigned(v) => Count(Some(v)),
            Leaf::Str(_) | Leaf::Bool(_) => Count(None),
        }))
    }
}

/// A boolean field, as [`Value::as_bool`](serde_json::Value::as_bool)
/// reads it: `None` for null, a missing field or another type.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Flag(pub(crate) Option<bool>);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Lenient(|leaf| match leaf {
            Leaf::Bool(v) => Flag(Some(v)),
            Leaf::Str(_) | Leaf::Unsigned(_) => Flag(None),
        }))
    }
}

/// A JSON object read as `T`. A derived struct would also take a list, its
/// fields by position, which the `Value` helpers never do; this takes
/// objects only.
#[derive(Debug)]
pub(crate) struct Obj<T>(pub(crate) T);

struct ObjVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjVisitor<T> {
    type Value = Obj<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjVisitor(PhantomData))
    }
}

/// A long text field (an answer's text), read without serde_json's
/// strict string scan, which checks every byte for a control character
/// and the whole string for UTF-8: [`typed`] checks the whole body for
/// both once, up front, so the scan here only looks for the closing quote
/// and escapes. Only [`typed`] may read it.
#[derive(Debug, Default)]
pub(crate) enum RawText<'a> {
    #[default]
    Absent,
    /// The text as it stands in the body (no escape in it): UTF-8, as the
    /// whole body was checked to be.
    InBody(&'a [u8]),
    /// The text with its escapes decoded.
    Decoded(String),
}

impl RawText<'_> {
    /// Whether the text has anything but whitespace in it, as
    /// [`is_real_text`](super::is_real_text) tells, without decoding the
    /// text unless its first non-blank byte is not ASCII.
    pub(crate) fn is_real(&self) -> bool {
        match self {
            RawText::Absent => false,
            RawText::Decoded(text) => super::is_real_text(text),
            RawText::InBody(bytes) => {
                // ASCII whitespace as `char::is_whitespace` has it (with
                // vertical tab); anything else ASCII is real.
                let blank = |b: &u8| matches!(b, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ');
                match bytes.iter().find(|b| !blank(b)) {
                    None => false,
                    Some(b) if b.is_ascii() => true,
                    Some(_) => std::str::from_utf8(bytes).is_ok_and(super::is_real_text),
                }
            }
        }
    }

    /// The text, if the field was a string.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            RawText::Absent => None,
            RawText::InBody(bytes) => std::str::from_utf8(bytes).ok(),
            RawText::Decoded(text) => Some(text),
        }
    }
}

struct RawTextVisitor;

impl<'de> Visitor<'de> for RawTextVisitor {
    type Value = RawText<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_bytes<E>(self, bytes: &'de [u8]) -> Result<RawText<'de>, E> {
        Ok(RawText::InBody(bytes))
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<RawText<'de>, E> {
        // Read as bytes, a lone surrogate escape decodes to bytes that are
        // not UTF-8, where a strict read fails: fail as it does.
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(RawText::Decoded(text.to_owned())),
            Err(_) => Err(E::custom("lone surrogate in a string")),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawText<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A string read as bytes is not scanned for control characters nor
        // checked for UTF-8; a value of another type fails the typed read.
        d.deserialize_bytes(RawTextVisitor)
    }
}

/// Reads `bytes` as the object `T`, or `None` where they do not fit it (or
/// are not JSON): the caller then reads them as a whole `Value`.
///
/// A strict read fails on a string with a control character in it or
/// with bytes that are not UTF-8. [`RawText`] skips those checks, so they
/// are made here on the whole body at once (one pass when it is ASCII, as
/// most bodies are); a body with any control character at all (pretty
/// printed JSON has line ends between its values) is read as a `Value`.
pub(crate) fn typed<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    if !printable(bytes) {
        return None;
    }
    serde_json::from_slice::<Obj<T>>(bytes)
        .ok()
        .map(|obj| obj.0)
}

/// UTF-8 without control characters (bytes below 0x20).
fn printable(bytes: &[u8]) -> bool {
    // Whole blocks without an early exit, so that the compiler can use
    // vector instructions.
    let outside = |block: &[u8], low: u8, high: u8| {
        block
            .iter()
            .fold(false, |found, &b| found | !(low..=high).contains(&b))
    };
    let ascii = bytes.chunks(256).all(|block| !outside(block, 0x20, 0x7F));
    if ascii {
        return true;
    }
    std::str::from_utf8(bytes).is_ok() && bytes.chunks(256).all(|block| !outside(block, 0x20, 0xFF))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Leaves<'a> {
        #[serde(default, borrow)]
        s: Str<'a>,
        #[serde(default)]
        n: Count,
        #[serde(default)]
        b: Flag,
    }

    #[test]
    fn a_flag_is_a_boolean_or_absent() {
        let flag = |json: &str| typed::<Leaves<'_>>(json.as_bytes()).unwrap().b.0;
        assert_eq!(flag(r#"{"b":true}"#), Some(true));
        assert_eq!(flag(r#"{"b":false,"s":true,"n":false}"#), Some(false));
        assert_eq!(flag(r#"{"b":null}"#), None);
        assert_eq!(flag(r#"{"b":"true"}"#), None);
        assert_eq!(flag(r#"{"b":1}"#), None);
        assert_eq!(flag(r#"{}"#), None);
    }

    fn leaves(json: &str) -> (Option<String>, Option<u64>) {
        let read: Leaves<'_> = typed(json.as_bytes()).unwrap();
        (read.s.owned(), read.n.0)
    }

    #[test]
    fn leaves_of_another_type_read_as_absent() {
        assert_eq!(leaves(r#"{"s":"x","n":3}"#), (Some("x".into()), Some(3)));
        assert_eq!(leaves(r#"{"s":"a\nb"}"#), (Some("a\nb".into()), None));
        assert_eq!(leaves(r#"{"s":null,"n":null}"#), (None, None));
        assert_eq!(leaves(r#"{"s":1,"n":"3"}"#), (None, None));
        assert_eq!(leaves(r#"{"s":{"a":[1]},"n":[1,{}]}"#), (None, None));
        assert_eq!(leaves(r#"{"s":true,"n":-1}"#), (None, None));
        assert_eq!(leaves(r#"{"n":1.5}"#), (None, None));
        assert_eq!(leaves(r#"{}"#), (None, None));
    }

    #[derive(serde::Deserialize)]
    struct Answer<'a> {
        #[serde(default, borrow)]
        text: RawText<'a>,
    }

    fn answer(json: &str) -> Option<(bool, Option<String>)> {
        let read: Answer<'_> = typed(json.as_bytes())?;
        Some((read.text.is_real(), read.text.text().map(str::to_owned)))
    }

    #[test]
    fn a_raw_text_is_read_as_strictly_as_a_string() {
        assert_eq!(answer(r#"{"text":"Hi"}"#), Some((true, Some("Hi".into()))));
        assert_eq!(
            answer(r#"{"text":" \n\t"}"#),
            Some((false, Some(" \n\t".into())))
        );
        assert_eq!(
            answer("{\"text\":\" \u{3000}\"}"),
            Some((false, Some(" \u{3000}".into())))
        );
        assert_eq!(
            answer("{\"text\":\" \u{e9}\"}"),
            Some((true, Some(" \u{e9}".into())))
        );
        assert_eq!(
            answer(r#"{"text":"\u00e9\ud83d\ude00"}"#),
            Some((true, Some("\u{e9}\u{1F600}".into())))
        );
        assert_eq!(answer(r#"{}"#), Some((false, None)));
        // Where serde_json's strict read fails, this fails too.
        for broken in [
            r#"{"text":"\ud800"}"#,
            r#"{"text":"\udc00x"}"#,
            "{\"text\":\"a\u{1}\"}",
            "{\"text\":\"a\nb\"}",
            r#"{"text":3}"#,
            r#"{"text":[104]}"#,
            r#"{"text":null}"#,
        ] {
            assert_eq!(answer(broken), None, "{broken:?}");
        }
        let not_utf8: &[u8] = b"{\"text\":\"\xFF\"}";
        assert!(typed::<Answer<'_>>(not_utf8).is_none());
    }

    #[test]
    fn only_objects_are_read_as_structs() {
        assert!(typed::<Leaves<'_>>(br#"["x", 3]"#).is_none());
        assert!(typed::<Leaves<'_>>(br#" {"s":"x"} "#).is_some());
        let nested: Option<Obj<Leaves<'_>>> = serde_json::from_str(r#"["x", 3]"#).ok();
        assert!(nested.is_none());
        let null: Option<Option<Obj<Leaves<'_>>>> = serde_json::from_str("null").ok();
        assert!(matches!(null, Some(None)));
    }

    #[test]
    fn an_unescaped_string_is_borrowed() {
        let read: Leaves<'_> = typed(br#"{"s":"plain"}"#).unwrap();
        assert!(matches!(read.s.0, Some(Cow::Borrowed("plain"))));
    }
}
