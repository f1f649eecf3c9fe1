//! The controllers of one kind in the running operator, and everything the runtime does for
//! them whatever their kind. This file holds the table of loaded controllers: loading and
//! reloading (the last good version keeps running when a new one fails), installing, removal
//! and routing events to them. Beside it: `version` builds a version from the controller
//! object, `outcomes` runs work items and records how they ended, `statuses` writes each
//! controller's status, `routes` says which controllers an event concerns. A staged rollout
//! places each newest revision ([`crate::runtime::rollout`]) in this table.

mod outcomes;
pub(crate) mod routes;
mod statuses;
mod version;

use crate::api::{ControllerStatus, KindName};
use crate::hooks::ConfigMapLookup;
use crate::object;
use crate::reasons;
use crate::resources::ResourceType;
use crate::runtime::context::{Context, sweep};
use crate::runtime::keys::{ControllerId, Work, WorkKey};
use crate::runtime::kind::{self, Controller, Kind};
use crate::runtime::load::credentials::CredentialWatch;
use crate::runtime::load::{self};
use crate::runtime::reads::rbac::Batch;
use crate::runtime::registry::routes::Routes;
use crate::runtime::replicas::shard::Sharded;
use crate::runtime::report::problem::Problem;
use crate::runtime::rollout::{ControllerTable, Rollouts, Turn};
use crate::runtime::watch::event::ObjectEvent;
use crate::runtime::write::fingerprint::Sweep;
use crate::store::ObjectStore;
use futures::future::BoxFuture;
use outcomes::RefusedWork;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use version::Unloaded;

pub(crate) struct Registry<K: Kind> {
    /// The controller objects' type.
    resource: ResourceType,
    loaded: RwLock<HashMap<String, Arc<Controller<K>>>>,
    unloaded: Mutex<HashMap<String, Unloaded>>,
    routes: RwLock<Routes>,
    /// The status last written per controller, so unchanged status is never rewritten.
    written_status: Mutex<HashMap<String, ControllerStatus>>,
    /// Per controller, the work items whose last sync was refused a read, and why: its
    /// `ReadsAllowed` condition, and what an RBAC change retries at once.
    refused: Mutex<HashMap<String, RefusedWork>>,
    /// Staged rollouts: candidate revisions beside the serving ones in `loaded`.
    rollouts: Rollouts<K>,
    /// Per controller, the newest revision whose `spec.tests` failed and why: a retry or a
    /// reload of the same revision is refused again without running them.
    failed_tests: Mutex<HashMap<String, (String, Problem)>>,
}

impl<K: Kind> Registry<K> {
    pub(crate) fn new(resource: ResourceType) -> Registry<K> {
        Registry {
            resource,
            loaded: RwLock::default(),
            unloaded: Mutex::default(),
            routes: RwLock::default(),
            written_status: Mutex::default(),
            refused: Mutex::default(),
            rollouts: Rollouts::default(),
            failed_tests: Mutex::default(),
        }
    }

