//! The cached objects of one type, as one view filled by one or more feeds (watches): one of
//! every object, or several of the objects a label selector matches. An object is held once
//! however many feeds hold it, and a change is reported when the view changes, not when a feed
//! does: a feed that starts, stops or re-lists moves objects in and out of the view without
//! announcing what another feed already holds, and a feed behind another does not set an
//! object back to an older version. Not covered: an object deleted while a feed behind
//! another has not yet seen it come to match its selector is announced added and deleted
//! again when that feed catches up (tombstones of recent deletions would cover it).

use crate::object;
use crate::resources::ResourceType;
use crate::runtime::keys::ObjRef;
use crate::runtime::watch::compare::Parts;
use crate::runtime::watch::decode::Undecodable;
use crate::runtime::watch::share::Share;
use crate::store::Kept;
use lru::LruCache;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most feeds one type's view has at once (one bit each in [`Held::feeds`]).
pub(super) const MAX_FEEDS: usize = 64;

/// A change of the view, as [`super::event::ObjectEvent`] reports it: the object's states as
/// the view keeps them, and for an update, which parts changed.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) old: Option<Kept>,
    pub(crate) new: Option<Kept>,
    pub(crate) parts: Parts,
}

impl Change {
    fn added(new: Kept) -> Change {
        Change {
            old: None,
            new: Some(new),
            parts: Parts::default(),
        }
    }

    fn deleted(old: Kept) -> Change {
        Change {
            old: Some(old),
            new: None,
            parts: Parts::default(),
        }
    }
}

/// An object as [`Store::sweep`] gives it.
#[derive(Debug)]
pub(crate) enum Swept {
    /// Held by one of the sweeper's own label-selected feeds: its key.
    Selected(ObjRef),
    /// Any other, to be read.
    Kept(Kept),
}

/// How much JSON text of one type's recently used objects is also kept decoded (a decoded
/// object takes about ten times its text): small lists read at every sync (a namespace's
/// inputs, a parent's children), and objects whose watch events just came in while there is
/// room (read again by the syncs they start).
const DECODED_BYTES: usize = 2 << 20;

/// How much text a read (a list, an owner's children) may decode and keep as recently used:
/// a namespace's inputs read at every sync stay decoded, a scan of every Pod at a resync is
/// decoded one object at a time and does not push the objects being worked on out.
pub(super) const REMEMBERED_READ: usize = DECODED_BYTES / 4;

/// One feed of a view: its bit, and an id that is never reused, so that a stopped feed's last
/// changes (its task may still be finishing one) are told apart from those of the next feed
/// given the same bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FeedSlot {
    bit: u8,
    id: u64,
}

/// Feed ids are drawn for the whole process, not per view: a lease that outlives a view
/// (a type released, then watched again) must not name the new view's feeds.
static NEXT_FEED: AtomicU64 = AtomicU64::new(1);

/// An object as a view keeps it: its JSON text (about its size on the wire, where a decoded
/// `Value` takes ten times that) and what the view's indexes and version checks read from it.
/// Without text it is another replica's share ([`super::share`]): known, not held.
#[derive(Clone, Debug)]
pub(super) struct Compact {
    text: Option<Arc<str>>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    controller: Controller,
}

/// Which owner index an object is in.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Controller {
    /// No owner reference with `controller: true`: an orphan.
    None,
    Uid(Box<str>),
    /// A controller reference without a uid: in neither index.
    WithoutUid,
}

/// An object a feed listed, keyed as the view keys it.
#[derive(Clone, Debug)]
pub(super) struct Incoming {
    namespace: String,
    name: String,
    object: Compact,
}

impl Incoming {
    /// The object whole.
    pub(super) fn of(object: &Value) -> Incoming {
        let mut incoming = Incoming::known(object);
        incoming.object.text = Some(
            serde_json::to_string(object)
                .expect("a Value serializes")
                .into(),
        );
        incoming
    }

