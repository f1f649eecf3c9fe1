//! What each work item's hooks read (`get`, `list`), indexed by the type, namespace and name
//! read, and a list's by its selector's anchor, so a watch event re-queues exactly the work
//! items whose reads it changes, looking only at the lists it may be in (see
//! [`SelectorIndex`]): the work per event follows the object's labels and the items it
//! affects, not how many items listed its type or how large their selectors are.

use crate::object;
use crate::reads::{Dependency, ListFilter};
use crate::resources::ResourceType;
use crate::runtime::keys::{ControllerId, WorkKey};
use crate::runtime::watch::event::ObjectEvent;
use crate::selector::Field;
use crate::selector::index::{Anchor, SelectorIndex};
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

/// A list a work item made: the item and where in its reads the list is.
type Listed = (WorkKey, usize);

#[derive(Debug, Default)]
struct TypeIndex {
    /// (namespace, name) → the work items that got that object.
    objects: HashMap<(Option<String>, String), HashSet<WorkKey>>,
    /// Namespace listed (none: all namespaces, or a cluster-scoped type) → the lists made
    /// there, filed by their filters; each candidate's filter is checked against the object.
    lists: HashMap<Option<String>, SelectorIndex<Listed>>,
}

impl TypeIndex {
    fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.lists.is_empty()
    }
}

/// Where a list's filter is filed: a `metadata.name=` it names, else its label selector's.
fn anchor(filter: &ListFilter) -> Anchor<'_> {
    let names = filter
        .fields
        .iter()
        .find(|f| f.field == Field::Name && f.equal)
        .map_or(&[][..], |f| std::slice::from_ref(&f.value));
    filter.labels.anchor(names)
}

impl DependencyIndex {
    /// Records what a work item's run read, replacing what its previous run read. Returns how
    /// the controller's dependency count changed: workers record at once, and changes added
    /// to a gauge in any order sum right, where counts set in the wrong order would not.
    pub(crate) fn set(&self, key: &WorkKey, dependencies: Vec<Dependency>) -> i64 {
        let mut inner = self.inner.write();
        let before = inner.count(&key.controller);
        inner.remove(key);
        if !dependencies.is_empty() {
            for (position, dependency) in dependencies.iter().enumerate() {
                let index = inner
                    .by_type
                    .entry(dependency.resource().clone())
                    .or_default();
                match dependency {
                    Dependency::Object {
                        namespace, name, ..
                    } => {
                        index
                            .objects
                            .entry((namespace.clone(), name.clone()))
                            .or_default()
                            .insert(key.clone());
                    }
                    Dependency::List {
                        namespace, filter, ..
                    } => index
                        .lists
                        .entry(namespace.clone())
                        .or_default()
                        .insert(anchor(filter), (key.clone(), position)),
                }
            }
            *inner
                .per_controller
                .entry(key.controller.clone())
                .or_default() += dependencies.len();
            inner.by_key.insert(key.clone(), dependencies);
        }
        inner.count(&key.controller) as i64 - before as i64
    }

