//! Owned children (a decorator's attachments, a map's outputs): how hooks see them, how the objects a
//! hook returns are checked, and how desired and observed children are reconciled.

use super::APPLIED_DIGEST_ANNOTATION;
use super::response::{InvalidResponse, json_type};
use super::sanity;
use super::writes::Deletion;
use crate::api::{API_VERSION, ChildRule, HookVersion, KindName, UpdateMethod};
use crate::object::{self, ObjectKey};
use crate::resources::ResourceType;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// A declared child type: the user's rule and what it resolved to.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildType {
    pub rule: ChildRule,
    pub resource: ResourceType,
}

/// Resolves the types of a controller's child rules (attachments, outputs).
pub(crate) fn resolve_child_types(
    rules: &[ChildRule],
    resolver: &dyn crate::resources::ResourceResolver,
) -> Result<Vec<ChildType>, crate::resources::ResolveError> {
    rules
        .iter()
        .map(|rule| {
            Ok(ChildType {
                rule: rule.clone(),
                resource: resolver.resolve(&rule.resource_ref())?,
            })
        })
        .collect()
}

/// A controller object as hooks receive it in `controller`: with its apiVersion and kind,
/// which typed objects do not serialize.
pub(crate) fn controller_json(controller: &impl serde::Serialize, kind: KindName) -> Value {
    let mut json = serde_json::to_value(controller).unwrap_or(Value::Null);
    if let Some(map) = json.as_object_mut() {
        map.insert("apiVersion".into(), API_VERSION.into());
        map.insert("kind".into(), kind.object_kind().into());
    }
    json
}

/// The key of an object under its type in a hook request. In `v1`, its name, or
/// `namespace/name` when the parent cannot imply the namespace (a cluster-scoped parent, or an
/// object in another namespace); in `v2`, `namespace/name` for every namespaced object.
pub(crate) fn request_key(parent: &Value, child: &Value, version: HookVersion) -> String {
    match (object::namespace(child), version) {
        (Some(namespace), HookVersion::V2) => format!("{namespace}/{}", object::name(child)),
        (Some(namespace), HookVersion::V1) if object::namespace(parent) != Some(namespace) => {
            format!("{namespace}/{}", object::name(child))
        }
        _ => object::name(child).to_string(),
    }
}

/// Groups objects as hooks receive them: `{"<Kind>.<apiVersion>": {key: object}}`, with every
/// declared type present even when it has no objects.
pub(crate) fn group_for_request<'a>(
    parent: &Value,
    types: impl IntoIterator<Item = &'a ResourceType>,
    objects: impl IntoIterator<Item = &'a Value>,
    version: HookVersion,
) -> Value {
    let types: Vec<&ResourceType> = types.into_iter().collect();
    let mut groups: BTreeMap<String, Map<String, Value>> = types
        .iter()
        .map(|resource| (resource.group_key(), Map::new()))
        .collect();
    for item in objects {
        if let Some(resource) = types.iter().find(|resource| resource.describes(item)) {
            groups
                .entry(resource.group_key())
                .or_default()
                .insert(request_key(parent, item, version), item.clone());
        }
    }
    Value::Object(
        groups
            .into_iter()
            .map(|(key, group)| (key, Value::Object(group)))
            .collect(),
    )
}