    fn id(name: &str) -> ControllerId {
        ControllerId::new(kind::name::<K>(), name)
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<Controller<K>>> {
        self.loaded.read().get(name).cloned()
    }

    /// A controller object of this kind that this operator serves, from the cache.
    fn own(&self, context: &Context, name: &str) -> Option<Arc<Value>> {
        context
            .informers
            .get(&self.resource, None, name)
            .filter(|object| context.serves(object))
    }

    fn all(&self) -> Vec<Arc<Controller<K>>> {
        self.loaded.read().values().cloned().collect()
    }

    /// Loads, reloads or removes a controller, from the cache.
    async fn load(&self, context: &Arc<Context>, key: &WorkKey) {
        let id = &key.controller;
        let Some(object) = self.own(context, &id.name) else {
            self.remove(context, id);
            return;
        };
        if object::is_deleting(&object) {
            // Stop syncing first, so no sync redoes what is being released. Releasing is the
            // leader's, or the controller's owner's (a replica that takes over reloads every
            // controller).
            self.remove(context, id);
            if !context.authority.may_write() {
                return;
            }
            if let Err(failure) = K::release(context, id, &object).await {
                tracing::warn!(controller = %id, error = %failure.message, "cannot release yet");
                context.queue.retry_later(key.clone());
            }
            return;
        }
        // It exists (again, after a removal): its figures count from here.
        context.metrics.admit(id);
        let previous = self.get(&id.name);
        let newest = match self
            .version(context, id, &object, previous.as_ref(), None)
            .await
        {
            Ok(newest) => newest,
            Err(unloaded) => return self.not_loaded(context, key, &object, *unloaded).await,
        };
        if !newest.rollout.strategy.stages() {
            // Every revision serves at once; a rollout that was staged ends here.
            let dropped = self.rollouts.forget(&id.name);
            self.install(context, key, &object, newest, previous).await;
            if dropped.is_some() {
                self.resync_serving(context, &id.name).await;
            }
            return;
        }
        self.rollouts
            .place(self, context, key, &object, newest, previous)
            .await;
    }

    /// Queues the serving revision's work items whose last sync it did not make (a candidate's
    /// share, after the candidate is gone), and those that failed: their fingerprints are not
    /// its own.
    async fn resync_serving(&self, context: &Arc<Context>, name: &str) {
        if let Some(serving) = self.get(name) {
            enqueue_all(context, &serving, Sweep::Changed).await;
        }
    }

    /// Makes a freshly loaded version current; re-syncs everything when what runs changed.
    async fn install(
        &self,
        context: &Arc<Context>,
        key: &WorkKey,
        object: &Value,
        mut controller: Controller<K>,
        previous: Option<Arc<Controller<K>>>,
    ) {
        let changed = previous
            .as_ref()
            .is_none_or(|p| p.version != controller.version);
        // A user asking for a sync gets one of everything, whatever a resync would skip and
        // whatever backoff a failing item is in.
        let requested = previous
            .as_ref()
            .is_some_and(|p| p.sync_requested != controller.sync_requested);
        let changed = changed || requested;
        // New webhook credentials leave what runs as it was (a token is no part of a hook's
        // digest), but what failed with the old ones (a 401) should not wait for its backoff.
        let rotated = !changed
            && previous
                .as_ref()
                .is_some_and(|p| p.credentials_digest() != controller.credentials_digest());
        if changed {
            // Before `enqueue_all` below reads the cache.
            controller.queued_all_at = Instant::now();
        }
        let controller = Arc::new(controller);
        let id = &controller.id;
        self.loaded
            .write()
            .insert(id.name.clone(), controller.clone());
        self.unloaded.lock().remove(&id.name);
        self.rebuild_routes();
        context.queue.forget(key);
        if let Err(problem) = &controller.health.scripts_loaded {
            context
                .warn(
                    object,
                    None,
                    &problem.reason,
                    "Load",
                    &format!("{} (the previous version keeps running)", problem.message),
                )
                .await;
        }
        K::installed(context, &controller, object, previous.is_none()).await;
        if changed {
            let digests = load::digests(&controller.hooks)
                .into_iter()
                .map(|(hook, digest)| format!("{hook}={digest}"))
                .collect::<Vec<_>>()
                .join(",");
            tracing::info!(controller = %id, %digests, requested, "controller loaded; syncing what it acts on");
            enqueue_all(context, &controller, Sweep::Everything).await;
        } else if rotated {
            tracing::info!(controller = %id, "webhook credentials changed; syncing what may have failed with the old ones");
            enqueue_all(context, &controller, Sweep::Changed).await;
        }
    }

    /// Records a controller that did not load: reported in its status and as an Event, retried
    /// with backoff, and reloaded as soon as one of its script sources changes. A version that
    /// loaded before keeps running.
    async fn not_loaded(
        &self,
        context: &Context,
        key: &WorkKey,
        object: &Value,
        unloaded: Unloaded,
    ) {
        let id = &key.controller;
        if let Err(problem) = &unloaded.health.ready {
            tracing::warn!(controller = %id, reason = %problem.reason, error = %problem.message, "controller not loaded");
        }
        if let Err(problem) = &unloaded.health.ready {
            context
                .warn(object, None, reasons::LOAD_FAILED, "Load", &problem.message)
                .await;
        }
        self.unloaded.lock().insert(id.name.clone(), unloaded);
        self.rebuild_routes();
        context.queue.retry_later(key.clone());
    }

    fn remove(&self, context: &Context, id: &ControllerId) {
        let removed = self.loaded.write().remove(&id.name);
        let unloaded = self.unloaded.lock().remove(&id.name);
        self.written_status.lock().remove(&id.name);
        self.refused.lock().remove(&id.name);
        self.failed_tests.lock().remove(&id.name);
        self.rollouts.forget(&id.name);
        // Marked removed first: its work still running records no reads after the index
        // forgets them.
        context.metrics.forget(id);
        context.dependencies.remove_controller(id);
        context.queue.resume(id);
        if removed.is_some() || unloaded.is_some() {
            self.rebuild_routes();
            tracing::info!(controller = %id, "controller removed");
        }
    }

    /// Routes an event to a controller's serving revision, and to a candidate revision that
    /// serves a share (whose selection may differ; it queues only work of its share).
    fn route_to(&self, context: &Context, name: &str, event: &ObjectEvent) {
        if let Some(controller) = self.get(name) {
            K::route(context, &controller, event);
        }
        if let Some(candidate) = self.rollouts.candidate(name)
            && candidate.serves_any()
        {
            K::route(context, &candidate.controller, event);
        }
    }

    fn rebuild_routes(&self) {
        let mut routes = Routes::default();
        for (name, controller) in self.loaded.read().iter() {
            let interest = K::interest(&controller.planner);
            routes.add(name, Some(&interest), &controller.sources);
            if let Some(candidate) = self.rollouts.candidate(name) {
                let candidate = &candidate.controller;
                let interest = K::interest(&candidate.planner);
                routes.add(name, Some(&interest), &candidate.sources);
            }
        }
        // A controller that did not load still reloads when a script source of its changes.
        for (name, unloaded) in self.unloaded.lock().iter() {
            routes.add(name, None, &unloaded.sources);
        }
        *self.routes.write() = routes;
    }
}

impl<K: Kind> ControllerTable<K> for Registry<K> {
    fn serving(&self, name: &str) -> Option<Arc<Controller<K>>> {
        self.get(name)
    }

