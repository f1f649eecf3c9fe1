//! What a plan would change in the objects observed now, object by object and field by field
//! (`metascript diff`). A plan is already the operator's decision (children compared as
//! applied subsets with their applied digest, labels and status only where they differ), so
//! an empty list here means the operator would write nothing; this only names the fields.

use super::{
    APPLIED_DIGEST_ANNOTATION, ClaimChange, FinalizerChange, PROVENANCE_ANNOTATION, Plan,
    SOURCE_ANNOTATION, StatusChange,
};
use crate::object::{self, ObjectKey};
use serde::Serialize;
use serde_json::{Map, Value};

/// One object a plan writes to, and how.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ObjectChange {
    #[serde(flatten)]
    pub key: ObjectKey,
    pub action: Action,
    /// The fields that change (updates; the subject's labels, annotations, status and
    /// finalizers).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldChange>,
    /// Why (a deletion's reason), or what the fields do not show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The whole object, for a creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Action {
    Create,
    Update,
    Delete,
    /// Gains this controller's reference (an orphan adopted).
    Adopt,
    /// Loses it (a child that no longer matches).
    Release,
}

/// One field's value now and after the write (`None`: absent).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct FieldChange {
    /// Where, as `spec.ports[0].port` (keys with dots or slashes quoted: `metadata.labels["app.kubernetes.io/name"]`).
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

/// Annotations every write sets: who computed the object from what, and a digest of what was
/// applied. They change whenever anything else does, so listing them says nothing.
const BOOKKEEPING: [&str; 3] = [
    APPLIED_DIGEST_ANNOTATION,
    PROVENANCE_ANNOTATION,
    SOURCE_ANNOTATION,
];

/// How many changes of each kind a set of plans would make, and how many of them failed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Summary {
    /// Pieces of work synced (targets, parents, map pairs).
    pub evaluated: usize,
    pub create: usize,
    pub update: usize,
    pub delete: usize,
    /// Controller references added or removed.
    pub claim: usize,
    /// Syncs that fail, and controllers that cannot run.
    pub errors: usize,
}

impl Summary {
    /// Counts one piece of work: the changes its plan makes, or its failure.
    pub(crate) fn add(&mut self, changes: &[ObjectChange], failed: bool) {
        self.evaluated += 1;
        self.errors += usize::from(failed);
        for change in changes {
            let count = match change.action {
                Action::Create => &mut self.create,
                Action::Update => &mut self.update,
                Action::Delete => &mut self.delete,
                Action::Adopt | Action::Release => &mut self.claim,
            };
            *count += 1;
        }
    }
}

/// One change as `metascript diff` prints it: the object with `+` (create), `~` (update, its
/// fields below, before and after), `-` (delete), each line indented and ending in a newline.
pub(crate) fn describe(change: &ObjectChange) -> String {
    let (sign, word) = match change.action {
        Action::Create => ('+', "create"),
        Action::Update => ('~', "change"),
        Action::Delete => ('-', "delete"),
        Action::Adopt => ('~', "adopt"),
        Action::Release => ('~', "release"),
    };
    let note = change
        .note
        .as_ref()
        .map(|note| format!(": {note}"))
        .unwrap_or_default();
    let mut out = format!("  {sign} {} ({word}){note}\n", change.key);
    for field in &change.fields {
        let show = |value: &Option<Value>| {
            value
                .as_ref()
                .map_or_else(|| "(absent)".to_string(), Value::to_string)
        };
        out.push_str(&format!(
            "      {}: {} -> {}\n",
            field.path,
            show(&field.before),
            show(&field.after)
        ));
    }
    out
}

