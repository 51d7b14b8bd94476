//! What a Claude model's id tells of the requests it takes: whether it
//! rejects an assistant prefill.

/// A Claude model id's family and version, read from what follows
/// `claude-`: `claude-opus-4-6`, its snapshot `claude-opus-4-6-20260205`,
/// Vertex AI's `claude-opus-4-6@20260205`, Bedrock's
/// `us.anthropic.claude-opus-4-6-v1:0`. Ids that put the version first
/// (`claude-3-5-sonnet-20241022`, every model before Claude 4) have no
/// family here.
struct ClaudeId<'a> {
    family: &'a str,
    /// `major.minor`; `None` for a family with no version (`claude-mythos-preview`).
    version: Option<(u32, u32)>,
}

impl<'a> ClaudeId<'a> {
    fn read(model: &'a str) -> Option<Self> {
        let at = model.rfind("claude-")? + "claude-".len();
        let name = model[at..].split(['@', ':']).next()?;
        let mut parts = name.split('-');
        let family = parts
            .next()
            .filter(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_lowercase()))?;
        // A version part is a number of one or two digits; a snapshot's
        // date (eight digits) or Bedrock's `v1` is none.
        let number = |part: Option<&str>| {
            part.filter(|p| (1..=2).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse().ok())
        };
        let version = number(parts.next()).map(|major| (major, number(parts.next()).unwrap_or(0)));
        Some(ClaudeId { family, version })
    }
}

/// Whether `model` answers a request that ends in an assistant turn with a
/// 400 ("This model does not support assistant message prefill. The
/// conversation must end with a user message."): every model of the Claude
/// 4.6 generation and later (platform docs "Migration guide": "Prefilling
/// assistant messages returns a 400 error on Claude 4.6 models"; "What's new
/// in Claude 4.6", Prefill removal), and Claude Fable and Mythos (Fable 5's
/// launch notes: assistant prefill is not supported). A fallback credit
/// token's appended-assistant form is the one prefill such a model takes.
/// An id this does not read (another provider's, an alias the guard does
/// not know) is taken to accept prefill: the request goes as the client
/// wrote it.
pub(crate) fn rejects_prefill(model: &str) -> bool {
    let Some(id) = ClaudeId::read(model) else {
        return false;
    };
    match id.family {
        "fable" | "mythos" => true,
        "opus" | "sonnet" | "haiku" => id.version.is_some_and(|version| version >= (4, 6)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claude_4_6_generation_and_later_reject_prefill() {
        for model in [
            "claude-opus-4-6",
            "claude-sonnet-4-6",
            "claude-opus-4-7",
            "claude-opus-4-8",
            "claude-opus-5",
            "claude-sonnet-5",
            "claude-opus-5-5",
            "claude-fable-5",
            "claude-fable-5-1",
            "claude-mythos-5",
            "claude-mythos-preview",
            "claude-opus-4-6-20260205",
            "claude-opus-4-6@20260205",
            "us.anthropic.claude-sonnet-4-6-v1:0",
            "anthropic.claude-opus-4-7",
        ] {
            assert!(rejects_prefill(model), "{model}");
        }
    }

    #[test]
    fn earlier_models_and_ids_it_cannot_read_take_prefill() {
        for model in [
            "claude-haiku-4-5",
            "claude-haiku-4-5-20251001",
            "claude-sonnet-4-5",
            "claude-opus-4-5-20251101",
            "claude-opus-4-1",
            "claude-sonnet-4-20250514",
            "claude-3-7-sonnet-latest",
            "claude-3-5-haiku-20241022",
            "us.anthropic.claude-sonnet-4-5-v1:0",
            "claude-x",
            "claude-fallback",
            "gpt-5",
            "",
        ] {
            assert!(!rejects_prefill(model), "{model}");
        }
    }
}
