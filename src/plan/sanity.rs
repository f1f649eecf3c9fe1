//! Outputs the API server would accept but that are almost always a script's mistake: a name
//! built from a missing field (`-pdb`), an empty selector on a kind where empty means "every
//! pod", a label value the API would refuse. Refused before anything is applied, with the
//! path, in the operator, `render` and `metascript test` alike.

use super::response::InvalidResponse;
use crate::object;
use serde_json::Value;

/// Set to `"true"` on a child whose empty selector is meant (e.g. a NetworkPolicy that does
/// apply to every pod of its namespace).
pub(crate) const ALLOW_EMPTY_SELECTOR: &str = "metascript.dev/allow-empty-selector";

/// Kinds whose selector, when empty, selects everything in the namespace, where it is, and
/// whether the bare `{}` is a normal way to mean that. A NetworkPolicy's `podSelector: {}` is
/// the default-deny policy, the most common one there is; a selector whose `matchLabels` or
/// `matchExpressions` came out empty is still what a field the script read being missing
/// makes. (A Service's empty selector selects nothing: it means endpoints are managed
/// elsewhere, so it is not here.)
const EVERYTHING_SELECTORS: &[(&str, &str, bool)] = &[
    ("PodDisruptionBudget", "/spec/selector", false),
    ("NetworkPolicy", "/spec/podSelector", true),
    ("Deployment", "/spec/selector", false),
    ("ReplicaSet", "/spec/selector", false),
    ("StatefulSet", "/spec/selector", false),
    ("DaemonSet", "/spec/selector", false),
    ("Job", "/spec/selector", false),
];

/// Checks one child (at `path` in the response): its name and its labels, and a selector that
/// would select everything.
pub(crate) fn check_child(child: &Value, path: &str) -> Result<(), InvalidResponse> {
    let fail =
        |field: &str, reason: String| InvalidResponse::new(format!("{path}.{field}"), reason);
    // Deeper, the operator could not read it back from its watch: it would be applied again
    // on every sync, and never seen.
    let depth = object::depth(child);
    if depth > object::MAX_WATCHED_DEPTH {
        return Err(InvalidResponse::new(
            path.to_string(),
            format!(
                "nests {depth} lists and maps deep, more than the {} the operator reads back",
                object::MAX_WATCHED_DEPTH
            ),
        ));
    }
    let name = object::name(child);
    if let Some(problem) = name_problem(name) {
        return Err(fail("metadata.name", format!("{name:?} {problem}")));
    }
    for (key, value) in object::labels(child) {
        check_label(&key, &value)
            .map_err(|reason| fail(&format!("metadata.labels.{key}"), reason))?;
    }
    let kind = object::kind(child);
    let allowed = object::str_at(
        child,
        &format!("/metadata/annotations/{}", escape(ALLOW_EMPTY_SELECTOR)),
    ) == Some("true");
    if let Some((_, pointer, bare_is_meant)) =
        EVERYTHING_SELECTORS.iter().find(|(k, _, _)| *k == kind)
        && !allowed
        && let Some(selector) = child.pointer(pointer)
        && is_empty_selector(selector)
        && !(*bare_is_meant && selector.as_object().is_some_and(|map| map.is_empty()))
    {
        let field = pointer.trim_start_matches('/').replace('/', ".");
        return Err(fail(
            &field,
            format!(
                "is empty, which on a {kind} selects every pod in the namespace (a field the \
                 script read was probably missing); set the annotation {ALLOW_EMPTY_SELECTOR}: \
                 \"true\" on the {kind} if that is meant"
            ),
        ));
    }
    Ok(())
}

/// Why a name is not usable, if it is not: a name must be non-empty, and every dot-separated
/// part must start and end with a letter or digit (so `-pdb` or `web.` are refused: a part
/// built from a missing field).
fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("is empty");
    }
    if name.len() > 253 {
        return Some("is longer than 253 characters");
    }
    let edges_ok = |part: &str| {
        let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
        alnum(part.chars().next()) && alnum(part.chars().last())
    };
    // RBAC and a few other kinds allow `:` in names (`system:...`); their parts count alike.
    if name.split(['.', ':']).all(edges_ok) {
        None
    } else {
        Some(
            "has an empty or dangling part (it must start and end with a letter or digit, as \
             must each part between dots); was part of it built from a missing field?",
        )
    }
}

/// A label's key and value as the API server requires them.
pub(crate) fn check_label(key: &str, value: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && (prefix.is_empty() || prefix.len() > 253 || name_problem(prefix).is_some())
    {
        return Err(format!(
            "the key's prefix {prefix:?} is not a DNS subdomain"
        ));
    }
    if !is_label_token(name) || name.is_empty() {
        return Err(format!(
            "the key {key:?} must be at most 63 characters of letters, digits, '-', '_' and '.', \
             starting and ending with a letter or digit"
        ));
    }
    if !value.is_empty() && !is_label_token(value) {
        return Err(format!(
            "the value {value:?} is not a valid label value: at most 63 characters of letters, \
             digits, '-', '_' and '.', starting and ending with a letter or digit (or empty)"
        ));
    }
    Ok(())
}

