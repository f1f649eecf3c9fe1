//! Watch caches: one watch per resource type, shared by every controller, with the indexes the
//! controllers need (by namespace and name, by namespace, by controller owner uid).
//!
//! Each watched type has a task that keeps its [`Store`] current and sends an [`ObjectEvent`] for
//! every change to the operator's single event channel. Objects are held once, as
//! `Arc<serde_json::Value>`, and handed out by reference count, never copied. An object that
//! cannot be decoded ([`Undecodable`]) is passed over, said and counted, and never stops its
//! type: what was cached of it stays until it is deleted.

use crate::object;
use crate::resources::ResourceType;
use crate::runtime::report::metrics::ResourceLabels;
use crate::runtime::watch::decode::{Undecodable, WatchedObject};
use crate::runtime::watch::discovery::ResolvedType;
use crate::store::ObjectStore;
use futures::StreamExt as _;
use kube::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use parking_lot::{Mutex, RwLock};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::{Map, Value};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// A change to one cached object.
#[derive(Clone, Debug)]
pub struct ObjectEvent {
    pub resource: ResourceType,
    /// The previous state; `None` when the object was added (or seen for the first time).
    pub old: Option<Arc<Value>>,
    /// The new state; `None` when the object was deleted.
    pub new: Option<Arc<Value>>,
    /// When the change comes from a (re)list: when the listed objects replaced the cache. A
    /// controller that queued everything from the cache after that moment has seen it already.
    pub listed_at: Option<Instant>,
}

#[cfg(test)]
impl ObjectEvent {
    /// A change as a watch would report it, for tests of what routes it.
    pub(crate) fn of(resource: &ResourceType, old: Option<Value>, new: Option<Value>) -> Self {
        ObjectEvent {
            resource: resource.clone(),
            old: old.map(Arc::new),
            new: new.map(Arc::new),
            listed_at: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("watching {resource}: {message}")]
    Watch { resource: String, message: String },
    #[error("the watch of {resource} was released before its initial list completed")]
    Released { resource: String },
}

/// The watches of every type the operator needs.
pub struct Informers {
    client: kube::Client,
    events: mpsc::UnboundedSender<ObjectEvent>,
    watches: Mutex<HashMap<ResourceType, RunningWatch>>,
    /// Objects passed over because they cannot be decoded, per type.
    undecodable: Family<ResourceLabels, Counter>,
    /// Where each passed-over object is reported, for an Event on it (set once by the
    /// operator; a full channel drops the report, the log line and the count stay).
    passed_over: std::sync::OnceLock<mpsc::Sender<PassedOver>>,
}

/// Where a watch says it passed an object over: a count, and the operator's reports.
struct PassOver {
    counted: Counter,
    reports: Option<mpsc::Sender<PassedOver>>,
}

/// An object a watch passed over, and its type.
#[derive(Debug)]
pub(crate) struct PassedOver {
    pub resource: ResourceType,
    pub object: Undecodable,
}

/// One running watch.
struct RunningWatch {
    store: Arc<RwLock<Store>>,
    progress: watch::Receiver<Progress>,
    task: JoinHandle<()>,
}

/// How far a watch got: whether its cache holds a complete list yet, and how many attempts to
/// list or watch have failed (so a waiter can tell a fresh failure from one it already saw).
#[derive(Clone, Debug, Default)]
struct Progress {
    synced: bool,
    failures: u64,
    last_error: Option<String>,
}

impl Informers {
    /// Informers sending their changes to `events`, counting the objects they pass over in
    /// `undecodable`.
    pub fn new(
        client: kube::Client,
        events: mpsc::UnboundedSender<ObjectEvent>,
        undecodable: Family<ResourceLabels, Counter>,
    ) -> Arc<Informers> {
        Arc::new(Informers {
            client,
            events,
            watches: Mutex::default(),
            undecodable,
            passed_over: std::sync::OnceLock::new(),
        })
    }

    /// Reports every object passed over from now on to `reports` too.
    pub(crate) fn report_passed_over(&self, reports: mpsc::Sender<PassedOver>) {
        let _ = self.passed_over.set(reports);
    }