/// The changes carrying out `plan` would make, given the object it is about (`subject`, a
/// target or parent, as observed) and the observed objects by key. In the order the operator
/// writes: claims, children applied, children deleted, then the subject itself. `manager`: the
/// controller's server-side apply field manager, whose fields a child no longer returned loses.
pub(crate) fn changes<'a>(
    plan: &Plan,
    subject: &Value,
    manager: &str,
    observed: impl Fn(&ObjectKey) -> Option<&'a Value>,
) -> Vec<ObjectChange> {
    let mut changes = Vec::new();
    for claim in &plan.claims {
        changes.push(ObjectChange {
            key: claim.key.clone(),
            action: match claim.change {
                ClaimChange::Adopt { .. } => Action::Adopt,
                ClaimChange::Release { .. } => Action::Release,
            },
            fields: Vec::new(),
            note: None,
            object: None,
        });
    }
    for child in &plan.apply {
        let key = ObjectKey::of(child);
        changes.push(match observed(&key) {
            None => ObjectChange {
                key,
                action: Action::Create,
                fields: Vec::new(),
                note: None,
                object: Some(child.clone()),
            },
            Some(current) => {
                let mut fields = Vec::new();
                applied_fields(&mut String::new(), child, Some(current), &mut fields);
                removed_fields(child, current, manager, &mut fields);
                fields.retain(|field| !is_bookkeeping(&field.path));
                // Only the applied digest changed, and no field the operator applied is
                // missing by name: one inside a list it merges by key.
                let note = fields.is_empty().then(|| {
                    "only fields the hook no longer returns change (inside a list): server-side \
                     apply removes them"
                        .to_string()
                });
                ObjectChange {
                    key,
                    action: Action::Update,
                    fields,
                    note,
                    object: None,
                }
            }
        });
    }
    for deletion in &plan.delete {
        changes.push(ObjectChange {
            key: deletion.key.clone(),
            action: Action::Delete,
            fields: Vec::new(),
            note: Some(deletion.reason.to_string()),
            object: None,
        });
    }
    let fields = subject_fields(plan, subject);
    if !fields.is_empty() {
        changes.push(ObjectChange {
            key: ObjectKey::of(subject),
            action: Action::Update,
            fields,
            note: None,
            object: None,
        });
    }
    changes
}

/// The subject's own changes: labels and annotations, status, finalizers.
fn subject_fields(plan: &Plan, subject: &Value) -> Vec<FieldChange> {
    let mut fields = Vec::new();
    if let Some(metadata) = plan
        .metadata_patch
        .as_ref()
        .and_then(|patch| patch.get("metadata"))
        .and_then(Value::as_object)
    {
        for (field, updates) in metadata {
            let current = object::string_map(subject, field);
            for (key, value) in updates.as_object().into_iter().flatten() {
                let before = current.get(key).map(|v| Value::String(v.clone()));
                let after = Some(value.clone()).filter(|v| !v.is_null());
                if before != after {
                    fields.push(FieldChange {
                        path: join(&join("metadata", field), key),
                        before,
                        after,
                    });
                }
            }
        }
    }
    let current = subject.get("status");
    match &plan.status {
        // The whole status is replaced: what the hook left out goes too.
        Some(StatusChange::Replace(desired)) => {
            replaced_fields("status", desired, current, &mut fields)
        }
        Some(StatusChange::Merge(desired)) => {
            merged_fields(&mut "status".to_string(), desired, current, &mut fields)
        }
        Some(StatusChange::Conditions { conditions, .. }) => merged_fields(
            &mut "status".to_string(),
            &serde_json::json!({"conditions": conditions}),
            current,
            &mut fields,
        ),
        None => {}
    }
    if let Some(change) = &plan.finalizer {
        let before: Vec<&str> = object::finalizers(subject);
        let after: Vec<&str> = match change {
            FinalizerChange::Add(finalizer) => {
                before.iter().copied().chain([finalizer.as_str()]).collect()
            }
            FinalizerChange::Remove(finalizer) => before
                .iter()
                .copied()
                .filter(|f| *f != finalizer.as_str())
                .collect(),
        };
        fields.push(FieldChange {
            path: "metadata.finalizers".into(),
            before: (!before.is_empty()).then(|| before.into()),
            after: (!after.is_empty()).then(|| after.into()),
        });
    }
    fields
}

