//! Which objects a controller syncs relate to which others: the rules each object's customize
//! hook returned, indexed by the type and namespace they look in, so an event of a related
//! object finds the objects it may concern without scanning them all; and making sure the
//! types those rules name are watched before a sync reads them. Shared by every kind with a
//! customize hook.

use super::context::Context;
use super::discovery::ResolvedType;
use super::keys::{ControllerId, ObjRef};
use crate::object;
use crate::plan::SyncError;
use crate::plan::related::{Related, RelatedRule, RelatedRules};
use crate::resources::ResourceType;
use crate::script::CallScope;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// The customize hook's answers per object, kept while the object (its uid, metadata and spec)
/// and the controller (its version) are the ones it answered for. Its status is no part of it,
/// as in Metacontroller (whose cache goes by generation): a status the object's own controller
/// updates all the time would otherwise ask the hook again at every sync.
#[derive(Debug, Default)]
pub struct CustomizeCache(Mutex<HashMap<ObjRef, (String, Vec<RelatedRule>)>>);

/// Fields of an object that change without anything a customize hook answers about changing.
const NOT_ASKED_ABOUT: [&str; 3] = ["status", "resourceVersion", "managedFields"];

/// An object as a customize answer depends on it: without [`NOT_ASKED_ABOUT`] at its top level
/// or in its metadata. Serialized as it is read, so keying an answer copies nothing.
struct AskedAbout<'a> {
    object: &'a Value,
    /// Whether `object` is the whole object (its `metadata` is filtered too).
    top: bool,
}

impl serde::Serialize for AskedAbout<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let Value::Object(fields) = self.object else {
            return self.object.serialize(serializer);
        };
        let mut map = serializer.serialize_map(None)?;
        for (field, value) in fields {
            if NOT_ASKED_ABOUT.contains(&field.as_str()) {
                continue;
            }
            match self.top && field == "metadata" {
                true => map.serialize_entry(
                    field,
                    &AskedAbout {
                        object: value,
                        top: false,
                    },
                )?,
                false => map.serialize_entry(field, value)?,
            }
        }
        map.end()
    }
}

impl CustomizeCache {
    /// What an answer is kept for: the object as it is (less its status and the server's
    /// bookkeeping), and the controller as it runs.
    fn key(target: &Value, version: u64) -> String {
        let asked = AskedAbout {
            object: target,
            top: true,
        };
        format!(
            "{}#{version}#{}",
            object::uid(target).unwrap_or_default(),
            object::value_digest(&asked)
        )
    }

    pub fn remove(&self, target: &ObjRef) {
        self.0.lock().remove(target);
    }
}

/// An object's related rules in the operator: its customize answer kept while it holds, and the
/// rules' types resolved, watched and indexed, so their objects' changes re-sync the object.
pub struct Watched<'a> {
    pub context: &'a Context,
    pub id: &'a ControllerId,
    pub index: &'a RelatedIndex,
    pub customized: &'a CustomizeCache,
    /// The controller's version (its answers are kept for it only).
    pub version: u64,
    pub target_ref: &'a ObjRef,
    pub target: &'a Value,
    /// The work item's scope: related objects are handed to the hooks only where the
    /// controller's account may read them.
    pub scope: &'a CallScope,
}

impl Related for Watched<'_> {
    fn cached(&self) -> Option<Vec<RelatedRule>> {
        let key = CustomizeCache::key(self.target, self.version);
        let kept = self.customized.0.lock();
        let (kept_for, rules) = kept.get(self.target_ref)?;
        (*kept_for == key).then(|| rules.clone())
    }

    fn keep(&self, rules: &[RelatedRule]) {
        let key = CustomizeCache::key(self.target, self.version);
        self.customized
            .0
            .lock()
            .insert(self.target_ref.clone(), (key, rules.to_vec()));
    }

    fn resolve(&self, rules: Vec<RelatedRule>) -> Result<RelatedRules, SyncError> {
        let runtime = tokio::runtime::Handle::current();
        let resolved = runtime.block_on(resolve_related(self.context, self.id, rules))?;
        let related: RelatedRules = resolved
            .iter()
            .map(|(rule, resolved)| (rule.clone(), resolved.resource.clone()))
            .collect();
        // Before anything is watched or indexed: a refused rule starts no watch (a customize
        // answer cannot have the operator watch every Secret of the cluster for an account that
        // may not read them) and relates nothing to the object.
        crate::plan::admit(
            self.scope,
            &self.id.name,
            &crate::plan::related::related_scopes(&related, self.target),
        )?;
        runtime.block_on(watch_related(self.context, self.id, &resolved))?;
        self.index
            .set(self.target_ref, self.target, related.clone());
        Ok(related)
    }
}

