//! The `Synced` condition the operator keeps on every parent (and on decorator targets that
//! have a status): whether the last sync went through, and if not, why. Application teams
//! often cannot read Events in other namespaces; an object's own status is where they look.
//!
//! The condition is the operator's, written beside whatever status the hook writes: into a
//! status the hook replaces whole (with other controllers' conditions of this kind kept), with
//! a map parent's counts, or on its own, guarded by the object's resourceVersion so that
//! conditions others wrote meanwhile are not lost. Planners and routing compare statuses
//! without these conditions, so they never make a hook's status look changed.

use super::writes::{Plan, StatusChange};
use crate::object;
use serde_json::{Value, json};

/// The condition type on a parent (composite, map).
pub(crate) const SYNCED: &str = "Synced";
/// How a decorator's condition type ends (`<decorator>.metascript.dev/Synced`).
const DECORATED_SUFFIX: &str = ".metascript.dev/Synced";

/// Where a controller reports its syncs, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct SyncedPlace {
    /// The condition type: [`SYNCED`] on parents; on a decorator's targets, which other
    /// decorators (and the target's own controller) share, one named after the decorator.
    pub condition_type: String,
    /// Whether it rides along with every status write of the sync (a map parent's counts).
    /// Otherwise (a decorator's targets, someone else's objects) only with a status the hook
    /// writes. Either way it is written on its own to report a failure, or to clear one.
    pub always: bool,
}

impl SyncedPlace {
    pub(crate) fn parent() -> SyncedPlace {
        SyncedPlace {
            condition_type: SYNCED.to_string(),
            always: true,
        }
    }

    /// On a target of decorator `name`.
    pub(crate) fn decorated(name: &str) -> SyncedPlace {
        SyncedPlace {
            condition_type: format!("{name}{DECORATED_SUFFIX}"),
            always: false,
        }
    }
}

/// What a sync ended with.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SyncResult<'a> {
    Ok,
    Failed { reason: &'a str, message: &'a str },
}

/// Whether `object` says its condition of `condition_type` is True.
pub(crate) fn is_true(object: &Value, condition_type: &str) -> bool {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some(condition_type)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

/// Whether a condition is one the operator keeps (its own or another controller's).
fn is_operators(condition: &Value) -> bool {
    condition
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|kind| kind == SYNCED || kind.ends_with(DECORATED_SUFFIX))
}

/// `status` without the operator's conditions (and without `conditions` when only those were
/// there): what a hook's status is compared with.
pub(crate) fn without_operators(status: &Value) -> Value {
    let mut status = status.clone();
    if let Some(map) = status.as_object_mut()
        && let Some(Value::Array(conditions)) = map.get_mut("conditions")
    {
        conditions.retain(|c| !is_operators(c));
        if conditions.is_empty() {
            map.remove("conditions");
        }
    }
    status
}

/// The condition as it should be after `result`, keeping the observed one's transition time
/// when its status does not change.
fn condition(
    observed: Option<&Value>,
    condition_type: &str,
    result: &SyncResult,
    generation: Option<i64>,
    now: impl FnOnce() -> String,
) -> Value {
    let (status, reason, message) = match result {
        SyncResult::Ok => ("True", "Synced", String::new()),
        SyncResult::Failed { reason, message } => ("False", *reason, message.to_string()),
    };
    let since = observed
        .filter(|c| c.get("status").and_then(Value::as_str) == Some(status))
        .and_then(|c| c.get("lastTransitionTime"))
        .and_then(Value::as_str)
        .map_or_else(now, str::to_string);
    let mut condition = json!({
        "type": condition_type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    });
    if let Some(generation) = generation {
        condition["observedGeneration"] = generation.into();
    }
    condition
}

/// Whether the observed condition already says what `wanted` does. A parent's schema may
/// prune the fields it does not declare (`lastTransitionTime`, `observedGeneration`): what
/// is absent is not compared, or every sync would write again what cannot be stored.
fn says(observed: &Value, wanted: &Value) -> bool {
    ["status", "reason", "message"]
        .iter()
        .all(|field| observed.get(field) == wanted.get(field))
        && observed
            .get("observedGeneration")
            .is_none_or(|generation| Some(generation) == wanted.get("observedGeneration"))
}

/// `conditions` with the condition of `condition_type` set to `wanted` (in place, or added).
fn set_in(conditions: &mut Vec<Value>, wanted: Value, condition_type: &str) {
    match conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(condition_type))
    {
        Some(existing) => *existing = wanted,
        None => conditions.push(wanted),
    }
}

