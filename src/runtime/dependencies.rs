//! What each work item's hooks read (`get`, `list`), indexed by the type, namespace and name
//! read, so a watch event re-queues exactly the work items whose reads it changes, without
//! looking at any other.

use super::cache::ObjectEvent;
use super::keys::{ControllerId, WorkKey};
use crate::object;
use crate::reads::Dependency;
use crate::resources::ResourceType;
use parking_lot::RwLock;
use std::collections::{HashMap, HashSet};

#[derive(Debug, Default)]
pub struct DependencyIndex {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per work item: what its last run read (replaced by every run).
    by_key: HashMap<WorkKey, Vec<Dependency>>,
    /// Type → where its objects were read: the one lookup an event of the type needs.
    by_type: HashMap<ResourceType, TypeIndex>,
    /// Dependencies per controller, for the `metascript_dependencies` gauge.
    per_controller: HashMap<ControllerId, usize>,
}

#[derive(Debug, Default)]
struct TypeIndex {
    /// (namespace, name) → the work items that got that object.
    objects: HashMap<(Option<String>, String), HashSet<WorkKey>>,
    /// Namespace listed (none: all namespaces, or a cluster-scoped type) → the work items
    /// that listed there; their filters are checked against the event's object.
    lists: HashMap<Option<String>, HashSet<WorkKey>>,
}

impl TypeIndex {
    fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.lists.is_empty()
    }
}

impl DependencyIndex {
    /// Records what a work item's run read, replacing what its previous run read. Returns the
    /// controller's dependency count afterwards.
    pub fn set(&self, key: &WorkKey, dependencies: Vec<Dependency>) -> usize {
        let mut inner = self.inner.write();
        inner.remove(key);
        if !dependencies.is_empty() {
            for dependency in &dependencies {
                let index = inner
                    .by_type
                    .entry(dependency.resource().clone())
                    .or_default();
                let keys = match dependency {
                    Dependency::Object {
                        namespace, name, ..
                    } => index
                        .objects
                        .entry((namespace.clone(), name.clone()))
                        .or_default(),
                    Dependency::List { namespace, .. } => {
                        index.lists.entry(namespace.clone()).or_default()
                    }
                };
                keys.insert(key.clone());
            }
            *inner
                .per_controller
                .entry(key.controller.clone())
                .or_default() += dependencies.len();
            inner.by_key.insert(key.clone(), dependencies);
        }
        inner.count(&key.controller)
    }

    /// What a work item's last run read, in the order read.
    pub fn of(&self, key: &WorkKey) -> Vec<Dependency> {
        self.inner
            .read()
            .by_key
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether any work item of the controller depends on something (a shared lock only).
    pub fn holds_any(&self, controller: &ControllerId) -> bool {
        self.inner.read().count(controller) > 0
    }

    /// Forgets a work item (its object is gone). Returns the controller's count afterwards.
    pub fn remove(&self, key: &WorkKey) -> usize {
        let mut inner = self.inner.write();
        inner.remove(key);
        inner.count(&key.controller)
    }

    /// Forgets every work item of a controller (it was removed).
    pub fn remove_controller(&self, controller: &ControllerId) {
        let mut inner = self.inner.write();
        let keys: Vec<WorkKey> = inner
            .by_key
            .keys()
            .filter(|key| key.controller == *controller)
            .cloned()
            .collect();
        for key in keys {
            inner.remove(&key);
        }
        inner.per_controller.remove(controller);
    }

    /// The work items whose reads an event changes: those that got the object, and those
    /// whose list matched its old or its new version (an object that starts or stops matching
    /// changes the list).
    pub fn affected(&self, event: &ObjectEvent) -> Vec<WorkKey> {
        let inner = self.inner.read();
        let Some(index) = inner.by_type.get(&event.resource) else {
            return Vec::new();
        };
        let versions: Vec<&serde_json::Value> = [&event.old, &event.new]
            .into_iter()
            .flatten()
            .map(|v| &**v)
            .collect();
        let mut affected: HashSet<&WorkKey> = HashSet::new();
        for version in &versions {
            let namespace = event.resource.scope_of(version).map(str::to_string);
            let name = object::name(version).to_string();
            if let Some(keys) = index.objects.get(&(namespace.clone(), name)) {
                affected.extend(keys);
            }
            let scopes = [Some(namespace).filter(|n| n.is_some()), Some(None)];
            for scope in scopes.into_iter().flatten() {
                let Some(keys) = index.lists.get(&scope) else {
                    continue;
                };
                for key in keys {
                    if affected.contains(key) {
                        continue;
                    }
                    let matches = inner.by_key.get(key).is_some_and(|dependencies| {
                        dependencies.iter().any(|d| {
                            matches!(d, Dependency::List { .. })
                                && d.resource() == &event.resource
                                && d.covers(version)
                        })
                    });
                    if matches {
                        affected.insert(key);
                    }
                }
            }
        }
        affected.into_iter().cloned().collect()
    }
}

impl Inner {
    fn count(&self, controller: &ControllerId) -> usize {
        self.per_controller.get(controller).copied().unwrap_or(0)
    }

