//! Whether a response's `modelVersion` names the model the request's path
//! asked for: what tells a reroute from an alias.
//!
//! `modelVersion` is "the model version used to generate the response"
//! (API reference, `GenerateContentResponse`). The Gemini API's model
//! version name patterns (Models docs, "Model version name patterns"):
//! latest stable `gemini-2.0-flash` (an alias of its newest stable
//! version), stable `gemini-2.0-flash-001` (a three-digit version, as on
//! Vertex AI, "Model versions and lifecycle": "the three-digit number
//! that's appended to the model name"), preview
//! `gemini-2.5-flash-preview-09-2025`, experimental
//! `gemini-2.0-pro-exp-02-05`, and latest `gemini-1.5-flash-latest` or
//! `gemini-flash-latest` (an alias that may point at any version of its
//! tier). A name may come with the resource's `models/` prefix, or Vertex
//! AI's `publishers/google/models/`.

/// A name's parts: lower case, the resource prefix off, split at `-`.
fn parts_of(model: &str) -> Vec<String> {
    let lower = model.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or_default();
    name.split('-').map(str::to_owned).collect()
}

/// Whether `part` is all digits, `len` of them.
fn digits(part: &str, len: usize) -> bool {
    part.len() == len && part.bytes().all(|b| b.is_ascii_digit())
}

/// Where a version suffix begins in `parts`, if there is one: a stable
/// version (`001`), or `preview`/`exp` with the date parts after it
/// (`preview-09-2025`, `exp-02-05`, `exp-1206`).
fn version_at(parts: &[String]) -> Option<usize> {
    let last = parts.len().checked_sub(1)?;
    if last > 0 && digits(&parts[last], 3) {
        return Some(last);
    }
    let at = parts
        .iter()
        .rposition(|part| part == "preview" || part == "exp")?;
    let dated = parts[at + 1..]
        .iter()
        .all(|part| (1..=4).contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit()));
    (at > 0 && dated).then_some(at)
}

/// A model name reduced to the model it names, its version suffix apart,
/// and whether it was a `-latest` alias.
fn read(model: &str) -> (Vec<String>, Option<Vec<String>>, bool) {
    let mut parts = parts_of(model);
    let latest = parts.last().is_some_and(|part| part == "latest");
    if latest {
        parts.pop();
    }
    match version_at(&parts) {
        Some(at) => {
            let version = parts.split_off(at);
            (parts, Some(version), latest)
        }
        None => (parts, None, latest),
    }
}

/// The tier of a Gemini model without its version number
/// (`gemini-2.5-flash-lite` is `gemini-flash-lite`), for the aliases that
/// name a tier only (`gemini-flash-latest`).
fn tier(base: &[String]) -> Vec<&str> {
    base.iter()
        .map(String::as_str)
        .filter(|part| !part.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect()
}

/// Whether a response whose `modelVersion` is `served` came from another
/// model than `requested` (the path's): an alias answered by one of its
/// versions is none, nor is a name this does not read (a tuned model's).
/// Two different versions are two models.
pub(crate) fn another_model(requested: &str, served: &str) -> bool {
    let asked = parts_of(requested);
    let family = asked.first().map(String::as_str);
    if !matches!(family, Some("gemini" | "gemma")) || served.is_empty() {
        return false;
    }
    let (asked, asked_version, latest) = read(requested);
    let (answered, answered_version, _) = read(served);
    let tier_only = latest
        && asked
            .iter()
            .all(|part| !part.starts_with(|c: char| c.is_ascii_digit()));
    let same_model = if tier_only {
        tier(&asked) == tier(&answered)
    } else {
        asked == answered
    };
    let versions_differ =
        matches!((&asked_version, &answered_version), (Some(a), Some(b)) if a != b);
    !same_model || versions_differ
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_versions_and_prefixes_are_the_same_model() {
        for (requested, served) in [
            ("gemini-2.5-pro", "gemini-2.5-pro"),
            ("gemini-2.0-flash", "gemini-2.0-flash-001"),
            ("gemini-2.0-flash-001", "gemini-2.0-flash-001"),
            ("gemini-2.5-flash", "models/gemini-2.5-flash"),
            (
                "gemini-2.5-flash",
                "publishers/google/models/gemini-2.5-flash",
            ),
            ("gemini-1.5-flash-latest", "gemini-1.5-flash-002"),
            ("gemini-flash-latest", "gemini-2.5-flash-preview-09-2025"),
            (
                "gemini-flash-lite-latest",
                "gemini-2.5-flash-lite-preview-09-2025",
            ),
            (
                "gemini-2.5-flash-preview-05-20",
                "gemini-2.5-flash-preview-05-20",
            ),
            ("gemini-2.0-pro-exp-02-05", "gemini-2.0-pro-exp-02-05"),
            // Names this does not read are never a reroute.
            ("my-tuned-model", "gemini-2.0-flash-001"),
            ("gemini-2.5-pro", ""),
        ] {
            assert!(!another_model(requested, served), "{requested} -> {served}");
        }
    }

    #[test]
    fn another_tier_model_or_version_is_a_reroute() {
        for (requested, served) in [
            ("gemini-2.5-pro", "gemini-2.5-flash"),
            ("gemini-2.5-flash", "gemini-2.5-flash-lite"),
            ("gemini-2.5-flash", "gemini-2.0-flash-001"),
            (
                "gemini-flash-latest",
                "gemini-2.5-flash-lite-preview-09-2025",
            ),
            ("gemini-pro-latest", "gemini-2.5-flash"),
            ("gemini-2.0-flash-001", "gemini-2.0-flash-002"),
            ("gemini-2.5-flash-image", "gemini-2.5-flash"),
        ] {
            assert!(another_model(requested, served), "{requested} -> {served}");
        }
    }
}
