//! Comparing a hook's response with a case's expectation, and explaining the difference.

use serde_json::Value;

/// Every place where `actual` does not match `expected`, as `path: expected X, got Y`.
/// In subset mode, maps in `actual` may have extra keys; lists must have the same length.
pub(super) fn mismatches(expected: &Value, actual: &Value, exact: bool) -> Vec<String> {
    let mut found = Vec::new();
    walk(expected, actual, exact, "", &mut found);
    found
}

fn walk(expected: &Value, actual: &Value, exact: bool, path: &str, found: &mut Vec<String>) {
    let here = || {
        if path.is_empty() {
            "(response)".to_string()
        } else {
            path.to_string()
        }
    };
    match (expected, actual) {
        (Value::Object(want), Value::Object(have)) => {
            for (key, value) in want {
                let child = join(path, key);
                match have.get(key) {
                    Some(actual) => walk(value, actual, exact, &child, found),
                    None => found.push(format!(
                        "{child}: expected {}, but it is missing",
                        short(value)
                    )),
                }
            }
            if exact {
                for (key, value) in have.iter().filter(|(key, _)| !want.contains_key(*key)) {
                    found.push(format!(
                        "{}: not expected, got {}",
                        join(path, key),
                        short(value)
                    ));
                }
            }
        }
        (Value::Array(want), Value::Array(have)) => {
            if want.len() != have.len() {
                found.push(format!(
                    "{}: expected a list of {}, got a list of {}",
                    here(),
                    want.len(),
                    have.len()
                ));
            }
            for (index, (w, h)) in want.iter().zip(have).enumerate() {
                walk(w, h, exact, &format!("{path}[{index}]"), found);
            }
        }
        (Value::Number(want), Value::Number(have)) if !exact && want.as_f64() == have.as_f64() => {}
        _ if expected == actual => {}
        _ => found.push(format!(
            "{}: expected {}, got {}",
            here(),
            short(expected),
            short(actual)
        )),
    }
}

fn join(path: &str, key: &str) -> String {
    let simple = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), simple) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{key:?}]"),
    }
}

/// A value shortened for one line.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 {
        format!("{}…", text.chars().take(77).collect::<String>())
    } else {
        text
    }
}

/// `actual` cut down to the keys `expected` mentions, so a subset-mode diff shows only what
/// the case is about.
pub(super) fn project(expected: &Value, actual: &Value) -> Value {
    match (expected, actual) {
        (Value::Object(want), Value::Object(have)) => Value::Object(
            have.iter()
                .filter(|(key, _)| want.contains_key(*key))
                .map(|(key, value)| (key.clone(), project(&want[key], value)))
                .collect(),
        ),
        (Value::Array(want), Value::Array(have)) => Value::Array(
            have.iter()
                .enumerate()
                .map(|(i, value)| {
                    want.get(i)
                        .map_or_else(|| value.clone(), |w| project(w, value))
                })
                .collect(),
        ),
        _ => actual.clone(),
    }
}

/// A unified diff of two values printed as YAML.
pub(super) fn diff(expected: &Value, actual: &Value) -> String {
    let expected = super::yaml(expected);
    let actual = super::yaml(actual);
    similar::TextDiff::from_lines(&expected, &actual)
        .unified_diff()
        .context_radius(3)
        .header("expected", "actual")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_mode_allows_extra_keys_but_not_other_lengths_or_values() {
        let expected = json!({"labels": {"a": "1"}, "attachments": [{"kind": "Service"}]});
        let actual =
            json!({"labels": {"a": "1", "b": "2"}, "attachments": [{"kind": "Service", "x": 1}]});
        assert!(mismatches(&expected, &actual, false).is_empty());
        assert_eq!(
            mismatches(&expected, &actual, true),
            vec![
                "attachments[0].x: not expected, got 1",
                "labels.b: not expected, got \"2\""
            ]
        );
        let wrong = json!({"labels": {"a": "2"}, "attachments": []});
        assert_eq!(
            mismatches(&expected, &wrong, false),
            vec![
                "attachments: expected a list of 1, got a list of 0",
                "labels.a: expected \"1\", got \"2\""
            ]
        );
        assert_eq!(
            mismatches(&json!({"m": {"k/x": null}}), &json!({"m": {}}), false),
            vec!["m[\"k/x\"]: expected null, but it is missing"]
        );
    }

    #[test]
    fn projection_keeps_only_expected_keys() {
        let expected = json!({"a": {"b": 1}});
        let actual = json!({"a": {"b": 2, "c": 3}, "d": 4});
        assert_eq!(project(&expected, &actual), json!({"a": {"b": 2}}));
        assert!(diff(&expected, &project(&expected, &actual)).contains("-  b: 1\n+  b: 2"));
    }
}
