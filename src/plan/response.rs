//! Reading the fields of hook responses: every rejection names the field or item and why.

pub(crate) use crate::hooks::InvalidResponse;
pub(crate) use crate::object::json_type;
use serde_json::Value;
use std::collections::BTreeMap;

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

/// The soonest a hook may ask to be called again (`resyncAfterSeconds`): a hook asking sooner
/// is called after this, so one object cannot keep a worker (and the Events it publishes)
/// busy without pause.
pub(crate) const MIN_RESYNC_AFTER_SECONDS: f64 = 1.0;

/// The latest a hook may ask to be called again: a year. Past it the answer is refused (a
/// value like `1e300` is a mistake, and no timer holds it).
pub(crate) const MAX_RESYNC_AFTER_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// `resyncAfterSeconds`: a positive number of seconds up to [`MAX_RESYNC_AFTER_SECONDS`],
/// raised to [`MIN_RESYNC_AFTER_SECONDS`]; zero or absent means none.
pub(crate) fn resync_after(
    response: &serde_json::Map<String, Value>,
) -> Result<Option<f64>, InvalidResponse> {
    match response.get("resyncAfterSeconds") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(0.0) => Ok(None),
            Some(seconds) if seconds > 0.0 && seconds <= MAX_RESYNC_AFTER_SECONDS => {
                Ok(Some(seconds.max(MIN_RESYNC_AFTER_SECONDS)))
            }
            Some(seconds) if seconds > MAX_RESYNC_AFTER_SECONDS => Err(InvalidResponse::new(
                "resyncAfterSeconds",
                format!("expected at most {MAX_RESYNC_AFTER_SECONDS} seconds (a year), got {n}"),
            )),
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
