//! The `Synced` condition the operator keeps on every parent (and on decorator targets that
//! have a status): whether the last sync went through, and if not, why. Application teams
//! often cannot read Events in other namespaces; an object's own status is where they look.
//!
//! The condition is the operator's, written beside whatever status the hook writes: into a
//! status the hook replaces whole, or merged into `status.conditions` when the hook wrote
//! nothing. Planners compare a hook's status with the observed one without it, so the
//! condition never makes a status look changed.

use super::writes::{Plan, StatusChange};
use serde_json::{Map, Value, json};

/// The condition type on a parent (composite, map).
pub const SYNCED: &str = "Synced";
/// The longest message a condition carries: enough for an error with its position and the
/// API server's reason; the Event has the same text.
const MAX_MESSAGE_BYTES: usize = 1024;

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
    pub fn parent() -> SyncedPlace {
        SyncedPlace {
            condition_type: SYNCED.to_string(),
            always: true,
        }
    }

    /// On a target of decorator `name`.
    pub fn decorated(name: &str) -> SyncedPlace {
        SyncedPlace {
            condition_type: format!("{name}.metascript.dev/{SYNCED}"),
            always: false,
        }
    }
}

/// What a sync ended with.
#[derive(Clone, Debug, PartialEq)]
pub enum SyncResult<'a> {
    Ok,
    Failed { reason: &'a str, message: &'a str },
}

