//! The server-side `fallbacks` list the guard writes (a retarget), kept to
//! what the API accepts, and taken back when the API rejects it anyway.
//!
//! The rules (platform docs "Refusals and fallback", Naming your own
//! fallback models): entries are tried in order, each distinct from the
//! others and from the requested model; each is one of the requested
//! model's permitted targets (the Models API's `allowed_fallback_models`);
//! each names a `model` and may override `max_tokens`, `thinking`,
//! `output_config` and `speed` for that attempt, any other key being
//! rejected at parse time (anthropic-sdk-python
//! `types/beta/beta_fallback_param.py`); the request must be valid as a
//! direct request to every model named. Each break is a 400 before any
//! model runs.

use http::{HeaderMap, Uri};
use serde_json::{Map, Value};

use super::models::rejects_prefill;
use super::signals::first_party;
use super::trailing::ends_in_assistant_turn;
use super::{BETA_HEADER, MAX_SERVER_FALLBACKS, SERVER_FALLBACK_BETA};
use crate::dialect::{
    merge_list_header, remove_list_value, str_field, ComposedFallbacks, Retarget,
};

/// The keys a `fallbacks` entry may carry.
const ENTRY_KEYS: [&str; 5] = ["model", "max_tokens", "thinking", "output_config", "speed"];

/// Writes the retarget's models as the request's server-side `fallbacks`,
/// keeping only entries the API accepts; `None` when the body is left as it
/// was (not first party, the client's `"default"`, nothing left to name,
/// no list and nothing to inject).
pub(super) fn compose(
    uri: &Uri,
    headers: &mut HeaderMap,
    body: &mut Value,
    retarget: Retarget<'_>,
) -> Option<ComposedFallbacks> {
    if !first_party(uri) {
        return None;
    }
    let prefilled = ends_in_assistant_turn(body);
    let object = body.as_object_mut()?;
    match object.get("fallbacks") {
        None if !retarget.inject => return None,
        // `"default"` (or any form but a list) is the client's choice of
        // the provider's own fallbacks: kept.
        Some(existing) if !existing.is_array() => return None,
        _ => {}
    }
    let existing = object.get("fallbacks").and_then(Value::as_array);
    let chosen = entries(
        retarget,
        existing.map(Vec::as_slice).unwrap_or(&[]),
        prefilled,
    );
    if chosen.is_empty() {
        return None;
    }
    let chosen = Value::Array(chosen);
    if object.get("fallbacks") == Some(&chosen) {
        return None;
    }
    // A list added where there was none needs the beta; either date of it
    // the client already sends takes the list form.
    let beta = (!object.contains_key("fallbacks") && !asks_server_fallback(headers))
        .then_some(SERVER_FALLBACK_BETA);
    if let Some(beta) = beta {
        merge_list_header(headers, BETA_HEADER, beta);
    }
    let previous = object.insert("fallbacks".into(), chosen);
    Some(ComposedFallbacks { previous, beta })
}

/// The entries for the retarget's models, in order: never the requested
/// model, none twice, only models the operator allows for it (when the
/// operator said), none that rejects the prefill the request ends in, at
/// most [`MAX_SERVER_FALLBACKS`]. A model the client listed keeps its own
/// overrides, the keys the API takes.
fn entries(retarget: Retarget<'_>, existing: &[Value], prefilled: bool) -> Vec<Value> {
    let mut chosen: Vec<Value> = Vec::new();
    for model in retarget.models {
        let named = |entry: &Value| str_field(entry, "model").as_deref() == Some(model.as_str());
        let unwanted = Some(model.as_str()) == retarget.own_model
            || chosen.iter().any(named)
            || retarget
                .allowed
                .is_some_and(|allowed| !allowed.contains(model))
            || (prefilled && rejects_prefill(model));
        if unwanted {
            continue;
        }
        if chosen.len() == MAX_SERVER_FALLBACKS {
            break;
        }
        let mut entry: Map<String, Value> = existing
            .iter()
            .find(|entry| named(entry))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        entry.retain(|key, _| ENTRY_KEYS.contains(&key.as_str()));
        entry.insert("model".into(), Value::String(model.clone()));
        chosen.push(Value::Object(entry));
    }
    chosen
}

/// Whether the request's betas name server-side fallback, of any date.
fn asks_server_fallback(headers: &HeaderMap) -> bool {
    headers
        .get_all(BETA_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim().starts_with("server-side-fallback-"))
}