    async fn pinned_version(
        &self,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        previous: Option<&Arc<Controller<K>>>,
        pinned: &(dyn ConfigMapLookup + Sync),
    ) -> Result<Controller<K>, String> {
        self.version(context, id, object, previous, Some(pinned))
            .await
            .map_err(|unloaded| unloaded.why())
    }

    async fn install(
        &self,
        context: &Arc<Context>,
        key: &WorkKey,
        object: &Value,
        controller: Controller<K>,
        previous: Option<Arc<Controller<K>>>,
    ) {
        Registry::install(self, context, key, object, controller, previous).await;
    }

    fn settle(&self, context: &Context, key: &WorkKey) {
        self.unloaded.lock().remove(&key.controller.name);
        self.rebuild_routes();
        context.queue.forget(key);
    }

    async fn resync_serving(&self, context: &Arc<Context>, name: &str) {
        Registry::resync_serving(self, context, name).await;
    }
}

/// A kind as the operator starts it: its names, and its registry once its controller objects'
/// type is resolved.
#[derive(Clone, Copy)]
pub struct KindEntry {
    pub name: KindName,
    pub registry: fn(ResourceType) -> Arc<dyn KindRuntime>,
}

impl KindEntry {
    pub fn of<K: Kind>() -> KindEntry {
        KindEntry {
            name: kind::name::<K>(),
            registry: |resource| Arc::new(Registry::<K>::new(resource)),
        }
    }
}

/// A registry as the operator drives it, whatever the kind.
pub trait KindRuntime: Send + Sync {
    fn kind(&self) -> KindName;

    /// Queues the work a watch event causes for this kind's controllers.
    fn route(&self, context: &Arc<Context>, event: &ObjectEvent);

    /// The dev loop: a saved script file reloads the controllers whose hooks name it.
    fn script_file_changed(&self, context: &Context, file: &str);

    /// A followed CRD changed: loads again the controllers whose `spec.tests` failed, which
    /// may pass against the new schema.
    fn schemas_changed(&self, context: &Context);

    /// Routes an event again, to one controller only.
    fn redeliver(&self, context: &Context, name: &str, event: &ObjectEvent);

    fn work<'a>(&'a self, context: &'a Arc<Context>, key: &'a WorkKey) -> BoxFuture<'a, ()>;

    /// Whether a work item only queues other work (see [`Kind::fans_out`]).
    fn fans_out(&self, work: &Work) -> bool;

