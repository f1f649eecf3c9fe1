//! Validation of hook responses: every rejection names the field or item and why.

use crate::api::HookKind;
use crate::script::suggest::did_you_mean;
use serde_json::Value;
use std::collections::BTreeMap;

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

pub(crate) use crate::object::json_type;

/// The response fields each hook defines (Metacontroller's).
pub(crate) fn response_fields(hook: HookKind) -> &'static [&'static str] {
    match hook {
        HookKind::Sync | HookKind::Finalize => &[
            "labels",
            "annotations",
            "status",
            "attachments",
            "resyncAfterSeconds",
            "finalized",
        ],
        HookKind::Customize => &["relatedResources"],
        HookKind::Map | HookKind::Tombstone => &["outputs"],
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
            let known = response_fields(hook);
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

/// The response as a map of fields; a script that returns nothing or a non-map is an error.
pub(crate) fn fields(response: &Value) -> Result<&serde_json::Map<String, Value>, InvalidResponse> {
    response.as_object().ok_or_else(|| {
        InvalidResponse::new(
            "(response)",
            format!(
                "expected a map of response fields, got {}",
                json_type(response)
            ),
        )
    })
}

/// An optional list field; absent or null is an empty list.
pub(crate) fn list<'a>(
    response: &'a serde_json::Map<String, Value>,
    field: &str,
) -> Result<&'a [Value], InvalidResponse> {
    match response.get(field) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        // Scripts that build an empty table or map for "no items" mean an empty list.
        Some(Value::Object(map)) if map.is_empty() => Ok(&[]),
        Some(other) => Err(InvalidResponse::new(
            field,
            format!("expected a list of objects, got {}", json_type(other)),
        )),
    }
}

/// A `labels`/`annotations` field: string values set, null values remove.
pub(crate) fn string_updates(
    response: &serde_json::Map<String, Value>,
    field: &str,
) -> Result<BTreeMap<String, Option<String>>, InvalidResponse> {
    let map = match response.get(field) {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(Value::Array(items)) if items.is_empty() => return Ok(BTreeMap::new()),
        Some(other) => {
            return Err(InvalidResponse::new(
                field,
                format!("expected a map of strings, got {}", json_type(other)),
            ));
        }
    };
    map.iter()
        .map(|(key, value)| match value {
            Value::String(text) => Ok((key.clone(), Some(text.clone()))),
            Value::Null => Ok((key.clone(), None)),
            other => Err(InvalidResponse::new(
                format!("{field}.{key}"),
                format!(
                    "expected a string (or null to remove), got {}",
                    json_type(other)
                ),
            )),
        })
        .collect()
}

/// `resyncAfterSeconds`: a non-negative number; zero or absent means none.
pub(crate) fn resync_after(
    response: &serde_json::Map<String, Value>,
) -> Result<Option<f64>, InvalidResponse> {
    match response.get("resyncAfterSeconds") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(seconds) if seconds > 0.0 && seconds.is_finite() => Ok(Some(seconds)),
            Some(0.0) => Ok(None),
            _ => Err(InvalidResponse::new(
                "resyncAfterSeconds",
                format!("expected a positive number of seconds, got {n}"),
            )),
        },
        Some(other) => Err(InvalidResponse::new(
            "resyncAfterSeconds",
            format!("expected a number of seconds, got {}", json_type(other)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_misspelled_response_field_names_the_fix() {
        let error = check_script_response(HookKind::Sync, &json!({"lables": {"a": "b"}}), None)
            .unwrap_err();
        assert_eq!(error.path, "lables");
        assert!(
            error
                .reason
                .starts_with("unknown field of a sync response; did you mean `labels`?"),
            "{}",
            error.reason
        );
        let error = check_script_response(HookKind::Map, &json!({"output": []}), None).unwrap_err();
        assert!(
            error.reason.contains("did you mean `outputs`?"),
            "{}",
            error.reason
        );
        assert!(
            check_script_response(HookKind::Finalize, &json!({"finalized": true}), None).is_ok()
        );
    }

    #[test]
    fn an_empty_response_carries_the_hint() {
        let error =
            check_script_response(HookKind::Sync, &Value::Null, Some("indent it")).unwrap_err();
        assert_eq!(
            error.reason,
            "the script returned nothing (null), expected a map of response fields; indent it"
        );
        // Other shapes are left to the hook's own reader.
        assert!(check_script_response(HookKind::Sync, &json!([]), None).is_ok());
    }
}
