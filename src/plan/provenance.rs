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
pub fn stamp_provenance(plan: &mut Plan, runner: &HookRunner, hook: HookKind, source: &Value) {
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