    fn write_statuses<'a>(&'a self, context: &'a Arc<Context>) -> BoxFuture<'a, ()>;

    /// The controllers that resync periodically, with their periods.
    fn resync_periods(&self) -> Vec<(ControllerId, Duration)>;

    /// Queues what a controller acts on, as a periodic resync: the work items whose outcome may
    /// have changed since their last sync (everything with `--full-resync`).
    fn resync(&self, context: &Context, name: &str);

    /// What each controller's webhook credentials were last read from, to read again: the
    /// newest spec's when it did not load (a fix there must retry it), else the running one's.
    fn credential_watches(&self) -> Vec<(ControllerId, Arc<CredentialWatch>)>;

    /// The names of the loaded controllers.
    fn names(&self) -> BTreeSet<String>;

    /// The controller objects in the cache (this operator's selection), not being deleted.
    fn controller_names(&self, context: &Context) -> Vec<String>;

    /// Whether a controller has been loaded, found unloadable, or is gone.
    fn settled(&self, context: &Context, name: &str) -> bool;

    /// Roles, ClusterRoles or bindings changed (a window's worth, its answers forgotten):
    /// work refused a read they can alter, and controllers that did not load for one, are
    /// tried again now.
    fn rbac_changed(&self, context: &Context, batch: &Batch);

    /// This replica just became the leader, or (sharded) the members changed: everything it
    /// skipped is done now (every controller reloaded, so its load-time writes happen, and
    /// what `sweep` picks resynced). Outcomes of items another replica owns now are
    /// forgotten, so they are neither counted here nor skipped if they come back.
    fn take_over(&self, context: &Context, sweep: Sweep);
}

impl<K: Kind> KindRuntime for Registry<K> {
    fn kind(&self) -> KindName {
        kind::name::<K>()
    }

    fn route(&self, context: &Arc<Context>, event: &ObjectEvent) {
        let Some(object) = event.head() else {
            return;
        };
        if event.resource == self.resource {
            // A controller object's own status (which the operator writes) never reloads it,
            // but may say where its rollout went on another replica.
            let status_only = event.only_status_changed();
            let name = object::name(object);
            if !status_only {
                context.queue.add(WorkKey::load(&Self::id(name)));
                return;
            }
            // The router goes on with the next event: a canary step's queueing ends on its
            // own, and the replica driving the rollout announces it.
            let _ = self
                .rollouts
                .turn(context, &Self::id(name), Turn::Follow { object });
            return;
        }
        let routes = self.routes.read();
        if event.resource == context.config_map_type {
            let namespace = object::namespace(object).unwrap_or_default();
            for name in routes.for_config_map(namespace, object::name(object)) {
                context.queue.add(WorkKey::load(&Self::id(name)));
            }
        }
        for name in routes.for_type(&event.resource) {
            self.route_to(context, name, event);
        }
    }

    fn script_file_changed(&self, context: &Context, file: &str) {
        let routes = self.routes.read();
        let names = routes.for_script_key(file);
        if !names.is_empty() {
            tracing::info!(file, controllers = %names.join(","), kind = kind::name::<K>().as_str(), "script file changed");
        }
        for name in names {
            context.queue.add(WorkKey::load(&Self::id(name)));
        }
    }

    fn schemas_changed(&self, context: &Context) {
        let failed: Vec<String> = self
            .failed_tests
            .lock()
            .drain()
            .map(|(name, _)| name)
            .collect();
        for name in failed {
            tracing::info!(controller = %Self::id(&name), "a CustomResourceDefinition changed; running the spec.tests that failed again");
            context.queue.add(WorkKey::load(&Self::id(&name)));
        }
    }

    fn redeliver(&self, context: &Context, name: &str, event: &ObjectEvent) {
        self.route_to(context, name, event);
    }

