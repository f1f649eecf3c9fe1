//! Indexes from a changed object to the work it causes, so an event never scans every
//! controller or every target: types to the controllers that target, own or relate to them,
//! ConfigMaps and script files to the controllers whose hooks they hold, and related objects
//! to the targets whose customize rules select them.

use super::operator::WorkKey;
use crate::controllers::decorator::RelatedRule;
use crate::object;
use crate::resources::ResourceType;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

/// One object, addressed by type, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjRef {
    pub resource: ResourceType,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjRef {
    pub fn of(resource: &ResourceType, object: &Value) -> ObjRef {
        ObjRef {
            resource: resource.clone(),
            namespace: if resource.namespaced {
                object::namespace(object).map(str::to_string)
            } else {
                None
            },
            name: object::name(object).to_string(),
        }
    }
}

impl std::fmt::Display for ObjRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ", self.resource.group_key())?;
        if let Some(namespace) = &self.namespace {
            write!(f, "{namespace}/")?;
        }
        f.write_str(&self.name)
    }
}

/// Which controllers care about which types and script sources. Rebuilt whenever a
/// controller is loaded or removed (rare), read on every event (often).
#[derive(Debug, Default)]
pub struct Routes {
    /// Decorator target types → DecoratorController names.
    pub targets: HashMap<ResourceType, Vec<String>>,
    /// Decorator attachment types → DecoratorController names.
    pub children: HashMap<ResourceType, Vec<String>>,
    /// Map parent, input and output types → MapController names.
    pub parents: HashMap<ResourceType, Vec<String>>,
    pub inputs: HashMap<ResourceType, Vec<String>>,
    pub outputs: HashMap<ResourceType, Vec<String>>,
    /// ConfigMaps (namespace, name) and script keys → the reload work of the controllers
    /// whose hooks they hold.
    pub config_maps: HashMap<(String, String), Vec<WorkKey>>,
    pub script_keys: HashMap<String, Vec<WorkKey>>,
}

/// Adds an entry to a route list once.
pub fn push_unique<T: PartialEq + Clone>(list: &mut Vec<T>, item: &T) {
    if !list.contains(item) {
        list.push(item.clone());
    }
}

/// Customize rules per target, indexed by the related type and namespace they look in.
#[derive(Debug, Default)]
pub struct RelatedIndex {
    inner: RwLock<RelatedInner>,
}

type TargetId = (String, ObjRef);

#[derive(Debug, Default)]
struct RelatedInner {
    rules: HashMap<TargetId, Vec<(RelatedRule, ResourceType)>>,
    /// (related type, namespace or None for all) → targets with a rule there.
    by_scope: HashMap<(ResourceType, Option<String>), HashSet<TargetId>>,
}

impl RelatedIndex {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, RelatedInner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, RelatedInner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a target's rules, replacing those of its previous sync.
    pub fn set(
        &self,
        controller: &str,
        target: &ObjRef,
        target_object: &Value,
        rules: Vec<(RelatedRule, ResourceType)>,
    ) {
        let id = (controller.to_string(), target.clone());
        let mut inner = self.write();
        inner.remove(&id);
        for (rule, resource) in &rules {
            let namespace = if resource.namespaced {
                rule.namespace_for(target_object).map(str::to_string)
            } else {
                None
            };
            inner
                .by_scope
                .entry((resource.clone(), namespace))
                .or_default()
                .insert(id.clone());
        }
        if !rules.is_empty() {
            inner.rules.insert(id, rules);
        }
    }

    pub fn remove(&self, controller: &str, target: &ObjRef) {
        self.write()
            .remove(&(controller.to_string(), target.clone()));
    }

    pub fn remove_controller(&self, controller: &str) {
        let mut inner = self.write();
        let ids: Vec<TargetId> = inner
            .rules
            .keys()
            .filter(|(c, _)| c == controller)
            .cloned()
            .collect();
        for id in ids {
            inner.remove(&id);
        }
    }

