//! Watch caches: one view per resource type, shared by every controller, with the indexes the
//! controllers need (by namespace and name, by namespace, by controller owner uid).
//!
//! A view is filled by one watch of every object of its type once anything needs them all, and
//! until then by one watch per distinct label selector that the controllers needing the type
//! declared ([`Informers::select`]): a decorator of the 10 Pods labelled `app: special` caches
//! those 10, not the cluster's Pods. Views and their feeds are in [`super::store`]: an object
//! held by several feeds is held once and reported once. A label-selected watch lives while a
//! [`WatchLease`] on it does; a watch of every object is never stopped.
//!
//! Each feed has a task that keeps the view current and sends a [`CacheEvent`] for every
//! change to the operator's single event channel. Objects are held once, as their JSON text
//! ([`super::store`]), and decoded when read. An object that
//! cannot be decoded ([`Undecodable`]) is passed over, said and counted, and never stops its
//! type: what was cached of it stays until it is deleted.

use crate::object;
use crate::resources::ResourceType;
use crate::runtime::replicas::shard::Assignment;
use crate::runtime::report::metrics::{Metrics, ResourceLabels, WatchLabels};
use crate::runtime::watch::decode::{Undecodable, WatchedObject};
use crate::runtime::watch::discovery::ResolvedType;
use crate::runtime::watch::event::CacheEvent;
use crate::runtime::watch::share::Sharer;
use crate::runtime::watch::store::{
    Change, FeedSlot, Fill, Incoming, MAX_FEEDS, REMEMBERED_READ, Refill, Store, Swept,
};
use crate::selector::LabelSelector;
use crate::store::{Kept, Listed, ObjectStore};
use futures::StreamExt as _;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use parking_lot::{Mutex, RwLock};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("watching {resource}: {message}")]
    Watch { resource: String, message: String },
    #[error("the watch of {resource} was released before its initial list completed")]
    Released { resource: String },
    #[error("listing {resource} again for this replica's share: {message}")]
    Refill { resource: String, message: String },
}

/// What the caches count.
#[derive(Clone, Default)]
pub struct CacheMetrics {
    /// Objects passed over because they cannot be decoded, per type.
    pub undecodable: Family<ResourceLabels, Counter>,
    /// Objects held, per type.
    pub cached: Family<ResourceLabels, Gauge>,
    /// Watches running, per type and selection.
    pub watches: Family<WatchLabels, Gauge>,
}

impl CacheMetrics {
    /// The operator's families of these.
    pub(crate) fn of(metrics: &Metrics) -> CacheMetrics {
        CacheMetrics {
            undecodable: metrics.undecodable_objects.clone(),
            cached: metrics.cached_objects.clone(),
            watches: metrics.watches.clone(),
        }
    }
}

/// The watches of every type the operator needs.
pub struct Informers {
    client: kube::Client,
    events: mpsc::UnboundedSender<CacheEvent>,
    views: Mutex<HashMap<ResourceType, View>>,
    metrics: CacheMetrics,
    /// Where each passed-over object is reported, for an Event on it (set once by the
    /// operator; a full channel drops the report, the log line and the count stay).
    passed_over: std::sync::OnceLock<mpsc::Sender<PassedOver>>,
    /// Itself, for the leases it hands out.
    this: Weak<Informers>,
    /// Sharded replicas: who owns what, so views used only for their share keep it
    /// ([`super::share`]). `None` keeps everything.
    assignment: Mutex<Option<Arc<Assignment>>>,
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

/// The cache of one type and the watches that fill it.
struct View {
    resolved: ResolvedType,
    store: Arc<RwLock<Store>>,
    /// A background fill ([`Informers::fill_in_background`]) runs.
    filling: Arc<AtomicBool>,
    /// The watch of every object, once anything needs them all.
    all: Option<Feed>,
    /// One watch per label selector, with how many leases hold it, while `all` is not running.
    selected: HashMap<String, (Feed, usize)>,
}

/// One running watch.
struct Feed {
    /// Its type, as metrics name it.
    resource: String,
    slot: FeedSlot,
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

/// Keeps a label-selected watch running ([`Informers::select`]); the watch stops when its last
/// lease is dropped, and what only it held leaves the cache (reported as deletions).
#[must_use = "the watch stops when its lease is dropped"]
pub struct WatchLease {
    informers: Weak<Informers>,
    resource: ResourceType,
    selector: String,
    /// The label-selected watch it counts in, `None` when the watch of every object served it
    /// (nothing to count: that watch is never stopped).
    feed: Option<FeedSlot>,
    /// The controller it keeps a share of the type for ([`Informers::share`]).
    sharer: Option<u64>,
}

impl std::fmt::Debug for WatchLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WatchLease({} {:?})",
            self.resource.group_key(),
            self.selector
        )
    }
}