/// The fields of `desired` that `current` does not already have, compared the way the operator
/// decides to apply ([`object::is_applied_subset`]): fields only `current` has are left alone.
/// Maps are followed key by key, lists of the same length item by item; any other list that
/// differs is one change.
fn applied_fields(
    path: &mut String,
    desired: &Value,
    current: Option<&Value>,
    out: &mut Vec<FieldChange>,
) {
    match (desired, current) {
        (_, Some(current)) if object::is_applied_subset(desired, current) => {}
        (Value::Object(want), Some(Value::Object(have))) => {
            for (key, value) in want {
                let length = path.len();
                *path = join(path, key);
                applied_fields(path, value, have.get(key), out);
                path.truncate(length);
            }
        }
        (Value::Array(want), Some(Value::Array(have))) if want.len() == have.len() => {
            for (index, (w, h)) in want.iter().zip(have).enumerate() {
                let length = path.len();
                path.push_str(&format!("[{index}]"));
                applied_fields(path, w, Some(h), out);
                path.truncate(length);
            }
        }
        _ => out.push(FieldChange {
            path: path.clone(),
            before: current.cloned(),
            after: Some(desired.clone()),
        }),
    }
}

/// The fields this controller applied to `current` (its server-side apply field manager,
/// `manager`, in `managedFields`) that `desired` no longer has: server-side apply removes
/// them. Another controller's fields (its own `metascript.dev/…` manager) stay. Inside a list
/// merged by key, the list itself is named when `desired` has none; otherwise its items are
/// not told apart.
fn removed_fields(desired: &Value, current: &Value, manager: &str, out: &mut Vec<FieldChange>) {
    let applied = current
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|entry| {
            entry["operation"] == "Apply" && object::str_at(entry, "/manager") == Some(manager)
        });
    for entry in applied {
        let mut found = Vec::new();
        owned_paths(&entry["fieldsV1"], &mut Vec::new(), &mut found);
        for path in found {
            let mut want = Some(desired);
            let mut have = Some(current);
            for key in &path {
                want = want.and_then(|value| value.get(key));
                have = have.and_then(|value| value.get(key));
            }
            if want.is_none()
                && let Some(before) = have
            {
                let path = path
                    .iter()
                    .fold(String::new(), |path, key| join(&path, key));
                if !out.iter().any(|field| field.path == path) {
                    out.push(FieldChange {
                        path,
                        before: Some(before.clone()),
                        after: None,
                    });
                }
            }
        }
    }
}

/// The object paths a `fieldsV1` set owns, down to a leaf or to a list merged by key (`k:`,
/// `v:`, `i:` members), which ends the path.
fn owned_paths(set: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(members) = set.as_object() else {
        return;
    };
    let fields: Vec<(&str, &Value)> = members
        .iter()
        .filter_map(|(key, value)| Some((key.strip_prefix("f:")?, value)))
        .collect();
    let listed = members
        .keys()
        .any(|key| ["k:", "v:", "i:"].iter().any(|p| key.starts_with(p)));
    if (fields.is_empty() || listed) && !path.is_empty() {
        out.push(path.clone());
        return;
    }
    for (key, value) in fields {
        path.push(key.to_string());
        owned_paths(value, path, out);
        path.pop();
    }
}

/// Every field that differs between `current` and `desired`, which replaces it whole.
fn replaced_fields(
    path: &str,
    desired: &Value,
    current: Option<&Value>,
    out: &mut Vec<FieldChange>,
) {
    match (desired, current) {
        (Value::Object(want), Some(Value::Object(have))) => {
            let keys: std::collections::BTreeSet<&String> =
                want.keys().chain(have.keys()).collect();
            for key in keys {
                let path = join(path, key);
                match want.get(key) {
                    Some(value) => replaced_fields(&path, value, have.get(key), out),
                    None => out.push(FieldChange {
                        path,
                        before: have.get(key).cloned(),
                        after: None,
                    }),
                }
            }
        }
        (_, Some(current)) if same(desired, current) => {}
        _ => out.push(FieldChange {
            path: path.to_string(),
            before: current.cloned(),
            after: Some(desired.clone()),
        }),
    }
}