/// Takes back what [`compose`] wrote: the client's own `fallbacks` (or
/// none), without the beta the guard added for them.
pub(super) fn restore(headers: &mut HeaderMap, body: &mut Value, composed: &ComposedFallbacks) {
    if let Some(beta) = composed.beta {
        remove_list_value(headers, BETA_HEADER, beta);
    }
    let Some(object) = body.as_object_mut() else {
        return;
    };
    match &composed.previous {
        Some(previous) => object.insert("fallbacks".into(), previous.clone()),
        None => object.remove("fallbacks"),
    };
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const FIRST_PARTY: &str = "https://api.anthropic.com/v1/messages";

    fn retarget<'a>(models: &'a [String], allowed: Option<&'a [String]>) -> Retarget<'a> {
        Retarget {
            models,
            own_model: Some("claude-fable-5"),
            inject: true,
            allowed,
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|m| m.to_string()).collect()
    }

    fn models_of(body: &Value) -> Vec<&str> {
        let list = body["fallbacks"].as_array().unwrap();
        list.iter().map(|e| e["model"].as_str().unwrap()).collect()
    }

    #[test]
    fn only_models_the_requested_model_allows_and_only_keys_the_api_takes() {
        let uri: Uri = FIRST_PARTY.parse().unwrap();
        let models = names(&["claude-fable-5", "claude-sonnet-4-5", "claude-opus-4-8"]);
        let allowed = names(&["claude-opus-4-8"]);
        let mut body = json!({"model": "claude-fable-5", "messages": [], "fallbacks": [
            {"model": "claude-opus-4-8", "max_tokens": 9, "temperature": 0.2, "speed": "fast"}]});
        let mut headers = HeaderMap::new();
        let composed = compose(
            &uri,
            &mut headers,
            &mut body,
            retarget(&models, Some(&allowed)),
        );
        assert!(composed.is_some());
        assert_eq!(
            body["fallbacks"],
            json!([{"model": "claude-opus-4-8", "max_tokens": 9, "speed": "fast"}])
        );
        let none: Vec<String> = Vec::new();
        let mut plain = json!({"model": "claude-fable-5", "messages": []});
        let composed = compose(
            &uri,
            &mut headers,
            &mut plain,
            retarget(&models, Some(&none)),
        );
        assert!(composed.is_none(), "an empty allowlist writes nothing");
        assert!(plain.get("fallbacks").is_none());
    }

    #[test]
    fn a_request_ending_in_a_prefill_names_no_model_that_rejects_it() {
        let uri: Uri = FIRST_PARTY.parse().unwrap();
        let models = names(&["claude-opus-4-8", "claude-haiku-4-5"]);
        let mut body = json!({"model": "claude-sonnet-4-5", "messages": [
            {"role": "user", "content": "x"}, {"role": "assistant", "content": "{"}]});
        let mut headers = HeaderMap::new();
        compose(&uri, &mut headers, &mut body, retarget(&models, None)).unwrap();
        assert_eq!(models_of(&body), ["claude-haiku-4-5"]);
    }

    #[test]
    fn what_a_retarget_wrote_is_taken_back() {
        let uri: Uri = FIRST_PARTY.parse().unwrap();
        let models = names(&["a", "b"]);
        let mut headers = HeaderMap::new();
        headers.insert(BETA_HEADER, "prompt-caching-2024-07-31".parse().unwrap());
        let sent = json!({"model": "claude-fable-5", "messages": []});
        let mut body = sent.clone();
        let composed = compose(&uri, &mut headers, &mut body, retarget(&models, None)).unwrap();
        assert_eq!(models_of(&body), ["a", "b"]);
        assert_eq!(
            headers[BETA_HEADER],
            "prompt-caching-2024-07-31,server-side-fallback-2026-07-01"
        );
        restore(&mut headers, &mut body, &composed);
        assert_eq!(body, sent);
        assert_eq!(headers[BETA_HEADER], "prompt-caching-2024-07-31");

        // A client that sent its own list, with the beta of its own.
        let mut headers = HeaderMap::new();
        headers.insert(
            BETA_HEADER,
            "server-side-fallback-2026-06-01".parse().unwrap(),
        );
        let own = json!({"model": "claude-fable-5", "messages": [], "fallbacks": [{"model": "z"}]});
        let mut body = own.clone();
        let composed = compose(&uri, &mut headers, &mut body, retarget(&models, None)).unwrap();
        assert_eq!(headers[BETA_HEADER], "server-side-fallback-2026-06-01");
        restore(&mut headers, &mut body, &composed);
        assert_eq!(body, own);
        assert_eq!(headers[BETA_HEADER], "server-side-fallback-2026-06-01");
    }
}
