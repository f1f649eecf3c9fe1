//! The cached objects of one type, as one view filled by one or more feeds (watches): one of
//! every object, or several of the objects a label selector matches. An object is held once
//! however many feeds hold it, and a change is reported when the view changes, not when a feed
//! does: a feed that starts, stops or re-lists moves objects in and out of the view without
//! announcing what another feed already holds, and a feed behind another does not set an
//! object back to an older version. Not covered: an object deleted while a feed behind
//! another has not yet seen it come to match its selector is announced added and deleted
//! again when that feed catches up (tombstones of recent deletions would cover it).

use crate::object;
use crate::runtime::watch::decode::Undecodable;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// Metadata fields that change on every write without saying anything about the object.
const BOOKKEEPING: &[&str] = &["resourceVersion", "managedFields"];

/// The most feeds one type's view has at once (one bit each in [`Held::feeds`]).
pub(super) const MAX_FEEDS: usize = 64;

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

/// (old, new) as in [`super::cache::ObjectEvent`].
pub(super) type Change = (Option<Arc<Value>>, Option<Arc<Value>>);

/// One feed of a view: its bit, and an id that is never reused, so that a stopped feed's last
/// changes (its task may still be finishing one) are told apart from those of the next feed
/// given the same bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FeedSlot {
    bit: u8,
    id: u64,
}

/// A cached object and the feeds that hold it.
#[derive(Debug)]
struct Held {
    object: Arc<Value>,
    /// One bit per feed ([`FeedSlot::bit`]).
    feeds: u64,
}

/// The cached objects of one type and their indexes.
///
/// Objects are keyed by namespace (`""` for cluster-scoped ones), then name, in ordered maps: a
/// namespace's objects are one range, and lists come out in a stable order.
#[derive(Debug, Default)]
pub(super) struct Store {
    objects: BTreeMap<String, BTreeMap<String, Held>>,
    /// Controller owner uid → (namespace, name) of the objects it controls.
    by_owner: HashMap<String, HashSet<(String, String)>>,
    /// Namespace → names of the objects there without a controller (what a parent can adopt
    /// is looked up here, not by scanning the namespace).
    orphans: HashMap<String, BTreeSet<String>>,
    len: usize,
    /// The id of the feed holding each bit; `None` while the bit is free.
    feeds: Vec<Option<u64>>,
    next_feed: u64,
}

impl Store {
    pub(super) fn get(&self, namespace: &str, name: &str) -> Option<&Arc<Value>> {
        self.held(namespace, name).map(|held| &held.object)
    }