/// The fields a JSON merge patch of `desired` changes in `current` (null removes a key).
fn merged_fields(
    path: &mut String,
    desired: &Value,
    current: Option<&Value>,
    out: &mut Vec<FieldChange>,
) {
    let empty = Map::new();
    match desired {
        Value::Object(want) => {
            let have = current.and_then(Value::as_object).unwrap_or(&empty);
            for (key, value) in want {
                let length = path.len();
                *path = join(path, key);
                match (value, have.get(key)) {
                    (Value::Null, None) => {}
                    (Value::Null, Some(before)) => out.push(FieldChange {
                        path: path.clone(),
                        before: Some(before.clone()),
                        after: None,
                    }),
                    (value, before) => merged_fields(path, value, before, out),
                }
                path.truncate(length);
            }
        }
        _ if current.is_some_and(|current| same(desired, current)) => {}
        _ => out.push(FieldChange {
            path: path.clone(),
            before: current.cloned(),
            after: Some(desired.clone()),
        }),
    }
}

/// Equal as JSON, numbers by value (`1` and `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    object::is_subset(a, b) && object::is_subset(b, a)
}

fn is_bookkeeping(path: &str) -> bool {
    BOOKKEEPING
        .iter()
        .any(|key| path == join("metadata.annotations", key))
}