    /// Only what identifies the object: another replica's share.
    fn known(object: &Value) -> Incoming {
        let (namespace, name) = key(object);
        let (uid, resource_version) = version(object);
        let controller = match object::controller_ref(object) {
            None => Controller::None,
            Some(reference) => match reference.get("uid").and_then(Value::as_str) {
                Some(uid) if !uid.is_empty() => Controller::Uid(uid.into()),
                _ => Controller::WithoutUid,
            },
        };
        Incoming {
            namespace,
            name,
            object: Compact {
                text: None,
                uid: uid.map(Box::from),
                resource_version: resource_version.map(Box::from),
                controller,
            },
        }
    }
}

impl Compact {
    fn version(&self) -> Version<'_> {
        (self.uid.as_deref(), self.resource_version.as_deref())
    }

    /// Whether this is an older version of the object `than` holds: same uid, and a smaller
    /// resourceVersion. resourceVersions are opaque to clients, but the API server's are etcd
    /// revisions; two watches of one type can deliver an object out of step, and the view
    /// keeps the newer. Versions that are not numbers are never older.
    fn is_older_than(&self, than: &Compact) -> bool {
        self.uid == than.uid
            && matches!((self.number(), than.number()), (Some(older), Some(newer)) if older < newer)
    }

    /// Its resourceVersion as the number the API server's are (etcd revisions).
    fn number(&self) -> Option<u64> {
        self.resource_version.as_deref()?.parse().ok()
    }
}

/// A cached object and the feeds that hold it.
#[derive(Debug)]
struct Held {
    object: Compact,
    /// One bit per feed ([`FeedSlot::bit`]).
    feeds: u64,
}

/// An object of another replica's share ([`super::share`]): what tells its versions apart
/// and the feeds that hold it, in about a tenth of what a held object's entry takes beside
/// its text.
#[derive(Clone, Copy, Debug)]
struct Known {
    /// A digest of its uid (0 without one).
    uid: u64,
    /// Its resourceVersion, when it is a number (as the API server's are).
    version: Option<u64>,
    feeds: u64,
}

impl Known {
    fn of(object: &Compact, feeds: u64) -> Known {
        Known {
            uid: object.uid.as_deref().map_or(0, digest),
            version: object.number(),
            feeds,
        }
    }

    fn is_same_object(&self, object: &Compact) -> bool {
        self.uid == object.uid.as_deref().map_or(0, digest)
    }

    /// Whether `object` is this very version.
    fn is(&self, object: &Compact) -> bool {
        self.is_same_object(object) && self.version.is_some() && self.version == object.number()
    }

    /// Whether `object` is an older version (as [`Compact::is_older_than`]).
    fn is_newer_than(&self, object: &Compact) -> bool {
        self.is_same_object(object)
            && matches!((object.number(), self.version), (Some(older), Some(newer)) if older < newer)
    }
}

/// A digest of a text that stays the same while the process runs.
fn digest(text: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(text)
}

