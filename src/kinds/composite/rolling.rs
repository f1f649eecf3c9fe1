//! Rolling updates, pure: a parent's revisions and which child moves next.
//!
//! A revision is what the children of a rolling type are computed from: the values of the
//! parent's `revisionHistory.fieldPaths` (default `spec`) and the sync hook that ran (its
//! digest). Each is kept in a built-in `apps/v1` ControllerRevision owned by the parent, whose
//! immutable `data` holds `{parentPatch, syncHook}`, and each child of a rolling type carries the
//! hash of the revision it was last written for in the label [`REVISION_LABEL`] (as a
//! StatefulSet's Pods carry `controller-revision-hash`). The label is the claim: which revision
//! a child belongs to is read off the child, never kept anywhere that could drift from it.
//!
//! On each sync the latest revision's children are written as the hook returned them; a child
//! still on an older revision keeps being synced to that revision (the hook is called with the
//! parent as it was, `fieldPaths` restored) while its hook is still the one loaded, or is left
//! as it is otherwise; and one such child moves to the latest revision, in the order the hook
//! listed the children, once every child already on the latest revision is written, not being
//! deleted and passes its type's `statusChecks` (Metacontroller's rules). A child whose content
//! would not change is moved at once (relabelled in place).

use super::api::StatusConditionCheck;
use crate::api::UpdateMethod;
use crate::object::{self, ObjectKey};
use crate::plan::APPLIED_DIGEST_ANNOTATION;
use crate::plan::children::{self, ChildType};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The label holding the hash of the revision a child (and its ControllerRevision) is of.
pub const REVISION_LABEL: &str = "metascript.dev/revision";

/// The type of the `Updated` condition a rolling update keeps on the parent's status.
pub const UPDATED: &str = "Updated";

/// How one child type rolls out.
#[derive(Clone, Debug, PartialEq)]
pub struct RollingType {
    /// `RollingInPlace` (else `RollingRecreate`): a child must also have observed its latest
    /// spec (`status.observedGeneration`, when it reports one) before the rollout goes on.
    pub in_place: bool,
    pub checks: Vec<StatusConditionCheck>,
}

/// One revision of a parent.
#[derive(Clone, Debug, PartialEq)]
pub struct Revision {
    /// What children carry in [`REVISION_LABEL`]: a digest of the parent's uid, the patch and
    /// the hook.
    pub hash: String,
    /// The ControllerRevision's name: `<parent>-<hash>`.
    pub name: String,
    /// The parent's `fieldPaths`, as a patch of the parent.
    pub patch: Value,
    /// The digest of the sync hook the revision's children were computed by.
    pub hook: String,
}

impl Revision {
    /// The revision a parent is at now.
    pub fn latest(parent: &Value, field_paths: &[String], hook: &str) -> Revision {
        let patch = parent_patch(parent, field_paths);
        let identity = json!([object::uid(parent).unwrap_or_default(), patch, hook]);
        let hash = object::value_digest(&identity)[..16].to_string();
        // Names are at most 253 characters; the hash keeps them unique when the parent's is cut.
        let base: String = object::name(parent).chars().take(253 - 17).collect();
        Revision {
            name: format!("{base}-{hash}"),
            hash,
            patch,
            hook: hook.to_string(),
        }
    }

    /// The revision a ControllerRevision records, if it is one of ours.
    pub fn of_object(revision: &Value) -> Option<Revision> {
        Some(Revision {
            hash: object::label(revision, REVISION_LABEL)?.to_string(),
            name: object::name(revision).to_string(),
            patch: revision.pointer("/data/parentPatch")?.clone(),
            hook: object::str_at(revision, "/data/syncHook")?.to_string(),
        })
    }

    /// The ControllerRevision recording this revision, numbered `number`.
    pub fn object(&self, parent: &Value, number: i64) -> Value {
        let mut revision = json!({
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": self.name,
                "labels": {REVISION_LABEL: self.hash},
                "ownerReferences": [object::owner_reference(parent)],
            },
            "data": {"parentPatch": self.patch, "syncHook": self.hook},
            "revision": number,
        });
        if let Some(namespace) = object::namespace(parent) {
            revision["metadata"]["namespace"] = json!(namespace);
        }
        revision
    }

    /// The parent as it was at this revision: the current parent with this revision's
    /// `fieldPaths` values put back (a path the revision did not have keeps its current value).
    pub fn parent(&self, parent: &Value, field_paths: &[String]) -> Value {
        let mut materialized = parent.clone();
        for path in field_paths {
            let parts: Vec<&str> = path.split('.').collect();
            if let Some(value) = lookup(&self.patch, &parts) {
                set(&mut materialized, &parts, value.clone());
            }
        }
        materialized
    }
}