    /// Starts the watch for a type once (later calls share it) and waits until its initial list
    /// is in the cache. Cluster-wide.
    ///
    /// Until the first list succeeds, a failed attempt (e.g. RBAC forbids listing the type) is
    /// returned as [`CacheError::Watch`]; the watch keeps retrying with backoff, and a later
    /// call waits for its next attempt, so callers retrying in a loop do not add requests.
    pub async fn ensure(&self, resolved: &ResolvedType) -> Result<(), CacheError> {
        self.ensure_selected(resolved, None).await
    }

    /// [`Informers::ensure`], caching only the objects whose labels match `label_selector`
    /// (kubectl syntax, checked by the apiserver). The selector applies to the type's one
    /// shared watch, so it is for types only the operator itself reads (its controller
    /// objects); a watch that already runs keeps its selector.
    pub(crate) async fn ensure_selected(
        &self,
        resolved: &ResolvedType,
        label_selector: Option<&str>,
    ) -> Result<(), CacheError> {
        let (mut progress, seen_failures) = {
            let mut watches = self.watches.lock();
            match watches.entry(resolved.resource.clone()) {
                // A new watch may fail before this borrows its progress; every failure counts.
                Entry::Vacant(entry) => (
                    entry
                        .insert(self.start(resolved, label_selector))
                        .progress
                        .clone(),
                    0,
                ),
                Entry::Occupied(entry) => {
                    let progress = entry.get().progress.clone();
                    let failures = progress.borrow().failures;
                    (progress, failures)
                }
            }
        };
        let resource = resolved.resource.group_key();
        let outcome = progress
            .wait_for(|p| p.synced || p.failures > seen_failures)
            .await
            .map(|p| (p.synced, p.last_error.clone()));
        match outcome {
            Ok((true, _)) => Ok(()),
            Ok((false, error)) => Err(CacheError::Watch {
                resource,
                message: error.unwrap_or_default(),
            }),
            Err(_) => Err(CacheError::Released { resource }),
        }
    }

    pub fn is_watched(&self, resource: &ResourceType) -> bool {
        self.watches.lock().contains_key(resource)
    }

    /// Whether the type of this apiVersion and resource (plural) is watched.
    pub(crate) fn watches(&self, api_version: &str, plural: &str) -> bool {
        self.watches
            .lock()
            .keys()
            .any(|watched| watched.api_version == api_version && watched.plural == plural)
    }

    /// A cached object. `namespace` is ignored for cluster-scoped types.
    pub(crate) fn get(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        let store = self.store(resource)?;
        let store = store.read();
        store
            .get(resource.scope(namespace).unwrap_or_default(), name)
            .cloned()
    }

    /// How many objects of a type are cached (0 when it is not watched).
    pub fn len(&self, resource: &ResourceType) -> usize {
        self.store(resource).map_or(0, |store| store.read().len())
    }

    /// Stops watching a type no controller needs any more, and drops its cache.
    pub fn release(&self, resource: &ResourceType) {
        let removed = self.watches.lock().remove(resource);
        if let Some(watched) = removed {
            watched.task.abort();
            tracing::info!(resource = %resource.group_key(), "stopped watching");
        }
    }

    fn store(&self, resource: &ResourceType) -> Option<Arc<RwLock<Store>>> {
        self.watches
            .lock()
            .get(resource)
            .map(|watched| watched.store.clone())
    }

    fn start(&self, resolved: &ResolvedType, label_selector: Option<&str>) -> RunningWatch {
        let store = Arc::new(RwLock::new(Store::default()));
        let (progress_tx, progress) = watch::channel(Progress::default());
        let mut config = watcher::Config::default();
        if let Some(selector) = label_selector {
            config = config.labels(selector);
        }
        let undecodable = self.undecodable.get_or_create(&ResourceLabels {
            resource: resolved.resource.group_key(),
        });
        let task = tokio::spawn(run_watch(
            Api::all_with(self.client.clone(), &resolved.api),
            config,
            resolved.clone(),
            store.clone(),
            progress_tx,
            self.events.clone(),
            PassOver {
                counted: undecodable.clone(),
                reports: self.passed_over.get().cloned(),
            },
        ));
        tracing::info!(resource = %resolved.resource.group_key(), "started watching");
        RunningWatch {
            store,
            progress,
            task,
        }
    }
}

impl Drop for Informers {
    fn drop(&mut self) {
        let watches = self.watches.get_mut();
        for (_, watched) in watches.drain() {
            watched.task.abort();
        }
    }
}

impl ObjectStore for Informers {
    fn get(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        Informers::get(self, resource, namespace, name)
    }

