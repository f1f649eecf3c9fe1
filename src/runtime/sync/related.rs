//! Which objects a controller syncs relate to which others: the rules each object's customize
//! hook returned, indexed by the type and namespace they look in and by their names and
//! selectors (see [`SelectorIndex`]), so an event of a related object looks only at the rules
//! that may select it, however many targets there are; and making sure the types those rules
//! name are watched before a sync reads them. Shared by every kind with a customize hook.

use crate::object;
use crate::plan::SyncError;
use crate::plan::related::{Related, RelatedRule, RelatedRules};
use crate::resources::ResourceType;
use crate::runtime::context::Context;
use crate::runtime::keys::{ControllerId, ObjRef};
use crate::runtime::watch::discovery::ResolvedType;
use crate::runtime::watch::event::ObjectEvent;
use crate::script::CallScope;
use crate::selector::index::{Anchor, SelectorIndex};
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The customize hook's answers per object, kept while the object (its uid, metadata and spec)
/// and the controller (its version) are the ones it answered for. Its status is no part of it,
/// as in Metacontroller (whose cache goes by generation): a status the object's own controller
/// updates all the time would otherwise ask the hook again at every sync.
#[derive(Debug, Default)]
pub(crate) struct CustomizeCache(Mutex<HashMap<ObjRef, (String, Vec<RelatedRule>)>>);

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

    pub(crate) fn remove(&self, target: &ObjRef) {
        self.0.lock().remove(target);
    }
}

/// An object's related rules in the operator: its customize answer kept while it holds, and the
/// rules' types resolved, watched and indexed, so their objects' changes re-sync the object.
pub(crate) struct Watched<'a> {
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
pub(crate) struct RelatedIndex {
    inner: RwLock<Inner>,
}

/// One rule of a target: the target and where in its rules the rule is.
type Rule = (ObjRef, usize);

#[derive(Debug, Default)]
struct Inner {
    /// Per target: its rules and the scopes they were filed under.
    rules: HashMap<ObjRef, (RelatedRules, Vec<Scope>)>,
    by_scope: HashMap<Scope, SelectorIndex<Rule>>,
}

/// Where a rule is filed in its scope: by its names, else its selector.
fn anchor(rule: &RelatedRule) -> Anchor<'_> {
    match &rule.label_selector {
        Some(selector) => selector.anchor(&rule.names),
        None => Anchor::of(&rule.names, &NO_LABELS, &[]),
    }
}

static NO_LABELS: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();

impl RelatedIndex {
    /// Records a target's rules, replacing those of its previous sync.
    pub(crate) fn set(&self, target: &ObjRef, target_object: &Value, rules: RelatedRules) {
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
        for (position, (scope, (rule, _))) in scopes.iter().zip(&rules).enumerate() {
            inner
                .by_scope
                .entry(scope.clone())
                .or_default()
                .insert(anchor(rule), (target.clone(), position));
        }
        inner.rules.insert(target.clone(), (rules, scopes));
    }

    /// The rules a target's last customize returned (none recorded: none returned).
    pub(crate) fn rules_of(&self, target: &ObjRef) -> RelatedRules {
        self.inner
            .read()
            .rules
            .get(target)
            .map(|(rules, _)| rules.clone())
            .unwrap_or_default()
    }

    pub(crate) fn remove(&self, target: &ObjRef) {
        self.inner.write().remove(target);
    }