/// Whether `object` says its condition of `condition_type` is True.
pub fn is_true(object: &Value, condition_type: &str) -> bool {
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

/// `status` without the condition of `condition_type` (and without `conditions` when that was
/// the only one): what a hook's status is compared with.
pub fn without_condition(status: &Value, condition_type: &str) -> Value {
    let mut status = status.clone();
    if let Some(map) = status.as_object_mut()
        && let Some(Value::Array(conditions)) = map.get_mut("conditions")
    {
        conditions.retain(|c| c.get("type").and_then(Value::as_str) != Some(condition_type));
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
    now: &str,
) -> Value {
    let (status, reason, message) = match result {
        SyncResult::Ok => ("True", "Synced", String::new()),
        SyncResult::Failed { reason, message } => ("False", *reason, cut(message)),
    };
    let since = observed
        .filter(|c| c.get("status").and_then(Value::as_str) == Some(status))
        .and_then(|c| c.get("lastTransitionTime"))
        .and_then(Value::as_str)
        .unwrap_or(now);
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

fn cut(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE_BYTES - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
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

/// Adds to `plan` what brings `object`'s condition in line with `result`. Nothing is added
/// when the condition already says so, nor when the object has no such condition, the sync
/// went well and the plan writes no status to carry it.
pub fn report(
    plan: &mut Plan,
    object: &Value,
    place: &SyncedPlace,
    result: &SyncResult,
    now: &str,
) {
    let empty = Vec::new();
    let observed_conditions = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let observed = observed_conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(&place.condition_type));
    // Not on someone else's object: its every spec change would be one more write.
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .filter(|_| place.always);
    let wanted = condition(observed, &place.condition_type, result, generation, now);
    if let Some(StatusChange::Replace(status)) = &mut plan.status {
        // The hook's status replaces the observed one: the condition goes in with it.
        let Some(map) = status.as_object_mut() else {
            return;
        };
        let mut conditions = match map.remove("conditions") {
            Some(Value::Array(conditions)) => conditions,
            _ => Vec::new(),
        };
        set_in(&mut conditions, wanted, &place.condition_type);
        map.insert("conditions".into(), conditions.into());
        return;
    }
    if observed.is_some_and(|observed| says(observed, &wanted)) {
        return;
    }
    let riding = matches!(plan.status, Some(StatusChange::Merge(_)));
    if observed.is_none() && *result == SyncResult::Ok && !(place.always && riding) {
        // Nothing to clear. A write of its own would also repeat on every sync where the
        // schema prunes `conditions`: a healthy object gets it with a status write it has.
        return;
    }
    let mut conditions = observed_conditions.clone();
    set_in(&mut conditions, wanted, &place.condition_type);
    match &mut plan.status {
        Some(StatusChange::Merge(fields)) => fields["conditions"] = conditions.into(),
        _ => {
            let mut fields = Map::new();
            fields.insert("conditions".into(), conditions.into());
            plan.status = Some(StatusChange::Merge(Value::Object(fields)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-28T12:00:00Z";
    const EARLIER: &str = "2026-11-27T12:00:00Z";

    fn parent(conditions: Value) -> Value {
        json!({"metadata": {"name": "a", "generation": 3},
               "status": {"phase": "Active", "conditions": conditions}})
    }

    fn synced(status: &str, reason: &str, message: &str, since: &str) -> Value {
        json!({"type": "Synced", "status": status, "reason": reason, "message": message,
               "lastTransitionTime": since, "observedGeneration": 3})
    }

    fn reported(object: &Value, place: &SyncedPlace, result: SyncResult, plan: &mut Plan) {
        report(plan, object, place, &result, NOW);
    }

    #[test]
    fn a_parent_gets_the_condition_with_its_status_and_no_write_after() {
        let object = parent(json!([{"type": "Ready", "status": "True"}]));
        let mut plan = Plan::default();
        reported(&object, &SyncedPlace::parent(), SyncResult::Ok, &mut plan);
        assert_eq!(
            plan.status, None,
            "no write of its own for a healthy parent"
        );
        let mut plan = Plan {
            status: Some(StatusChange::Merge(json!({"inputs": {"total": 1}}))),
            ..Plan::default()
        };
        reported(&object, &SyncedPlace::parent(), SyncResult::Ok, &mut plan);
        let Some(StatusChange::Merge(fields)) = &plan.status else {
            panic!("expected a merge, got {:?}", plan.status);
        };
        let conditions = fields["conditions"].as_array().unwrap();
        assert_eq!(conditions[0]["type"], "Ready", "others' conditions kept");
        assert_eq!(conditions[1], synced("True", "Synced", "", NOW));

        let object = parent(json!([synced("True", "Synced", "", EARLIER)]));
        let mut plan = Plan::default();
        reported(&object, &SyncedPlace::parent(), SyncResult::Ok, &mut plan);
        assert_eq!(plan.status, None, "nothing to say, nothing written");
    }

    #[test]
    fn a_failure_turns_it_false_and_the_next_good_sync_true_again() {
        let object = parent(json!([synced("True", "Synced", "", EARLIER)]));
        let mut plan = Plan::default();
        let failed = SyncResult::Failed {
            reason: "AdoptionRefused",
            message: "Namespace team-a already exists",
        };
        reported(&object, &SyncedPlace::parent(), failed.clone(), &mut plan);
        let Some(StatusChange::Merge(fields)) = &plan.status else {
            panic!("expected a merge");
        };
        let failing = synced(
            "False",
            "AdoptionRefused",
            "Namespace team-a already exists",
            NOW,
        );
        assert_eq!(fields["conditions"], json!([failing.clone()]));

        // The same failure again writes nothing; its transition time stays.
        let object = parent(json!([failing]));
        let mut plan = Plan::default();
        reported(&object, &SyncedPlace::parent(), failed, &mut plan);
        assert_eq!(plan.status, None);

        let mut plan = Plan::default();
        reported(&object, &SyncedPlace::parent(), SyncResult::Ok, &mut plan);
        let Some(StatusChange::Merge(fields)) = &plan.status else {
            panic!("expected a merge");
        };
        assert_eq!(fields["conditions"][0]["status"], "True");
    }

    #[test]
    fn fields_a_schema_pruned_are_not_written_again() {
        let pruned = json!({"type": "Synced", "status": "True", "reason": "Synced", "message": ""});
        let mut plan = Plan::default();
        reported(
            &parent(json!([pruned])),
            &SyncedPlace::parent(),
            SyncResult::Ok,
            &mut plan,
        );
        assert_eq!(plan.status, None);
    }

    #[test]
    fn a_status_the_hook_replaces_carries_the_condition() {
        let object = parent(json!([synced("True", "Synced", "", EARLIER)]));
        let mut plan = Plan {
            status: Some(StatusChange::Replace(json!({"phase": "Terminating"}))),
            ..Plan::default()
        };
        reported(&object, &SyncedPlace::parent(), SyncResult::Ok, &mut plan);
        assert_eq!(
            plan.status,
            Some(StatusChange::Replace(json!({
                "phase": "Terminating",
                "conditions": [synced("True", "Synced", "", EARLIER)],
            })))
        );
    }

    #[test]
    fn a_decorated_target_is_told_only_of_failures_and_their_end() {
        let place = SyncedPlace::decorated("team-labels");
        assert_eq!(place.condition_type, "team-labels.metascript.dev/Synced");
        let target = json!({"metadata": {"name": "web"}, "status": {"replicas": 1}});
        let mut plan = Plan::default();
        reported(&target, &place, SyncResult::Ok, &mut plan);
        assert_eq!(plan.status, None, "a healthy target is not written to");

        let failed = SyncResult::Failed {
            reason: "HookFailed",
            message: "boom",
        };
        reported(&target, &place, failed, &mut plan);
        let Some(StatusChange::Merge(fields)) = plan.status else {
            panic!("expected a merge");
        };
        assert_eq!(fields["conditions"][0]["status"], "False");
        let target = json!({"status": fields});
        let mut plan = Plan::default();
        reported(&target, &place, SyncResult::Ok, &mut plan);
        assert!(plan.status.is_some(), "the failure is cleared");
    }

    #[test]
    fn the_comparison_leaves_the_condition_out() {
        let status = json!({"phase": "Active", "conditions": [synced("True", "Synced", "", NOW)]});
        assert_eq!(
            without_condition(&status, SYNCED),
            json!({"phase": "Active"})
        );
        let status = json!({"conditions": [{"type": "Ready"}, synced("True", "Synced", "", NOW)]});
        assert_eq!(
            without_condition(&status, SYNCED),
            json!({"conditions": [{"type": "Ready"}]})
        );
    }

    #[test]
    fn a_long_message_is_cut_at_a_character() {
        let message = "é".repeat(1000);
        let failed = SyncResult::Failed {
            reason: "HookFailed",
            message: &message,
        };
        let mut plan = Plan::default();
        reported(
            &parent(json!([])),
            &SyncedPlace::parent(),
            failed,
            &mut plan,
        );
        let Some(StatusChange::Merge(fields)) = plan.status else {
            panic!("expected a merge");
        };
        let written = fields["conditions"][0]["message"].as_str().unwrap();
        assert!(written.len() <= MAX_MESSAGE_BYTES && written.ends_with('…'));
    }
}
