//! Reading the common fields of Kubernetes objects held as JSON, and naming them.
//!
//! Hooks see objects as plain JSON, so the controllers keep them that way instead of converting
//! to typed structs and back.

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// How deep the operator reads an object it watches: lists and maps, the object itself
/// included. Deeper, it is passed over (`runtime::decode`), so no controller may write one.
pub(crate) const MAX_WATCHED_DEPTH: usize = 100;

/// How many lists and maps deep a value is (the value itself included; 0 for a scalar).
/// Recursive: only for values already held to a depth limit (responses are, at 128).
pub(crate) fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A JSON value's type as error messages name it ("a map", "a list", …).
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

pub fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    at(object, pointer).and_then(Value::as_str)
}

/// The value at a JSON pointer, as [`Value::pointer`] finds it, without the two strings that
/// allocates per step to unescape it when nothing is escaped: these accessors run for every
/// object of every event, fan-out and resync (they were a fifth of a resync's CPU).
pub(crate) fn at<'a>(object: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.contains('~') {
        return object.pointer(pointer);
    }
    if pointer.is_empty() {
        return Some(object);
    }
    pointer
        .strip_prefix('/')?
        .split('/')
        .try_fold(object, |value, step| match value {
            Value::Object(fields) => fields.get(step),
            // RFC 6901 indexes: no sign, no leading zero.
            Value::Array(items)
                if !step.starts_with('+') && (step == "0" || !step.starts_with('0')) =>
            {
                step.parse::<usize>()
                    .ok()
                    .and_then(|index| items.get(index))
            }
            _ => None,
        })
}

pub fn name(object: &Value) -> &str {
    str_at(object, "/metadata/name").unwrap_or_default()
}

pub fn namespace(object: &Value) -> Option<&str> {
    str_at(object, "/metadata/namespace").filter(|ns| !ns.is_empty())
}

pub fn uid(object: &Value) -> Option<&str> {
    str_at(object, "/metadata/uid").filter(|uid| !uid.is_empty())
}

pub fn api_version(object: &Value) -> &str {
    str_at(object, "/apiVersion").unwrap_or_default()
}

pub fn kind(object: &Value) -> &str {
    str_at(object, "/kind").unwrap_or_default()
}

/// A map under `metadata` (labels, annotations), read in place: selectors match the objects
/// of a cache through it without copying any.
pub(crate) fn metadata_map<'a>(object: &'a Value, field: &str) -> Option<&'a Map<String, Value>> {
    object.get("metadata")?.get(field)?.as_object()
}

