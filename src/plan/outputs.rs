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
    /// As every message names an object (`Widget.example.com/v1 ns/name`), with ` (status)`
    /// for the target's status.
    pub object: String,
    pub violation: Violation,
}

impl fmt::Display for OutputViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.violation)
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
    let mut said = |object: String, violations: Vec<Violation>| {
        found.extend(violations.into_iter().map(|violation| OutputViolation {
            object: object.clone(),
            violation,
        }));
    };
    for child in &plan.apply {
        let violations = schema::check(schemas, child, || observed(child), Part::Resource);
        if !violations.is_empty() {
            said(ObjectKey::of(child).to_string(), violations);
        }
    }
    if let Some(status) = written_status(plan.status.as_ref(), target) {
        let violations = schema::check(schemas, &status, || Some(target), Part::Status);
        if !violations.is_empty() {
            said(format!("{} (status)", ObjectKey::of(target)), violations);
        }
    }
    if found.iter().any(|v| v.violation.blocks()) {
        found.retain(|v| v.violation.blocks());
        return Err(InvalidOutputs { violations: found });
    }
    Ok(found)
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
