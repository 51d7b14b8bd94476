//! The part of a request body a conversation seed reads, cut out of it.
//!
//! A call keeps its request for as long as its response streams, because
//! the conversation's key may be asked for at the very end (a partial
//! refusal's record) and is computed only when asked (see `guard::request::conversation`).
//! Once the call is decided, nothing else needs the body; for an agent's
//! turn (hundreds of KB of history and tools) the key reads a few per cent
//! of it. [`seed_part`] cuts that part out as a small document of its own,
//! from which the seed is what it would have been from the whole body: the
//! members the seed reads kept as they were, its turns array kept up to and
//! with its first user turn, everything else left out.

use std::ops::Range;

use serde_json::Value;

use super::skim::{self, Located};

/// What of a request a dialect's
/// [`conversation_seed`](super::Dialect::conversation_seed) reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeedReach {
    /// Top-level members read whole (the system prompt).
    pub(crate) members: &'static [&'static str],
    /// The top-level array of turns, read up to its first user turn.
    pub(crate) turns: &'static str,
    /// Whether a turn whose `role` is this (`None`: no role, or not an
    /// object) is the first user turn.
    pub(crate) is_user: fn(Option<&str>) -> bool,
}

/// How far into the turns array a first search reaches before the rest is
/// joined: the first user turn is nearly always the first or second turn.
const FIRST_LOOK: usize = 64 * 1024;

/// The part of `chunks` (a request body whose top-level `members` were
/// located) that a seed of `reach` reads, as a JSON object of at most
/// `budget` bytes; `None` when it would be longer, or cannot be cut
/// exactly (the caller then keeps the whole body). What goes into the part
/// is measured before anything is copied.
pub(crate) fn seed_part<C: AsRef<[u8]>>(
    chunks: &[C],
    members: &[Located],
    reach: &SeedReach,
    budget: usize,
) -> Option<Vec<u8>> {
    let named = |member: &Located, name: &str| {
        member.name.len() == name.len()
            && &skim::cut(chunks, member.name.clone())[..] == name.as_bytes()
    };
    // Each kept member's name and value, and whether it is the turns array
    // (until the array is measured; then whether it is cut).
    let mut kept: Vec<(Range<usize>, Range<usize>, bool)> = Vec::new();
    // `{}`, and per member its quotes, colon and comma.
    let mut len = 2;
    for member in members {
        let turns = named(member, reach.turns);
        if !turns && !reach.members.iter().any(|name| named(member, name)) {
            continue;
        }
        kept.push((member.name.clone(), member.value.clone(), turns));
        // The turns array is measured once cut, below.
        len += member.name.len() + 4 + if turns { 0 } else { member.value.len() };
        if len > budget {
            return None;
        }
    }
    // A turns array cut after its first user turn gets its closing
    // bracket back.
    for (_, value, cut) in kept.iter_mut().filter(|(_, _, turns)| *turns) {
        let end = first_user_end(chunks, value.clone(), reach.is_user);
        *cut = end < value.end;
        len += end - value.start + usize::from(*cut);
        value.end = end;
    }
    if len > budget {
        return None;
    }
    let mut part = Vec::with_capacity(len);
    part.push(b'{');
    for (name, value, cut) in kept {
        if part.len() > 1 {
            part.push(b',');
        }
        part.push(b'"');
        part.extend_from_slice(&skim::cut(chunks, name));
        part.extend_from_slice(b"\":");
        part.extend_from_slice(&skim::cut(chunks, value));
        if cut {
            part.push(b']');
        }
    }
    part.push(b'}');
    Some(part)
}

/// Where the turns array at `value` may be cut: after its first user
/// turn (the closing bracket then written by the caller), or at its own
/// end when it is not an array or no turn is seen to be a user's.
fn first_user_end<C: AsRef<[u8]>>(
    chunks: &[C],
    value: Range<usize>,
    is_user: fn(Option<&str>) -> bool,
) -> usize {
    let mut look = FIRST_LOOK;
    loop {
        let end = value.end.min(value.start.saturating_add(look));
        let prefix = skim::cut(chunks, value.start..end);
        if prefix.first() != Some(&b'[') {
            return value.end;
        }
        match through_first_user(&prefix, is_user) {
            Some(through) => return value.start + through,
            None if end == value.end => return value.end,
            None => look = look.saturating_mul(4),
        }
    }
}

