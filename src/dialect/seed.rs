//! What of a request body names its conversation, kept on its own.
//!
//! The default conversation key is computed only when asked for (a rescue,
//! a sticky route, a record), and a record may be asked for at the end of
//! a stream that lasted minutes. Keeping the whole body that long for it
//! would keep the whole conversation (hundreds of KB on an agent's turn)
//! per open stream; the key reads only the system prompt and the turns up
//! to the first user turn ([`SeedSource`]). Those members' bytes, cut out
//! by the locating skim and written as a small JSON object of their own,
//! give [`Dialect::conversation_seed`](super::Dialect::conversation_seed)
//! the same seed as the whole body does.

use serde_json::Value;

use super::skim;

/// Where a wire API's conversation seed is read from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeedSource {
    /// Members read whole: the system prompt, a named conversation.
    pub(crate) whole: &'static [&'static str],
    /// The member holding the turns, read up to the first user turn.
    pub(crate) turns: &'static str,
    /// Whether a turn without a role, or with an empty one, is a user turn
    /// (Gemini's `contents`).
    pub(crate) roleless_is_user: bool,
}

/// The members of `body` that `source` names, the turns up to the first
/// user turn, as a JSON object of their own; `None` when the skim cannot
/// tell them apart for sure (the whole body is then kept).
pub(crate) fn seed_part(source: &SeedSource, body: &[u8]) -> Option<Vec<u8>> {
    let members = skim::locate(body)?;
    let mut part = Vec::with_capacity(256);
    part.push(b'{');
    for (name, value) in members {
        let value = if source.whole.contains(&name) {
            value
        } else if name == source.turns {
            first_turns(source, value)?
        } else {
            continue;
        };
        if part.len() > 1 {
            part.push(b',');
        }
        part.push(b'"');
        part.extend_from_slice(name.as_bytes());
        part.extend_from_slice(b"\":");
        part.extend_from_slice(value);
        if name == source.turns && value.first() == Some(&b'[') {
            part.push(b']');
        }
    }
    part.push(b'}');
    Some(part)
}

/// The turns up to and including the first user turn, without the array's
/// closing bracket (all of them if none is); a value that is not an array
/// (a Responses `input` string), whole.
fn first_turns<'a>(source: &SeedSource, turns: &'a [u8]) -> Option<&'a [u8]> {
    if turns.first() != Some(&b'[') {
        return Some(turns);
    }
    let start = turns.as_ptr() as usize;
    let mut end = 1;
    for item in skim::items(turns)? {
        let item = item?;
        end = item.as_ptr() as usize - start + item.len();
        if is_user_turn(source, item)? {
            break;
        }
    }
    Some(&turns[..end])
}

/// Whether `turn` is a user turn as the seed reads it; `None` when the skim
/// cannot tell.
fn is_user_turn(source: &SeedSource, turn: &[u8]) -> Option<bool> {
    if turn.first() != Some(&b'{') {
        // Not an object: it has no role.
        return Some(source.roleless_is_user);
    }
    let members = skim::locate(turn)?;
    let Some((_, role)) = members.iter().rev().find(|(name, _)| *name == "role") else {
        return Some(source.roleless_is_user);
    };
    let role = match serde_json::from_slice::<Value>(role).ok()? {
        Value::String(role) => role,
        _ => return Some(source.roleless_is_user),
    };
    Some(role == "user" || (source.roleless_is_user && role.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::{self, Dialect};

    fn seeds_agree(dialect: &dyn Dialect, body: &[u8]) {
        let whole: Value = serde_json::from_slice(body).unwrap();
        let part = seed_part(&dialect.seed_source(), body).expect("the skim cuts it");
        let part: Value = serde_json::from_slice(&part).unwrap();
        assert_eq!(
            dialect.conversation_seed(&part),
            dialect.conversation_seed(&whole),
            "{}",
            String::from_utf8_lossy(body)
        );
    }

    #[test]
    fn the_part_kept_seeds_the_key_the_whole_body_does_in_every_wire_api() {
        let anthropic = br#"{"model":"m","system":[{"type":"text","text":"Be \"brief\".\n"}],"tools":[{"name":"t"}],
            "messages":[{"role":"assistant","content":"x"},{"role":"us\u0065r","content":[{"type":"text","text":"a]b"}]},{"role":"user","content":"later"}],"stream":true,"system":"last wins"}"#;
        seeds_agree(&dialect::anthropic::AnthropicMessages, anthropic);
        let chat = br#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},{"role":"user","content":"u"},{"role":"assistant","content":"a"}]}"#;
        seeds_agree(&dialect::openai_chat::OpenAiChat, chat);
        let gemini = br#"{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[{"role":"model","parts":[]},{"parts":[{"text":"u"}]},{"role":"user","parts":[]}]}"#;
        seeds_agree(&dialect::gemini::GeminiGenerateContent, gemini);
        let gemini_empty_role =
            br#"{"contents":[{"role":"","parts":[{"text":"u"}]}],"system_instruction":"s"}"#;
        seeds_agree(&dialect::gemini::GeminiGenerateContent, gemini_empty_role);
        for responses in [
            &br#"{"instructions":"i","input":"just text","model":"m"}"#[..],
            br#"{"instructions":"i","input":[{"role":"developer","content":"d"},{"role":"user","content":"u"},{"role":"user","content":"v"}]}"#,
            br#"{"conversation":{"id":"conv_1"},"input":"x"}"#,
        ] {
            seeds_agree(&dialect::openai_responses::OpenAiResponses, responses);
        }
    }

    #[test]
    fn the_part_kept_leaves_out_the_rest_of_the_conversation() {
        let later = "x".repeat(10_000);
        let body = format!(
            r#"{{"model":"m","system":"s","tools":[{{"name":"{later}"}}],"messages":[{{"role":"user","content":"u"}},{{"role":"assistant","content":"{later}"}}]}}"#
        );
        let part = seed_part(
            &dialect::anthropic::AnthropicMessages.seed_source(),
            body.as_bytes(),
        )
        .unwrap();
        assert_eq!(
            part,
            br#"{"system":"s","messages":[{"role":"user","content":"u"}]}"#
        );
    }

    #[test]
    fn a_body_the_skim_cannot_cut_keeps_no_part() {
        let source = dialect::anthropic::AnthropicMessages.seed_source();
        for body in [
            &br#"{"mess\u0061ges":[]}"#[..],
            b"[1]",
            br#"{"messages":[{"r\u006fle":"user"}]}"#,
        ] {
            assert_eq!(
                seed_part(&source, body),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