fn is_label_token(text: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    text.len() <= 63
        && alnum(text.chars().next())
        && alnum(text.chars().last())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// An empty label selector: `{}`, or one whose `matchLabels` and `matchExpressions` are both
/// empty. (Service selectors are plain maps, empty as `{}`.)
fn is_empty_selector(selector: &Value) -> bool {
    match selector.as_object() {
        Some(map) => map.iter().all(|(key, value)| match key.as_str() {
            "matchLabels" => value.as_object().is_none_or(|m| m.is_empty()),
            "matchExpressions" => value.as_array().is_none_or(|a| a.is_empty()),
            _ => false,
        }),
        None => false,
    }
}

/// A JSON pointer token: `~` and `/` escaped.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pdb(name: &str, selector: Value, annotations: Value) -> Value {
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"minAvailable": 1, "selector": selector}
        })
    }

    #[test]
    fn a_name_built_from_a_missing_field_is_refused() {
        let selector = json!({"matchLabels": {"app": "web"}});
        for bad in ["-pdb", "web-", "", "a..b", "web.-x"] {
            let error = check_child(&pdb(bad, selector.clone(), json!({})), "attachments[0]")
                .expect_err(bad);
            assert_eq!(error.path, "attachments[0].metadata.name", "{bad}");
        }
        for good in ["web-pdb", "web.example.com", "system:web", "a"] {
            check_child(&pdb(good, selector.clone(), json!({})), "attachments[0]")
                .unwrap_or_else(|e| panic!("{good}: {e}"));
        }
    }

    #[test]
    fn an_empty_selector_that_selects_everything_is_refused_unless_allowed() {
        for empty in [
            json!({}),
            json!({"matchLabels": {}}),
            json!({"matchLabels": {}, "matchExpressions": []}),
        ] {
            let error =
                check_child(&pdb("web", empty, json!({})), "outputs[2]").expect_err("empty");
            assert_eq!(error.path, "outputs[2].spec.selector");
            assert!(error.reason.contains(ALLOW_EMPTY_SELECTOR), "{error}");
        }
        let allowed = json!({ALLOW_EMPTY_SELECTOR: "true"});
        check_child(&pdb("web", json!({}), allowed), "outputs[2]").expect("allowed");
        // Default deny, as written everywhere: meant.
        let policy = |selector: Value| {
            json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "deny"}, "spec": {"podSelector": selector, "policyTypes": ["Ingress"]}
            })
        };
        check_child(&policy(json!({})), "attachments[0]").expect("default deny");
        // What `podSelector = { matchLabels = { app = missing } }` makes: a mistake.
        let error = check_child(&policy(json!({"matchLabels": {}})), "attachments[0]")
            .expect_err("emptied matchLabels");
        assert_eq!(error.path, "attachments[0].spec.podSelector");
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"selector": {}}});
        check_child(&service, "attachments[0]").expect("an empty Service selector selects nothing");
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "spec": {"selector": {}}});
        check_child(&config_map, "attachments[0]").expect("other kinds are not checked");
    }

    #[test]
    fn a_child_deeper_than_the_operator_reads_back_is_refused() {
        let nested = |containers: usize| {
            let spec = (0..containers - 1).fold(json!(1), |inner, _| json!({"a": inner}));
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "spec": spec})
        };
        assert_eq!(
            object::depth(&nested(object::MAX_WATCHED_DEPTH)),
            object::MAX_WATCHED_DEPTH
        );
        check_child(&nested(object::MAX_WATCHED_DEPTH), "attachments[0]").expect("as deep as read");
        let error = check_child(&nested(object::MAX_WATCHED_DEPTH + 1), "attachments[0]")
            .expect_err("deeper");
        assert_eq!(error.path, "attachments[0]");
        assert!(error.reason.contains("101 lists and maps deep"), "{error}");
    }

    #[test]
    fn labels_must_be_valid_keys_and_values() {
        check_label("app", "web").unwrap();
        check_label("example.com/tier", "").unwrap();
        check_label("app", "a.b_c-d").unwrap();
        for (key, value) in [
            ("app", "has space"),
            ("app", "-web"),
            ("app", &"x".repeat(64)),
            ("bad key", "v"),
            ("/app", "v"),
            ("-x.com/app", "v"),
        ] {
            assert!(check_label(key, value).is_err(), "{key}={value}");
        }
        let child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"app": "not valid"}}});
        let error = check_child(&child, "attachments[1]").expect_err("bad label");
        assert_eq!(error.path, "attachments[1].metadata.labels.app");
    }
}
