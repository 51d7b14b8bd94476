//! What a Claude model's id tells: whether the model rejects an assistant
//! prefill, and whether two ids name the same model (a reroute is a
//! response that names another).

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

/// A Claude model id reduced to the model it names, and the snapshot date
/// it pins, if any. Platform docs "Model IDs and versioning": before the 4.6
/// generation an id carries a snapshot date (`claude-sonnet-4-5-20250929`),
/// Vertex AI separates it with `@` (`claude-haiku-4-5@20251001`), Bedrock
/// wraps it (`anthropic.claude-sonnet-4-5-20250929-v1:0`, with a region
/// prefix for an inference profile), and "on the Claude API, these models
/// also have shorter aliases (for example, `claude-sonnet-4-5`) that point
/// to the most recent dated snapshot for that minor version"; from 4.6 on
/// the dateless id is the model's one id. Older aliases end in `-latest`
/// (`claude-3-7-sonnet-latest`) or name a `.0` minor version
/// (`claude-opus-4-0`, answered as `claude-opus-4-20250514`). `None` for an
/// id this cannot compare: one with no `claude-` in it, or no version
/// number after it (a gateway's or a test's own name, `claude-default`).
fn snapshot_of(model: &str) -> Option<(String, Option<String>)> {
    let lower = model.to_ascii_lowercase();
    let at = lower.rfind("claude-")?;
    // Bedrock's `:0`, or its percent-encoding in an InvokeModel path.
    let name = lower[at..].split([':', '%']).next()?.replace('@', "-");
    let mut parts: Vec<&str> = name.split('-').collect();
    let mut date = None;
    let digits =
        |part: &str, len: usize| part.len() == len && part.bytes().all(|b| b.is_ascii_digit());
    while let Some(&last) = parts.last() {
        let bedrock_version =
            last.len() > 1 && last.starts_with('v') && digits(&last[1..], last.len() - 1);
        if digits(last, 8) {
            date = Some(last.to_owned());
        } else if !(last == "latest" || bedrock_version) {
            break;
        }
        parts.pop();
    }
    // `claude-opus-4-0`: the alias of Opus 4 (`claude-opus-4-20250514`).
    if parts.len() > 3 && parts.last() == Some(&"0") && digits(parts[parts.len() - 2], 1) {
        parts.pop();
    }
    let versioned = parts[1..]
        .iter()
        .any(|part| part.starts_with(|c: char| c.is_ascii_digit()));
    versioned.then(|| (parts.join("-"), date))
}

/// Whether a response that names `served` came from another Claude model
/// than `requested`: the same model under an alias, a dated snapshot or a
/// platform's spelling is none, nor is an id this cannot read (a deployment
/// name). Two different snapshot dates are two models.
pub(crate) fn another_claude(requested: &str, served: &str) -> bool {
    let (Some(asked), Some(answered)) = (snapshot_of(requested), snapshot_of(served)) else {
        return false;
    };
    let dates_differ = matches!((&asked.1, &answered.1), (Some(a), Some(b)) if a != b);
    asked.0 != answered.0 || dates_differ
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_snapshots_and_platform_spellings_are_the_same_model() {
        for (requested, served) in [
            ("claude-opus-4-7", "claude-opus-4-7"),
            ("claude-opus-4-7", "claude-opus-4-7-20260301"),
            ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"),
            ("claude-3-7-sonnet-latest", "claude-3-7-sonnet-20250219"),
            ("claude-opus-4-0", "claude-opus-4-20250514"),
            ("claude-haiku-4-5@20251001", "claude-haiku-4-5-20251001"),
            ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929"),
            ("anthropic.claude-opus-4-7", "claude-opus-4-7"),
            ("us.anthropic.claude-sonnet-4-5-20250929-v1%3A0", "claude-sonnet-4-5-20250929"),
            (
                "arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.anthropic.claude-opus-4-7",
                "claude-opus-4-7",
            ),
            ("Claude-Opus-4-7", "claude-opus-4-7"),
            // Ids this cannot read are never a reroute.
            ("my-foundry-deployment", "claude-sonnet-4-5-20250929"),
            ("claude-default", "claude-sonnet-4-5-20250929"),
            ("claude-opus-4-7", "claude-x"),
            ("claude-opus-4-7", ""),
        ] {
            assert!(!another_claude(requested, served), "{requested} -> {served}");
        }
    }

    #[test]
    fn another_family_version_or_snapshot_is_another_model() {
        for (requested, served) in [
            ("claude-opus-4-7", "claude-sonnet-4-5-20250929"),
            ("claude-opus-4-7", "claude-opus-4-6"),
            ("claude-opus-4-1", "claude-opus-4-20250514"),
            ("claude-sonnet-4-5", "claude-haiku-4-5-20251001"),
            ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet-20240620"),
        ] {
            assert!(another_claude(requested, served), "{requested} -> {served}");
        }
    }

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