impl Drop for WatchLease {
    fn drop(&mut self) {
        let Some(informers) = self.informers.upgrade() else {
            return;
        };
        if let Some(sharer) = self.sharer
            && let Some(store) = informers.store(&self.resource)
        {
            store.write().reshape(|share| share.remove(sharer));
        }
        if let Some(feed) = self.feed {
            informers.unselect(&self.resource, &self.selector, feed);
        }
    }
}

impl Informers {
    /// Informers sending their changes to `events`, counting into `metrics`.
    pub fn new(
        client: kube::Client,
        events: mpsc::UnboundedSender<CacheEvent>,
        metrics: CacheMetrics,
    ) -> Arc<Informers> {
        Arc::new_cyclic(|this| Informers {
            client,
            events,
            views: Mutex::default(),
            metrics,
            passed_over: std::sync::OnceLock::new(),
            this: this.clone(),
            assignment: Mutex::default(),
        })
    }

    /// Reports every object passed over from now on to `reports` too.
    pub(crate) fn report_passed_over(&self, reports: mpsc::Sender<PassedOver>) {
        let _ = self.passed_over.set(reports);
    }

    /// Starts the watch of every object of a type once (later calls share it) and waits until
    /// its initial list is in the cache. Cluster-wide. Label-selected watches of the type stop
    /// once it has listed: it holds all they held.
    ///
    /// Until the first list succeeds, a failed attempt (e.g. RBAC forbids listing the type) is
    /// returned as [`CacheError::Watch`]; the watch keeps retrying with backoff, and a later
    /// call waits for its next attempt, so callers retrying in a loop do not add requests.
    pub async fn ensure(&self, resolved: &ResolvedType) -> Result<(), CacheError> {
        self.keep_whole(resolved).await?;
        self.watch_all(resolved).await
    }

    /// [`Informers::ensure`], keeping what the view keeps.
    async fn watch_all(&self, resolved: &ResolvedType) -> Result<(), CacheError> {
        let (progress, seen_failures) = {
            let mut views = self.views.lock();
            let view = self.view(&mut views, resolved);
            match &view.all {
                Some(all) => (all.progress.clone(), all.progress.borrow().failures),
                // A new watch may fail before this borrows its progress; every failure counts.
                None => (self.watch_whole(view, resolved), 0),
            }
        };
        wait(resolved, progress, seen_failures).await?;
        self.retire_selected(&resolved.resource);
        Ok(())
    }

    /// Caches the objects of a type whose labels match `label_selector` (kubectl syntax,
    /// checked by the API server), sharing the watch of every object when one runs and one
    /// watch per selector otherwise, and waits until they are in the cache. The watch runs
    /// while the lease does. Failures are as for [`Informers::ensure`], except that a
    /// selector no lease holds any more stops being retried. Past [`MAX_FEEDS`]` - 1` distinct
    /// selectors on one type, the type is watched whole instead.
    pub async fn select(
        &self,
        resolved: &ResolvedType,
        label_selector: &str,
    ) -> Result<WatchLease, CacheError> {
        self.keep_whole(resolved).await?;
        self.watch_selected(resolved, label_selector).await
    }

    /// Keeps a sharded replica's share of a type for a controller that needs no more
    /// ([`super::share`]), watched whole or by `label_selector` as [`Informers::ensure`] and
    /// [`Informers::select`] do; the share is kept while the lease is. A view that already
    /// held other shares is listed again for what this one adds. Without sharding, the type is
    /// kept whole.
    pub(crate) async fn share(
        &self,
        resolved: &ResolvedType,
        label_selector: Option<&str>,
        sharer: Sharer,
    ) -> Result<WatchLease, CacheError> {
        let sharded = self.assignment.lock().is_some();
        let (id, wants_fill) = {
            let mut views = self.views.lock();
            let view = self.view(&mut views, resolved);
            if sharded {
                let mut id = 0;
                let wants_fill = view.store.write().reshape(|share| id = share.add(sharer));
                (Some(id), wants_fill)
            } else {
                (None, false)
            }
        };
        // Held from here, so a failure below gives the share back.
        let mut lease = self.lease(resolved, label_selector.unwrap_or_default());
        lease.sharer = id;
        match label_selector {
            Some(selector) => {
                let mut selected = self.watch_selected(resolved, selector).await?;
                selected.sharer = lease.sharer.take();
                lease = selected;
            }
            None => self.watch_all(resolved).await?,
        }
        if wants_fill {
            self.refill_view(&resolved.resource).await?;
        }
        Ok(lease)
    }