/// A string map under `metadata` (labels, annotations), copied; empty when absent or malformed.
pub(crate) fn string_map(object: &Value, field: &str) -> BTreeMap<String, String> {
    metadata_map(object, field)
        .map(|map| {
            map.iter()
                .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn labels(object: &Value) -> BTreeMap<String, String> {
    string_map(object, "labels")
}

pub(crate) fn annotations(object: &Value) -> BTreeMap<String, String> {
    string_map(object, "annotations")
}

pub fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    metadata_map(object, "labels")?.get(key)?.as_str()
}

pub fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .get("metadata")?
        .get("annotations")?
        .get(key)?
        .as_str()
}

pub fn is_deleting(object: &Value) -> bool {
    at(object, "/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

pub(crate) fn finalizers(object: &Value) -> Vec<&str> {
    at(object, "/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

pub fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    finalizers(object).contains(&finalizer)
}

/// The owner reference with `controller: true`, if any.
pub fn controller_ref(object: &Value) -> Option<&Value> {
    at(object, "/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|reference| reference.get("controller").and_then(Value::as_bool) == Some(true))
}

/// Whether `owner` is the controller of `object`. Compared by uid; objects read from files for
/// `render` may have no uid, and then kind and name decide.
pub(crate) fn is_controlled_by(object: &Value, owner: &Value) -> bool {
    let Some(reference) = controller_ref(object) else {
        return false;
    };
    match (reference.get("uid").and_then(Value::as_str), uid(owner)) {
        (Some(reference_uid), Some(owner_uid)) => reference_uid == owner_uid,
        _ => {
            str_at(reference, "/kind") == Some(kind(owner))
                && str_at(reference, "/name") == Some(name(owner))
                && group_of(str_at(reference, "/apiVersion").unwrap_or_default())
                    == group_of(api_version(owner))
        }
    }
}

/// The controller owner reference a child of `owner` carries.
pub fn owner_reference(owner: &Value) -> Value {
    let mut reference = Map::new();
    reference.insert("apiVersion".into(), api_version(owner).into());
    reference.insert("kind".into(), kind(owner).into());
    reference.insert("name".into(), name(owner).into());
    if let Some(uid) = uid(owner) {
        reference.insert("uid".into(), uid.into());
    }
    reference.insert("controller".into(), true.into());
    reference.insert("blockOwnerDeletion".into(), true.into());
    Value::Object(reference)
}

/// The group part of an apiVersion (`""` for the core group).
pub(crate) fn group_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or("")
}

/// The object's metadata map, created if missing. Fails only when `object` is not a map.
pub(crate) fn metadata_mut(object: &mut Value) -> Option<&mut Map<String, Value>> {
    let map = object.as_object_mut()?;
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    metadata.as_object_mut()
}

/// Sets `metadata.<field>.<key> = value` (labels or annotations), creating the maps as needed.
pub(crate) fn set_string(object: &mut Value, field: &str, key: &str, value: &str) {
    if let Some(metadata) = metadata_mut(object) {
        let map = metadata
            .entry(field)
            .or_insert_with(|| Value::Object(Map::new()));
        if !map.is_object() {
            *map = Value::Object(Map::new());
        }
        if let Some(map) = map.as_object_mut() {
            map.insert(key.to_string(), value.into());
        }
    }
}

/// Whether every field set in `desired` has the same value in `observed`: maps recursively, lists
/// of the same length element by element. Fields the server or others added are ignored, so an
/// object that already has everything the hook asked for needs no write.
pub(crate) fn is_subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(want), Value::Object(have)) => want
            .iter()
            .all(|(key, value)| have.get(key).is_some_and(|actual| is_subset(value, actual))),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| is_subset(w, h))
        }
        (Value::Number(want), Value::Number(have)) => want.as_f64() == have.as_f64(),
        _ => desired == observed,
    }
}

/// Whether the fields a writer set in `desired` are all in `observed`, allowing for what the API
/// server and other writers add to lists: like [`is_subset`], except that a list of maps in
/// `desired` needs its elements, in order, among the elements of the observed list, which may
/// have others before, between and after them. Admission adds items this way (a Pod's
/// service-account volume and volume mount, its default tolerations), and server-side apply
/// would leave them to their owners. Lists of anything else still need the same length.
///
/// Used to decide whether a child needs a write: a change in what the hook returns changes the
/// child's applied digest, so a list the hook shortened is still written.
pub(crate) fn is_applied_subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(key, value)| {
            have.get(key)
                .is_some_and(|actual| is_applied_subset(value, actual))
        }),
        (Value::Array(want), Value::Array(have)) if want.iter().all(Value::is_object) => {
            let mut have = have.iter();
            want.iter()
                .all(|w| have.by_ref().any(|h| is_applied_subset(w, h)))
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| is_applied_subset(w, h))
        }
        _ => is_subset(desired, observed),
    }
}

/// Identifies one object: its type (as `<Kind>.<apiVersion>`), namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn of(object: &Value) -> ObjectKey {
        ObjectKey {
            api_version: api_version(object).to_string(),
            kind: kind(object).to_string(),
            namespace: namespace(object).map(str::to_string),
            name: name(object).to_string(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{} ", self.kind, self.api_version)?;
        if let Some(namespace) = &self.namespace {
            write!(f, "{namespace}/")?;
        }
        f.write_str(&self.name)
    }
}