    /// The targets (still in the cache, as `get` finds them) one of whose rules selects the
    /// event's object, before or after the change. Only the rules filed under the object's
    /// type, namespace (or all), name and labels are looked at.
    pub(crate) fn affected(
        &self,
        event: &ObjectEvent,
        get: impl Fn(&ObjRef) -> Option<Arc<Value>>,
    ) -> Vec<ObjRef> {
        let inner = self.inner.read();
        let mut targets: HashMap<&ObjRef, Option<Arc<Value>>> = HashMap::new();
        let mut affected: HashSet<&ObjRef> = HashSet::new();
        for version in [&event.old, &event.new].into_iter().flatten() {
            let version = version.head();
            let mut scopes = vec![(event.resource.clone(), None)];
            if let Some(namespace) = object::namespace(version) {
                scopes.push((event.resource.clone(), Some(namespace.to_string())));
            }
            for index in scopes.iter().filter_map(|scope| inner.by_scope.get(scope)) {
                for (target, position) in index.candidates(version) {
                    if affected.contains(target) {
                        continue;
                    }
                    let Some((rule, _)) = inner
                        .rules
                        .get(target)
                        .and_then(|(rules, _)| rules.get(*position))
                    else {
                        continue;
                    };
                    let target_object = targets.entry(target).or_insert_with(|| get(target));
                    if target_object
                        .as_ref()
                        .is_some_and(|object| rule.selects(object, version))
                    {
                        affected.insert(target);
                    }
                }
            }
        }
        affected.into_iter().cloned().collect()
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
        let Some((rules, scopes)) = self.rules.remove(target) else {
            return;
        };
        for (position, (scope, (rule, _))) in scopes.iter().zip(&rules).enumerate() {
            if let Some(index) = self.by_scope.get_mut(scope) {
                index.remove(anchor(rule), &(target.clone(), position));
                if index.is_empty() {
                    self.by_scope.remove(scope);
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
    fn an_event_finds_the_targets_whose_rules_select_it() {
        let index = RelatedIndex::default();
        let target_type = ResourceType::from(TypeInfo {
            namespaced: false,
            kind: "Namespace".into(),
            plural: "namespaces".into(),
            ..TypeInfo::clone(&configmaps())
        });
        let team = |name: &str| json!({"metadata": {"name": name}});
        let rule = |rule: Value| -> RelatedRule { serde_json::from_value(rule).unwrap() };
        let shared =
            rule(json!({"apiVersion": "v1", "resource": "configmaps", "namespace": "shared"}));
        let everywhere = rule(json!({"apiVersion": "v1", "resource": "configmaps"}));
        let web = rule(json!({"apiVersion": "v1", "resource": "configmaps",
            "labelSelector": {"matchLabels": {"app": "web"}}}));
        let named = rule(json!({"apiVersion": "v1", "resource": "configmaps", "names": ["x"]}));
        let targets: HashMap<ObjRef, Arc<Value>> = ["team-a", "team-b", "team-c", "team-d"]
            .into_iter()
            .map(|name| (ObjRef::of(&target_type, &team(name)), Arc::new(team(name))))
            .collect();
        let of = |name: &str| ObjRef::of(&target_type, &team(name));
        let (a, b, c, d) = (of("team-a"), of("team-b"), of("team-c"), of("team-d"));
        index.set(&a, &team("team-a"), vec![(shared, configmaps())]);
        index.set(
            &b,
            &team("team-b"),
            vec![(everywhere.clone(), configmaps())],
        );
        index.set(&c, &team("team-c"), vec![(web, configmaps())]);
        index.set(&d, &team("team-d"), vec![(named, configmaps())]);

        let cm = |namespace: &str, name: &str, app: &str| json!({"metadata": {"name": name, "namespace": namespace, "labels": {"app": app}}});
        let names = |old: Option<Value>, new: Option<Value>| {
            let found = index.affected(&ObjectEvent::of(&configmaps(), old, new), |target| {
                targets.get(target).cloned()
            });
            let mut names: Vec<String> = found.into_iter().map(|target| target.name).collect();
            names.sort();
            names
        };
        let in_shared = cm("shared", "y", "db");
        assert_eq!(names(None, Some(in_shared.clone())), ["team-a", "team-b"]);
        assert_eq!(names(None, Some(cm("other", "y", "db"))), ["team-b"]);
        assert_eq!(
            names(None, Some(cm("other", "x", "web"))),
            ["team-b", "team-c", "team-d"]
        );
        // Relabelled away from a selector: the rule selected its old version.
        let left = names(Some(cm("other", "y", "web")), Some(cm("other", "y", "db")));
        assert_eq!(left, ["team-b", "team-c"]);
        // Another type is not looked at.
        let secrets = ResourceType::from(TypeInfo {
            kind: "Secret".into(),
            plural: "secrets".into(),
            ..TypeInfo::clone(&configmaps())
        });
        let secret = ObjectEvent::of(&secrets, None, Some(in_shared.clone()));
        assert!(
            index
                .affected(&secret, |t| targets.get(t).cloned())
                .is_empty()
        );
        // A target gone from the cache is not queued.
        let gone = index.affected(
            &ObjectEvent::of(&configmaps(), None, Some(in_shared.clone())),
            |t| (*t != b).then(|| targets.get(t).cloned()).flatten(),
        );
        assert_eq!(gone, std::slice::from_ref(&a));

        // A new sync replaces the rules; removal forgets them and their scopes.
        index.set(&a, &team("team-a"), vec![(everywhere, configmaps())]);
        assert_eq!(
            names(None, Some(cm("other", "y", "db"))),
            ["team-a", "team-b"]
        );
        for target in [&a, &b, &c, &d] {
            index.remove(target);
        }
        assert!(names(None, Some(in_shared)).is_empty());
        assert!(index.inner.read().by_scope.is_empty());
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    use crate::resources::TypeInfo;
    use serde_json::json;

    /// Prints how long finding the targets one event concerns takes beside many targets whose
    /// rules look at the event's type everywhere with a large selector.
    #[test]
    fn time_per_event_beside_many_large_related_selectors() {
        let configmaps = crate::resources::StaticResolver::with_builtins()
            .find_kind("v1", "ConfigMap")
            .unwrap();
        let namespaces = ResourceType::from(TypeInfo {
            namespaced: false,
            kind: "Namespace".into(),
            plural: "namespaces".into(),
            ..TypeInfo::clone(&configmaps)
        });
        let index = RelatedIndex::default();
        let targets = 2_000;
        let mut objects = HashMap::new();
        for i in 0..targets {
            let expressions: Vec<Value> = (0..63)
                .map(|r| json!({"key": format!("k{r}"), "operator": "NotIn", "values": ["v0", "v1", "v2"]}))
                .collect();
            let rule: RelatedRule = serde_json::from_value(json!({
                "apiVersion": "v1", "resource": "configmaps",
                "labelSelector": {"matchLabels": {"app": format!("item-{i}")}, "matchExpressions": expressions}
            }))
            .unwrap();
            let target = json!({"metadata": {"name": format!("t{i}")}});
            let target_ref = ObjRef::of(&namespaces, &target);
            index.set(&target_ref, &target, vec![(rule, configmaps.clone())]);
            objects.insert(target_ref, Arc::new(target));
        }
        let object =
            json!({"metadata": {"namespace": "x", "name": "cm", "labels": {"app": "item-5"}}});
        let rounds = 20;
        let started = std::time::Instant::now();
        let mut found = 0;
        let event = ObjectEvent::of(&configmaps, Some(object.clone()), Some(object));
        for _ in 0..rounds {
            found = index
                .affected(&event, |target| objects.get(target).cloned())
                .len();
        }
        let each = started.elapsed() / rounds;
        eprintln!("related matching: {targets} related selectors, {each:?} per event");
        assert_eq!(found, 1);
    }
}
