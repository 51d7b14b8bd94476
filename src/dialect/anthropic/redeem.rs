//! A credit token the provider did not redeem because of fields the
//! request carried: the next fallback leaves them out.

use serde_json::Value;

/// What a fallback keeps whatever a response names: what the request is (its
/// model, conversation, system prompt, tools, output bound and whether it
/// streams, which a redeeming request must match anyway) and the token.
const KEPT: [&str; 7] = [
    "model",
    "messages",
    "system",
    "tools",
    "max_tokens",
    "stream",
    "fallback_credit_token",
];

/// Removes each of `fields` from `body`: the names a not-applied credit's
/// `remove_to_redeem` lists, "request fields to remove before retrying, so
/// the retry can redeem this token" (anthropic-sdk-python
/// `types/beta/beta_fallback_credit_not_applied.py`). A dotted name reaches
/// into an object (`output_config.effort`).
pub(super) fn drop_fields(body: &mut Value, fields: &[String]) {
    for field in fields {
        let mut path: Vec<&str> = field.split('.').collect();
        let Some(last) = path.pop() else {
            continue;
        };
        if KEPT.contains(&path.first().copied().unwrap_or(last)) {
            continue;
        }
        let parent = path
            .iter()
            .try_fold(&mut *body, |at, segment| at.get_mut(*segment));
        if let Some(object) = parent.and_then(Value::as_object_mut) {
            object.remove(last);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_named_fields_go_and_what_the_request_is_stays() {
        let mut body = json!({"model": "m", "max_tokens": 9, "messages": [], "speed": "fast",
            "output_config": {"effort": "max", "format": {"type": "json_schema"}}});
        let fields = [
            "speed",
            "output_config.effort",
            "model",
            "messages",
            "absent.field",
        ];
        drop_fields(&mut body, &fields.map(String::from));
        assert_eq!(
            body,
            json!({"model": "m", "max_tokens": 9, "messages": [],
                "output_config": {"format": {"type": "json_schema"}}})
        );
    }
}
