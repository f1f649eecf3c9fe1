//! Provenance: every object a sync applies names the controller, hook and script revision that
//! computed it, and the version of the object it was computed from (`metascript explain` reads
//! them back).

use super::{PROVENANCE_ANNOTATION, Plan, SOURCE_ANNOTATION};
use crate::api::HookKind;
use crate::hooks::HookRunner;
use crate::object;
use serde_json::Value;

/// Annotates every object a plan applies with who computed it from what (see
/// [`PROVENANCE_ANNOTATION`]). Added after planning, so it never makes an object differ: it
/// changes when the object is written anyway, and then says what that write came from.
pub(crate) fn stamp_provenance(
    plan: &mut Plan,
    runner: &HookRunner,
    hook: HookKind,
    source: &Value,
) {
    let digest = runner
        .hooks
        .get(hook)
        .map(|hook| hook.digest())
        .unwrap_or_default();
    let provenance = format!(
        "{}/{} {hook} {}",
        hook.kind().as_str(),
        runner.hooks.controller,
        &digest[..digest.len().min(12)]
    );
    // Objects read from files (render, tests) have neither.
    let source = match (
        object::uid(source),
        object::str_at(source, "/metadata/resourceVersion"),
    ) {
        (None, None) => None,
        (uid, version) => Some(format!(
            "{}@{}",
            uid.unwrap_or_default(),
            version.unwrap_or_default()
        )),
    };
    for child in &mut plan.apply {
        object::set_string(child, "annotations", PROVENANCE_ANNOTATION, &provenance);
        if let Some(source) = &source {
            object::set_string(child, "annotations", SOURCE_ANNOTATION, source);
        }
    }
}

/// Takes the provenance annotations off every object a plan applies (`render --no-provenance`):
/// they name the script's digest, so plans that are otherwise the same (a hook's Rhai and Lua
/// flavours, a script before and after a refactoring) differ only there.
pub(crate) fn strip_provenance(plan: &mut Plan) {
    for child in &mut plan.apply {
        let annotations = child
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut);
        if let Some(annotations) = annotations {
            annotations.remove(PROVENANCE_ANNOTATION);
            annotations.remove(SOURCE_ANNOTATION);
            if annotations.is_empty() {
                child["metadata"]
                    .as_object_mut()
                    .map(|metadata| metadata.remove("annotations"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stripping_takes_off_only_the_provenance_annotations() {
        let mut plan = Plan {
            apply: vec![
                json!({"metadata": {"name": "a", "annotations": {
                    PROVENANCE_ANNOTATION: "DecoratorController/x sync 0123456789ab",
                    SOURCE_ANNOTATION: "uid@1",
                    "team": "blue",
                }}}),
                json!({"metadata": {"name": "b", "annotations": {
                    PROVENANCE_ANNOTATION: "DecoratorController/x sync 0123456789ab",
                }}}),
            ],
            ..Plan::default()
        };
        strip_provenance(&mut plan);
        assert_eq!(
            plan.apply,
            vec![
                json!({"metadata": {"name": "a", "annotations": {"team": "blue"}}}),
                json!({"metadata": {"name": "b"}}),
            ]
        );
    }
}
