//! Every object a plan would write, checked against its type's schema and CEL rules
//! ([`crate::schema`]) before anything of the plan is written: the children it applies (their
//! observed versions are `oldSelf` to transition rules) and the status it gives its target.
//! One violation and nothing of the plan is written, so the previous state stays whole: a plan
//! applied up to its first refused object could leave some children new and others old.

use super::{Plan, StatusChange};
use crate::object::{self, ObjectKey};
use crate::schema::{self, Part, SchemaSource, Violation};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// One violation, and the object it is in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputViolation {
    pub object: ObjectKey,
    /// In the status the hook gave its target or parent, not in an applied object.
    pub in_status: bool,
    pub violation: Violation,
}

impl fmt::Display for OutputViolation {
    /// As every message names an object: `Widget.example.com/v1 ns/name: spec.size: …`, with
    /// ` (status)` after the target's name for its status.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = if self.in_status { " (status)" } else { "" };
        write!(f, "{}{status}: {}", self.object, self.violation)
    }
}

/// The violations that keep a plan from being written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InvalidOutputs {
    pub violations: Vec<OutputViolation>,
}

impl fmt::Display for InvalidOutputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.violations.len();
        let fields = if count == 1 { "field" } else { "fields" };
        write!(
            f,
            "the hook's output breaks its schema at {count} {fields}:"
        )?;
        for violation in &self.violations {
            write!(f, "\n  {violation}")?;
        }
        Ok(())
    }
}

/// Checks what `plan` writes. `observed` finds the object as it is now for a desired one (its
/// `oldSelf`). `Ok` holds what could not be checked (rules this check cannot evaluate), to be
/// said, not held against the plan.
pub(crate) fn check(
    plan: &Plan,
    target: &Value,
    observed: &dyn Fn(&Value) -> Option<Arc<Value>>,
    schemas: &dyn SchemaSource,
) -> Result<Vec<OutputViolation>, InvalidOutputs> {
    let mut found = Vec::new();
    let mut said = |object: &Value, in_status: bool, violations: Vec<Violation>| {
        let object = ObjectKey::of(object);
        found.extend(violations.into_iter().map(|violation| OutputViolation {
            object: object.clone(),
            in_status,
            violation,
        }));
    };
    for child in &plan.apply {
        let violations = schema::check(schemas, child, || observed(child), Part::Resource);
        if !violations.is_empty() {
            said(child, false, violations);
        }
    }
    if let Some(status) = written_status(plan.status.as_ref(), target) {
        let violations = schema::check(schemas, &status, || Some(target), Part::Status);
        if !violations.is_empty() {
            said(target, true, violations);
        }
    }
    if found.iter().any(|v| v.violation.blocks()) {
        found.retain(|v| v.violation.blocks());
        return Err(InvalidOutputs { violations: found });
    }
    Ok(found)
}

/// Where in a hook's response the objects of `invalid` are: `attachments[1]`, `status`, or
/// several of them (`children[0], children[3]`); `(outputs)` when none is found by name (a
/// planner may have renamed it).
pub(crate) fn where_in(response: &Value, invalid: &InvalidOutputs) -> String {
    let mut places: Vec<String> = Vec::new();
    for violation in &invalid.violations {
        let place = match violation.in_status {
            true => Some("status".to_string()),
            false => response
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(list, items)| Some((list, items.as_array()?)))
                .find_map(|(list, items)| {
                    let index = items.iter().position(|item| {
                        object::api_version(item) == violation.object.api_version
                            && object::kind(item) == violation.object.kind
                            && object::name(item) == violation.object.name
                    })?;
                    Some(format!("{list}[{index}]"))
                }),
        };
        let place = place.unwrap_or_else(|| "(outputs)".to_string());
        if !places.contains(&place) {
            places.push(place);
        }
    }
    places.join(", ")
}

/// What a response writes, read without a controller's spec (a script file's test case, which
/// has no planner): the objects in its top-level lists (`children`, `attachments`, a map's
/// outputs), and its `status`.
pub(crate) fn loose_plan(response: &Value) -> Plan {
    let is_object =
        |value: &&Value| !object::api_version(value).is_empty() && !object::kind(value).is_empty();
    let apply = response
        .as_object()
        .into_iter()
        .flat_map(|fields| fields.values())
        .filter_map(Value::as_array)
        .flatten()
        .filter(is_object)
        .cloned()
        .collect();
    Plan {
        apply,
        status: response
            .get("status")
            .filter(|status| status.is_object())
            .map(|status| StatusChange::Replace(status.clone())),
        ..Plan::default()
    }
}

/// The target as its status write would leave it, with the status the hook gave; `None` when
/// the plan writes none.
fn written_status(change: Option<&StatusChange>, target: &Value) -> Option<Value> {
    // The operator's own: a map parent's counts (merged), its conditions and a parent's
    // observedGeneration. A status schema may leave them out, and they are not the hook's to
    // answer for.
    let StatusChange::Replace(status) = change? else {
        return None;
    };
    let mut status = super::synced::without_operators(status);
    if let Some(fields) = status.as_object_mut() {
        fields.remove("observedGeneration");
    }
    let mut written = target.clone();
    written.as_object_mut()?.insert("status".into(), status);
    Some(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ViolationKind;
    use serde_json::json;

    fn violation(name: &str, in_status: bool) -> OutputViolation {
        OutputViolation {
            object: ObjectKey {
                api_version: "v1".into(),
                kind: "Service".into(),
                namespace: Some("shop".into()),
                name: name.into(),
            },
            in_status,
            violation: Violation {
                field: "spec.ports[0].port".into(),
                message: "must be an integer, not a string (\"80\")".into(),
                rule: None,
                kind: ViolationKind::Type,
                unchanged: false,
            },
        }
    }

    #[test]
    fn a_violation_is_placed_in_the_response_by_its_object() {
        let response = json!({
            "attachments": [
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b"}}
            ],
            "status": {"ready": 1}
        });
        let found = |names: &[(&str, bool)]| InvalidOutputs {
            violations: names.iter().map(|(n, s)| violation(n, *s)).collect(),
        };
        assert_eq!(
            where_in(
                &response,
                &found(&[("b", false), ("b", false), ("web", true)])
            ),
            "attachments[1], status"
        );
        assert_eq!(where_in(&response, &found(&[("c", false)])), "(outputs)");
        assert_eq!(
            violation("b", true).to_string(),
            "Service.v1 shop/b (status): spec.ports[0].port: must be an integer, not a string (\"80\")"
        );
    }
}