    /// What a work item's last run read, in the order read.
    pub(crate) fn of(&self, key: &WorkKey) -> Vec<Dependency> {
        self.inner
            .read()
            .by_key
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether any work item of the controller depends on something (a shared lock only).
    pub(crate) fn holds_any(&self, controller: &ControllerId) -> bool {
        self.inner.read().count(controller) > 0
    }

    /// Whether any work item read objects of this type: events of other types need no look.
    pub(crate) fn watches_type(&self, resource: &ResourceType) -> bool {
        self.inner.read().by_type.contains_key(resource)
    }

    /// Forgets a work item (its object is gone). Returns how the controller's count changed.
    pub(crate) fn remove(&self, key: &WorkKey) -> i64 {
        let mut inner = self.inner.write();
        let before = inner.count(&key.controller);
        inner.remove(key);
        inner.count(&key.controller) as i64 - before as i64
    }

    /// Forgets every work item of a controller (it was removed).
    pub(crate) fn remove_controller(&self, controller: &ControllerId) {
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
    pub(crate) fn affected(&self, event: &ObjectEvent) -> Vec<WorkKey> {
        let inner = self.inner.read();
        let Some(index) = inner.by_type.get(&event.resource) else {
            return Vec::new();
        };
        let mut affected: HashSet<&WorkKey> = HashSet::new();
        for version in [&event.old, &event.new].into_iter().flatten() {
            let version = version.head();
            let namespace = event.resource.scope_of(version).map(str::to_string);
            let name = object::name(version).to_string();
            if let Some(keys) = index.objects.get(&(namespace.clone(), name)) {
                affected.extend(keys);
            }
            let scopes = [Some(namespace).filter(|n| n.is_some()), Some(None)];
            for scope in scopes.into_iter().flatten() {
                let Some(lists) = index.lists.get(&scope) else {
                    continue;
                };
                for (key, position) in lists.candidates(version) {
                    if affected.contains(key) {
                        continue;
                    }
                    let read = inner
                        .by_key
                        .get(key)
                        .and_then(|dependencies| dependencies.get(*position));
                    if read.is_some_and(|dependency| dependency.covers(version)) {
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
        for (position, dependency) in dependencies.iter().enumerate() {
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
                Dependency::List {
                    namespace, filter, ..
                } => {
                    if let Some(lists) = index.lists.get_mut(namespace) {
                        lists.remove(anchor(filter), &(key.clone(), position));
                        if lists.is_empty() {
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
    use serde_json::json;

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
        let changed = ObjectEvent::of(&namespaces, Some(team_a.clone()), Some(team_a));
        assert_eq!(names(index.affected(&changed)), ["a"]);
        // Deleted, too.
        let gone = ObjectEvent::of(
            &namespaces,
            Some(json!({"metadata": {"name": "team-b"}})),
            None,
        );
        assert_eq!(names(index.affected(&gone)), ["b"]);

        // A new run replaces what the last one read.
        assert_eq!(index.set(&key("c", "a"), vec![get("team-b")]), 0);
        assert_eq!(names(index.affected(&gone)), ["a", "b"]);
        assert_eq!(index.remove(&key("c", "b")), -1);
        assert_eq!(index.inner.read().count(&key("c", "a").controller), 1);
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
        let added = ObjectEvent::of(&services, None, Some(svc("shop", "web")));
        assert_eq!(names(index.affected(&added)), ["all", "web"]);
        let unrelated = ObjectEvent::of(&services, None, Some(svc("shop", "db")));
        assert_eq!(names(index.affected(&unrelated)), ["all"]);
        let elsewhere = ObjectEvent::of(&services, None, Some(svc("other", "web")));
        assert_eq!(names(index.affected(&elsewhere)), ["all"]);
        // Relabelled away from the selector: the list lost it.
        let left = ObjectEvent::of(&services, Some(svc("shop", "web")), Some(svc("shop", "db")));
        assert_eq!(names(index.affected(&left)), ["all", "web"]);
        // Another type is not looked at.
        let configmaps = resolver().find_kind("v1", "ConfigMap").unwrap();
        assert!(
            index
                .affected(&ObjectEvent::of(
                    &configmaps,
                    None,
                    Some(svc("shop", "web"))
                ))
                .is_empty()
        );
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    use crate::reads::ListFilter;
    use crate::runtime::keys::{ObjRef, Work};
    use crate::selector::{Operator, Requirement, Selector};
    use serde_json::json;

    /// How long matching one event takes beside `items` work items that each list its type
    /// everywhere with a selector of 64 requirements, item `i`'s made by `selector(i)`; and
    /// how many items it found.
    fn per_event(
        items: usize,
        selector: impl Fn(usize) -> Selector,
    ) -> (std::time::Duration, usize) {
        let configmaps = crate::resources::StaticResolver::with_builtins()
            .find_kind("v1", "ConfigMap")
            .unwrap();
        let index = DependencyIndex::default();
        for i in 0..items {
            let key = WorkKey::new(
                &ControllerId::new(crate::kinds::decorator::KIND, "c"),
                Work::Object(ObjRef {
                    resource: configmaps.clone(),
                    namespace: Some("ns".into()),
                    name: format!("t{i}"),
                }),
            );
            let filter = ListFilter {
                labels: selector(i),
                fields: Vec::new(),
            };
            let list = Dependency::List {
                resource: configmaps.clone(),
                namespace: None,
                filter,
            };
            index.set(&key, vec![list]);
        }
        let object = json!({"metadata": {"namespace": "x", "name": "cm", "labels": {"app": "item-5", "k1": "v0"}}});
        let event = ObjectEvent::of(&configmaps, Some(object.clone()), Some(object));
        let rounds = 10;
        let started = std::time::Instant::now();
        let mut found = 0;
        for _ in 0..rounds {
            found = index.affected(&event).len();
        }
        (started.elapsed() / rounds, found)
    }

    fn requirements(operator: Operator) -> Vec<Requirement> {
        (0..63)
            .map(|r| Requirement {
                key: format!("k{r}"),
                operator,
                values: (0..3).map(|v| format!("v{v}")).collect(),
            })
            .collect()
    }

    /// Prints the time per event beside many large selectors (a measurement, not a bound): with
    /// something to file them by, it follows what the event matches; only selectors of negative
    /// requirements alone are each looked at.
    #[test]
    fn time_per_event_beside_many_large_list_selectors() {
        let items = 2_000;
        let (anchored, found) = per_event(items, |i| Selector {
            match_exact: [("app".to_string(), format!("item-{i}"))].into(),
            expressions: requirements(Operator::NotIn),
        });
        assert_eq!(found, 0, "k1=v0 is excluded by every selector");
        let (matching, found) = per_event(items, |i| Selector {
            match_exact: [("app".to_string(), format!("item-{}", i % 2 * 5))].into(),
            expressions: vec![],
        });
        assert_eq!(found, items / 2);
        let (negative, found) = per_event(items, |_| Selector {
            match_exact: Default::default(),
            expressions: requirements(Operator::DoesNotExist),
        });
        assert_eq!(found, 0);
        eprintln!(
            "dependency matching beside {items} lists: {anchored:?} per event (filed by a label), \
             {matching:?} (half of them match), {negative:?} (negative requirements only: each looked at)"
        );
    }
}