    /// In namespace order, then name order. `namespace` is ignored for cluster-scoped types.
    fn list(&self, resource: &ResourceType, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let Some(store) = self.store(resource) else {
            return Vec::new();
        };
        let store = store.read();
        store.list(resource.scope(namespace))
    }

    fn orphans(&self, resource: &ResourceType, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let Some(store) = self.store(resource) else {
            return Vec::new();
        };
        let store = store.read();
        store.orphans(resource.scope(namespace))
    }

    fn controlled_by(&self, resource: &ResourceType, owner: &Value) -> Vec<Arc<Value>> {
        let Some(uid) = object::uid(owner) else {
            // Without a uid there is nothing to look up; match by kind and name instead.
            return self
                .list(resource, resource.scope_of(owner))
                .into_iter()
                .filter(|child| object::is_controlled_by(child, owner))
                .collect();
        };
        let Some(store) = self.store(resource) else {
            return Vec::new();
        };
        let store = store.read();
        // Children of a namespaced owner live in its namespace (the garbage collector ignores
        // owner references across namespaces); those of a cluster-scoped owner anywhere.
        let namespace = resource.scope_of(owner);
        store
            .controlled_by(uid)
            .filter(|child| namespace.is_none() || object::namespace(child) == namespace)
            .collect()
    }
}

/// The watch loop of one type. Runs until aborted; errors are retried with kube's default
/// backoff, and the cache keeps serving what it had meanwhile. Reports its changes to
/// `events`, and says in `passing_over` which objects it passes over.
async fn run_watch(
    api: Api<WatchedObject>,
    config: watcher::Config,
    resolved: ResolvedType,
    store: Arc<RwLock<Store>>,
    progress: watch::Sender<Progress>,
    events: mpsc::UnboundedSender<ObjectEvent>,
    passing_over: PassOver,
) {
    let resource = resolved.resource.group_key();
    let pass_over = |object: &Undecodable| {
        passing_over.counted.inc();
        if let Some(reports) = &passing_over.reports {
            let _ = reports.try_send(PassedOver {
                resource: resolved.resource.clone(),
                object: object.clone(),
            });
        }
        tracing::warn!(
            resource = %resource,
            namespace = object.namespace.as_deref().unwrap_or_default(),
            name = object.name.as_deref().unwrap_or("(unknown)"),
            "an object cannot be decoded: {}; passed over (the type's other objects are not)",
            object.reason
        );
    };
    let send = |changes: Vec<Change>, listed_at: Option<Instant>| {
        for (old, new) in changes {
            // A closed channel means the operator is shutting down; the cache stays usable.
            let _ = events.send(ObjectEvent {
                resource: resolved.resource.clone(),
                old,
                new,
                listed_at,
            });
        }
    };
    // The list being received after a (re)start; swapped in whole at `InitDone`.
    let mut listing: Option<Store> = None;
    let stream = watcher::watcher(api, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item {
            Ok(Event::Init) => listing = Some(Store::default()),
            Ok(Event::InitApply(object)) => {
                let listing = listing.get_or_insert_with(Store::default);
                match object.decoded(&resolved.api) {
                    Ok(object) => {
                        // An unchanged object keeps the cached copy, so a re-list does not
                        // briefly hold two copies of everything.
                        let cached = store.read().same_version(&object);
                        listing.insert(cached.unwrap_or_else(|| Arc::new(object)));
                    }
                    Err(object) => {
                        pass_over(&object);
                        // What was cached of it stays, as for a watch event: a re-list must
                        // not read as its deletion.
                        if let Some(cached) = store.read().named(&object) {
                            listing.insert(cached);
                        }
                    }
                }
            }
            Ok(Event::InitDone) => {
                let listed = listing.take().unwrap_or_default();
                let count = listed.len();
                let changes = store.write().replace(listed);
                let listed_at = Instant::now();
                tracing::debug!(resource = %resource, objects = count, changes = changes.len(), "listed");
                send(changes, Some(listed_at));
                progress.send_modify(|p| p.synced = true);
            }
            Ok(Event::Apply(object)) => match object.decoded(&resolved.api) {
                Ok(object) => {
                    let change = store.write().apply(Arc::new(object));
                    send(change.into_iter().collect(), None);
                }
                // Controllers keep the last version they could read.
                Err(object) => pass_over(&object),
            },
            Ok(Event::Delete(object)) => match object.decoded(&resolved.api) {
                Ok(object) => {
                    let change = store.write().delete(object);
                    send(vec![change], None);
                }
                // Gone, in the last state that could be read.
                Err(object) => {
                    pass_over(&object);
                    let removed = store.write().remove_named(&object);
                    if let Some(removed) = removed {
                        send(vec![(Some(removed), None)], None);
                    }
                }
            },
            Err(error) => {
                tracing::warn!(resource = %resource, error = %error, "watch failed; retrying with backoff");
                progress.send_modify(|p| {
                    p.failures += 1;
                    p.last_error = Some(error.to_string());
                });
            }
        }
    }
}

/// Metadata fields that change on every write without saying anything about the object.
const BOOKKEEPING: &[&str] = &["resourceVersion", "managedFields"];

/// Whether an update changed anything but bookkeeping (resourceVersion, managedFields), i.e.
/// whether controllers need to hear about it.
pub(crate) fn is_meaningful_update(old: &Value, new: &Value) -> bool {
    differs_ignoring(old, new, &[])
}

/// Whether two versions of an object differ in anything but bookkeeping metadata and the
/// top-level fields named in `ignored` (e.g. `status`). Compares in place, without copies:
/// it runs for every watch event.
pub(crate) fn differs_ignoring(old: &Value, new: &Value, ignored: &[&str]) -> bool {
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    if maps_differ(old, new, |key| key == "metadata" || ignored.contains(&key)) {
        return true;
    }
    match (
        old.get("metadata").and_then(Value::as_object),
        new.get("metadata").and_then(Value::as_object),
    ) {
        (Some(old_meta), Some(new_meta)) => {
            maps_differ(old_meta, new_meta, |key| BOOKKEEPING.contains(&key))
        }
        _ => old.get("metadata") != new.get("metadata"),
    }
}

/// Whether two maps differ in any key `skip` does not exclude.
fn maps_differ(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    skip: impl Fn(&str) -> bool,
) -> bool {
    let counted = |map: &Map<String, Value>| map.keys().filter(|key| !skip(key)).count();
    counted(old) != counted(new)
        || old
            .iter()
            .any(|(key, value)| !skip(key) && new.get(key) != Some(value))
}

/// (old, new) as in [`ObjectEvent`].
type Change = (Option<Arc<Value>>, Option<Arc<Value>>);

/// The cached objects of one type and their indexes.
///
/// Objects are keyed by namespace (`""` for cluster-scoped ones), then name, in ordered maps: a
/// namespace's objects are one range, and lists come out in a stable order.
#[derive(Debug, Default)]
struct Store {
    objects: BTreeMap<String, BTreeMap<String, Arc<Value>>>,
    /// Controller owner uid → (namespace, name) of the objects it controls.
    by_owner: HashMap<String, HashSet<(String, String)>>,
    /// Namespace → names of the objects there without a controller (what a parent can adopt
    /// is looked up here, not by scanning the namespace).
    orphans: HashMap<String, BTreeSet<String>>,
    len: usize,
}

impl Store {
    fn get(&self, namespace: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects.get(namespace)?.get(name)
    }