    fn remove(&mut self, key: &WorkKey) {
        let Some(dependencies) = self.by_key.remove(key) else {
            return;
        };
        if let Some(count) = self.per_controller.get_mut(&key.controller) {
            *count = count.saturating_sub(dependencies.len());
        }
        for dependency in &dependencies {
            let Some(index) = self.by_type.get_mut(dependency.resource()) else {
                continue;
            };
            match dependency {
                Dependency::Object {
                    namespace, name, ..
                } => {
                    let slot = (namespace.clone(), name.clone());
                    if let Some(keys) = index.objects.get_mut(&slot) {
                        keys.remove(key);
                        if keys.is_empty() {
                            index.objects.remove(&slot);
                        }
                    }
                }
                Dependency::List { namespace, .. } => {
                    if let Some(keys) = index.lists.get_mut(namespace) {
                        keys.remove(key);
                        if keys.is_empty() {
                            index.lists.remove(namespace);
                        }
                    }
                }
            }
            if index.is_empty() {
                self.by_type.remove(dependency.resource());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reads::ListFilter;
    use crate::runtime::keys::{ObjRef, Work};
    use crate::selector::parse_label_selector;
    use serde_json::{Value, json};
    use std::sync::Arc;

    fn resolver() -> crate::resources::StaticResolver {
        crate::resources::StaticResolver::with_builtins()
    }

    fn key(controller: &str, name: &str) -> WorkKey {
        let deployments = resolver().find_kind("apps/v1", "Deployment").unwrap();
        WorkKey::new(
            &ControllerId::new(crate::kinds::decorator::KIND, controller),
            Work::Object(ObjRef {
                resource: deployments,
                namespace: Some("ns".into()),
                name: name.into(),
            }),
        )
    }

    fn event(resource: &ResourceType, old: Option<Value>, new: Option<Value>) -> ObjectEvent {
        ObjectEvent {
            resource: resource.clone(),
            old: old.map(Arc::new),
            new: new.map(Arc::new),
            listed_at: None,
        }
    }

    fn names(mut keys: Vec<WorkKey>) -> Vec<String> {
        keys.sort_by_key(|k| k.work.to_string());
        keys.into_iter()
            .map(|k| match k.work {
                Work::Object(o) => o.name,
                other => other.to_string(),
            })
            .collect()
    }

    #[test]
    fn a_get_re_queues_exactly_its_readers() {
        let namespaces = resolver().find_kind("v1", "Namespace").unwrap();
        let index = DependencyIndex::default();
        let get = |name: &str| Dependency::Object {
            resource: namespaces.clone(),
            namespace: None,
            name: name.into(),
        };
        index.set(&key("c", "a"), vec![get("team-a")]);
        index.set(&key("c", "b"), vec![get("team-b")]);
        let team_a = json!({"metadata": {"name": "team-a", "labels": {"team": "x"}}});
        let changed = event(&namespaces, Some(team_a.clone()), Some(team_a));
        assert_eq!(names(index.affected(&changed)), ["a"]);
        // Deleted, too.
        let gone = event(
            &namespaces,
            Some(json!({"metadata": {"name": "team-b"}})),
            None,
        );
        assert_eq!(names(index.affected(&gone)), ["b"]);

        // A new run replaces what the last one read.
        assert_eq!(index.set(&key("c", "a"), vec![get("team-b")]), 2);
        assert_eq!(names(index.affected(&gone)), ["a", "b"]);
        assert_eq!(index.remove(&key("c", "b")), 1);
        index.remove_controller(&key("c", "a").controller);
        assert!(index.affected(&gone).is_empty());
        assert!(index.inner.read().by_type.is_empty());
    }

    #[test]
    fn a_list_re_queues_when_an_object_starts_or_stops_matching() {
        let services = resolver().find_kind("v1", "Service").unwrap();
        let index = DependencyIndex::default();
        index.set(
            &key("c", "web"),
            vec![Dependency::List {
                resource: services.clone(),
                namespace: Some("shop".into()),
                filter: ListFilter {
                    labels: parse_label_selector("app=web").unwrap(),
                    fields: Vec::new(),
                },
            }],
        );
        index.set(
            &key("c", "all"),
            vec![Dependency::List {
                resource: services.clone(),
                namespace: None,
                filter: ListFilter::default(),
            }],
        );
        let svc = |namespace: &str, app: &str| json!({"metadata": {"namespace": namespace, "name": "s", "labels": {"app": app}}});
        let added = event(&services, None, Some(svc("shop", "web")));
        assert_eq!(names(index.affected(&added)), ["all", "web"]);
        let unrelated = event(&services, None, Some(svc("shop", "db")));
        assert_eq!(names(index.affected(&unrelated)), ["all"]);
        let elsewhere = event(&services, None, Some(svc("other", "web")));
        assert_eq!(names(index.affected(&elsewhere)), ["all"]);
        // Relabelled away from the selector: the list lost it.
        let left = event(&services, Some(svc("shop", "web")), Some(svc("shop", "db")));
        assert_eq!(names(index.affected(&left)), ["all", "web"]);
        // Another type is not looked at.
        let configmaps = resolver().find_kind("v1", "ConfigMap").unwrap();
        assert!(
            index
                .affected(&event(&configmaps, None, Some(svc("shop", "web"))))
                .is_empty()
        );
    }
}