/// Checks the objects a hook returned under `field` and completes them: namespace defaulted from
/// the parent, owner reference to the parent, the given labels. Rejects anything that could not
/// be applied, naming the item and why.
pub(crate) fn desired_children(
    items: &[Value],
    field: &str,
    parent: &Value,
    parent_namespaced: bool,
    types: &[ChildType],
    labels: &[(&str, &str)],
) -> Result<Vec<(Value, usize)>, InvalidResponse> {
    let mut seen = BTreeSet::new();
    let mut desired = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let path = format!("{field}[{index}]");
        let fail = |reason: String| InvalidResponse::new(path.clone(), reason);
        if !item.is_object() {
            return Err(fail(format!("expected an object, got {}", json_type(item))));
        }
        let api_version = object::str_at(item, "/apiVersion")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| fail("object has no apiVersion".into()))?;
        let kind = object::str_at(item, "/kind")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| fail("object has no kind".into()))?;
        let name = object::str_at(item, "/metadata/name")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| fail(format!("{kind} has no metadata.name")))?;
        sanity::check_child(item, &path)?;
        let Some(type_index) = types.iter().position(|t| t.resource.describes(item)) else {
            let declared: Vec<String> = types.iter().map(|t| t.resource.group_key()).collect();
            return Err(fail(format!(
                "{kind}.{api_version} {name:?} is not a declared {field} type (declared: {})",
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared.join(", ")
                }
            )));
        };
        let child_type = &types[type_index].resource;
        let mut child = item.clone();
        let namespace = object::namespace(item).map(str::to_string);
        match (child_type.namespaced, parent_namespaced, namespace) {
            (false, true, _) => {
                return Err(fail(format!(
                    "{kind} {name:?} is cluster-scoped and cannot be owned by a namespaced object"
                )));
            }
            (false, false, Some(_)) => {
                return Err(fail(format!(
                    "{kind} {name:?} is cluster-scoped but has metadata.namespace"
                )));
            }
            (true, false, None) => {
                return Err(fail(format!(
                    "{kind} {name:?} is namespaced and the parent is cluster-scoped, so \
                     metadata.namespace must be set"
                )));
            }
            (true, true, Some(namespace))
                if Some(namespace.as_str()) != object::namespace(parent) =>
            {
                return Err(fail(format!(
                    "{kind} {name:?} is in namespace {namespace:?} but owner references cannot \
                     cross namespaces (the parent is in {:?})",
                    object::namespace(parent).unwrap_or_default()
                )));
            }
            (true, true, None) => {
                let parent_namespace = object::namespace(parent).unwrap_or_default().to_string();
                if let Some(metadata) = object::metadata_mut(&mut child) {
                    metadata.insert("namespace".into(), parent_namespace.into());
                }
            }
            _ => {}
        }
        let key = ObjectKey::of(&child);
        if !seen.insert(key.clone()) {
            return Err(fail(format!("{key} is returned more than once")));
        }
        for (label, value) in labels {
            object::set_string(&mut child, "labels", label, value);
        }
        if let Some(metadata) = object::metadata_mut(&mut child) {
            metadata.insert(
                "ownerReferences".into(),
                Value::Array(vec![object::owner_reference(parent)]),
            );
        }
        let digest = applied_digest(&child);
        object::set_string(
            &mut child,
            "annotations",
            APPLIED_DIGEST_ANNOTATION,
            &digest,
        );
        desired.push((child, type_index));
    }
    Ok(desired)
}

/// A short digest of the desired object (keys are sorted, so equal objects digest equally).
fn applied_digest(child: &Value) -> String {
    object::value_digest(child)
}

/// Writes that bring `observed` to `desired`: create what is missing, update or recreate what
/// differs (per the type's update method), delete what is no longer desired. A child being
/// deleted is left to finish.
pub(crate) fn reconcile(
    desired: Vec<(Value, usize)>,
    observed: &[&Value],
    types: &[ChildType],
    delete_reason: &'static str,
) -> (Vec<Value>, Vec<Deletion>) {
    let desired = desired
        .into_iter()
        .map(|(child, index)| (child, types[index].rule.update_method()))
        .collect();
    reconcile_each(desired, observed, delete_reason)
}

/// [`reconcile`], with the update method of each desired child given with it (a rolling
/// update decides child by child).
pub(crate) fn reconcile_each(
    desired: Vec<(Value, UpdateMethod)>,
    observed: &[&Value],
    delete_reason: &'static str,
) -> (Vec<Value>, Vec<Deletion>) {
    let observed_by_key: BTreeMap<ObjectKey, &Value> = observed
        .iter()
        .map(|child| (ObjectKey::of(child), *child))
        .collect();
    let mut apply = Vec::new();
    let mut delete = Vec::new();
    let mut wanted = BTreeSet::new();
    for (child, method) in desired {
        let key = ObjectKey::of(&child);
        wanted.insert(key.clone());
        let Some(existing) = observed_by_key.get(&key) else {
            apply.push(child);
            continue;
        };
        if object::is_deleting(existing) || already_applied(&child, existing) {
            continue;
        }
        match method {
            UpdateMethod::OnDelete => {}
            UpdateMethod::InPlace => apply.push(child),
            UpdateMethod::Recreate => delete.push(deletion(existing, "recreate")),
        }
    }
    for (key, existing) in &observed_by_key {
        if !wanted.contains(key) && !object::is_deleting(existing) {
            delete.push(deletion(existing, delete_reason));
        }
    }
    delete.sort();
    (apply, delete)
}

/// Whether the observed child already has everything desired. Owner references are left out of
/// the comparison: observed children were selected by their controller reference already, and
/// other owners may have added theirs.
pub(crate) fn already_applied(desired: &Value, existing: &Value) -> bool {
    let mut desired = desired.clone();
    if let Some(metadata) = object::metadata_mut(&mut desired) {
        metadata.remove("ownerReferences");
    }
    object::is_applied_subset(&desired, existing)
}

pub(crate) fn deletion(existing: &Value, reason: &'static str) -> Deletion {
    Deletion {
        key: ObjectKey::of(existing),
        uid: object::uid(existing).map(str::to_string),
        reason,
    }
}