    fn len(&self) -> usize {
        self.len
    }

    fn list(&self, namespace: Option<&str>) -> Vec<Arc<Value>> {
        match namespace {
            Some(namespace) => self
                .objects
                .get(namespace)
                .map(|objects| objects.values().cloned().collect())
                .unwrap_or_default(),
            None => self
                .objects
                .values()
                .flat_map(|objects| objects.values().cloned())
                .collect(),
        }
    }

    fn orphans(&self, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let names = |namespace: &str, names: &BTreeSet<String>| -> Vec<Arc<Value>> {
            names
                .iter()
                .filter_map(|name| self.get(namespace, name).cloned())
                .collect()
        };
        match namespace {
            Some(namespace) => self
                .orphans
                .get(namespace)
                .map(|set| names(namespace, set))
                .unwrap_or_default(),
            None => self
                .orphans
                .iter()
                .flat_map(|(namespace, set)| names(namespace, set))
                .collect(),
        }
    }

    fn controlled_by<'a>(&'a self, uid: &str) -> impl Iterator<Item = Arc<Value>> + 'a {
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|(namespace, name)| self.get(namespace, name).cloned())
    }

    /// The cached version of an object that cannot be decoded, found by its name.
    /// The cached version of an object passed over: by name, and only while it is the same
    /// object (a deleted one recreated under its name while the watch was down is not).
    fn named(&self, object: &Undecodable) -> Option<Arc<Value>> {
        let name = object.name.as_deref()?;
        self.get(object.namespace.as_deref().unwrap_or_default(), name)
            .filter(|cached| {
                object.uid.is_none() || crate::object::uid(cached) == object.uid.as_deref()
            })
            .cloned()
    }

    fn remove_named(&mut self, object: &Undecodable) -> Option<Arc<Value>> {
        let name = object.name.as_deref()?;
        self.remove(object.namespace.as_deref().unwrap_or_default(), name)
    }

    /// The cached object if it is this very version (same uid and resourceVersion).
    fn same_version(&self, object: &Value) -> Option<Arc<Value>> {
        let (namespace, name) = key(object);
        let cached = self.get(&namespace, &name)?;
        let version = |o: &Value| object::str_at(o, "/metadata/resourceVersion").map(str::to_owned);
        (object::uid(cached) == object::uid(object) && version(cached) == version(object))
            .then(|| cached.clone())
    }

    /// Inserts or replaces an object, returning the one it replaced.
    fn insert(&mut self, object: Arc<Value>) -> Option<Arc<Value>> {
        let (namespace, name) = key(&object);
        let owner = controller_uid(&object);
        let orphan = object::controller_ref(&object).is_none();
        let previous = self
            .objects
            .entry(namespace.clone())
            .or_default()
            .insert(name.clone(), object);
        match &previous {
            Some(previous) => self.unindex_owner(previous, &namespace, &name),
            None => self.len += 1,
        }
        if let Some(owner) = owner {
            self.by_owner
                .entry(owner)
                .or_default()
                .insert((namespace, name));
        } else if orphan {
            self.orphans.entry(namespace).or_default().insert(name);
        }
        previous
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let objects = self.objects.get_mut(namespace)?;
        let removed = objects.remove(name)?;
        if objects.is_empty() {
            self.objects.remove(namespace);
        }
        self.len -= 1;
        self.unindex_owner(&removed, namespace, name);
        Some(removed)
    }

    fn unindex_owner(&mut self, object: &Value, namespace: &str, name: &str) {
        if object::controller_ref(object).is_none()
            && let Some(names) = self.orphans.get_mut(namespace)
        {
            names.remove(name);
            if names.is_empty() {
                self.orphans.remove(namespace);
            }
        }
        let Some(owner) = controller_uid(object) else {
            return;
        };
        if let Some(keys) = self.by_owner.get_mut(&owner) {
            keys.remove(&(namespace.to_owned(), name.to_owned()));
            if keys.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
    }

    /// An added or modified object; the change to report, if it is worth reporting.
    fn apply(&mut self, object: Arc<Value>) -> Option<Change> {
        let previous = self.insert(object.clone());
        match previous {
            Some(previous) if !is_meaningful_update(&previous, &object) => None,
            previous => Some((previous, Some(object))),
        }
    }

    /// A deleted object, reported in the final state its event carries (newer than the cached
    /// one: a finalizer's removal, say).
    fn delete(&mut self, object: Value) -> Change {
        let (namespace, name) = key(&object);
        self.remove(&namespace, &name);
        (Some(Arc::new(object)), None)
    }

    /// Swaps in a complete list, returning what changed relative to the old contents: objects
    /// that vanished are deletions (the watch missed their delete while it was down).
    fn replace(&mut self, listed: Store) -> Vec<Change> {
        let old = std::mem::replace(self, listed);
        let mut changes = Vec::new();
        for (namespace, objects) in &self.objects {
            for (name, object) in objects {
                match old.get(namespace, name) {
                    None => changes.push((None, Some(object.clone()))),
                    Some(previous) if Arc::ptr_eq(previous, object) => {}
                    Some(previous) => {
                        if is_meaningful_update(previous, object) {
                            changes.push((Some(previous.clone()), Some(object.clone())));
                        }
                    }
                }
            }
        }
        for (namespace, objects) in old.objects {
            for (name, object) in objects {
                if self.get(&namespace, &name).is_none() {
                    changes.push((Some(object), None));
                }
            }
        }
        changes
    }
}