    fn held(&self, namespace: &str, name: &str) -> Option<&Held> {
        self.objects.get(namespace)?.get(name)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn list(&self, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let objects = |held: &BTreeMap<String, Held>| -> Vec<Arc<Value>> {
            held.values().map(|held| held.object.clone()).collect()
        };
        match namespace {
            Some(namespace) => self.objects.get(namespace).map(objects).unwrap_or_default(),
            None => self.objects.values().flat_map(objects).collect(),
        }
    }

    pub(super) fn orphans(&self, namespace: Option<&str>) -> Vec<Arc<Value>> {
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

    pub(super) fn controlled_by<'a>(&'a self, uid: &str) -> impl Iterator<Item = Arc<Value>> + 'a {
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|(namespace, name)| self.get(namespace, name).cloned())
    }

    /// The cached version of an object passed over: by name, and only while it is the same
    /// object (a deleted one recreated under its name while the watch was down is not).
    pub(super) fn named(&self, object: &Undecodable) -> Option<Arc<Value>> {
        let name = object.name.as_deref()?;
        self.get(object.namespace.as_deref().unwrap_or_default(), name)
            .filter(|cached| {
                object.uid.is_none() || crate::object::uid(cached) == object.uid.as_deref()
            })
            .cloned()
    }

    /// The cached object if it is this very version (same uid and resourceVersion).
    pub(super) fn same_version(&self, object: &Value) -> Option<Arc<Value>> {
        let (namespace, name) = key(object);
        let cached = self.get(&namespace, &name)?;
        is_same_version(cached, object).then(|| cached.clone())
    }

    /// A bit for a new feed, or `None` when [`MAX_FEEDS`] feeds hold them all.
    pub(super) fn open_feed(&mut self) -> Option<FeedSlot> {
        let bit = match self.feeds.iter().position(Option::is_none) {
            Some(bit) => bit,
            None if self.feeds.len() < MAX_FEEDS => {
                self.feeds.push(None);
                self.feeds.len() - 1
            }
            None => return None,
        };
        self.next_feed += 1;
        self.feeds[bit] = Some(self.next_feed);
        Some(FeedSlot {
            bit: bit as u8,
            id: self.next_feed,
        })
    }

    /// Stops a feed: what only it held leaves the view, as deletions.
    pub(super) fn close_feed(&mut self, feed: FeedSlot) -> Vec<Change> {
        if !self.is_open(feed) {
            return Vec::new();
        }
        self.feeds[usize::from(feed.bit)] = None;
        let held: Vec<(String, String)> = self.keys_held_by(feed);
        held.into_iter()
            .filter_map(|(namespace, name)| self.release(feed, &namespace, &name))
            .collect()
    }

    fn is_open(&self, feed: FeedSlot) -> bool {
        self.feeds.get(usize::from(feed.bit)) == Some(&Some(feed.id))
    }

    fn keys_held_by(&self, feed: FeedSlot) -> Vec<(String, String)> {
        let bit = 1u64 << feed.bit;
        self.objects
            .iter()
            .flat_map(|(namespace, objects)| {
                objects
                    .iter()
                    .filter(move |(_, held)| held.feeds & bit != 0)
                    .map(move |(name, _)| (namespace.clone(), name.clone()))
            })
            .collect()
    }

    /// A feed saw an object added or modified; the change to report, if it is worth reporting.
    /// An object another feed holds in this very version is only marked as held by this one
    /// too: the view did not change.
    pub(super) fn apply(&mut self, feed: FeedSlot, object: Arc<Value>) -> Option<Change> {
        if !self.is_open(feed) {
            return None;
        }
        let bit = 1u64 << feed.bit;
        let (namespace, name) = key(&object);
        if let Some(held) = self
            .objects
            .get_mut(&namespace)
            .and_then(|objects| objects.get_mut(&name))
        {
            held.feeds |= bit;
            // Another feed may be ahead of this one: its newer version stays.
            if Arc::ptr_eq(&held.object, &object)
                || is_same_version(&held.object, &object)
                || is_older(&object, &held.object)
            {
                return None;
            }
        }
        let previous = self.insert(object.clone(), bit);
        match previous {
            Some(previous) if !is_meaningful_update(&previous, &object) => None,
            previous => Some((previous, Some(object))),
        }
    }

    /// A feed saw an object deleted (or, for a selecting feed, stop matching), in the final
    /// state its event carries. It leaves the view, and is reported, once no feed holds it;
    /// an object the view does not hold is no news.
    pub(super) fn delete(&mut self, feed: FeedSlot, object: Value) -> Option<Change> {
        if !self.is_open(feed) {
            return None;
        }
        let (namespace, name) = key(&object);
        let bit = 1u64 << feed.bit;
        match self.held(&namespace, &name) {
            None => None,
            Some(held) if held.feeds & !bit != 0 => {
                self.release(feed, &namespace, &name);
                None
            }
            Some(_) => {
                self.remove(&namespace, &name);
                Some((Some(Arc::new(object)), None))
            }
        }
    }

    /// A feed saw an object deleted that it cannot decode: by name, in its last cached state.
    pub(super) fn delete_named(&mut self, feed: FeedSlot, object: &Undecodable) -> Option<Change> {
        if !self.is_open(feed) {
            return None;
        }
        let name = object.name.as_deref()?;
        self.release(feed, object.namespace.as_deref().unwrap_or_default(), name)
    }

    /// Takes a feed's complete list: objects it lists are held by it (and reported where the
    /// view changes), those it held and no longer lists are released (the watch missed their
    /// delete while it was down, or they stopped matching). Adds and updates come first.
    pub(super) fn replace(&mut self, feed: FeedSlot, listed: Vec<Arc<Value>>) -> Vec<Change> {
        if !self.is_open(feed) {
            return Vec::new();
        }
        let listed_keys: HashSet<(String, String)> = listed.iter().map(|o| key(o)).collect();
        let mut changes: Vec<Change> = listed
            .into_iter()
            .filter_map(|object| self.apply(feed, object))
            .collect();
        let gone: Vec<(String, String)> = self
            .keys_held_by(feed)
            .into_iter()
            .filter(|key| !listed_keys.contains(key))
            .collect();
        changes.extend(
            gone.into_iter()
                .filter_map(|(namespace, name)| self.release(feed, &namespace, &name)),
        );
        changes
    }

    /// Drops a feed's hold on an object; reports its deletion from the view when no feed holds
    /// it any more.
    fn release(&mut self, feed: FeedSlot, namespace: &str, name: &str) -> Option<Change> {
        let held = self.objects.get_mut(namespace)?.get_mut(name)?;
        held.feeds &= !(1u64 << feed.bit);
        if held.feeds != 0 {
            return None;
        }
        let removed = self.remove(namespace, name)?;
        Some((Some(removed), None))
    }

    /// Inserts or replaces an object held by `feeds` (added to the feeds already holding it),
    /// returning the one it replaced.
    fn insert(&mut self, object: Arc<Value>, feeds: u64) -> Option<Arc<Value>> {
        let (namespace, name) = key(&object);
        let owner = controller_uid(&object);
        let orphan = object::controller_ref(&object).is_none();
        let objects = self.objects.entry(namespace.clone()).or_default();
        let previous = match objects.get_mut(&name) {
            Some(held) => {
                held.feeds |= feeds;
                Some(std::mem::replace(&mut held.object, object))
            }
            None => {
                objects.insert(name.clone(), Held { object, feeds });
                None
            }
        };
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
        let removed = objects.remove(name)?.object;
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
}

/// Whether two states are one version of one object (same uid and resourceVersion; a state
/// without a resourceVersion is no known version).
fn is_same_version(cached: &Value, object: &Value) -> bool {
    let version = |o| object::str_at(o, "/metadata/resourceVersion");
    object::uid(cached) == object::uid(object)
        && version(cached).is_some()
        && version(cached) == version(object)
}

/// Whether `object` is an older version of the object `than` holds: same uid, and a smaller
/// resourceVersion. resourceVersions are opaque to clients, but the API server's are etcd
/// revisions; two watches of one type can deliver an object out of step, and the view keeps the
/// newer. Versions that are not numbers are never older.
fn is_older(object: &Value, than: &Value) -> bool {
    let version = |o| {
        object::str_at(o, "/metadata/resourceVersion")?
            .parse::<u64>()
            .ok()
    };
    object::uid(object) == object::uid(than)
        && matches!((version(object), version(than)), (Some(older), Some(newer)) if older < newer)
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
#[path = "store_tests.rs"]
mod tests;