    /// Keeps every object of a type from now on: what the view knew only by name is listed
    /// again before this returns (or fails, to be asked again).
    async fn keep_whole(&self, resolved: &ResolvedType) -> Result<(), CacheError> {
        let partial = {
            let mut views = self.views.lock();
            let view = self.view(&mut views, resolved);
            let mut store = view.store.write();
            store.reshape(|share| {
                share.keep_whole();
            })
        };
        if partial {
            self.refill_view(&resolved.resource).await?;
        }
        Ok(())
    }

    /// A sharded replica follows a new assignment of the items: each view kept for shares
    /// drops what is no longer this replica's and lists again what came its way.
    pub(crate) async fn reshare(&self, assignment: Assignment) -> Result<(), CacheError> {
        let assignment = Arc::new(assignment);
        let partial: Vec<ResourceType> = {
            let mut views = self.views.lock();
            *self.assignment.lock() = Some(assignment.clone());
            views
                .iter_mut()
                .filter_map(|(resource, view)| {
                    let partial = view
                        .store
                        .write()
                        .reshape(|share| share.assign(resource, assignment.clone()));
                    partial.then(|| resource.clone())
                })
                .collect()
        };
        // Every view is filled in even when one fails; a retry lists those still wanting it.
        let mut failed = Ok(());
        for resource in partial {
            if let Err(error) = self.refill_view(&resource).await {
                failed = failed.and(Err(error));
            }
        }
        failed
    }

    /// Fills in what a view keeps, when it wants that ([`refill`]).
    async fn refill_view(&self, resource: &ResourceType) -> Result<(), CacheError> {
        let Some((resolved, store, selectors)) = self.views.lock().get(resource).map(|view| {
            let selectors: Vec<Option<String>> = match &view.all {
                Some(_) => vec![None],
                None => view.selected.keys().cloned().map(Some).collect(),
            };
            (view.resolved.clone(), view.store.clone(), selectors)
        }) else {
            return Ok(());
        };
        let api = Api::all_with(self.client.clone(), &resolved.api);
        let cached = self
            .metrics
            .cached
            .get_or_create(&ResourceLabels {
                resource: resource.group_key(),
            })
            .clone();
        refill(&api, &resolved, &store, &selectors, &self.events, &cached)
            .await
            .map_err(|error| CacheError::Refill {
                resource: resource.group_key(),
                message: error.to_string(),
            })
    }

