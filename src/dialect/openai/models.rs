//! Whether a response's `model` names the model the request asked for, on
//! OpenAI's APIs and Azure OpenAI's: what tells a reroute from an alias.
//!
//! A response's `model` is "the model used" (API reference, the chat
//! completion and response objects), and for an alias that is the dated
//! snapshot it points to: "`gpt-4o` currently points to
//! `gpt-4o-2024-08-06`", `gpt-5` to `gpt-5-2025-08-07` (Models docs,
//! snapshots: "lock in a specific version of the model"). Older snapshots
//! are dated `-MMDD` (`gpt-4-0613`, `gpt-3.5-turbo-0125`). Codex CLI warns
//! when the two differ otherwise ("this request was routed to gpt-5.2 as a
//! fallback" for `gpt-5.3-codex`, openai/codex#12003).
//!
//! On Azure OpenAI the request names a deployment (in the path, or the v1
//! API's body `model`), and the response the model deployed behind it
//! (Azure OpenAI REST reference): the two cannot be compared.

use http::Uri;

use crate::dialect::path_segments;

/// Aliases that are not a prefix of the snapshot they point to (Models
/// docs: `gpt-4-turbo-preview` points to `gpt-4-0125-preview`).
const ALIASES: &[(&str, &str)] = &[("gpt-4-turbo-preview", "gpt-4-0125-preview")];

/// Whether a request to `uri` goes to Azure OpenAI (or another Azure AI
/// endpoint), whose model names are deployments: a resource host, or the
/// paths Azure serves (`/openai/deployments/{d}/...`, `/openai/v1/...`,
/// `/openai/responses`).
pub(crate) fn names_a_deployment(uri: &Uri) -> bool {
    let azure_host = uri.host().is_some_and(|host| {
        [
            ".openai.azure.com",
            ".cognitiveservices.azure.com",
            ".services.ai.azure.com",
        ]
        .iter()
        .any(|suffix| host.ends_with(suffix))
    });
    let segments = path_segments(uri);
    let azure_path = segments
        .windows(2)
        .any(|pair| pair[0] == "openai" && matches!(pair[1], "deployments" | "v1" | "responses"));
    azure_host || azure_path
}

/// A model name reduced to the model it names, and the snapshot it pins
/// if any: lower case, a gateway's `openai/` prefix off, a `-latest` alias
/// read as its model, a trailing date (`-2025-08-07`, `-0613`) apart.
fn snapshot_of(model: &str) -> (String, Option<String>) {
    let lower = model.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or_default();
    let name = name.strip_suffix("-latest").unwrap_or(name);
    let digits =
        |part: &str, len: usize| part.len() == len && part.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = name.split('-').collect();
    let n = parts.len();
    let (base, date) =
        if n > 3 && digits(parts[n - 3], 4) && digits(parts[n - 2], 2) && digits(parts[n - 1], 2) {
            (parts[..n - 3].join("-"), Some(parts[n - 3..].join("-")))
        } else if n > 1 && digits(parts[n - 1], 4) {
            (parts[..n - 1].join("-"), Some(parts[n - 1].to_owned()))
        } else {
            (name.to_owned(), None)
        };
    (base, date)
}

/// Whether `model` (a gateway's `openai/` prefix off) is named as OpenAI
/// names its models (`gpt-5`, `o3`, `chatgpt-4o-latest`, `codex-mini-latest`,
/// a fine-tune's `ft:`): a name of another server speaking the API (a
/// gateway's alias, a local model's) says nothing of the model that answers
/// it.
fn openai_name(model: &str) -> bool {
    let lower = model.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or_default();
    let reasoning = name
        .strip_prefix('o')
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    reasoning
        || ["gpt-", "chatgpt-", "codex-", "ft:"]
            .iter()
            .any(|p| name.starts_with(p))
}

/// Whether a response that names `served` came from another model than
/// `requested`: an alias answered by its snapshot is none, nor is a name
/// on Azure (a deployment's), nor a name OpenAI does not give its models.
/// Two different snapshots are two models.
pub(crate) fn another_model(uri: &Uri, requested: &str, served: &str) -> bool {
    if names_a_deployment(uri) || !openai_name(requested) || served.is_empty() {
        return false;
    }
    let lower = (requested.to_ascii_lowercase(), served.to_ascii_lowercase());
    if ALIASES.contains(&(lower.0.as_str(), lower.1.as_str())) {
        return false;
    }
    let (asked, answered) = (snapshot_of(requested), snapshot_of(served));
    let dates_differ = matches!((&asked.1, &answered.1), (Some(a), Some(b)) if a != b);
    asked.0 != answered.0 || dates_differ
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAI: &str = "https://api.openai.com/v1/chat/completions";

    fn rerouted(uri: &str, requested: &str, served: &str) -> bool {
        another_model(&uri.parse().unwrap(), requested, served)
    }

    #[test]
    fn aliases_and_their_snapshots_are_the_same_model() {
        for (requested, served) in [
            ("gpt-5", "gpt-5"),
            ("gpt-5", "gpt-5-2025-08-07"),
            ("gpt-4o", "gpt-4o-2024-08-06"),
            ("gpt-4o-mini", "gpt-4o-mini-2024-07-18"),
            ("gpt-4", "gpt-4-0613"),
            ("gpt-3.5-turbo", "gpt-3.5-turbo-0125"),
            ("o1", "o1-2024-12-17"),
            ("gpt-4-turbo-preview", "gpt-4-0125-preview"),
            ("gpt-5-2025-08-07", "gpt-5-2025-08-07"),
            ("chatgpt-4o-latest", "chatgpt-4o-latest"),
            ("openai/gpt-5", "gpt-5-2025-08-07"),
            ("GPT-5", "gpt-5-2025-08-07"),
            // Names OpenAI does not give its models: a gateway's, a local one's.
            ("fast-model", "gpt-4o-mini-2024-07-18"),
            ("llama3", "meta-llama/Llama-3-8B-Instruct"),
        ] {
            assert!(
                !rerouted(OPENAI, requested, served),
                "{requested} -> {served}"
            );
        }
    }

    #[test]
    fn another_model_or_snapshot_is_a_reroute() {
        for (requested, served) in [
            ("gpt-5.3-codex", "gpt-5.2"),
            ("gpt-5", "gpt-5-mini-2025-08-07"),
            ("gpt-4o", "gpt-4o-mini-2024-07-18"),
            ("gpt-4o-2024-08-06", "gpt-4o-2024-05-13"),
            ("o3", "o4-mini-2025-04-16"),
        ] {
            assert!(
                rerouted(OPENAI, requested, served),
                "{requested} -> {served}"
            );
        }
    }

    #[test]
    fn an_azure_deployment_name_is_never_compared() {
        for uri in [
            "https://r.openai.azure.com/openai/deployments/prod-chat/chat/completions?api-version=2024-10-21",
            "https://r.openai.azure.com/openai/v1/chat/completions",
            "https://r.cognitiveservices.azure.com/openai/responses?api-version=preview",
            "http://127.0.0.1:9/openai/deployments/prod-chat/chat/completions",
            "http://127.0.0.1:9/openai/v1/responses",
        ] {
            assert!(!rerouted(uri, "prod-chat", "gpt-4o-2024-08-06"), "{uri}");
        }
        assert!(rerouted(
            "http://127.0.0.1:9/v1/chat/completions",
            "gpt-5",
            "gpt-4o"
        ));
    }
}