    /// Targets whose rules of this type, in this object's namespace or in all, could select
    /// it, with those rules; the caller checks each rule against the object.
    pub fn candidates(
        &self,
        resource: &ResourceType,
        object: &Value,
    ) -> Vec<(TargetId, Vec<RelatedRule>)> {
        let inner = self.read();
        let namespace = object::namespace(object).map(str::to_string);
        let mut scopes = vec![(resource.clone(), None)];
        if namespace.is_some() {
            scopes.push((resource.clone(), namespace));
        }
        scopes
            .iter()
            .filter_map(|scope| inner.by_scope.get(scope))
            .flatten()
            .collect::<HashSet<_>>()
            .into_iter()
            .map(|id| {
                let rules = inner.rules[id]
                    .iter()
                    .filter(|(_, t)| t == resource)
                    .map(|(rule, _)| rule.clone())
                    .collect();
                (id.clone(), rules)
            })
            .collect()
    }
}

impl RelatedInner {
    fn remove(&mut self, id: &TargetId) {
        if self.rules.remove(id).is_some() {
            self.by_scope.retain(|_, ids| {
                ids.remove(id);
                !ids.is_empty()
            });
        }
    }
}

/// Whether two versions of an object differ only in status (and bookkeeping metadata).
pub fn only_status_changed(old: &Value, new: &Value) -> bool {
    old.get("status") != new.get("status") && !super::cache::differs_ignoring(old, new, &["status"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configmaps() -> ResourceType {
        crate::resources::StaticResolver::with_builtins()
            .find_kind("v1", "ConfigMap")
            .expect("ConfigMap is built in")
    }

    #[test]
    fn related_candidates_come_from_the_index_by_type_and_namespace() {
        let index = RelatedIndex::default();
        let target_type = ResourceType {
            namespaced: false,
            kind: "Namespace".into(),
            plural: "namespaces".into(),
            ..configmaps()
        };
        let team_a = json!({"metadata": {"name": "team-a"}});
        let team_b = json!({"metadata": {"name": "team-b"}});
        let shared_rule: RelatedRule = serde_json::from_value(
            json!({"apiVersion": "v1", "resource": "configmaps", "namespace": "shared"}),
        )
        .unwrap();
        let everywhere: RelatedRule =
            serde_json::from_value(json!({"apiVersion": "v1", "resource": "configmaps"})).unwrap();
        index.set(
            "c",
            &ObjRef::of(&target_type, &team_a),
            &team_a,
            vec![(shared_rule, configmaps())],
        );
        index.set(
            "c",
            &ObjRef::of(&target_type, &team_b),
            &team_b,
            vec![(everywhere, configmaps())],
        );

        let in_shared = json!({"metadata": {"name": "x", "namespace": "shared"}});
        let in_other = json!({"metadata": {"name": "x", "namespace": "other"}});
        let mut found: Vec<String> = index
            .candidates(&configmaps(), &in_shared)
            .into_iter()
            .map(|((_, t), _)| t.name)
            .collect();
        found.sort();
        assert_eq!(found, ["team-a", "team-b"]);
        let found: Vec<String> = index
            .candidates(&configmaps(), &in_other)
            .into_iter()
            .map(|((_, t), _)| t.name)
            .collect();
        assert_eq!(found, ["team-b"]);

        index.remove_controller("c");
        assert!(index.candidates(&configmaps(), &in_shared).is_empty());
    }

    #[test]
    fn status_only_changes_are_told_apart() {
        let old =
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"a": 1}, "status": {"x": 1}});
        let status_only =
            json!({"metadata": {"resourceVersion": "2"}, "spec": {"a": 1}, "status": {"x": 2}});
        let spec_change =
            json!({"metadata": {"resourceVersion": "2"}, "spec": {"a": 2}, "status": {"x": 1}});
        assert!(only_status_changed(&old, &status_only));
        assert!(!only_status_changed(&old, &spec_change));
        assert!(!only_status_changed(&old, &old));
    }
}