    /// Fills in what a view keeps in the background, retrying with backoff until a list
    /// succeeds (one task per view at a time): after a re-list taken across a change of what
    /// it keeps.
    fn fill_in_background(&self, resource: &ResourceType) {
        let Some(filling) = self
            .views
            .lock()
            .get(resource)
            .map(|view| view.filling.clone())
        else {
            return;
        };
        if filling.swap(true, Ordering::SeqCst) {
            return;
        }
        let (informers, resource) = (self.this.clone(), resource.clone());
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(500);
            while let Some(informers) = informers.upgrade() {
                match informers.refill_view(&resource).await {
                    Ok(()) => break,
                    Err(error) => {
                        tracing::warn!(%error, retry_seconds = delay.as_secs_f64(), "cannot fill in this replica's share; retrying");
                    }
                }
                drop(informers);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
            filling.store(false, Ordering::SeqCst);
        });
    }

    /// A lease that counts in no watch.
    fn lease(&self, resolved: &ResolvedType, selector: &str) -> WatchLease {
        WatchLease {
            informers: self.this.clone(),
            resource: resolved.resource.clone(),
            selector: selector.to_string(),
            feed: None,
            sharer: None,
        }
    }

    /// [`Informers::select`], keeping what the view keeps.
    async fn watch_selected(
        &self,
        resolved: &ResolvedType,
        label_selector: &str,
    ) -> Result<WatchLease, CacheError> {
        loop {
            let mut lease = self.lease(resolved, label_selector);
            let mut whole = false;
            let (progress, seen_failures) = {
                let mut views = self.views.lock();
                let view = self.view(&mut views, resolved);
                if let Some(all) = &view.all {
                    (all.progress.clone(), all.progress.borrow().failures)
                } else if let Some((feed, leases)) = view.selected.get_mut(label_selector) {
                    *leases += 1;
                    lease.feed = Some(feed.slot);
                    (feed.progress.clone(), feed.progress.borrow().failures)
                } else if view.selected.len() + 1 >= MAX_FEEDS {
                    // Too many selectors on one type: one watch of every object serves them
                    // all, as before selections (the selected ones retire once it has listed).
                    tracing::info!(resource = %resolved.resource.group_key(), selectors = view.selected.len(), "too many label selectors on one type; watching it whole");
                    whole = true;
                    (self.watch_whole(view, resolved), 0)
                } else {
                    let store = view.store.clone();
                    let feed = self.start(resolved, store, Some(label_selector));
                    let progress = feed.progress.clone();
                    lease.feed = Some(feed.slot);
                    view.selected.insert(label_selector.to_string(), (feed, 1));
                    (progress, 0)
                }
            };
            match wait(resolved, progress, seen_failures).await {
                // The selected watch it waited on was retired by the watch of every object,
                // which serves it now.
                Err(CacheError::Released { .. }) if lease.feed.is_some() => continue,
                waited => waited?,
            }
            if whole {
                self.retire_selected(&resolved.resource);
            }
            return Ok(lease);
        }
    }

    /// Starts a view's watch of every object; its progress.
    fn watch_whole(&self, view: &mut View, resolved: &ResolvedType) -> watch::Receiver<Progress> {
        let all = self.start(resolved, view.store.clone(), None);
        let progress = all.progress.clone();
        view.all = Some(all);
        progress
    }

    /// The view of a type, made empty the first time it is asked for.
    fn view<'a>(
        &self,
        views: &'a mut HashMap<ResourceType, View>,
        resolved: &ResolvedType,
    ) -> &'a mut View {
        views.entry(resolved.resource.clone()).or_insert_with(|| {
            let mut store = Store::default();
            if let Some(assignment) = self.assignment.lock().clone() {
                store.reshape(|share| share.assign(&resolved.resource, assignment));
            }
            View {
                resolved: resolved.clone(),
                store: Arc::new(RwLock::new(store)),
                filling: Arc::default(),
                all: None,
                selected: HashMap::new(),
            }
        })
    }

    /// A lease on a label-selected watch ended: the last one stops it.
    fn unselect(&self, resource: &ResourceType, selector: &str, leased: FeedSlot) {
        let changes = {
            let mut views = self.views.lock();
            let Some(view) = views.get_mut(resource) else {
                return;
            };
            match view.selected.get_mut(selector) {
                // Not the watch it counted in: that one was retired (by the watch of every
                // object) or stopped, and this one is someone else's.
                Some((feed, leases)) if feed.slot == leased => {
                    *leases -= 1;
                    if *leases > 0 {
                        return;
                    }
                }
                _ => return,
            }
            let (feed, _) = view.selected.remove(selector).expect("looked up above");
            tracing::info!(resource = %resource.group_key(), selector, "stopped watching");
            self.stop(&view.store, feed)
        };
        self.announce(resource, changes);
    }

    /// Stops the label-selected watches of a type whose watch of every object has listed.
    fn retire_selected(&self, resource: &ResourceType) {
        let changes = {
            let mut views = self.views.lock();
            let Some(view) = views.get_mut(resource) else {
                return;
            };
            let listed = view
                .all
                .as_ref()
                .is_some_and(|all| all.progress.borrow().synced);
            if !listed {
                return;
            }
            let retired: Vec<Feed> = view.selected.drain().map(|(_, (feed, _))| feed).collect();
            retired
                .into_iter()
                .flat_map(|feed| self.stop(&view.store, feed))
                .collect()
        };
        self.announce(resource, changes);
    }

    /// Stops a label-selected watch, under the lock of the views (so its bit is free before
    /// anyone counts the type's watches again); what only it held leaves the cache, and the
    /// deletions to announce are returned.
    fn stop(&self, store: &RwLock<Store>, feed: Feed) -> Vec<Change> {
        feed.task.abort();
        let mut store = store.write();
        let changes = store.close_feed(feed.slot);
        let resource = feed.resource;
        self.metrics
            .cached
            .get_or_create(&ResourceLabels {
                resource: resource.clone(),
            })
            .set(store.len() as i64);
        self.metrics
            .watches
            .get_or_create(&WatchLabels {
                resource,
                selection: "labels",
            })
            .dec();
        changes
    }

    /// Sends the changes a stopped watch made to the cache.
    fn announce(&self, resource: &ResourceType, changes: Vec<Change>) {
        for change in changes {
            let _ = self.events.send(CacheEvent::of(resource, change, None));
        }
    }

    pub fn is_watched(&self, resource: &ResourceType) -> bool {
        self.views
            .lock()
            .get(resource)
            .is_some_and(|view| view.all.is_some() || !view.selected.is_empty())
    }

    /// Whether the type of this apiVersion and resource (plural) is watched.
    pub(crate) fn watches(&self, api_version: &str, plural: &str) -> bool {
        self.views.lock().iter().any(|(watched, view)| {
            watched.api_version == api_version
                && watched.plural == plural
                && (view.all.is_some() || !view.selected.is_empty())
        })
    }

    /// A cached object. `namespace` is ignored for cluster-scoped types.
    pub(crate) fn get(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        let (store, kept) = self.kept(resource, namespace, name)?;
        decoded(&store, vec![kept]).next()
    }

    /// One object as its view keeps it (`namespace` is ignored for cluster-scoped types), and
    /// the view.
    fn kept(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<(Arc<RwLock<Store>>, Kept)> {
        let store = self.store(resource)?;
        let kept = store
            .read()
            .get(resource.scope(namespace).unwrap_or_default(), name)?;
        Some((store, kept))
    }

    /// The object a sync is about, decoded where it is not already, without keeping it as
    /// recently used: a tree dropped by the sync that built it costs a fraction of one that
    /// waits in the recently used set until pushed out, by then out of the CPU's caches
    /// (docs/performance.md, "Per-sync CPU of the text cache"), and the watch event of a
    /// write the sync makes is told from a no-op by the two versions' texts. With `only`, an
    /// object kept as text is decoded only in those top-level fields, and the read holds the
    /// text of the rest ([`SyncRead::text`], [`SyncRead::whole`]).
    pub(crate) fn read_for_sync(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        only: Option<&[&str]>,
    ) -> Option<SyncRead> {
        let (_, kept) = self.kept(resource, namespace, name)?;
        Some(match kept {
            Kept::Decoded(object) => SyncRead {
                object,
                decoded_from: None,
                partial: false,
            },
            Kept::Json(text) => SyncRead {
                object: match only {
                    Some(fields) => Kept::Json(text.clone()).only(fields),
                    None => Kept::Json(text.clone()).decoded(),
                },
                decoded_from: Some(text),
                partial: only.is_some(),
            },
        })
    }

    /// Every cached object of a type, for a sweep that queues what a controller acts on:
    /// by key alone where a label-selected watch one of `leases` counts in holds it (the
    /// caller acts on all such objects: its rules select exactly what those selectors match),
    /// left as text otherwise, for the caller to read its head, outside the view's lock.
    pub(crate) fn sweep(&self, resource: &ResourceType, leases: &[WatchLease]) -> Vec<Swept> {
        let Some(store) = self.store(resource) else {
            return Vec::new();
        };
        let feeds: Vec<FeedSlot> = leases
            .iter()
            .filter(|lease| lease.resource == *resource)
            .filter_map(|lease| lease.feed)
            .collect();
        store.read().sweep(resource, &feeds)
    }

    /// Lets go of every decoded object of every type, so reads decode from text.
    #[cfg(test)]
    pub(crate) fn forget_decoded(&self) {
        for view in self.views.lock().values() {
            view.store.read().forget_decoded();
        }
    }

    /// How many objects of a type are cached (0 when it is not watched).
    pub fn len(&self, resource: &ResourceType) -> usize {
        self.store(resource).map_or(0, |store| store.read().len())
    }

    /// Stops watching a type no controller needs any more, and drops its cache.
    pub fn release(&self, resource: &ResourceType) {
        let removed = self.views.lock().remove(resource);
        if let Some(view) = removed {
            for feed in view
                .all
                .into_iter()
                .chain(view.selected.into_values().map(|(feed, _)| feed))
            {
                feed.task.abort();
            }
            tracing::info!(resource = %resource.group_key(), "stopped watching");
        }
    }

    fn store(&self, resource: &ResourceType) -> Option<Arc<RwLock<Store>>> {
        self.views
            .lock()
            .get(resource)
            .map(|view| view.store.clone())
    }

    /// Starts a watch filling `store`: of every object, or of those `label_selector` matches.
    fn start(
        &self,
        resolved: &ResolvedType,
        store: Arc<RwLock<Store>>,
        label_selector: Option<&str>,
    ) -> Feed {
        let (progress_tx, progress) = watch::channel(Progress::default());
        let group_key = resolved.resource.group_key();
        // A view has a bit for its watch of every object beside as many label selectors as
        // `select` lets in, so a bit is always free here.
        let slot = store
            .write()
            .open_feed()
            .expect("select leaves a feed for the watch of every object");
        let mut config = watcher::Config::default();
        if let Some(selector) = label_selector {
            config = config.labels(selector);
        }
        let labels = ResourceLabels {
            resource: group_key.clone(),
        };
        let task = tokio::spawn(run_watch(
            Api::all_with(self.client.clone(), &resolved.api),
            config,
            Target {
                resolved: resolved.clone(),
                store,
                slot,
                cached: self.metrics.cached.get_or_create(&labels).clone(),
                informers: self.this.clone(),
            },
            progress_tx,
            self.events.clone(),
            PassOver {
                counted: self.metrics.undecodable.get_or_create(&labels).clone(),
                reports: self.passed_over.get().cloned(),
            },
        ));
        self.metrics
            .watches
            .get_or_create(&WatchLabels {
                resource: group_key.clone(),
                selection: if label_selector.is_some() {
                    "labels"
                } else {
                    "all"
                },
            })
            .inc();
        tracing::info!(resource = %group_key, selector = label_selector.unwrap_or("(all)"), "started watching");
        Feed {
            resource: group_key,
            slot,
            progress,
            task,
        }
    }
}