/// (namespace or `""`, name).
fn key(object: &Value) -> (String, String) {
    (
        object::namespace(object).unwrap_or_default().to_owned(),
        object::name(object).to_owned(),
    )
}

fn controller_uid(object: &Value) -> Option<String> {
    object::controller_ref(object)?
        .get("uid")?
        .as_str()
        .filter(|uid| !uid.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config_map(namespace: &str, name: &str, version: &str, data: Value) -> Arc<Value> {
        Arc::new(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}"),
                         "resourceVersion": version},
            "data": data,
        }))
    }

    fn owned(name: &str, owner_uid: &str) -> Arc<Value> {
        Arc::new(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "ns", "name": name, "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "other"},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "p", "uid": owner_uid,
                 "controller": true},
            ]},
        }))
    }

    fn names(objects: impl IntoIterator<Item = Arc<Value>>) -> Vec<String> {
        let mut names: Vec<String> = objects
            .into_iter()
            .map(|o| object::name(&o).to_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn bookkeeping_only_updates_are_not_meaningful() {
        let old = config_map("ns", "a", "1", json!({"k": "v"}));
        let mut new = (*old).clone();
        new["metadata"]["resourceVersion"] = "2".into();
        new["metadata"]["managedFields"] = json!([{"manager": "someone"}]);
        assert!(!is_meaningful_update(&old, &new));

        let mut labelled = new.clone();
        labelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(is_meaningful_update(&old, &labelled));
        let mut changed = new.clone();
        changed["data"]["k"] = "w".into();
        assert!(is_meaningful_update(&old, &changed));
        let mut extra = new.clone();
        extra["binaryData"] = json!({});
        assert!(is_meaningful_update(&old, &extra));
        let mut removed = new;
        removed.as_object_mut().unwrap().remove("data");
        assert!(is_meaningful_update(&old, &removed));
    }

    #[test]
    fn apply_reports_adds_and_meaningful_updates_only() {
        let mut store = Store::default();
        let first = config_map("ns", "a", "1", json!({"k": "v"}));
        let (old, new) = store.apply(first.clone()).expect("an add");
        assert!(old.is_none() && Arc::ptr_eq(&new.unwrap(), &first));

        let noise = config_map("ns", "a", "2", json!({"k": "v"}));
        assert!(store.apply(noise.clone()).is_none());
        // The cache still moves to the newest version.
        assert!(Arc::ptr_eq(store.get("ns", "a").unwrap(), &noise));

        let edit = config_map("ns", "a", "3", json!({"k": "w"}));
        let (old, new) = store.apply(edit.clone()).expect("an update");
        assert!(Arc::ptr_eq(&old.unwrap(), &noise) && Arc::ptr_eq(&new.unwrap(), &edit));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn delete_removes_from_every_index() {
        let mut store = Store::default();
        store.insert(owned("child", "owner-1"));
        store.insert(config_map("other", "b", "1", json!({})));
        assert_eq!(names(store.controlled_by("owner-1")), ["child"]);

        let final_state = (*owned("child", "owner-1")).clone();
        let (old, new) = store.delete(final_state);
        assert_eq!(object::name(&old.unwrap()), "child");
        assert!(new.is_none());
        assert_eq!(store.controlled_by("owner-1").count(), 0);
        assert!(store.by_owner.is_empty());
        assert!(store.list(Some("ns")).is_empty());
        assert!(!store.objects.contains_key("ns"));
        assert_eq!(names(store.list(None)), ["b"]);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn owner_index_follows_a_changed_controller_reference() {
        let mut store = Store::default();
        store.insert(owned("child", "owner-1"));
        store.insert(owned("child", "owner-2"));
        assert_eq!(store.controlled_by("owner-1").count(), 0);
        assert_eq!(names(store.controlled_by("owner-2")), ["child"]);
        // A non-controller owner reference is not indexed.
        assert_eq!(store.controlled_by("other").count(), 0);
    }

    #[test]
    fn orphans_are_indexed_by_namespace_until_adopted() {
        let mut store = Store::default();
        store.insert(config_map("a", "loose", "1", json!({})));
        store.insert(config_map("b", "elsewhere", "1", json!({})));
        store.insert(owned("child", "owner-1"));
        assert_eq!(names(store.orphans(Some("a"))), ["loose"]);
        assert_eq!(names(store.orphans(None)), ["elsewhere", "loose"]);
        // Adopted (a controller reference added): no longer an orphan; released: one again.
        let mut adopted = (*config_map("a", "loose", "2", json!({}))).clone();
        adopted["metadata"]["ownerReferences"] = json!([{"uid": "owner-1", "controller": true, "kind": "K", "name": "o", "apiVersion": "v1"}]);
        store.insert(Arc::new(adopted));
        assert!(store.orphans(Some("a")).is_empty());
        assert!(
            !store.orphans.contains_key("a"),
            "an empty namespace entry is dropped"
        );
        store.insert(config_map("a", "loose", "3", json!({})));
        assert_eq!(names(store.orphans(Some("a"))), ["loose"]);
        store.remove("a", "loose");
        assert!(store.orphans(Some("a")).is_empty());
    }

    #[test]
    fn an_undecodable_object_finds_its_cached_version_by_name() {
        let mut store = Store::default();
        store.insert(config_map("ns", "a", "1", json!({})));
        let undecodable = |namespace: Option<&str>, name: Option<&str>| Undecodable {
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
            uid: None,
            reason: "deep".into(),
        };
        assert!(store.named(&undecodable(Some("ns"), Some("a"))).is_some());
        assert!(store.named(&undecodable(None, Some("a"))).is_none());
        assert!(store.named(&undecodable(Some("ns"), None)).is_none());
        assert!(store.remove_named(&undecodable(Some("ns"), None)).is_none());
        let removed = store.remove_named(&undecodable(Some("ns"), Some("a")));
        assert_eq!(object::name(&removed.unwrap()), "a");
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn a_relist_reports_what_changed_while_the_watch_was_down() {
        let mut store = Store::default();
        let kept = config_map("ns", "kept", "1", json!({}));
        let touched = config_map("ns", "touched", "1", json!({}));
        let edited = config_map("ns", "edited", "1", json!({"k": "v"}));
        let gone = config_map("ns", "gone", "1", json!({}));
        for object in [&kept, &touched, &edited, &gone] {
            store.insert(object.clone());
        }

        let mut listed = Store::default();
        listed.insert(store.same_version(&kept).expect("same version is reused"));
        let touched_again = config_map("ns", "touched", "2", json!({}));
        assert!(store.same_version(&touched_again).is_none());
        listed.insert(touched_again);
        let edited_again = config_map("ns", "edited", "2", json!({"k": "w"}));
        listed.insert(edited_again.clone());
        let added = config_map("other", "added", "1", json!({}));
        listed.insert(added.clone());

        let changes = store.replace(listed);
        let described: Vec<(Option<String>, Option<String>)> = changes
            .iter()
            .map(|(old, new)| {
                let name = |o: &Option<Arc<Value>>| o.as_ref().map(|o| object::name(o).to_owned());
                (name(old), name(new))
            })
            .collect();
        assert_eq!(
            described,
            [
                (Some("edited".into()), Some("edited".into())),
                (None, Some("added".into())),
                (Some("gone".into()), None),
            ]
        );
        assert!(Arc::ptr_eq(&changes[0].1.clone().unwrap(), &edited_again));
        assert_eq!(store.len(), 4);
        assert!(store.get("ns", "gone").is_none());
        assert!(Arc::ptr_eq(store.get("ns", "kept").unwrap(), &kept));
    }
}
