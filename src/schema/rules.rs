//! The CEL half of a schema check: a custom resource's `x-kubernetes-validations`, evaluated
//! with Kubernetes' CEL libraries by the `kube-cel` crate, transition rules with the observed
//! object as `oldSelf`.
//!
//! What kube-cel cannot evaluate (`sortBy`, `cel.bind`, two-variable comprehensions, a rule
//! that does not compile here) is said as unchecked, never as a violation: the API server,
//! which does evaluate it, stays the judge of those.

use super::{Violation, ViolationKind};
use kube_cel::{CompiledSchema, ErrorKind, RootContext, Validator};
use serde_json::Value;
use std::cell::RefCell;

thread_local! {
    /// A validator registers every library function when made: once per thread, not per check.
    static VALIDATOR: RefCell<Option<Validator>> = const { RefCell::new(None) };
}

/// The rules of a schema, compiled; `None` when it has none.
pub(crate) fn compile(schema: &Value) -> Option<CompiledSchema> {
    has_rules(schema).then(|| kube_cel::compile_schema(schema))
}

fn has_rules(schema: &Value) -> bool {
    any_rule(schema, &|rule| {
        rule.get("rule").is_some_and(Value::is_string)
    })
}

/// Whether a rule of the schema (or the message it words) reads `oldSelf`.
pub(crate) fn has_transition_rules(schema: &Value) -> bool {
    any_rule(schema, &|rule| {
        ["rule", "messageExpression"]
            .iter()
            .filter_map(|key| rule.get(key).and_then(Value::as_str))
            .any(|text| text.contains("oldSelf"))
    })
}

fn any_rule(schema: &Value, wanted: &dyn Fn(&Value) -> bool) -> bool {
    match schema {
        Value::Object(node) => {
            let rules = node
                .get("x-kubernetes-validations")
                .and_then(Value::as_array);
            rules.into_iter().flatten().any(wanted)
                || node.values().any(|value| any_rule(value, wanted))
        }
        Value::Array(items) => items.iter().any(|item| any_rule(item, wanted)),
        _ => false,
    }
}

/// Evaluates the rules on `object` (and `old`, for transition rules).
pub(crate) fn check(
    compiled: &CompiledSchema,
    object: &Value,
    old: Option<&Value>,
    (api_version, kind): (&str, &str),
) -> Vec<Violation> {
    let root = RootContext {
        api_version: api_version.to_string(),
        api_group: api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
            .to_string(),
        kind: kind.to_string(),
    };
    let result = VALIDATOR.with(|cell| {
        let mut validator = cell.borrow_mut();
        let validator = validator.get_or_insert_with(Validator::new);
        validator.validate_compiled_with_context(compiled, object, old, Some(&root))
    });
    let Err(errors) = result else {
        return Vec::new();
    };
    errors
        .into_vec()
        .into_iter()
        .map(|error| {
            // Only a rule that evaluated to false is held against the object. An evaluation
            // error may be kube-cel's own (it types numbers by their JSON form: `1` in a
            // `number` field is an int, and int * double fails where the API server's typed
            // CEL passes), and kube-cel pairs list items with `oldSelf` by index where the API
            // server pairs a map-list's items by key.
            let by_index = error.rule.contains("oldSelf") && error.field_path.contains('[');
            let kind = match error.kind {
                ErrorKind::ValidationFailure if !by_index => ViolationKind::Rule,
                _ => ViolationKind::Unchecked,
            };
            let message = match kind {
                ViolationKind::Unchecked => format!("rule not checked here: {}", error.message),
                _ => error.message,
            };
            Violation {
                // A root rule's `fieldPath` keeps its leading dot.
                field: error.field_path.trim_start_matches('.').to_string(),
                message,
                rule: Some(error.rule),
                kind,
                unchanged: false,
            }
        })
        .collect()
}