/// The values of `field_paths` in `parent`, as a patch with the same shape.
pub(super) fn parent_patch(parent: &Value, field_paths: &[String]) -> Value {
    let mut patch = json!({});
    for path in field_paths {
        let parts: Vec<&str> = path.split('.').collect();
        if let Some(value) = lookup(parent, &parts) {
            set(&mut patch, &parts, value.clone());
        }
    }
    patch
}

fn lookup<'a>(value: &'a Value, parts: &[&str]) -> Option<&'a Value> {
    parts.iter().try_fold(value, |value, part| value.get(part))
}

fn set(value: &mut Value, parts: &[&str], new: Value) {
    let Some((last, path)) = parts.split_last() else {
        return;
    };
    let mut current = value;
    for part in path {
        if !current.get(part).is_some_and(Value::is_object)
            && let Some(map) = current.as_object_mut()
        {
            map.insert(part.to_string(), json!({}));
        }
        match current.get_mut(part) {
            Some(next) => current = next,
            None => return,
        }
    }
    if let Some(map) = current.as_object_mut() {
        map.insert(last.to_string(), new);
    }
}

/// Labels a desired child with the revision it is computed for.
pub(super) fn stamped(mut child: Value, revision: &str) -> Value {
    object::set_string(&mut child, "labels", REVISION_LABEL, revision);
    child
}

/// Whether a child already has everything `desired` asks for except its revision label: moving
/// it to `desired`'s revision changes nothing else. A child this controller never wrote (adopted,
/// or from before its type rolled) has no applied digest to compare, and is judged by its
/// fields alone.
fn same_content(desired: &Value, observed: &Value) -> bool {
    let mut unlabelled = desired.clone();
    if let Some(labels) = unlabelled
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(REVISION_LABEL);
    }
    let digest = |object: &Value| {
        object
            .pointer("/metadata/annotations")
            .and_then(|annotations| annotations.get(APPLIED_DIGEST_ANNOTATION))
            .is_some()
    };
    if !digest(observed)
        && let Some(metadata) = object::metadata_mut(&mut unlabelled)
        && let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
    {
        annotations.remove(APPLIED_DIGEST_ANNOTATION);
        if annotations.is_empty() {
            metadata.remove("annotations");
        }
    }
    children::already_applied(&unlabelled, observed)
}

/// What a rolling step decided.
#[derive(Debug)]
pub(super) struct Rolled {
    /// Every desired child with the method it is reconciled with.
    pub desired: Vec<(Value, UpdateMethod)>,
    /// The `Updated` condition to report.
    pub condition: Value,
    /// The revisions children still belong to after this step (the latest always).
    pub live: BTreeSet<String>,
}