/// `path.key`, with a key that has dots, slashes or brackets quoted: `path["app.kubernetes.io/name"]`.
fn join(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{}]", Value::String(key.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Claim, Deletion};
    use serde_json::json;
    use std::collections::BTreeMap;

    fn target() -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                         "labels": {"team": "blue", "app.kubernetes.io/name": "web"},
                         "finalizers": ["other"]},
            "status": {"phase": "Ready", "count": 2, "old": true},
        })
    }

    fn service(port: u64, extra: Value) -> Value {
        let mut service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web-svc", "namespace": "ns",
                         "annotations": {APPLIED_DIGEST_ANNOTATION: format!("d{port}")}},
            "spec": {"ports": [{"port": port, "protocol": "TCP"}]},
        });
        if let (Some(spec), Some(extra)) = (service["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        service
    }

    fn index(objects: &[Value]) -> BTreeMap<ObjectKey, Value> {
        objects
            .iter()
            .map(|o| (ObjectKey::of(o), o.clone()))
            .collect()
    }

    /// The field manager of the controller whose plans these tests compare.
    const MANAGER: &str = "metascript.dev/composite-teams";

    fn change(changes: &[ObjectChange], name: &str) -> ObjectChange {
        changes
            .iter()
            .find(|c| c.key.name == name)
            .unwrap_or_else(|| panic!("no change of {name} in {changes:#?}"))
            .clone()
    }

    #[test]
    fn a_noop_plan_changes_nothing() {
        assert_eq!(
            changes(&Plan::default(), &target(), MANAGER, |_| None),
            vec![]
        );
    }

    #[test]
    fn a_child_that_is_missing_is_created_whole() {
        let desired = service(80, json!({}));
        let plan = Plan {
            apply: vec![desired.clone()],
            ..Plan::default()
        };
        let found = changes(&plan, &target(), MANAGER, |_| None);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].action, Action::Create);
        assert_eq!(found[0].object, Some(desired));
    }

    /// Only the fields that differ are named, fields the server added are not, and the
    /// annotations every write sets are left out.
    #[test]
    fn an_updated_child_names_its_changed_fields_only() {
        let mut desired = service(81, json!({"type": "ClusterIP"}));
        object::set_string(&mut desired, "annotations", PROVENANCE_ANNOTATION, "x");
        let current = service(80, json!({"clusterIP": "10.0.0.1"}));
        let observed = index(&[current]);
        let plan = Plan {
            apply: vec![desired],
            ..Plan::default()
        };
        let found = changes(&plan, &target(), MANAGER, |key| observed.get(key));
        let update = change(&found, "web-svc");
        assert_eq!(update.action, Action::Update);
        assert_eq!(
            update.fields,
            vec![
                FieldChange {
                    path: "spec.ports[0].port".into(),
                    before: Some(json!(80)),
                    after: Some(json!(81)),
                },
                FieldChange {
                    path: "spec.type".into(),
                    before: None,
                    after: Some(json!("ClusterIP")),
                },
            ]
        );
        assert_eq!(update.note, None);
    }

    #[test]
    fn a_list_of_another_length_is_one_change() {
        let mut desired = service(80, json!({}));
        desired["spec"]["ports"] = json!([{"port": 80}, {"port": 443}]);
        let observed = index(&[service(80, json!({}))]);
        let plan = Plan {
            apply: vec![desired],
            ..Plan::default()
        };
        let found = changes(&plan, &target(), MANAGER, |key| observed.get(key));
        let fields = change(&found, "web-svc").fields;
        assert_eq!(fields.len(), 1, "{fields:#?}");
        assert_eq!(fields[0].path, "spec.ports");
        assert_eq!(fields[0].after, Some(json!([{"port": 80}, {"port": 443}])));
    }

    /// A rollback that drops a label the operator applied (a security control) names it, and
    /// a field another manager owns (another controller's too) is not this one's to remove.
    #[test]
    fn every_field_the_operator_applied_and_the_hook_no_longer_returns_is_named() {
        let desired = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a", "labels": {"team": "a"},
                         "annotations": {APPLIED_DIGEST_ANNOTATION: "new"}},
        });
        let observed = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a",
                "labels": {"team": "a", "pod-security.kubernetes.io/enforce": "restricted",
                           "kubernetes.io/metadata.name": "team-a", "cost-centre": "42"},
                "annotations": {APPLIED_DIGEST_ANNOTATION: "old"},
                "managedFields": [
                    {"manager": "metascript.dev/composite-teams", "operation": "Apply",
                     "fieldsV1": {"f:metadata": {
                         "f:labels": {"f:team": {}, "f:pod-security.kubernetes.io/enforce": {}},
                         "f:annotations": {format!("f:{APPLIED_DIGEST_ANNOTATION}"): {}}},
                         "f:spec": {"f:finalizers": {"v:kubernetes": {}}}}},
                    {"manager": "kube-apiserver", "operation": "Update",
                     "fieldsV1": {"f:metadata": {"f:labels": {"f:kubernetes.io/metadata.name": {}}}}},
                    {"manager": "metascript.dev/decorator-costs", "operation": "Apply",
                     "fieldsV1": {"f:metadata": {"f:labels": {"f:cost-centre": {}}}}}
                ]},
            "spec": {"finalizers": ["kubernetes"]},
        });
        let observed = index(&[observed]);
        let plan = Plan {
            apply: vec![desired],
            ..Plan::default()
        };
        let update = change(
            &changes(&plan, &target(), MANAGER, |key| observed.get(key)),
            "team-a",
        );
        assert_eq!(
            update.fields,
            vec![
                FieldChange {
                    path: r#"metadata.labels["pod-security.kubernetes.io/enforce"]"#.into(),
                    before: Some(json!("restricted")),
                    after: None,
                },
                FieldChange {
                    path: "spec.finalizers".into(),
                    before: Some(json!(["kubernetes"])),
                    after: None,
                },
            ]
        );
        assert_eq!(update.note, None);
        let theirs = change(
            &changes(&plan, &target(), "metascript.dev/decorator-costs", |key| {
                observed.get(key)
            }),
            "team-a",
        );
        assert_eq!(
            theirs
                .fields
                .iter()
                .map(|field| field.path.as_str())
                .collect::<Vec<_>>(),
            vec!["metadata.labels.cost-centre"],
            "the other controller's own diff names only its own field"
        );
        assert!(
            describe(&update).contains(
                r#"metadata.labels["pod-security.kubernetes.io/enforce"]: "restricted" -> (absent)"#
            ),
            "{}",
            describe(&update)
        );
    }

    /// The hook stopped returning a field the operator's managedFields do not name: only the
    /// digest differs. The change says so rather than showing nothing.
    #[test]
    fn a_field_no_longer_returned_is_a_change_with_a_note() {
        let desired = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web-svc", "namespace": "ns",
                         "annotations": {APPLIED_DIGEST_ANNOTATION: "new"}},
            "spec": {},
        });
        let observed = index(&[service(80, json!({}))]);
        let plan = Plan {
            apply: vec![desired],
            ..Plan::default()
        };
        let found = changes(&plan, &target(), MANAGER, |key| observed.get(key));
        let update = change(&found, "web-svc");
        assert_eq!(update.action, Action::Update);
        assert!(update.fields.is_empty(), "{:?}", update.fields);
        assert!(update.note.unwrap().contains("no longer returns"));
    }

    #[test]
    fn deletions_and_claims_are_listed_with_their_reason() {
        let plan = Plan {
            delete: vec![Deletion {
                key: ObjectKey::of(&service(80, json!({}))),
                uid: None,
                reason: "no longer returned by the hook",
            }],
            claims: vec![Claim {
                key: ObjectKey::of(
                    &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orphan", "namespace": "ns"}}),
                ),
                resource_version: "1".into(),
                change: ClaimChange::Adopt {
                    reference: json!({}),
                    first: true,
                },
            }],
            ..Plan::default()
        };
        let found = changes(&plan, &target(), MANAGER, |_| None);
        assert_eq!(
            found.iter().map(|c| c.action).collect::<Vec<_>>(),
            vec![Action::Adopt, Action::Delete]
        );
        assert_eq!(
            found[1].note.as_deref(),
            Some("no longer returned by the hook")
        );
    }

    #[test]
    fn the_subjects_labels_status_and_finalizers_are_one_update() {
        let plan = Plan {
            metadata_patch: Some(json!({"metadata": {
                "labels": {"team": "red", "app.kubernetes.io/name": null, "new": "x"},
            }})),
            status: Some(StatusChange::Replace(
                json!({"phase": "Failed", "count": 2.0}),
            )),
            finalizer: Some(FinalizerChange::Add("metascript.dev/d".into())),
            ..Plan::default()
        };
        let found = changes(&plan, &target(), MANAGER, |_| None);
        assert_eq!(found.len(), 1);
        let update = &found[0];
        assert_eq!(
            (update.action, update.key.name.as_str()),
            (Action::Update, "web")
        );
        let fields: Vec<(&str, Option<&Value>, Option<&Value>)> = update
            .fields
            .iter()
            .map(|f| (f.path.as_str(), f.before.as_ref(), f.after.as_ref()))
            .collect();
        assert_eq!(
            fields,
            vec![
                (
                    r#"metadata.labels["app.kubernetes.io/name"]"#,
                    Some(&json!("web")),
                    None
                ),
                ("metadata.labels.new", None, Some(&json!("x"))),
                (
                    "metadata.labels.team",
                    Some(&json!("blue")),
                    Some(&json!("red"))
                ),
                // Replaced: `count` is the same number, `old` goes.
                ("status.old", Some(&json!(true)), None),
                (
                    "status.phase",
                    Some(&json!("Ready")),
                    Some(&json!("Failed"))
                ),
                (
                    "metadata.finalizers",
                    Some(&json!(["other"])),
                    Some(&json!(["other", "metascript.dev/d"]))
                ),
            ]
        );
    }

    /// A merged status (the map controller's counts) changes only the keys it names.
    #[test]
    fn a_merged_status_changes_only_its_keys() {
        let plan = Plan {
            status: Some(StatusChange::Merge(
                json!({"count": 3, "old": null, "gone": null}),
            )),
            ..Plan::default()
        };
        let fields = changes(&plan, &target(), MANAGER, |_| None)
            .remove(0)
            .fields;
        assert_eq!(
            fields,
            vec![
                FieldChange {
                    path: "status.count".into(),
                    before: Some(json!(2)),
                    after: Some(json!(3)),
                },
                FieldChange {
                    path: "status.old".into(),
                    before: Some(json!(true)),
                    after: None,
                },
            ]
        );
    }
}