/// Where the first user turn of `array` (an array, or the start of one)
/// ends, if it is in `array`.
fn through_first_user(array: &[u8], is_user: fn(Option<&str>) -> bool) -> Option<usize> {
    let mut at = 1;
    loop {
        at = skip_space(array, at);
        if matches!(array.get(at), None | Some(b']')) {
            return None;
        }
        let end = skim::value_end(array, at)?;
        if is_user(role(&array[at..end])?) {
            return Some(end);
        }
        at = skip_space(array, end);
        if array.get(at) != Some(&b',') {
            return None;
        }
        at += 1;
    }
}

/// The `role` of a turn as the seed reads it: `Some(None)` when the turn
/// is no object or has no role, `None` when that cannot be told without a
/// full parse (an escape in a name or in the role), which ends the search.
fn role(turn: &[u8]) -> Option<Option<&str>> {
    if turn.first() != Some(&b'{') {
        return Some(None);
    }
    let members = skim::locate(&[turn])?;
    // serde_json keeps the last of repeated names.
    let Some(role) = members
        .iter()
        .rev()
        .find(|m| &turn[m.name.clone()] == b"role")
    else {
        return Some(None);
    };
    let text = turn[role.value.clone()]
        .strip_prefix(b"\"")?
        .strip_suffix(b"\"")?;
    if text.contains(&b'\\') {
        return None;
    }
    Some(Some(std::str::from_utf8(text).ok()?))
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        at += 1;
    }
    at
}

/// A conversation seed's bytes: `parts` as one JSON array, each object's
/// members in the order of their names, whatever order the body gave them
/// in. serde_json keeps a document's own order when a crate in the build
/// turns its `preserve_order` feature on (rig-core does); a key must not
/// depend on which crates an application links, or replicas built apart
/// would name one conversation twice. The bytes are serde_json's compact
/// output of the default build, so keys stay what they were.
pub(crate) fn seed_bytes(parts: &[&Value]) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(b'[');
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_sorted(part, &mut out);
    }
    out.push(b']');
    out
}

/// `value` as compact JSON, object members sorted by name.
fn write_sorted(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(members) => {
            let mut names: Vec<&String> = members.keys().collect();
            names.sort_unstable();
            out.push(b'{');
            for (i, name) in names.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // A name is a string: writing it into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, name.as_str());
                out.push(b':');
                write_sorted(&members[name.as_str()], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_sorted(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Writing a string, number, bool or null into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANTHROPIC: SeedReach = SeedReach {
        members: &["system"],
        turns: "messages",
        is_user: |role| role == Some("user"),
    };

    fn part(body: &str) -> Option<String> {
        let members = skim::locate(&[body.as_bytes()])?;
        let part = seed_part(&[body.as_bytes()], &members, &ANTHROPIC, usize::MAX)?;
        Some(String::from_utf8(part).unwrap())
    }

    #[test]
    fn the_part_is_the_seed_members_and_the_turns_through_the_first_users() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}],"system":"be brief","stream":true}"#;
        assert_eq!(
            part(body).unwrap(),
            r#"{"messages":[{"role":"user","content":"hi"}],"system":"be brief"}"#
        );
    }

    #[test]
    fn turns_before_the_first_user_turn_are_kept_and_an_escaped_role_ends_the_search() {
        let body = r#"{"messages": [ {"role":"assistant","content":"a"} , {"content":"b","role":"user"}, {"role":"user"} ]}"#;
        assert_eq!(
            part(body).unwrap(),
            r#"{"messages":[ {"role":"assistant","content":"a"} , {"content":"b","role":"user"}]}"#
        );
        let escaped = r#"{"messages":[{"role":"us\u0065r"},{"role":"user"}]}"#;
        assert_eq!(part(escaped).unwrap(), escaped, "kept whole");
        let none = r#"{"messages":[{"role":"assistant"}],"system":[{"type":"text","text":"s"}]}"#;
        assert_eq!(part(none).unwrap(), none, "no user turn: kept whole");
    }

    #[test]
    fn a_body_in_pieces_gives_the_same_part() {
        let body = r#"{"system":"s","messages":[{"role":"user","content":"x\"y\\"},{"role":"user"}],"max_tokens":9}"#;
        let whole = part(body).unwrap();
        for at in 1..body.len() {
            let pieces = [&body.as_bytes()[..at], &body.as_bytes()[at..]];
            let members = skim::locate(&pieces).unwrap();
            let cut = seed_part(&pieces, &members, &ANTHROPIC, usize::MAX).unwrap();
            assert_eq!(String::from_utf8(cut).unwrap(), whole, "cut at {at}");
        }
    }
}