/// A related type and the namespace its rules look in (none: every namespace, or a
/// cluster-scoped type).
type Scope = (ResourceType, Option<String>);

#[derive(Debug, Default)]
pub struct RelatedIndex {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per target: its rules and the scopes they were filed under.
    rules: HashMap<ObjRef, (RelatedRules, Vec<Scope>)>,
    by_scope: HashMap<Scope, HashSet<ObjRef>>,
}

impl RelatedIndex {
    /// Records a target's rules, replacing those of its previous sync.
    pub fn set(&self, target: &ObjRef, target_object: &Value, rules: RelatedRules) {
        let mut inner = self.inner.write();
        inner.remove(target);
        if rules.is_empty() {
            return;
        }
        let scopes: Vec<Scope> = rules
            .iter()
            .map(|(rule, resource)| {
                let namespace = resource.scope(rule.namespace_for(target_object));
                (resource.clone(), namespace.map(str::to_string))
            })
            .collect();
        for scope in &scopes {
            inner
                .by_scope
                .entry(scope.clone())
                .or_default()
                .insert(target.clone());
        }
        inner.rules.insert(target.clone(), (rules, scopes));
    }

    /// The rules a target's last customize returned (none recorded: none returned).
    pub fn rules_of(&self, target: &ObjRef) -> RelatedRules {
        self.inner
            .read()
            .rules
            .get(target)
            .map(|(rules, _)| rules.clone())
            .unwrap_or_default()
    }

    pub fn remove(&self, target: &ObjRef) {
        self.inner.write().remove(target);
    }

    /// Targets whose rules of this type, in this object's namespace or in all, could select
    /// it, with those rules; the caller checks each rule against the object.
    pub fn candidates(
        &self,
        resource: &ResourceType,
        object: &Value,
    ) -> Vec<(ObjRef, Vec<RelatedRule>)> {
        let inner = self.inner.read();
        let mut scopes = vec![(resource.clone(), None)];
        if let Some(namespace) = object::namespace(object) {
            scopes.push((resource.clone(), Some(namespace.to_string())));
        }
        scopes
            .iter()
            .filter_map(|scope| inner.by_scope.get(scope))
            .flatten()
            .collect::<HashSet<_>>()
            .into_iter()
            .map(|target| {
                let rules = inner.rules[target]
                    .0
                    .iter()
                    .filter(|(_, t)| t == resource)
                    .map(|(rule, _)| rule.clone())
                    .collect();
                (target.clone(), rules)
            })
            .collect()
    }
}

/// Resolves the type of each related rule.
async fn resolve_related(
    context: &Context,
    id: &ControllerId,
    rules: Vec<RelatedRule>,
) -> Result<Vec<(RelatedRule, ResolvedType)>, SyncError> {
    let mut related = Vec::with_capacity(rules.len());
    for rule in rules {
        let resolved = context
            .discovery
            .resolve(&rule.resource_ref())
            .await
            .map_err(|source| SyncError::Resolve {
                controller: id.name.clone(),
                source,
            })?;
        related.push((rule, resolved));
    }
    Ok(related)
}

/// Makes sure the type of each related rule is watched, so the rules can be evaluated against
/// the cache.
async fn watch_related(
    context: &Context,
    id: &ControllerId,
    related: &[(RelatedRule, ResolvedType)],
) -> Result<(), SyncError> {
    for (_, resolved) in related {
        context
            .informers
            .ensure(resolved)
            .await
            .map_err(|error| SyncError::Watch {
                controller: id.name.clone(),
                message: error.to_string(),
            })?;
    }
    Ok(())
}