/// One step of a rolling update: `desired` (the latest revision's children, in the hook's
/// order, with their type's index), `observed` (the children the parent owns), `rolling` (per
/// child type, how it rolls, or `None`), `old` (the desired children of each older revision that
/// can still be computed, by hash, then key).
pub(super) fn roll(
    desired: Vec<(Value, usize)>,
    observed: &[&Value],
    types: &[ChildType],
    rolling: &[Option<RollingType>],
    latest: &Revision,
    old: &BTreeMap<String, BTreeMap<ObjectKey, Value>>,
) -> Rolled {
    let observed: BTreeMap<ObjectKey, &Value> =
        observed.iter().map(|c| (ObjectKey::of(c), *c)).collect();
    // (desired, method, type index), and the entries that could move to the latest revision.
    let mut out: Vec<(Value, UpdateMethod, usize)> = Vec::with_capacity(desired.len());
    let mut waiting: Vec<(usize, Value)> = Vec::new();
    for (child, index) in desired {
        let base = types[index].rule.update_method();
        if rolling[index].is_none() {
            out.push((child, base, index));
            continue;
        }
        let key = ObjectKey::of(&child);
        let at_latest = stamped(child, &latest.hash);
        let Some(existing) = observed.get(&key).copied() else {
            out.push((at_latest, base, index));
            continue;
        };
        let revision = object::label(existing, REVISION_LABEL);
        if object::is_deleting(existing) || revision == Some(latest.hash.as_str()) {
            out.push((at_latest, base, index));
        } else if same_content(&at_latest, existing) {
            out.push((at_latest, UpdateMethod::InPlace, index));
        } else {
            waiting.push((out.len(), at_latest));
            match revision.and_then(|hash| old.get(hash)?.get(&key)) {
                Some(at_old) => out.push((at_old.clone(), base, index)),
                // Its revision cannot be computed: left exactly as it is until its turn.
                None => out.push(((*existing).clone(), UpdateMethod::OnDelete, index)),
            }
        }
    }
    let condition = match waiting.first() {
        None => condition(
            "True",
            "OnLatestRevision",
            &format!("latest ControllerRevision: {}", latest.name),
        ),
        Some((position, at_latest)) => match gate(&out, &observed, rolling, &latest.hash) {
            Ok(()) => {
                let message = format!(
                    "updating {} {}",
                    object::kind(at_latest),
                    object::name(at_latest)
                );
                let index = out[*position].2;
                let base = types[index].rule.update_method();
                out[*position] = (at_latest.clone(), base, index);
                condition("False", "RolloutProgressing", &message)
            }
            Err(waiting_for) => condition("False", "RolloutWaiting", &waiting_for),
        },
    };
    let mut live = BTreeSet::from([latest.hash.clone()]);
    for (child, _, index) in &out {
        if rolling[*index].is_some()
            && let Some(hash) = object::label(child, REVISION_LABEL)
        {
            live.insert(hash.to_string());
        }
    }
    Rolled {
        desired: out
            .into_iter()
            .map(|(child, method, _)| (child, method))
            .collect(),
        condition,
        live,
    }
}

/// Whether the rollout may move another child: every child of a rolling type that is on the
/// latest revision is there as written, not being deleted, has observed its spec (in place)
/// and passes its checks. The error says what it waits for.
fn gate(
    out: &[(Value, UpdateMethod, usize)],
    observed: &BTreeMap<ObjectKey, &Value>,
    rolling: &[Option<RollingType>],
    latest: &str,
) -> Result<(), String> {
    for (desired, _, index) in out {
        let Some(rolling) = &rolling[*index] else {
            continue;
        };
        if object::label(desired, REVISION_LABEL) != Some(latest) {
            continue;
        }
        let what = format!("{} {}", object::kind(desired), object::name(desired));
        let Some(child) = observed.get(&ObjectKey::of(desired)) else {
            return Err(format!("{what} does not exist yet"));
        };
        if object::is_deleting(child) {
            return Err(format!("{what} is being deleted"));
        }
        if !children::already_applied(desired, child) {
            return Err(format!("{what} is not updated yet"));
        }
        if rolling.in_place {
            let generation = child
                .pointer("/metadata/generation")
                .and_then(Value::as_i64);
            let observed_generation = child
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64);
            if let (Some(generation), Some(seen)) = (generation, observed_generation)
                && seen < generation
            {
                return Err(format!("{what} has not observed its latest spec yet"));
            }
        }
        status_check(&rolling.checks, child)
            .map_err(|failed| format!("{what} failed status check: {failed}"))?;
    }
    Ok(())
}

/// Metacontroller's status condition checks, with its messages.
pub(super) fn status_check(checks: &[StatusConditionCheck], child: &Value) -> Result<(), String> {
    for check in checks {
        let condition = child
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|condition| object::str_at(condition, "/type") == Some(check.type_.as_str()));
        let Some(condition) = condition else {
            return Err(format!(
                "required condition type missing: {:?}",
                check.type_
            ));
        };
        for (field, wanted) in [("status", &check.status), ("reason", &check.reason)] {
            let actual = object::str_at(condition, &format!("/{field}")).unwrap_or_default();
            if let Some(wanted) = wanted
                && actual != wanted
            {
                return Err(format!(
                    "{:?} condition {field} is {actual:?} (want {wanted:?})",
                    check.type_
                ));
            }
        }
    }
    Ok(())
}

fn condition(status: &str, reason: &str, message: &str) -> Value {
    json!({"type": UPDATED, "status": status, "reason": reason, "message": message})
}

/// Puts `condition` into `status.conditions`, replacing one of the same type.
pub(super) fn set_condition(status: &mut Map<String, Value>, condition: Value) {
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    let kind = condition.get("type").cloned();
    match list.iter_mut().find(|c| c.get("type") == kind.as_ref()) {
        Some(existing) => *existing = condition,
        None => list.push(condition),
    }
}