/// How [`Store`] keys what it knows only by name: `namespace/name` (neither holds a `/`).
fn path(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Recently used objects, decoded, by the text they were decoded from: an object replaced in
/// the view is looked up by its new text, so its old decoded form is never handed out.
#[derive(Debug)]
struct Decoded {
    recent: LruCache<usize, (Arc<str>, Arc<Value>)>,
    /// The JSON text behind `recent`.
    bytes: usize,
}

impl Default for Decoded {
    fn default() -> Decoded {
        Decoded {
            recent: LruCache::unbounded(),
            bytes: 0,
        }
    }
}

impl Decoded {
    /// `json`'s object if it is decoded already, counted as used.
    fn used(&mut self, json: &Arc<str>) -> Kept {
        match self.recent.get(&address(json)) {
            Some((_, value)) => Kept::Decoded(value.clone()),
            None => Kept::Json(json.clone()),
        }
    }

    /// `json`'s object if it is decoded already, without counting it as used: a scan of every
    /// object does not push the ones being worked on out.
    fn peek(&self, json: &Arc<str>) -> Kept {
        match self.recent.peek(&address(json)) {
            Some((_, value)) => Kept::Decoded(value.clone()),
            None => Kept::Json(json.clone()),
        }
    }

    /// Keeps an event's object for the sync it may start, where it fits without pushing
    /// another out: most events are of writes whose object no sync reads whole, and freeing
    /// a tree pushed out, by then out of the CPU's caches, costs more than decoding the head
    /// a sync reads (docs/performance.md, "Events told apart by their texts").
    fn offer(&mut self, json: Arc<str>, value: Arc<Value>) {
        if self.bytes + json.len() <= DECODED_BYTES {
            self.remember(json, value);
        }
    }

    fn remember(&mut self, json: Arc<str>, value: Arc<Value>) {
        if json.len() > DECODED_BYTES {
            return;
        }
        self.bytes += json.len();
        if let Some((_, (replaced, _))) = self.recent.push(address(&json), (json, value)) {
            self.bytes -= replaced.len();
        }
        while self.bytes > DECODED_BYTES {
            let Some((_, (evicted, _))) = self.recent.pop_lru() else {
                break;
            };
            self.bytes -= evicted.len();
        }
    }

    fn forget(&mut self, json: &Arc<str>) {
        if let Some((evicted, _)) = self.recent.pop(&address(json)) {
            self.bytes -= evicted.len();
        }
    }
}

/// Where a text lives: a key that stays unique while `Decoded` holds the text.
fn address(json: &Arc<str>) -> usize {
    Arc::as_ptr(json).cast::<u8>() as usize
}

/// The cached objects of one type and their indexes.
///
/// Objects are keyed by namespace (`""` for cluster-scoped ones), then name, in ordered maps: a
/// namespace's objects are one range, and lists come out in a stable order. Every object in
/// `objects` is held whole (its text is there); those of other replicas' shares are in
/// `elsewhere`.
#[derive(Debug, Default)]
pub(super) struct Store {
    objects: BTreeMap<String, BTreeMap<String, Held>>,
    /// Controller owner uid → (namespace, name) of the objects it controls.
    by_owner: HashMap<Box<str>, HashSet<(String, String)>>,
    /// Namespace → names of the objects there without a controller (what a parent can adopt
    /// is looked up here, not by scanning the namespace).
    orphans: HashMap<String, BTreeSet<String>>,
    /// The objects held whole.
    len: usize,
    /// The objects of other replicas' shares, by [`path`]: known, not held.
    elsewhere: HashMap<Box<str>, Known>,
    share: Share,
    /// Lists wanted and taken to fill in what the view keeps ([`Store::needs_fill`]).
    fills_wanted: u64,
    fills_done: u64,
    /// The id of the feed holding each bit; `None` while the bit is free.
    feeds: Vec<Option<u64>>,
    /// Taken under the view's read lock too: reading an object counts it as used.
    decoded: Mutex<Decoded>,
}

impl Store {
    /// An object, as text where it is not decoded already: the caller decodes it outside the
    /// view's lock (and hands it to [`Store::remember`]).
    pub(super) fn get(&self, namespace: &str, name: &str) -> Option<Kept> {
        let text = self.held(namespace, name)?.object.text.as_ref()?;
        Some(self.decoded.lock().used(text))
    }

    /// Keeps objects a reader decoded as recently used. One replaced in the view meanwhile
    /// is kept under its old text, which nothing looks up any more: it only waits its turn
    /// to leave.
    pub(super) fn remember(&self, decoded: impl IntoIterator<Item = (Arc<str>, Arc<Value>)>) {
        let mut recent = self.decoded.lock();
        for (json, value) in decoded {
            recent.remember(json, value);
        }
    }

    /// Lets go of every decoded object: the next reads decode from text, as a cold object is.
    #[cfg(test)]
    pub(super) fn forget_decoded(&self) {
        *self.decoded.lock() = Decoded::default();
    }

    fn held(&self, namespace: &str, name: &str) -> Option<&Held> {
        self.objects.get(namespace)?.get(name)
    }

    /// How many objects it holds whole.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Every object in a namespace or in all, left as text where it is not decoded already:
    /// the caller decodes them one at a time, outside the view's lock.
    pub(super) fn list(&self, namespace: Option<&str>) -> Vec<Kept> {
        let decoded = self.decoded.lock();
        let objects = |held: &BTreeMap<String, Held>| -> Vec<Kept> {
            held.values()
                .filter_map(|held| Some(decoded.peek(held.object.text.as_ref()?)))
                .collect()
        };
        match namespace {
            Some(namespace) => self.objects.get(namespace).map(objects).unwrap_or_default(),
            None => self.objects.values().flat_map(objects).collect(),
        }
    }

    /// Every object, for a sweep that queues what a controller acts on: by key alone where
    /// one of `feeds` holds it (what their label selectors match, which the sweeper acts on
    /// whatever the rest of the object says), as [`Store::list`] gives it otherwise. A feed
    /// stopped since its slot was taken holds nothing here.
    pub(super) fn sweep(&self, resource: &ResourceType, feeds: &[FeedSlot]) -> Vec<Swept> {
        let selected = feeds
            .iter()
            .filter(|feed| self.is_open(**feed))
            .fold(0u64, |bits, feed| bits | 1 << feed.bit);
        let decoded = self.decoded.lock();
        self.objects
            .iter()
            .flat_map(|(namespace, objects)| {
                objects.iter().filter_map(|(name, held)| {
                    if held.feeds & selected != 0 {
                        return Some(Swept::Selected(ObjRef {
                            resource: resource.clone(),
                            namespace: (!namespace.is_empty()).then(|| namespace.clone()),
                            name: name.clone(),
                        }));
                    }
                    Some(Swept::Kept(decoded.peek(held.object.text.as_ref()?)))
                })
            })
            .collect()
    }

    /// The objects without a controller, as [`Store::list`] gives them.
    pub(super) fn orphans(&self, namespace: Option<&str>) -> Vec<Kept> {
        let decoded = self.decoded.lock();
        let names = |namespace: &str, names: &BTreeSet<String>| -> Vec<Kept> {
            names
                .iter()
                .filter_map(|name| self.held(namespace, name)?.object.text.as_ref())
                .map(|text| decoded.peek(text))
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

    /// The objects a controller owner uid controls, as [`Store::get`] gives them.
    pub(super) fn controlled_by(&self, uid: &str) -> Vec<Kept> {
        let mut recent = self.decoded.lock();
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|(namespace, name)| self.held(namespace, name)?.object.text.as_ref())
            .map(|text| recent.used(text))
            .collect()
    }

    /// The cached version of an object passed over: by name, and only while it is the same
    /// object (a deleted one recreated under its name while the watch was down is not).
    pub(super) fn named(&self, object: &Undecodable) -> Option<Incoming> {
        let name = object.name.as_deref()?;
        let namespace = object.namespace.as_deref().unwrap_or_default();
        let Some(held) = self.held(namespace, name) else {
            // Known by name only: listed as that, with no version, it stays as it is.
            let known = self.elsewhere.get(path(namespace, name).as_str())?;
            let same = object
                .uid
                .as_deref()
                .is_none_or(|uid| digest(uid) == known.uid);
            return same.then(|| Incoming {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                object: Compact {
                    text: None,
                    uid: None,
                    resource_version: None,
                    controller: Controller::WithoutUid,
                },
            });
        };
        (object.uid.is_none() || held.object.uid.as_deref() == object.uid.as_deref()).then(|| {
            Incoming {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                object: held.object.clone(),
            }
        })
    }

    /// A listed object as the view takes it: as the view holds it when it holds this very
    /// version (a re-list shares the cached text rather than briefly holding two copies of
    /// everything), serialized when the view keeps it whole, else only what identifies it.
    pub(super) fn incoming(&self, object: &Value) -> Incoming {
        let keeps = self.share.keeps(object);
        let (namespace, name) = key(object);
        if let Some(held) = self.held(&namespace, &name)
            && is_same_version(held.object.version(), version(object))
            && keeps
        {
            return Incoming {
                namespace,
                name,
                object: held.object.clone(),
            };
        }
        if keeps {
            Incoming::of(object)
        } else {
            Incoming::known(object)
        }
    }

    /// How what the view keeps is decided ([`super::share`]); changed by [`Store::reshape`].
    pub(super) fn share(&self) -> &Share {
        &self.share
    }

    /// Changes what the view keeps whole. Objects it held and no longer keeps (another replica
    /// owns every item they are) keep only what identifies them, without a word: nothing
    /// changed in them, and this replica no longer reads them. Returns whether the view wants
    /// a list of its type to fill in what it keeps ([`Store::needs_fill`]): objects it knows
    /// only by name whose items came this replica's way.
    pub(super) fn reshape(&mut self, change: impl FnOnce(&mut Share)) -> bool {
        let before = self.share.clone();
        change(&mut self.share);
        if self.share.generation() == before.generation() {
            return self.needs_fill().is_some();
        }
        if self.share.filters() {
            let leaving: Vec<(String, String)> = self
                .objects
                .iter()
                .flat_map(|(namespace, objects)| objects.keys().map(move |name| (namespace, name)))
                .filter(|(namespace, name)| !self.share.may_keep(namespace, name))
                .map(|(namespace, name)| (namespace.clone(), name.clone()))
                .collect();
            for (namespace, name) in leaving {
                self.demote(&namespace, &name);
            }
        }
        // Only objects whose items came this replica's way: after a replica joins, the others
        // gained nothing and list nothing again.
        let gained = self.elsewhere.keys().any(|path| {
            let (namespace, name) = path.split_once('/').expect("a path holds a /");
            self.share.gains(&before, namespace, name)
        });
        if gained {
            self.fills_wanted += 1;
        }
        self.needs_fill().is_some()
    }

    /// Keeps only what identifies an object; its last state, when it was held whole.
    fn demote(&mut self, namespace: &str, name: &str) -> Option<Kept> {
        let objects = self.objects.get_mut(namespace)?;
        let held = objects.remove(name)?;
        if objects.is_empty() {
            self.objects.remove(namespace);
        }
        self.unindex(&held.object, namespace, name);
        self.elsewhere.insert(
            path(namespace, name).into(),
            Known::of(&held.object, held.feeds),
        );
        let text = held.object.text?;
        let recent = self.decoded.get_mut();
        let kept = recent.peek(&text);
        recent.forget(&text);
        Some(kept)
    }

    /// How many objects the view knows, held whole or not.
    #[cfg(test)]
    pub(super) fn known(&self) -> usize {
        self.len + self.elsewhere.len()
    }

    /// Whether a list of the type is wanted to fill in what the view keeps (after a change of
    /// what it keeps, or a re-list taken across one): the count of such wants, for
    /// [`Store::filled`].
    pub(super) fn needs_fill(&self) -> Option<u64> {
        (self.fills_done < self.fills_wanted).then_some(self.fills_wanted)
    }

    /// A list begun when [`Store::needs_fill`] said `wanted` was taken whole.
    pub(super) fn filled(&mut self, wanted: u64) {
        self.fills_done = self.fills_done.max(wanted);
    }

    /// What a list filling in the view ([`Store::fill`]) does with a listed object.
    pub(super) fn refill(&self, object: &Value) -> Refill {
        let (namespace, name) = key(object);
        let listed = Incoming::known(object).object;
        let keeps = self.share.keeps(object);
        if let Some(held) = self.held(&namespace, &name) {
            if held.object.uid != listed.uid || listed.is_older_than(&held.object) {
                return Refill::Nothing;
            }
            let same = is_same_version(held.object.version(), listed.version());
            return match keeps {
                // Newer than the view's (a re-list taken across a change left it behind).
                true if !same => Refill::Take,
                false => Refill::Drop,
                true => Refill::Nothing,
            };
        }
        // Not in the view (deleted meanwhile, or not seen yet): its watch event decides.
        let Some(known) = self.elsewhere.get(path(&namespace, &name).as_str()) else {
            return Refill::Nothing;
        };
        if !keeps || !known.is_same_object(&listed) {
            Refill::Nothing
        } else if known.is_newer_than(&listed) {
            // The list came from a cache behind the watch: what the view knows is newer.
            Refill::Behind
        } else {
            Refill::Take
        }
    }

    /// Fills in a listed object as [`Store::refill`] says, checked again under the lock:
    /// taken whole (`incoming`, serialized by the caller) and reported as added or updated,
    /// or dropped to its name and reported as deleted, as an object entering or leaving a
    /// selection is.
    pub(super) fn fill(&mut self, object: &Value, incoming: Option<Incoming>) -> Fill {
        match (self.refill(object), incoming) {
            (Refill::Take, Some(incoming)) => {
                let new = incoming
                    .object
                    .text
                    .clone()
                    .map(|text| (text.clone(), Kept::Json(text)));
                let previous = self.insert(incoming, 0).and_then(|previous| previous.text);
                Fill::Done(self.changed(previous, new))
            }
            (Refill::Drop, _) => {
                let (namespace, name) = key(object);
                Fill::Done(self.demote(&namespace, &name).map(Change::deleted))
            }
            (Refill::Behind, _) => Fill::Behind,
            _ => Fill::Done(None),
        }
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
        let id = NEXT_FEED.fetch_add(1, Ordering::Relaxed);
        self.feeds[bit] = Some(id);
        Some(FeedSlot { bit: bit as u8, id })
    }

    /// Stops a feed: what only it held leaves the view, as deletions.
    pub(super) fn close_feed(&mut self, feed: FeedSlot) -> Vec<Change> {
        if !self.is_open(feed) {
            return Vec::new();
        }
        self.feeds[usize::from(feed.bit)] = None;
        let bit = 1u64 << feed.bit;
        self.elsewhere.retain(|_, known| {
            known.feeds &= !bit;
            known.feeds != 0
        });
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
    pub(super) fn apply(&mut self, feed: FeedSlot, object: Arc<Value>) -> Option<Change> {
        if !self.share.keeps(&object) {
            return self.admit(feed, Incoming::known(&object), None, true);
        }
        let incoming = Incoming::of(&object);
        self.admit(feed, incoming, Some(object), true)
    }

    /// [`Store::apply`] of an object as text, and its decoded form where the caller has it.
    /// An object another feed holds in this very version is only marked as held by this one
    /// too: the view did not change.
    fn admit(
        &mut self,
        feed: FeedSlot,
        mut incoming: Incoming,
        decoded: Option<Arc<Value>>,
        current: bool,
    ) -> Option<Change> {
        if !self.is_open(feed) {
            return None;
        }
        let bit = 1u64 << feed.bit;
        // Taken whole by a list that began before a change of what the view keeps, and no
        // item of it is this replica's now: only what identifies it.
        if !current
            && incoming.object.text.is_some()
            && !self.share.may_keep(&incoming.namespace, &incoming.name)
        {
            incoming.object.text = None;
        }
        let taken_whole = incoming.object.text.is_some();
        if let Some(held) = self
            .objects
            .get_mut(&incoming.namespace)
            .and_then(|objects| objects.get_mut(&incoming.name))
        {
            held.feeds |= bit;
            let same_text = match (&held.object.text, &incoming.object.text) {
                (Some(held), Some(incoming)) => Arc::ptr_eq(held, incoming),
                _ => false,
            };
            // Another feed may be ahead of this one: its newer version stays.
            if same_text
                || is_same_version(held.object.version(), incoming.object.version())
                || incoming.object.is_older_than(&held.object)
            {
                return None;
            }
            if !taken_whole {
                // Left out by a list taken before a change of what the view keeps: that says
                // nothing of it, and a fill is wanted (`current` is false only then). It
                // stays as held until the fill takes its newer version.
                if !current {
                    return None;
                }
                // It left this replica's share: as an object leaving a selection, it is
                // deleted.
                let path = path(&incoming.namespace, &incoming.name);
                let old = self.demote(&incoming.namespace, &incoming.name)?;
                if let Some(known) = self.elsewhere.get_mut(path.as_str()) {
                    *known = Known::of(&incoming.object, known.feeds);
                }
                return Some(Change::deleted(old));
            }
        } else if let Some(known) = self
            .elsewhere
            .get_mut(path(&incoming.namespace, &incoming.name).as_str())
        {
            known.feeds |= bit;
            // Another feed is ahead (what it saw is not kept), or the same version; or an
            // object a re-list passed over ([`Store::named`]): what the view knew stays.
            let passed_over =
                incoming.object.uid.is_none() && incoming.object.version().1.is_none();
            if known.is_newer_than(&incoming.object)
                || (!taken_whole && (known.is(&incoming.object) || passed_over))
            {
                return None;
            }
            if !taken_whole {
                *known = Known::of(&incoming.object, known.feeds);
                return None;
            }
        } else if !taken_whole {
            self.elsewhere.insert(
                path(&incoming.namespace, &incoming.name).into(),
                Known::of(&incoming.object, bit),
            );
            return None;
        }
        let text = incoming.object.text.clone().expect("taken whole");
        let new = match &decoded {
            Some(value) => Kept::Decoded(value.clone()),
            None => Kept::Json(text.clone()),
        };
        let previous = self
            .insert(incoming, bit)
            .and_then(|previous| previous.text);
        let change = self.changed(previous, Some((text.clone(), new)));
        if let Some(value) = decoded {
            self.decoded.get_mut().offer(text, value);
        }
        change
    }

    /// What replacing an object's text `previous` with `new` (its text, and as the view keeps
    /// it; `None`: not held whole) says: entering or leaving this replica's share is an
    /// addition or a deletion, as entering or leaving a selection is; an update only when it
    /// changed more than bookkeeping, told from the two texts.
    fn changed(
        &mut self,
        previous: Option<Arc<str>>,
        new: Option<(Arc<str>, Kept)>,
    ) -> Option<Change> {
        let recent = self.decoded.get_mut();
        let (previous, (text, new)) = match (previous, new) {
            (None, None) => return None,
            (None, Some((_, new))) => return Some(Change::added(new)),
            (Some(previous), None) => {
                let old = recent.peek(&previous);
                recent.forget(&previous);
                return Some(Change::deleted(old));
            }
            (Some(previous), Some(new)) => (previous, new),
        };
        let parts = Parts::between(&previous, &text);
        // Changes of a re-list stay text until they are sent, one at a time: after a long
        // outage they may be most of the type.
        let old = match new {
            Kept::Decoded(_) => recent.peek(&previous),
            Kept::Json(_) => Kept::Json(previous.clone()),
        };
        recent.forget(&previous);
        parts.any().then_some(Change {
            old: Some(old),
            new: Some(new),
            parts,
        })
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
            None => self.release(feed, &namespace, &name),
            Some(held) if held.feeds & !bit != 0 => {
                self.release(feed, &namespace, &name);
                None
            }
            Some(_) => {
                self.remove(&namespace, &name);
                Some(Change::deleted(Kept::Decoded(Arc::new(object))))
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
    /// `kept_under` is the [`Share::generation`] the list was taken under ([`Store::incoming`]
    /// decided what to keep whole); after a change of it, a list to fill in what the view
    /// keeps is wanted.
    pub(super) fn replace(
        &mut self,
        feed: FeedSlot,
        listed: Vec<Incoming>,
        kept_under: u64,
    ) -> Vec<Change> {
        if !self.is_open(feed) {
            return Vec::new();
        }
        let current = kept_under == self.share.generation();
        if !current {
            self.fills_wanted += 1;
        }
        let listed_keys: HashSet<(String, String)> = listed
            .iter()
            .map(|o| (o.namespace.clone(), o.name.clone()))
            .collect();
        let mut changes: Vec<Change> = listed
            .into_iter()
            .filter_map(|incoming| self.admit(feed, incoming, None, current))
            .collect();
        let bit = 1u64 << feed.bit;
        let listed_paths: HashSet<String> = listed_keys
            .iter()
            .map(|(namespace, name)| path(namespace, name))
            .collect();
        self.elsewhere.retain(|path, known| {
            if known.feeds & bit != 0 && !listed_paths.contains(&**path) {
                known.feeds &= !bit;
            }
            known.feeds != 0
        });
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
        let bit = 1u64 << feed.bit;
        let Some(held) = self
            .objects
            .get_mut(namespace)
            .and_then(|objects| objects.get_mut(name))
        else {
            let path = path(namespace, name);
            let known = self.elsewhere.get_mut(path.as_str())?;
            known.feeds &= !bit;
            if known.feeds == 0 {
                self.elsewhere.remove(path.as_str());
            }
            return None;
        };
        held.feeds &= !(1u64 << feed.bit);
        if held.feeds != 0 {
            return None;
        }
        let removed = self.remove(namespace, name)?;
        Some(Change::deleted(removed))
    }

    /// Counts an object into the view's indexes: held whole, it is in the owner indexes.
    fn index(&mut self, object: &Compact, namespace: &str, name: &str) {
        self.len += 1;
        match &object.controller {
            Controller::Uid(owner) => {
                self.by_owner
                    .entry(owner.clone())
                    .or_default()
                    .insert((namespace.to_owned(), name.to_owned()));
            }
            Controller::None => {
                self.orphans
                    .entry(namespace.to_owned())
                    .or_default()
                    .insert(name.to_owned());
            }
            Controller::WithoutUid => {}
        }
    }

    /// Undoes [`Store::index`].
    fn unindex(&mut self, object: &Compact, namespace: &str, name: &str) {
        self.len -= 1;
        match &object.controller {
            Controller::None => {
                if let Some(names) = self.orphans.get_mut(namespace) {
                    names.remove(name);
                    if names.is_empty() {
                        self.orphans.remove(namespace);
                    }
                }
            }
            Controller::Uid(owner) => {
                if let Some(keys) = self.by_owner.get_mut(owner) {
                    keys.remove(&(namespace.to_owned(), name.to_owned()));
                    if keys.is_empty() {
                        self.by_owner.remove(owner);
                    }
                }
            }
            Controller::WithoutUid => {}
        }
    }

    /// Inserts or replaces an object held by `feeds` (added to the feeds already holding it),
    /// returning the one it replaced.
    fn insert(&mut self, incoming: Incoming, feeds: u64) -> Option<Compact> {
        let Incoming {
            namespace,
            name,
            object,
        } = incoming;
        // Known by name only until now: the feeds that hold it stay.
        let held_whole = self
            .objects
            .get(&namespace)
            .is_some_and(|objects| objects.contains_key(&name));
        let feeds = match held_whole {
            true => feeds,
            false => self
                .elsewhere
                .remove(path(&namespace, &name).as_str())
                .map_or(feeds, |known| known.feeds | feeds),
        };
        let objects = self.objects.entry(namespace.clone()).or_default();
        let previous = match objects.get_mut(&name) {
            Some(held) => {
                held.feeds |= feeds;
                Some(std::mem::replace(&mut held.object, object.clone()))
            }
            None => {
                objects.insert(
                    name.clone(),
                    Held {
                        object: object.clone(),
                        feeds,
                    },
                );
                None
            }
        };
        if let Some(previous) = &previous {
            self.unindex(previous, &namespace, &name);
        }
        self.index(&object, &namespace, &name);
        previous
    }

    /// Takes an object out of the view, as it was (decoded if it was among the recent ones);
    /// `None` when it was not held whole.
    fn remove(&mut self, namespace: &str, name: &str) -> Option<Kept> {
        let objects = self.objects.get_mut(namespace)?;
        let removed = objects.remove(name)?.object;
        if objects.is_empty() {
            self.objects.remove(namespace);
        }
        self.unindex(&removed, namespace, name);
        let text = removed.text?;
        let recent = self.decoded.get_mut();
        let kept = recent.peek(&text);
        recent.forget(&text);
        Some(kept)
    }
}

/// What a list filling in a view does with a listed object ([`Store::refill`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refill {
    Nothing,
    /// Keep it whole (serialize it for [`Store::fill`]).
    Take,
    /// Keep only what identifies it.
    Drop,
    /// Kept whole now, but the list is behind the view's own version of it: read it alone.
    Behind,
}

/// What [`Store::fill`] made of a listed object.
#[derive(Debug)]
pub(super) enum Fill {
    /// The change to report, if any.
    Done(Option<Change>),
    /// Read it alone.
    Behind,
}

/// An object's (uid, resourceVersion).
type Version<'a> = (Option<&'a str>, Option<&'a str>);

fn version(object: &Value) -> Version<'_> {
    (
        object::uid(object),
        object::str_at(object, "/metadata/resourceVersion"),
    )
}

/// Whether two states are one version of one object (same uid and resourceVersion; a state
/// without a resourceVersion is no known version).
fn is_same_version(cached: Version<'_>, other: Version<'_>) -> bool {
    cached.0 == other.0 && cached.1.is_some() && cached.1 == other.1
}

/// (namespace or `""`, name).
fn key(object: &Value) -> (String, String) {
    (
        object::namespace(object).unwrap_or_default().to_owned(),
        object::name(object).to_owned(),
    )
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