    fn work<'a>(&'a self, context: &'a Arc<Context>, key: &'a WorkKey) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            match key.work {
                Work::Load => self.load(context, key).await,
                _ => self.sync(context, key).await,
            }
        })
    }

    fn fans_out(&self, work: &Work) -> bool {
        K::fans_out(work)
    }

    fn write_statuses<'a>(&'a self, context: &'a Arc<Context>) -> BoxFuture<'a, ()> {
        Box::pin(Registry::write_statuses(self, context))
    }

    fn resync_periods(&self) -> Vec<(ControllerId, Duration)> {
        self.loaded
            .read()
            .values()
            .filter_map(|c| Some((c.id.clone(), c.resync_period?)))
            .collect()
    }

    fn resync(&self, context: &Context, name: &str) {
        let Some(controller) = self.get(name) else {
            return;
        };
        let sweep = if context.config.full_resync {
            Sweep::Everything
        } else {
            Sweep::Changed
        };
        let skipped = K::enqueue_all(context, &controller, sweep);
        context
            .metrics
            .count_resync_skipped(&controller.id, skipped);
        tracing::debug!(controller = %controller.id, skipped, "resync queued what may have changed");
    }

    fn credential_watches(&self) -> Vec<(ControllerId, Arc<CredentialWatch>)> {
        let (serving, newest) = {
            let unloaded = self.unloaded.lock();
            let serving = self
                .loaded
                .read()
                .iter()
                .filter(|(name, _)| !unloaded.contains_key(*name))
                .map(|(name, c)| (name.clone(), c.credentials.clone()))
                .collect::<Vec<_>>();
            let newest = unloaded
                .iter()
                .filter_map(|(name, u)| Some((Self::id(name), u.credentials.clone()?)))
                .collect::<Vec<_>>();
            (serving, newest)
        };
        let mut watches = Vec::new();
        for (name, serving) in serving {
            // A candidate is polled too, unless it read the same credential objects as the
            // serving revision and found the same: then both load again when they change.
            let candidate = self
                .rollouts
                .candidate(&name)
                .and_then(|candidate| candidate.controller.credentials.clone())
                .filter(|read| {
                    serving
                        .as_ref()
                        .is_none_or(|s| !s.reads_the_same(read) || s.digest() != read.digest())
                });
            let id = Self::id(&name);
            watches.extend(
                serving
                    .into_iter()
                    .chain(candidate)
                    .map(|w| (id.clone(), w)),
            );
        }
        watches.extend(newest);
        watches
    }

    fn names(&self) -> BTreeSet<String> {
        self.loaded.read().keys().cloned().collect()
    }

    fn controller_names(&self, context: &Context) -> Vec<String> {
        ObjectStore::list(&*context.informers, &self.resource, None)
            .filter(|object| context.serves(object) && !object::is_deleting(object))
            .map(|object| object::name(&object).to_string())
            .collect()
    }

    fn settled(&self, context: &Context, name: &str) -> bool {
        self.loaded.read().contains_key(name)
            || self.unloaded.lock().contains_key(name)
            || self
                .own(context, name)
                .is_none_or(|object| object::is_deleting(&object))
    }

    fn rbac_changed(&self, context: &Context, batch: &Batch) {
        for items in self.refused.lock().values() {
            for item in items.values().filter(|item| item.healed_by(batch)) {
                context.queue.add(item.key.clone());
            }
        }
        // A load is refused reads of several scopes (`load::may_read`: a ConfigMap's namespace,
        // the account's own namespace, cluster-wide), which its problem does not keep: any
        // batch may heal it. At most one batch a second, and only controllers refused a read,
        // so this costs a reload of those a second at most.
        for (name, unloaded) in self.unloaded.lock().iter() {
            if unloaded
                .health
                .ready
                .as_ref()
                .is_err_and(Problem::is_refused_read)
            {
                context.queue.add(WorkKey::load(&Self::id(name)));
            }
        }
    }

    fn take_over(&self, context: &Context, sweep: Sweep) {
        for object in ObjectStore::list(&*context.informers, &self.resource, None) {
            context
                .queue
                .add(WorkKey::load(&Self::id(object::name(&object))));
        }
        for controller in self.all() {
            let id = &controller.id;
            controller
                .outcomes
                .forget_where(|key| !context.authority.assigned(&key.item(id)));
            K::enqueue_all(context, &controller, sweep);
        }
    }
}

/// Queues what `controller` acts on (`K::enqueue_all`), off the runtime's threads.
async fn enqueue_all<K: Kind>(
    context: &Arc<Context>,
    controller: &Arc<Controller<K>>,
    items: Sweep,
) {
    let (context, controller) = (context.clone(), controller.clone());
    sweep("queueing what a controller acts on", move || {
        K::enqueue_all(&context, &controller, items);
    })
    .await;
}