impl Inner {
    fn remove(&mut self, target: &ObjRef) {
        let Some((_, scopes)) = self.rules.remove(target) else {
            return;
        };
        for scope in scopes {
            if let Some(targets) = self.by_scope.get_mut(&scope) {
                targets.remove(target);
                if targets.is_empty() {
                    self.by_scope.remove(&scope);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::TypeInfo;
    use serde_json::json;

    fn configmaps() -> ResourceType {
        crate::resources::StaticResolver::with_builtins()
            .find_kind("v1", "ConfigMap")
            .expect("ConfigMap is built in")
    }

    #[test]
    fn a_customize_answer_outlives_status_changes_but_not_metadata_spec_or_controller_changes() {
        let target = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "7",
                         "managedFields": [{"manager": "kubectl"}], "labels": {"a": "1"}},
            "spec": {"replicas": 1},
            "status": {"replicas": 0}
        });
        let key = |object: &Value| CustomizeCache::key(object, 1);
        let changed = |pointer: &str, value: Value| {
            let mut object = target.clone();
            *object.pointer_mut(pointer).expect("a field of the target") = value;
            object
        };
        for (same, why) in [
            (changed("/status/replicas", json!(1)), "status"),
            (
                changed("/metadata/resourceVersion", json!("8")),
                "resourceVersion",
            ),
            (
                changed("/metadata/managedFields", json!([])),
                "managedFields",
            ),
        ] {
            assert_eq!(key(&same), key(&target), "a change of {why} asks again");
        }
        for (other, why) in [
            (changed("/metadata/labels/a", json!("2")), "a label"),
            (changed("/spec/replicas", json!(2)), "the spec"),
            (
                changed("/metadata/uid", json!("u-2")),
                "the uid (a new object)",
            ),
        ] {
            assert_ne!(
                key(&other),
                key(&target),
                "a change of {why} keeps the answer"
            );
        }
        assert_ne!(
            CustomizeCache::key(&target, 2),
            key(&target),
            "a new controller version"
        );
    }

    #[test]
    fn candidates_come_from_the_index_by_type_and_namespace() {
        let index = RelatedIndex::default();
        let target_type = ResourceType::from(TypeInfo {
            namespaced: false,
            kind: "Namespace".into(),
            plural: "namespaces".into(),
            ..TypeInfo::clone(&configmaps())
        });
        let team_a = json!({"metadata": {"name": "team-a"}});
        let team_b = json!({"metadata": {"name": "team-b"}});
        let shared_rule: RelatedRule = serde_json::from_value(
            json!({"apiVersion": "v1", "resource": "configmaps", "namespace": "shared"}),
        )
        .unwrap();
        let everywhere: RelatedRule =
            serde_json::from_value(json!({"apiVersion": "v1", "resource": "configmaps"})).unwrap();
        let a = ObjRef::of(&target_type, &team_a);
        let b = ObjRef::of(&target_type, &team_b);
        index.set(&a, &team_a, vec![(shared_rule, configmaps())]);
        index.set(&b, &team_b, vec![(everywhere.clone(), configmaps())]);

        let in_shared = json!({"metadata": {"name": "x", "namespace": "shared"}});
        let in_other = json!({"metadata": {"name": "x", "namespace": "other"}});
        let names = |object: &Value| {
            let mut names: Vec<String> = index
                .candidates(&configmaps(), object)
                .into_iter()
                .map(|(target, _)| target.name)
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(&in_shared), ["team-a", "team-b"]);
        assert_eq!(names(&in_other), ["team-b"]);

        // A new sync replaces the rules; removal forgets them and their scopes.
        index.set(&a, &team_a, vec![(everywhere, configmaps())]);
        assert_eq!(names(&in_other), ["team-a", "team-b"]);
        index.remove(&a);
        index.remove(&b);
        assert!(names(&in_shared).is_empty());
        assert!(index.inner.read().by_scope.is_empty());
    }
}
