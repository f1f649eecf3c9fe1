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
}

impl InvalidResponse {
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> InvalidResponse {
        InvalidResponse {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// What only a script's response is held to: it is not empty, and it has no field the hook does
/// not define (a script builds its response, so an unknown field is a misspelling, which would
/// otherwise be dropped without a word). `hint` says why a script may have returned nothing.
pub fn check_script_response(
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
                    field.clone(),
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