/// Brings `object`'s condition in line with `result`: in the plan's status write when it has
/// one, otherwise as a write of its own, returned (`None`: nothing to write). Nothing is
/// written when the condition already says so, nor when the object has no such condition,
/// the sync went well and the plan writes no status to carry it.
pub(crate) fn report(
    plan: &mut Plan,
    object: &Value,
    place: &SyncedPlace,
    result: &SyncResult,
    now: impl FnOnce() -> String,
) -> Option<StatusChange> {
    let empty = Vec::new();
    let observed_conditions = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let observed = observed_conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(&place.condition_type));
    let carried = matches!(plan.status, Some(StatusChange::Replace(_)));
    let riding = matches!(plan.status, Some(StatusChange::Merge(_)));
    if !carried && observed.is_none() && *result == SyncResult::Ok && !(place.always && riding) {
        // Nothing to clear (most syncs: asked first, before a condition is built). A write of
        // its own would also repeat on every sync where the schema prunes `conditions`: a
        // healthy object gets it with a status write it has.
        return None;
    }
    // Not on someone else's object: its every spec change would be one more write.
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .filter(|_| place.always);
    let wanted = condition(observed, &place.condition_type, result, generation, now);
    if let Some(StatusChange::Replace(status)) = &mut plan.status {
        // The hook's status replaces the observed one: the condition goes in with it, and so
        // do other controllers' conditions of this kind, which the hook does not know about.
        let map = status.as_object_mut()?;
        let mut conditions: Vec<Value> = match map.remove("conditions") {
            Some(Value::Array(conditions)) => conditions,
            _ => Vec::new(),
        };
        conditions.retain(|c| !is_operators(c));
        conditions.extend(
            observed_conditions
                .iter()
                .filter(|c| {
                    is_operators(c)
                        && c.get("type").and_then(Value::as_str) != Some(&place.condition_type)
                })
                .cloned(),
        );
        conditions.push(wanted);
        map.insert("conditions".into(), conditions.into());
        return None;
    }
    if observed.is_some_and(|observed| says(observed, &wanted)) {
        return None;
    }
    let mut conditions = observed_conditions.clone();
    set_in(&mut conditions, wanted, &place.condition_type);
    if let Some(StatusChange::Merge(fields)) = &mut plan.status {
        // A map parent's counts: the operator's own status, written as a whole.
        fields["conditions"] = conditions.into();
        return None;
    }
    Some(StatusChange::Conditions {
        conditions: conditions.into(),
        resource_version: object::str_at(object, "/metadata/resourceVersion")
            .unwrap_or_default()
            .to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-28T12:00:00Z";
    const EARLIER: &str = "2026-11-27T12:00:00Z";

    fn parent(conditions: Value) -> Value {
        json!({"metadata": {"name": "a", "generation": 3, "resourceVersion": "7"},
               "status": {"phase": "Active", "conditions": conditions}})
    }

    fn synced(status: &str, reason: &str, message: &str, since: &str) -> Value {
        json!({"type": "Synced", "status": status, "reason": reason, "message": message,
               "lastTransitionTime": since, "observedGeneration": 3})
    }

    fn reported(
        object: &Value,
        place: &SyncedPlace,
        result: SyncResult,
        plan: &mut Plan,
    ) -> Option<StatusChange> {
        report(plan, object, place, &result, || NOW.to_string())
    }

    /// The conditions of a write of its own, checking it is conditioned on the version read.
    fn alone(change: Option<StatusChange>) -> Value {
        match change {
            Some(StatusChange::Conditions {
                conditions,
                resource_version,
            }) => {
                assert_eq!(resource_version, "7", "conditioned on the version read");
                conditions
            }
            other => panic!("expected a write of its own, got {other:?}"),
        }
    }

    #[test]
    fn a_parent_gets_the_condition_with_its_status_and_no_write_after() {
        let object = parent(json!([{"type": "Ready", "status": "True"}]));
        let mut plan = Plan::default();
        let alone = reported(&object, &SyncedPlace::parent(), SyncResult::Ok, &mut plan);
        assert_eq!(
            (alone, &plan.status),
            (None, &None),
            "no write for a healthy parent"
        );
        let mut plan = Plan {
            status: Some(StatusChange::Merge(json!({"inputs": {"total": 1}}))),
            ..Plan::default()
        };
        assert_eq!(
            reported(&object, &SyncedPlace::parent(), SyncResult::Ok, &mut plan),
            None
        );
        let Some(StatusChange::Merge(fields)) = &plan.status else {
            panic!("expected a merge, got {:?}", plan.status);
        };
        let conditions = fields["conditions"].as_array().unwrap();
        assert_eq!(conditions[0]["type"], "Ready", "others' conditions kept");
        assert_eq!(conditions[1], synced("True", "Synced", "", NOW));

        let object = parent(json!([synced("True", "Synced", "", EARLIER)]));
        let mut plan = Plan::default();
        let alone = reported(&object, &SyncedPlace::parent(), SyncResult::Ok, &mut plan);
        assert_eq!(
            (alone, plan.status),
            (None, None),
            "nothing to say, nothing written"
        );
    }

    #[test]
    fn a_failure_turns_it_false_and_the_next_good_sync_true_again() {
        let object = parent(json!([{"type": "Ready"}, synced("True", "Synced", "", EARLIER)]));
        let failed = SyncResult::Failed {
            reason: "AdoptionRefused",
            message: "Namespace team-a already exists",
        };
        let mut plan = Plan::default();
        let conditions = alone(reported(
            &object,
            &SyncedPlace::parent(),
            failed.clone(),
            &mut plan,
        ));
        assert_eq!(plan.status, None, "the plan itself is left alone");
        let failing = synced(
            "False",
            "AdoptionRefused",
            "Namespace team-a already exists",
            NOW,
        );
        assert_eq!(conditions, json!([{"type": "Ready"}, failing.clone()]));

        // The same failure again writes nothing; its transition time stays.
        let object = parent(json!([failing]));
        let alone_again = reported(&object, &SyncedPlace::parent(), failed, &mut plan);
        assert_eq!(alone_again, None);

        let conditions = alone(reported(
            &object,
            &SyncedPlace::parent(),
            SyncResult::Ok,
            &mut plan,
        ));
        assert_eq!(conditions[0]["status"], "True");
    }

    #[test]
    fn fields_a_schema_pruned_are_not_written_again() {
        let pruned = json!({"type": "Synced", "status": "True", "reason": "Synced", "message": ""});
        let mut plan = Plan::default();
        let change = reported(
            &parent(json!([pruned])),
            &SyncedPlace::parent(),
            SyncResult::Ok,
            &mut plan,
        );
        assert_eq!((change, plan.status), (None, None));
    }

    #[test]
    fn a_status_the_hook_replaces_carries_every_operator_condition() {
        let other = json!({"type": "labels.metascript.dev/Synced", "status": "False"});
        let object = parent(json!([
            synced("True", "Synced", "", EARLIER),
            other.clone(),
            {"type": "Ready", "status": "True"},
        ]));
        let mut plan = Plan {
            status: Some(StatusChange::Replace(json!({
                "phase": "Terminating",
                "conditions": [{"type": "Synced", "status": "Mine"}, {"type": "Done"}],
            }))),
            ..Plan::default()
        };
        let change = reported(&object, &SyncedPlace::parent(), SyncResult::Ok, &mut plan);
        assert_eq!(change, None);
        assert_eq!(
            plan.status,
            Some(StatusChange::Replace(json!({
                "phase": "Terminating",
                // The hook's own conditions, a decorator's kept, the operator's own last.
                "conditions": [{"type": "Done"}, other, synced("True", "Synced", "", EARLIER)],
            })))
        );
    }

    #[test]
    fn a_decorated_target_is_told_only_of_failures_and_their_end() {
        let place = SyncedPlace::decorated("team-labels");
        assert_eq!(place.condition_type, "team-labels.metascript.dev/Synced");
        let target = json!({"metadata": {"name": "web", "resourceVersion": "7"},
                            "status": {"replicas": 1}});
        let mut plan = Plan::default();
        let change = reported(&target, &place, SyncResult::Ok, &mut plan);
        assert_eq!(change, None, "a healthy target is not written to");

        let failed = SyncResult::Failed {
            reason: "HookFailed",
            message: "boom",
        };
        let conditions = alone(reported(&target, &place, failed, &mut plan));
        assert_eq!(conditions[0]["status"], "False");
        assert!(conditions[0]["observedGeneration"].is_null());
        let target = json!({"metadata": {"resourceVersion": "7"},
                            "status": {"conditions": conditions}});
        let conditions = alone(reported(&target, &place, SyncResult::Ok, &mut plan));
        assert_eq!(conditions[0]["status"], "True", "the failure is cleared");
    }

    #[test]
    fn the_comparison_leaves_every_operator_condition_out() {
        let status = json!({"phase": "Active", "conditions": [
            synced("True", "Synced", "", NOW),
            {"type": "a.metascript.dev/Synced"},
        ]});
        assert_eq!(without_operators(&status), json!({"phase": "Active"}));
        let status = json!({"conditions": [{"type": "Ready"}, synced("True", "Synced", "", NOW)]});
        assert_eq!(
            without_operators(&status),
            json!({"conditions": [{"type": "Ready"}]})
        );
    }
}