/// Waits until a watch has listed, or fails an attempt it had not failed before.
async fn wait(
    resolved: &ResolvedType,
    mut progress: watch::Receiver<Progress>,
    seen_failures: u64,
) -> Result<(), CacheError> {
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

impl Drop for Informers {
    fn drop(&mut self) {
        let views = self.views.get_mut();
        for (_, view) in views.drain() {
            for feed in view
                .all
                .into_iter()
                .chain(view.selected.into_values().map(|(feed, _)| feed))
            {
                feed.task.abort();
            }
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
    fn list(&self, resource: &ResourceType, namespace: Option<&str>) -> Listed {
        let Some(store) = self.store(resource) else {
            return Listed::default();
        };
        let kept = store.read().list(resource.scope(namespace));
        decoded(&store, kept)
    }

    /// Labels first, read from each head: of the orphans in a namespace (often every
    /// ConfigMap there), only those the parent's selector matches are decoded whole.
    fn orphans(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        selector: &LabelSelector,
    ) -> Vec<Arc<Value>> {
        let Some(store) = self.store(resource) else {
            return Vec::new();
        };
        let kept = store.read().orphans(resource.scope(namespace));
        let matching = kept
            .into_iter()
            .filter(|kept| match kept {
                Kept::Decoded(object) => selector.matches_labels_of(object),
                Kept::Json(_) => selector.matches_labels_of(&kept.clone().head()),
            })
            .collect();
        decoded(&store, matching).collect()
    }

    fn controlled_by(&self, resource: &ResourceType, owner: &Value) -> Vec<Arc<Value>> {
        let Some(uid) = object::uid(owner) else {
            // Without a uid there is nothing to look up; match by kind and name instead.
            return self
                .list(resource, resource.scope_of(owner))
                .filter(|child| object::is_controlled_by(child, owner))
                .collect();
        };
        let Some(store) = self.store(resource) else {
            return Vec::new();
        };
        let kept = store.read().controlled_by(uid);
        // Children of a namespaced owner live in its namespace (the garbage collector ignores
        // owner references across namespaces); those of a cluster-scoped owner anywhere.
        let namespace = resource.scope_of(owner);
        decoded(&store, kept)
            .filter(|child| namespace.is_none() || object::namespace(child) == namespace)
            .collect()
    }
}

/// Objects read from a view, decoded outside its lock. A small read is decoded now and kept
/// as recently used; a larger one ([`REMEMBERED_READ`]) is decoded one object at a time as it
/// is taken, and keeps none.
fn decoded(store: &RwLock<Store>, kept: Vec<Kept>) -> Listed {
    let text: usize = kept
        .iter()
        .map(|kept| match kept {
            Kept::Json(json) => json.len(),
            Kept::Decoded(_) => 0,
        })
        .sum();
    if text > REMEMBERED_READ {
        return Listed::new(kept);
    }
    let mut fresh = Vec::new();
    let objects: Vec<Arc<Value>> = kept
        .into_iter()
        .map(|kept| match kept {
            Kept::Decoded(value) => value,
            Kept::Json(json) => {
                let value = Kept::Json(json.clone()).decoded();
                fresh.push((json, value.clone()));
                value
            }
        })
        .collect();
    if !fresh.is_empty() {
        store.read().remember(fresh);
    }
    Listed::from(objects)
}

/// An object as [`Informers::read_for_sync`] read it.
pub(crate) struct SyncRead {
    /// The object, or only the fields the read asked for when `partial`.
    pub(crate) object: Arc<Value>,
    /// The text it was decoded from, when the read decoded it.
    decoded_from: Option<Arc<str>>,
    partial: bool,
}

impl SyncRead {
    /// The whole object's text, when `object` holds only some of its fields.
    pub(crate) fn text(&self) -> Option<&Arc<str>> {
        self.decoded_from.as_ref().filter(|_| self.partial)
    }

    /// The whole object, decoded if the read took only some of its fields.
    pub(crate) fn whole(self) -> Arc<Value> {
        match (self.partial, self.decoded_from) {
            (true, Some(text)) => Kept::Json(text).decoded(),
            _ => self.object,
        }
    }
}

/// What one watch fills: its type's view, as one of its feeds.
struct Target {
    resolved: ResolvedType,
    store: Arc<RwLock<Store>>,
    slot: FeedSlot,
    cached: Gauge,
    /// What fills in the view when a list leaves that wanted ([`Informers::fill_in_background`]).
    informers: Weak<Informers>,
}

/// The watch loop of one feed. Runs until aborted; errors are retried with kube's default
/// backoff, and the cache keeps serving what it had meanwhile. Reports its changes to
/// `events`, and says in `passing_over` which objects it passes over.
async fn run_watch(
    api: Api<WatchedObject>,
    config: watcher::Config,
    target: Target,
    progress: watch::Sender<Progress>,
    events: mpsc::UnboundedSender<CacheEvent>,
    passing_over: PassOver,
) {
    let Target {
        resolved,
        store,
        slot,
        cached,
        informers,
    } = target;
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
        for change in changes {
            // A closed channel means the operator is shutting down; the cache stays usable.
            let _ = events.send(CacheEvent::of(&resolved.resource, change, listed_at));
        }
    };
    // The list being received after a (re)start; handed to the view whole at `InitDone`, with
    // the generation of what the view kept when it began.
    let mut listing: Option<Vec<Incoming>> = None;
    let mut listing_kept = 0;
    let stream = watcher::watcher(api, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item {
            Ok(Event::Init) => {
                listing = Some(Vec::new());
                listing_kept = store.read().share().generation();
            }
            Ok(Event::InitApply(object)) => {
                let listing = listing.get_or_insert_with(Vec::new);
                match object.decoded(&resolved.api) {
                    // Serialized outside the view's write lock, when it must be.
                    Ok(object) => listing.push(store.read().incoming(&object)),
                    Err(object) => {
                        pass_over(&object);
                        // What was cached of it stays, as for a watch event: a re-list must
                        // not read as its deletion.
                        if let Some(cached) = store.read().named(&object) {
                            listing.push(cached);
                        }
                    }
                }
            }
            Ok(Event::InitDone) => {
                let listed = listing.take().unwrap_or_default();
                let count = listed.len();
                let (changes, wants_fill) = {
                    let mut view = store.write();
                    let changes = view.replace(slot, listed, listing_kept);
                    cached.set(view.len() as i64);
                    (changes, view.needs_fill().is_some())
                };
                let listed_at = Instant::now();
                tracing::debug!(resource = %resource, objects = count, changes = changes.len(), "listed");
                send(changes, Some(listed_at));
                // What the view keeps changed while it listed (or a fill failed before):
                // objects now this replica's may have been taken by name only.
                if wants_fill && let Some(informers) = informers.upgrade() {
                    informers.fill_in_background(&resolved.resource);
                }
                progress.send_modify(|p| p.synced = true);
            }
            Ok(Event::Apply(object)) => match object.decoded(&resolved.api) {
                Ok(object) => {
                    let object = Arc::new(object);
                    let changes = edit(&store, &cached, |store| {
                        store.apply(slot, object).into_iter().collect()
                    });
                    send(changes, None);
                }
                // Controllers keep the last version they could read.
                Err(object) => pass_over(&object),
            },
            Ok(Event::Delete(object)) => {
                let changes = match object.decoded(&resolved.api) {
                    Ok(object) => edit(&store, &cached, |store| {
                        store.delete(slot, object).into_iter().collect()
                    }),
                    // Gone, in the last state that could be read.
                    Err(object) => {
                        pass_over(&object);
                        edit(&store, &cached, |store| {
                            store.delete_named(slot, &object).into_iter().collect()
                        })
                    }
                };
                send(changes, None);
            }
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

/// Changes a view under its lock, keeping its count true.
fn edit(
    store: &RwLock<Store>,
    cached: &Gauge,
    change: impl FnOnce(&mut Store) -> Vec<Change>,
) -> Vec<Change> {
    let mut store = store.write();
    let changes = change(&mut store);
    cached.set(store.len() as i64);
    changes
}

/// Objects of a type listed at once to fill in a view.
const REFILL_PAGE: u32 = 500;

/// Fills in what a view keeps whole after a change of it ([`Store::needs_fill`]): a list of
/// its type as each of its watches selects it (`selectors`), a page at a time, each object
/// serialized only when the view takes it. An object the list shows older than the view knows
/// it (the list came from a cache behind the watch) is read alone. Each object taken or
/// dropped is sent as added, updated or deleted.
async fn refill(
    api: &Api<WatchedObject>,
    resolved: &ResolvedType,
    store: &RwLock<Store>,
    selectors: &[Option<String>],
    events: &mpsc::UnboundedSender<CacheEvent>,
    cached: &Gauge,
) -> Result<(), kube::Error> {
    let Some(wanted) = store.read().needs_fill() else {
        return Ok(());
    };
    let fill = |object: &Value| -> Fill {
        let incoming = match store.read().refill(object) {
            Refill::Nothing => return Fill::Done(None),
            Refill::Behind => return Fill::Behind,
            Refill::Take => Some(Incoming::of(object)),
            Refill::Drop => None,
        };
        let mut view = store.write();
        let filled = view.fill(object, incoming);
        cached.set(view.len() as i64);
        filled
    };
    let send = |change: Change| {
        let _ = events.send(CacheEvent::of(&resolved.resource, change, None));
    };
    for selector in selectors {
        let mut params = ListParams::default().limit(REFILL_PAGE);
        if let Some(selector) = selector {
            params = params.labels(selector);
        }
        loop {
            let page = api.list(&params).await?;
            let mut behind = Vec::new();
            for object in page.items {
                let Ok(object) = object.decoded(&resolved.api) else {
                    continue;
                };
                match fill(&object) {
                    Fill::Done(Some(change)) => send(change),
                    Fill::Behind => behind.push(object),
                    Fill::Done(None) => {}
                }
            }
            for object in behind {
                let client = api.clone().into_client();
                let alone: Api<WatchedObject> = match object::namespace(&object) {
                    Some(namespace) => Api::namespaced_with(client, namespace, &resolved.api),
                    None => Api::all_with(client, &resolved.api),
                };
                let Some(fresh) = alone.get_opt(object::name(&object)).await? else {
                    continue;
                };
                if let Ok(fresh) = fresh.decoded(&resolved.api)
                    && let Fill::Done(Some(change)) = fill(&fresh)
                {
                    send(change);
                }
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => break,
            }
        }
    }
    store.write().filled(wanted);
    Ok(())
}
