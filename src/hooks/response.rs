//! What every hook response is held to before its kind reads it: a script's response is a map of
//! the fields its hook defines. Every rejection names the field and why.

use crate::api::HookKind;
use crate::script::suggest::did_you_mean;
use serde_json::Value;

/// A hook response that cannot be used. Nothing of it is applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid hook response: {path}: {reason}")]
pub struct InvalidResponse {
    /// Where in the response, e.g. `attachments[2]` or `labels.app`.
    pub path: String,
    pub reason: String,
    /// The start of a webhook's body that is no response at all: left out of the message, like
    /// every webhook answer (see [`super::WebhookFailure`]).
    pub excerpt: Option<String>,
}

impl InvalidResponse {
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> InvalidResponse {
        InvalidResponse {
            path: path.into(),
            reason: reason.into(),
            excerpt: None,
        }
    }

    pub(crate) fn with_excerpt(mut self, excerpt: String) -> InvalidResponse {
        self.excerpt = (!excerpt.is_empty()).then_some(excerpt);
        self
    }
}

/// What only a script's response is held to: it is not empty, and it has no field the hook does
/// not define (a script builds its response, so an unknown field is a misspelling, which would
/// otherwise be dropped without a word). `hint` says why a script may have returned nothing.
pub(crate) fn check_script_response(
    hook: HookKind,
    response: &Value,
    hint: Option<&str>,
) -> Result<(), InvalidResponse> {
    match response {
        Value::Null => Err(InvalidResponse::new(
            "(response)",
            format!(
                "the script returned nothing (null), expected a map of response fields{}",
                hint.map(|hint| format!("; {hint}")).unwrap_or_default()
            ),
        )),
        Value::Object(fields) => {
            let known: Vec<&str> = hook.response_fields().collect();
            match fields.keys().find(|field| !known.contains(&field.as_str())) {
                Some(field) => Err(InvalidResponse::new(
                    field_path(field),
                    format!(
                        "unknown field of a {hook} response{} (the fields are {})",
                        did_you_mean(field, known.iter().copied()),
                        known.join(", ")
                    ),
                )),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// A top-level field as an error's path names it: an empty name quoted, so it shows.
pub(super) fn field_path(field: &str) -> String {
    match field {
        "" => "\"\"".to_string(),
        field => field.to_string(),
    }
}

/// The largest object the API server accepts in a request body.
pub(crate) const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024;

/// Refuses a response whose object lists the API server could never take: more objects in one
/// list than `max_children` (`metascript run --max-children`), or an object larger than a
/// request may be. Checked for scripts and webhooks alike, before anything is planned from the
/// response, so nothing of it is applied.
pub(crate) fn check_response_size(
    hook: HookKind,
    response: &Value,
    max_children: usize,
) -> Result<(), InvalidResponse> {
    for field in hook.contract().response.iter().filter(|f| f.objects) {
        let Some(Value::Array(items)) = response.get(field.name) else {
            continue;
        };
        if items.len() > max_children {
            return Err(InvalidResponse::new(
                field.name,
                format!(
                    "{} objects, more than the {max_children} one response may return \
                     (metascript run --max-children)",
                    items.len()
                ),
            ));
        }
        for (index, item) in items.iter().enumerate() {
            let size = json_size(item);
            if size > MAX_OBJECT_BYTES {
                return Err(InvalidResponse::new(
                    format!("{}[{index}]", field.name),
                    format!(
                        "the object is about {} KiB as JSON; the API server accepts at most {} \
                         KiB in one request",
                        size / 1024,
                        MAX_OBJECT_BYTES / 1024
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// About how many bytes a value takes as JSON (escapes aside), without writing it out.
fn json_size(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(text) => text.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|item| json_size(item) + 1).sum::<usize>(),
        Value::Object(fields) => {
            2 + fields
                .iter()
                .map(|(key, value)| key.len() + 4 + json_size(value))
                .sum::<usize>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{decorator, map};
    use serde_json::json;

    #[test]
    fn a_misspelled_response_field_names_the_fix() {
        let error = check_script_response(decorator::SYNC, &json!({"lables": {"a": "b"}}), None)
            .unwrap_err();
        assert_eq!(error.path, "lables");
        assert!(
            error
                .reason
                .starts_with("unknown field of a sync response; did you mean `labels`?"),
            "{}",
            error.reason
        );
        let error = check_script_response(map::MAP, &json!({"output": []}), None).unwrap_err();
        assert!(
            error.reason.contains("did you mean `outputs`?"),
            "{}",
            error.reason
        );
        assert!(
            check_script_response(decorator::FINALIZE, &json!({"finalized": true}), None).is_ok()
        );
    }

    #[test]
    fn object_lists_are_held_to_what_the_api_server_accepts() {
        let child = |size: usize| json!({"kind": "ConfigMap", "data": {"x": "a".repeat(size)}});
        let ok = json!({"attachments": [child(10), child(10)]});
        assert!(check_response_size(decorator::SYNC, &ok, 2).is_ok());
        let error = check_response_size(decorator::SYNC, &ok, 1).unwrap_err();
        assert_eq!(error.path, "attachments");
        assert!(error.reason.contains("--max-children"), "{}", error.reason);
        let big = json!({"outputs": [child(10), child(MAX_OBJECT_BYTES)]});
        let error = check_response_size(map::MAP, &big, 1000).unwrap_err();
        assert_eq!(error.path, "outputs[1]");
        // Fields that are not object lists are not counted.
        let labels = json!({"labels": {"a": "a".repeat(MAX_OBJECT_BYTES)}});
        assert!(check_response_size(decorator::SYNC, &labels, 0).is_ok());
        assert!(json_size(&json!({"a": [1, "xy"]})) >= r#"{"a":[1,"xy"]}"#.len());
    }

    /// Found by `hooks::tests::fuzz`: the path was empty, so the message read `response: : unknown
    /// field`.
    #[test]
    fn an_unknown_field_with_an_empty_name_is_named() {
        let error = check_script_response(decorator::SYNC, &json!({"": 1}), None).unwrap_err();
        assert_eq!(error.path, r#""""#);
        assert!(
            error
                .to_string()
                .starts_with(r#"invalid hook response: "": unknown field"#)
        );
    }

    #[test]
    fn an_empty_response_carries_the_hint() {
        let error =
            check_script_response(decorator::SYNC, &Value::Null, Some("indent it")).unwrap_err();
        assert_eq!(
            error.reason,
            "the script returned nothing (null), expected a map of response fields; indent it"
        );
        // Other shapes are left to the hook's own reader.
        assert!(check_script_response(decorator::SYNC, &json!([]), None).is_ok());
    }
}