/// The digest naming an object by its identity alone (API group, kind, namespace, name), so
/// it is the same whether it is computed from the object or from a reference to it (a
/// MapController's map key; the work item a replica owns).
pub(crate) fn identity_digest(group: &str, kind: &str, namespace: &str, name: &str) -> String {
    short_digest(&format!("{group}/{kind}/{namespace}/{name}"))
}

/// A short, label-safe digest of a string (hex, 32 characters).
pub(crate) fn short_digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(text.as_bytes())[..16])
}

/// `short_digest` of a value's compact JSON text, hashed as it is written rather than built as a
/// string first (this runs once per desired object per sync).
pub(crate) fn value_digest(value: &(impl serde::Serialize + ?Sized)) -> String {
    use sha2::{Digest, Sha256};
    struct Hashing(Sha256);
    impl std::io::Write for Hashing {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.update(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hashing = Hashing(Sha256::new());
    serde_json::to_writer(&mut hashing, value).expect("writing to a hash cannot fail");
    hex::encode(&hashing.0.finalize()[..16])
}

/// A JSON object of the given fields, built without re-serializing values that already are
/// JSON (which `json!` does for every interpolated value).
pub(crate) fn fields<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect(),
    )
}

/// The JSON merge patch (RFC 7386) that turns `current` into `desired`, or None when they are
/// equal. Keys only in `current` are removed with null.
pub(crate) fn merge_patch(current: &Value, desired: &Value) -> Option<Value> {
    match (current, desired) {
        (Value::Object(have), Value::Object(want)) => {
            let mut patch = Map::new();
            for (key, value) in want {
                let nested = match have.get(key) {
                    Some(existing) => merge_patch(existing, value),
                    None => Some(value.clone()),
                };
                if let Some(nested) = nested {
                    patch.insert(key.clone(), nested);
                }
            }
            for key in have.keys().filter(|key| !want.contains_key(*key)) {
                patch.insert(key.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if current == desired => None,
        _ => Some(desired.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_finds_what_json_pointers_find() {
        let object = serde_json::json!({
            "metadata": {"name": "x", "labels": {"a/b": "1", "c~d": "2"}, "finalizers": ["f", "g"]},
            "items": [{"k": 1}, {"k": 2}],
            "": {"empty": true}
        });
        for pointer in [
            "",
            "/metadata/name",
            "/metadata/labels/a~1b",
            "/metadata/labels/c~0d",
            "/metadata/finalizers/1",
            "/metadata/finalizers/01",
            "/metadata/finalizers/+1",
            "/metadata/finalizers/2",
            "/items/0/k",
            "/items/x",
            "/metadata/missing/deeper",
            "/",
            "//empty",
            "metadata",
        ] {
            assert_eq!(at(&object, pointer), object.pointer(pointer), "{pointer:?}");
        }
    }
    use serde_json::json;

    #[test]
    fn a_value_digests_as_its_compact_text_does() {
        let value = json!({"b": [1, "x\"y"], "a": {"z": null, "c": 1.5}});
        assert_eq!(value_digest(&value), short_digest(&value.to_string()));
        assert_ne!(value_digest(&value), value_digest(&json!({"a": 1})));
    }

    #[test]
    fn subset_ignores_server_added_fields_but_not_changed_ones() {
        let desired = json!({"spec": {"ports": [{"port": 80}]}, "metadata": {"name": "a"}});
        let observed = json!({
            "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "clusterIP": "10.0.0.1"},
            "metadata": {"name": "a", "uid": "u"}
        });
        assert!(is_subset(&desired, &observed));
        let changed = json!({"spec": {"ports": [{"port": 81}]}});
        assert!(!is_subset(&changed, &observed));
        let longer = json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}});
        assert!(!is_subset(&longer, &observed));
        assert!(is_subset(&json!({"n": 1}), &json!({"n": 1.0})));
        assert!(!is_subset(&json!({"n": null}), &json!({})));
    }

    /// A Pod as a hook returns it (Metacontroller's catset: a downward API volume) and as the API
    /// server stores it: admission appends the service-account token volume and its mount, and
    /// default tolerations. The hook's Pod is there; the strict subset says it is not.
    #[test]
    fn applied_subset_allows_list_items_that_admission_adds() {
        let desired = json!({"spec": {
            "volumes": [{"name": "pod-info", "downwardAPI": {"items": [{"path": "pod_name", "fieldRef": {"fieldPath": "metadata.name"}}]}}],
            "containers": [{"name": "nginx", "args": ["-g", "daemon off;"], "volumeMounts": [{"name": "www", "mountPath": "/www"}]}],
            "tolerations": [{"key": "dedicated", "operator": "Exists"}]
        }});
        let observed = json!({"spec": {
            "volumes": [
                {"name": "pod-info", "downwardAPI": {"defaultMode": 420, "items": [{"path": "pod_name", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}]}},
                {"name": "kube-api-access-x", "projected": {"sources": []}}
            ],
            "containers": [{"name": "nginx", "args": ["-g", "daemon off;"], "volumeMounts": [
                {"name": "www", "mountPath": "/www"},
                {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
            ]}],
            "tolerations": [
                {"key": "dedicated", "operator": "Exists"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        }});
        assert!(!is_subset(&desired, &observed));
        assert!(is_applied_subset(&desired, &observed));
        // Items added before and between the desired ones are skipped as well.
        let mut before = observed.clone();
        before["spec"]["volumes"].as_array_mut().unwrap().reverse();
        before["spec"]["tolerations"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!({"key": "a"}));
        assert!(is_applied_subset(&desired, &before));
        // A desired item that is missing or changed is still a difference, and so are the desired
        // items out of order.
        let mut changed = observed.clone();
        changed["spec"]["volumes"][0]["name"] = json!("other");
        assert!(!is_applied_subset(&desired, &changed));
        let mut two = desired.clone();
        two["spec"]["tolerations"] =
            json!([{"key": "node.kubernetes.io/not-ready"}, {"key": "dedicated"}]);
        assert!(!is_applied_subset(&two, &observed));
        two["spec"]["tolerations"] =
            json!([{"key": "dedicated"}, {"key": "node.kubernetes.io/not-ready"}]);
        assert!(is_applied_subset(&two, &observed));
        // Lists of anything but maps keep their exact length: an extra argument is a change.
        let mut args = observed.clone();
        args["spec"]["containers"][0]["args"] = json!(["-g", "daemon off;", "-v"]);
        assert!(!is_applied_subset(&desired, &args));
        assert!(is_applied_subset(&json!({"n": 1}), &json!({"n": 1.0})));
    }

    #[test]
    fn controller_is_found_by_uid_or_by_kind_and_name_without_uid() {
        let owner = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "uid": "1"}});
        let mut child = json!({"metadata": {"ownerReferences": [owner_reference(&owner)]}});
        assert!(is_controlled_by(&child, &owner));
        let other = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "uid": "2"}});
        assert!(!is_controlled_by(&child, &other));
        let offline =
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"}});
        child["metadata"]["ownerReferences"][0]
            .as_object_mut()
            .unwrap()
            .remove("uid");
        assert!(is_controlled_by(&child, &offline));
        child["metadata"]["ownerReferences"][0]["controller"] = json!(false);
        assert!(!is_controlled_by(&child, &offline));
    }

    #[test]
    fn merge_patch_sets_changes_and_nulls_removed_keys() {
        let current = json!({"a": {"total": 1, "ready": 1}, "b": {"total": 2}});
        let desired = json!({"a": {"total": 2, "ready": 1}});
        assert_eq!(
            merge_patch(&current, &desired),
            Some(json!({"a": {"total": 2}, "b": null}))
        );
        assert_eq!(merge_patch(&desired, &desired), None);
        assert_eq!(
            merge_patch(&json!(null), &json!({"x": 1})),
            Some(json!({"x": 1}))
        );
    }

    #[test]
    fn readers_tolerate_missing_fields() {
        let empty = json!({});
        assert_eq!(name(&empty), "");
        assert_eq!(namespace(&empty), None);
        assert!(labels(&empty).is_empty());
        assert!(!is_deleting(&empty));
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("apps/v1"), "apps");
    }
}
