//! The controllers of one kind in the running operator, and everything the runtime does for
//! them whatever their kind: loading and reloading (the last good version keeps running when a
//! new one fails), removal, routing events to them, running their work and recording how it
//! ended, and writing their status.

pub(crate) mod routes;

use crate::api::{
    ABORT_ANNOTATION, ControllerObject, ControllerStatus, KindName, PROMOTE_ANNOTATION,
    SYNC_REQUESTED_ANNOTATION, ServiceAccountRef, UNDO_ANNOTATION,
};
use crate::hooks::ConfigMapLookup;
use crate::object;
use crate::plan::rollout::{Placement, Revisions};
use crate::reads::{ReadScope, ReadVerb};
use crate::reasons;
use crate::resources::ResourceType;
use crate::runtime::context::{Context, start_sweep, sweep};
use crate::runtime::keys::{ControllerId, Work, WorkKey};
use crate::runtime::kind::{self, Controller, Kind, Outcome};
use crate::runtime::load::credentials::CredentialValues;
use crate::runtime::load::credentials::CredentialWatch;
use crate::runtime::load::{self, ScriptSources};
use crate::runtime::reads::rbac::Batch;
use crate::runtime::registry::routes::{Routes, only_status_changed};
use crate::runtime::replicas::shard::{self, Item, Sharded};
use crate::runtime::report::status::{self, Counts, Health, Problem, RolloutReport};
use crate::runtime::rollout::{self, Advance, Rollouts};
use crate::runtime::sync::synced;
use crate::runtime::watch::cache::ObjectEvent;
use crate::runtime::write::fingerprint::{self, Sweep};
use crate::store::ObjectStore;
use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A controller whose newest spec could not be loaded (a previous version may still run): why,
/// and what would reload it.
struct Unloaded {
    health: Health,
    sources: ScriptSources,
    /// Its webhook credentials as read for this attempt: a change there retries it at once.
    credentials: Option<Arc<CredentialWatch>>,
}

impl Unloaded {
    /// Why it did not load, for a log line.
    fn why(self) -> String {
        self.health
            .ready
            .err()
            .map_or_else(String::new, |problem| problem.message)
    }
}

/// A work item refused a read: the key to retry, why, and the read (whose, and which) when the
/// refusal says, so an RBAC change retries only the work it can heal.
struct RefusedItem {
    key: WorkKey,
    problem: Problem,
    read: Option<(ServiceAccountRef, ReadScope)>,
}

impl RefusedItem {
    /// Whether an RBAC change can have healed it (a refusal that names no read: any change).
    fn healed_by(&self, batch: &Batch) -> bool {
        self.read
            .as_ref()
            .is_none_or(|(account, scope)| batch.covers(Some(account), scope.namespace.as_deref()))
    }
}

/// A controller's work items refused a read, by their description.
type RefusedWork = BTreeMap<String, RefusedItem>;

pub struct Registry<K: Kind> {
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
    pub fn new(resource: ResourceType) -> Registry<K> {
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

    pub fn get(&self, name: &str) -> Option<Arc<Controller<K>>> {
        self.loaded.read().get(name).cloned()
    }

    fn all(&self) -> Vec<Arc<Controller<K>>> {
        self.loaded.read().values().cloned().collect()
    }

    /// Loads, reloads or removes a controller, from the cache.
    async fn load(&self, context: &Arc<Context>, key: &WorkKey) {
        let id = &key.controller;
        let Some(object) = context.informers.get(&self.resource, None, &id.name) else {
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
        self.place(context, key, &object, newest, previous).await;
    }

    /// Reads a controller object as a version ready to run: its writer and webhook
    /// credentials, its hooks compiled (the previous version's kept when the newest do not
    /// compile), its planner built and its account's static reads checked. `pinned`: the
    /// scripts of a revision's snapshot, read instead of the ConfigMaps and dev-loop files.
    async fn version(
        &self,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        previous: Option<&Arc<Controller<K>>>,
        pinned: Option<&(dyn ConfigMapLookup + Sync)>,
    ) -> Result<Controller<K>, Box<Unloaded>> {
        let parsed: K::Object = match serde_json::from_value((**object).clone()) {
            Ok(parsed) => parsed,
            Err(error) => {
                let generation = object
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64);
                let problem =
                    Problem::new(reasons::INVALID_SPEC, format!("unreadable spec: {error}"));
                return Err(Box::new(Unloaded {
                    health: Health::failed(generation, problem),
                    sources: ScriptSources::default(),
                    credentials: None,
                }));
            }
        };
        let spec = parsed.spec();
        let sources = ScriptSources::of(&spec);
        let previous_hooks = previous.map(|p| p.hooks.clone());
        // The writer before the hooks: webhook credentials are read with it, so a controller
        // can use only the Secrets its own account may read.
        let writer = match (&spec.service_account, context.config.allow_unimpersonated) {
            (Err(invalid), _) => Err(Problem::new(reasons::INVALID_SPEC, invalid)),
            (Ok(None), false) => Err(Problem::new(
                reasons::SERVICE_ACCOUNT_REQUIRED,
                "spec.serviceAccountName is required: this operator runs with \
                 --allow-unimpersonated=false, so every controller writes as a ServiceAccount of \
                 its own",
            )),
            (Ok(account), _) => context
                .identities
                .writer(&context.client, account.as_ref())
                .map_err(|error| Problem::new(error.reason(), error)),
        };
        let writer = match writer {
            Ok(writer) => writer,
            Err(problem) => {
                return Err(Box::new(Unloaded {
                    health: Health::failed(spec.generation, problem),
                    sources,
                    credentials: None,
                }));
            }
        };
        let credential_sources = spec.credential_sources();
        let credentials = match CredentialValues::read(&writer.client, &credential_sources).await {
            Ok(read) => read,
            Err(error) => {
                let problem = Problem::new(reasons::CREDENTIALS_READ_FAILED, error);
                return Err(Box::new(Unloaded {
                    health: Health::failed(spec.generation, problem),
                    sources,
                    credentials: None,
                }));
            }
        };
        let watch =
            CredentialWatch::new(&writer.client, credential_sources, &credentials).map(Arc::new);
        let prepared = match load::prepare(
            context,
            &id.name,
            &spec,
            previous_hooks,
            &credentials,
            pinned,
        )
        .await
        {
            Ok(prepared) => prepared,
            Err(health) => {
                return Err(Box::new(Unloaded {
                    health,
                    sources,
                    credentials: watch,
                }));
            }
        };
        // When the newest scripts fail, the whole previous version keeps running, planner
        // included, so a hook added by the broken edit is not half enabled.
        let stale = match previous {
            Some(previous) if prepared.stale => Some(previous),
            _ => None,
        };
        let built = match stale {
            Some(previous) => Ok((previous.planner.clone(), previous.generation)),
            None => K::build(&parsed, &*context.discovery)
                .map(|planner| (Arc::new(planner), spec.generation))
                .map_err(|error| Problem::new(reasons::RESOLVE_FAILED, error)),
        };
        // What the newest spec and scripts are, apart from how they roll out.
        let newest = crate::plan::rollout::revision(
            &serde_json::to_value(&parsed)
                .ok()
                .and_then(|value| value.get("spec").cloned())
                .unwrap_or_default(),
            &load::digests(&prepared.hooks),
        );
        // One gate for every change of code: a new revision serves only once its own
        // `spec.tests` pass, whether the controller, a ConfigMap or a library changed (only the
        // first passes admission). What served before keeps serving, as after a compile error.
        let (prepared, stale, built) = match (stale, built) {
            (None, Ok(built))
                if !spec.tests.is_empty() && previous.is_none_or(|p| p.revision != newest) =>
            {
                let known = self
                    .failed_tests
                    .lock()
                    .get(&id.name)
                    .filter(|(failed, _)| *failed == newest)
                    .map(|(_, problem)| problem.clone());
                let tested = match known {
                    Some(problem) => Err(problem),
                    None => {
                        let tested = load::run_spec_tests(
                            context,
                            <K::Object as ControllerObject>::KIND,
                            &id.name,
                            &spec,
                            prepared.hooks.clone(),
                            built.0.clone(),
                        )
                        .await;
                        let mut failed = self.failed_tests.lock();
                        match &tested {
                            Ok(()) => failed.remove(&id.name),
                            Err(problem) => {
                                failed.insert(id.name.clone(), (newest.clone(), problem.clone()))
                            }
                        };
                        tested
                    }
                };
                match (tested, previous) {
                    (Ok(()), _) => (prepared, None, Ok(built)),
                    (Err(problem), Some(previous)) => {
                        tracing::warn!(controller = %id, error = %problem.message, "spec.tests failed; the previous version keeps running");
                        (
                            load::Prepared::kept(spec.generation, previous.hooks.clone(), problem),
                            Some(previous),
                            Ok((previous.planner.clone(), previous.generation)),
                        )
                    }
                    (Err(problem), None) => {
                        return Err(Box::new(Unloaded {
                            health: Health::failed(spec.generation, problem),
                            sources,
                            credentials: watch,
                        }));
                    }
                }
            }
            (stale, built) => (prepared, stale, built),
        };
        // Hooks are handed only what the controller's account may read; the types it acts on
        // that are cluster-scoped are checked now, the rest per namespace when used.
        let checked = match (built, &writer.identity) {
            (Ok(built), Some(account)) => {
                check_static_reads(context, account, &K::interest(&built.0))
                    .await
                    .map(|()| built)
            }
            (built, _) => built,
        };
        let (planner, generation) = match checked {
            Ok(built) => built,
            Err(problem) => {
                return Err(Box::new(Unloaded {
                    health: Health {
                        ready: Err(problem),
                        ..prepared.health
                    },
                    sources,
                    credentials: watch,
                }));
            }
        };
        let digests = load::digests(&prepared.hooks);
        // A version whose newest scripts failed runs what ran before: the same revision.
        let revision = match stale {
            Some(previous) => previous.revision.clone(),
            None => newest,
        };
        let reads = writer
            .identity
            .as_ref()
            .map(|account| context.access.policy(account));
        Ok(Controller {
            id: id.clone(),
            object: object.clone(),
            revision,
            rollout: spec.rollout.clone(),
            share: None,
            reference: crate::runtime::report::events::reference(object),
            writer,
            reads,
            generation,
            version: fingerprint::controller_version(generation, &digests),
            planner,
            hooks: prepared.hooks,
            health: prepared.health,
            resync_period: spec.resync_period,
            event_reasons: spec.compatibility.event_reasons,
            sources,
            credentials: watch,
            outcomes: previous.map(|p| p.outcomes.clone()).unwrap_or_default(),
            state: previous.map(|p| p.state.clone()).unwrap_or_default(),
            queued_all_at: previous.map_or_else(Instant::now, |p| p.queued_all_at),
            sync_requested: object::annotation(object, SYNC_REQUESTED_ANNOTATION)
                .map(str::to_string),
        })
    }

    /// A staged `spec.rollout`: the newest revision serves, becomes the candidate beside the
    /// serving one, or is held back ([`crate::plan::rollout::place`]). After a restart the
    /// serving revision is restored from its snapshot, as the controller's status names it.
    async fn place(
        &self,
        context: &Arc<Context>,
        key: &WorkKey,
        object: &Arc<Value>,
        mut newest: Controller<K>,
        previous: Option<Arc<Controller<K>>>,
    ) {
        let id = &key.controller;
        let name = id.name.as_str();
        let restored = match (&previous, rollout::rollout_status(object)) {
            (None, Some(status)) if status.serving != newest.revision => {
                match self.restore(context, id, object, &status.serving).await {
                    Ok(restored) => restored,
                    // Nothing runs until the serving revision is known: serving the newest
                    // everywhere because an API call failed would undo the rollout.
                    Err(error) => {
                        tracing::warn!(controller = %id, revision = %status.serving, %error, "cannot read the serving revision's snapshot; loading again later");
                        context.queue.retry_later(key.clone());
                        return;
                    }
                }
            }
            _ => None,
        };
        let serving = previous.as_deref().or(restored.as_ref());
        if let Some(serving) = serving {
            // The candidate and the serving revision count the same work items.
            newest.outcomes = serving.outcomes.clone();
            newest.state = serving.state.clone();
        }
        let (halted, promoting) = self.rollouts.revisions_of(name, object, &newest.revision);
        let placement = crate::plan::rollout::place(
            newest.rollout.strategy,
            Revisions {
                newest: &newest.revision,
                serving: serving.map(|s| s.revision.as_str()),
                halted: halted.as_ref(),
                promote: object::annotation(object, PROMOTE_ANNOTATION),
                abort: object::annotation(object, ABORT_ANNOTATION),
                undo: object::annotation(object, UNDO_ANNOTATION),
                promoting: promoting.as_deref(),
            },
        );
        // Held back with nothing else serving (an undo of the serving revision): the revision
        // before it serves again, from its snapshot. Without one the newest serves on, and the
        // `Rollout` condition says why.
        let mut placement = placement;
        let mut undone_to = None;
        if matches!(placement, Placement::Hold(_))
            && serving.is_none_or(|serving| serving.revision == newest.revision)
        {
            match self.before(context, id, object, &newest.revision).await {
                Ok(before) => {
                    self.rollouts.clear_trouble(name, reasons::UNDO_FAILED);
                    undone_to = Some(before);
                }
                Err(why) => {
                    let message = format!("revision {} cannot be undone: {why}", newest.revision);
                    tracing::warn!(controller = %id, revision = %newest.revision, %why, "cannot undo");
                    if self
                        .rollouts
                        .trouble(name, Some(Problem::new(reasons::UNDO_FAILED, &message)))
                    {
                        context
                            .warn(object, None, reasons::UNDO_FAILED, "Rollout", &message)
                            .await;
                    }
                    placement = Placement::Serve;
                }
            }
        } else {
            self.rollouts.clear_trouble(name, reasons::UNDO_FAILED);
        }
        // Unless the newest revision serves anyway, the serving one runs on beside it: again
        // from its snapshot after a restart, or loaded again when its webhook credentials
        // rotated. Installed with the version it replaces, if any.
        let serving_again = match (&placement, restored, &previous) {
            _ if undone_to.is_some() => undone_to.map(|before| (before, previous.clone())),
            (Placement::Serve, ..) | (_, None, None) => None,
            (_, Some(restored), _) => {
                tracing::info!(controller = %id, revision = %restored.revision, "serving revision restored from its snapshot");
                Some((restored, None))
            }
            (_, None, Some(serving)) => self
                .with_rotated_credentials(context, id, object, serving, &newest)
                .await
                .map(|reloaded| (reloaded, Some(serving.clone()))),
        };
        match placement {
            Placement::Serve => {
                let dropped = self.rollouts.serve(name, &newest.revision);
                let promoted = dropped
                    .as_ref()
                    .is_some_and(|candidate| candidate.revision() == newest.revision);
                let revision = newest.revision.clone();
                self.install(context, key, object, newest, previous).await;
                if dropped.is_some() {
                    self.resync_serving(context, name).await;
                }
                if promoted {
                    let note = format!("revision {revision} serves every object");
                    context
                        .note(object, reasons::PROMOTED, "Rollout", &note)
                        .await;
                }
                if let Some(serving) = self.get(name) {
                    self.rollouts.save(context, &serving).await;
                }
            }
            Placement::Stage => {
                // Staged first, so that the serving revision's work items of the candidate's
                // share go to the candidate.
                let (candidate, started) = self.rollouts.stage(name, newest, object);
                if let Some((serving, replaced)) = serving_again {
                    self.install(context, key, object, serving, replaced).await;
                }
                let serving = self.get(name).expect("a serving revision to stage beside");
                self.rollouts.save(context, &serving).await;
                self.unloaded.lock().remove(name);
                self.rebuild_routes();
                context.queue.forget(key);
                if started {
                    let note = format!(
                        "revision {} is rolled out ({:?}) beside revision {}, which serves the \
                         rest",
                        candidate.revision(),
                        candidate.controller.rollout.strategy,
                        serving.revision
                    );
                    tracing::info!(controller = %id, candidate = %candidate.revision(), serving = %serving.revision, "rollout started");
                    context
                        .note(object, reasons::ROLLOUT_STARTED, "Rollout", &note)
                        .await;
                    // Whatever an earlier candidate served goes back to the serving revision.
                    self.resync_serving(context, name).await;
                }
                if candidate.serves_any() {
                    enqueue_all(context, &candidate.controller, Sweep::Changed).await;
                }
            }
            Placement::Hold(halted) => {
                let dropped = self.rollouts.hold(name, halted.clone());
                if let Some((serving, replaced)) = serving_again {
                    let undone = replaced
                        .as_ref()
                        .is_some_and(|replaced| replaced.revision == halted.revision);
                    let revision = serving.revision.clone();
                    self.install(context, key, object, serving, replaced).await;
                    if undone {
                        self.rollouts.saved(name, &revision);
                        tracing::info!(controller = %id, undone = %halted.revision, serving = %revision, "rollout undone");
                        context
                            .warn(object, None, &halted.reason, "Rollout", &halted.message)
                            .await;
                        self.resync_serving(context, name).await;
                    }
                }
                self.unloaded.lock().remove(name);
                self.rebuild_routes();
                context.queue.forget(key);
                if let Some(dropped) = dropped {
                    tracing::warn!(controller = %id, candidate = %dropped.revision(), reason = %halted.reason, message = %halted.message, "rollout halted");
                    context
                        .warn(object, None, &halted.reason, "Rollout", &halted.message)
                        .await;
                    self.resync_serving(context, name).await;
                }
            }
        }
    }

    /// The revision that served before `revision`, loaded from its snapshot (an undo), or why
    /// it cannot be.
    async fn before(
        &self,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        revision: &str,
    ) -> Result<Controller<K>, String> {
        let kept = |name: &str| {
            format!(
                "ControllerRevision {}/{}",
                context.config.snapshot_namespace,
                rollout::snapshot_name(id, name)
            )
        };
        let replaced = rollout::replaced(context, id, object, revision)
            .await
            .map_err(|error| format!("cannot read {}: {error}", kept(revision)))?
            .ok_or_else(|| {
                format!(
                    "no snapshot names the revision that served before it ({} is missing or \
                     names none: it was the first to serve, or rolled out Immediate)",
                    kept(revision)
                )
            })?;
        let snapshot = rollout::load_snapshot(context, id, object, &replaced)
            .await
            .map_err(|error| format!("cannot read {}: {error}", kept(&replaced)))?
            .ok_or_else(|| {
                format!(
                    "the snapshot of revision {replaced} is gone ({})",
                    kept(&replaced)
                )
            })?;
        if let Some(why) = crate::tenancy::undo_refusal(&snapshot.controller, object) {
            return Err(format!(
                "revision {replaced}, which served before it, {why}"
            ));
        }
        self.snapshot_version(context, id, object, &snapshot, &replaced, None)
            .await
            .map_err(|unloaded| format!("revision {replaced} does not load: {}", unloaded.why()))
    }

    /// The serving revision of a staged rollout, from the snapshot the status names (after a
    /// restart): `None` when it is gone or does not load, and then the newest revision serves;
    /// an error when the snapshot could not be read.
    async fn restore(
        &self,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        revision: &str,
    ) -> Result<Option<Controller<K>>, kube::Error> {
        let snapshot = match rollout::load_snapshot(context, id, object, revision).await? {
            Some(snapshot) => snapshot,
            None => {
                let note = format!(
                    "the snapshot of serving revision {revision} is gone \
                     (ControllerRevision {}/{}): the newest revision serves every object",
                    context.config.snapshot_namespace,
                    rollout::snapshot_name(id, revision)
                );
                tracing::warn!(controller = %id, revision, "{note}");
                context
                    .warn(object, None, reasons::LOAD_FAILED, "Rollout", &note)
                    .await;
                return Ok(None);
            }
        };
        match self
            .snapshot_version(context, id, object, &snapshot, revision, None)
            .await
        {
            Ok(serving) => {
                self.rollouts.saved(&id.name, revision);
                Ok(Some(serving))
            }
            Err(unloaded) => {
                let message = unloaded.why();
                tracing::warn!(controller = %id, revision, %message, "the serving revision's snapshot does not load; the newest revision serves");
                Ok(None)
            }
        }
    }

    /// A revision loaded from a snapshot of it (`previous`: the version of it running now,
    /// whose outcomes it keeps).
    async fn snapshot_version(
        &self,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        snapshot: &rollout::Snapshot,
        revision: &str,
        previous: Option<&Arc<Controller<K>>>,
    ) -> Result<Controller<K>, Box<Unloaded>> {
        let kept = Arc::new(snapshot.controller.clone());
        let mut version = self
            .version(context, id, &kept, previous, Some(snapshot))
            .await?;
        // It is the same controller object: Events name it as it is now.
        version.reference = crate::runtime::report::events::reference(object);
        version.sync_requested =
            object::annotation(object, SYNC_REQUESTED_ANNOTATION).map(str::to_string);
        // Its snapshot is kept under this name, whatever its spec hashes to now.
        version.revision = revision.to_string();
        Ok(version)
    }

    /// The serving revision loaded again with rotated webhook credentials, while it runs
    /// beside a candidate or a held-back revision (the newest version read is not it, so it
    /// would go on with the old ones). It is loaded from a snapshot of itself as it runs, so
    /// nothing else about it changes. `newest` was read just now: when it reads the same
    /// credential objects, its digest tells without reading them again.
    async fn with_rotated_credentials(
        &self,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        serving: &Arc<Controller<K>>,
        newest: &Controller<K>,
    ) -> Option<Controller<K>> {
        let watch = serving.credentials.as_ref()?;
        let rotated = match &newest.credentials {
            Some(read) if read.reads_the_same(watch) => read.digest() != watch.digest(),
            _ => match watch.changed().await {
                Ok(changed) => changed,
                Err(error) => {
                    tracing::warn!(controller = %id, revision = %serving.revision, %error, "cannot read the serving revision's webhook credentials again");
                    return None;
                }
            },
        };
        if !rotated {
            return None;
        }
        let snapshot = rollout::snapshot_of(serving);
        match self
            .snapshot_version(
                context,
                id,
                object,
                &snapshot,
                &serving.revision,
                Some(serving),
            )
            .await
        {
            Ok(reloaded) => Some(reloaded),
            Err(unloaded) => {
                let message = unloaded.why();
                tracing::warn!(controller = %id, revision = %serving.revision, %message, "the serving revision's webhook credentials changed, but it does not load with them; it goes on with the old ones");
                None
            }
        }
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
        context.dependencies.remove_controller(id);
        context.metrics.forget(id);
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

    /// Runs one item of a controller's work and records how it ended.
    async fn sync(&self, context: &Arc<Context>, key: &WorkKey) {
        let Some(controller) = self.get(&key.controller.name) else {
            // Removed meanwhile: nothing will retry this.
            context.queue.forget(key);
            return;
        };
        // A canary candidate syncs the work items of its share; the serving revision the rest.
        let by_candidate = self
            .rollouts
            .candidate(&key.controller.name)
            .and_then(|candidate| {
                let unit = K::rollout_unit(&key.work)?.to_string();
                candidate.serves(&unit).then_some((candidate, unit))
            });
        let controller = by_candidate
            .as_ref()
            .map_or(controller, |(candidate, _)| candidate.controller.clone());
        let outcome = K::sync(context, &controller, &key.work).await;
        if let Some((candidate, unit)) = by_candidate {
            candidate.record(unit, matches!(outcome, Outcome::Failed { .. }));
        }
        let refused = match &outcome {
            Outcome::Failed { failure, .. } if failure.is_refused_read() => Some(RefusedItem {
                key: key.clone(),
                read: controller
                    .writer
                    .identity
                    .clone()
                    .zip(failure.refused_read().cloned()),
                problem: failure.clone(),
            }),
            _ => None,
        };
        let problem = refused.as_ref().map(|item| item.problem.clone());
        self.note_refused(&controller.id.name, key, refused);
        if let Some(problem) = problem {
            // About the controller, not the object: its author may not read that object's
            // namespace (the object is named in neither).
            context
                .metrics
                .count_failure(&controller.id, problem.reason.clone());
            let delay = context.queue.retry_later(key.clone());
            tracing::warn!(controller = %controller.id, work = %key.work, retry_in_seconds = delay.as_secs_f64(), reason = %problem.reason, error = %problem.message, "read refused");
            if let Outcome::Failed { key: failed, .. } = outcome {
                controller.outcomes.failed(failed);
            }
            if let Some(object) = context
                .informers
                .get(&self.resource, None, &controller.id.name)
            {
                context
                    .warn(
                        &object,
                        None,
                        &problem.reason,
                        kind::name::<K>().action(),
                        &problem.message,
                    )
                    .await;
            }
            return;
        }
        match outcome {
            Outcome::Done => context.queue.forget(key),
            Outcome::Synced {
                key: synced,
                resync_after,
                fingerprint,
            } => {
                context.queue.forget(key);
                context.queue.unthrottle(&controller.id);
                // A sync that asked to run again later expects to: a resync must not skip it.
                let fingerprint = fingerprint.filter(|_| resync_after.is_none());
                if controller.outcomes.succeeded(synced.clone(), fingerprint) {
                    K::recovered(&controller, &synced);
                }
                if let Some(delay) = resync_after {
                    context.queue.add_after(key.clone(), delay);
                }
            }
            Outcome::Forgotten(gone) => {
                context.queue.forget(key);
                context.forget_reads(key);
                if controller.outcomes.forget(&gone) {
                    K::recovered(&controller, &gone);
                }
            }
            Outcome::Failed {
                key: failed,
                about,
                failure,
            } => {
                let (reason, message) = (&*failure.reason, &failure.message);
                context
                    .metrics
                    .count_failure(&controller.id, failure.reason.clone());
                let delay = context.queue.retry_later(key.clone());
                if failure.timed_out() {
                    // Its calls keep running out of time: hold it to one worker for a while,
                    // so the others' work is not stuck behind it.
                    let throttled = context.queue.throttle(&controller.id);
                    tracing::warn!(controller = %controller.id, throttled_seconds = throttled.as_secs(), "a hook ran out of time; the controller gets one worker while others wait");
                }
                tracing::warn!(controller = %controller.id, work = %key.work, retry_in_seconds = delay.as_secs_f64(), reason, error = %message, "sync failed");
                controller.outcomes.failed(failed);
                let related = Some(&controller.reference);
                synced::failed(context, &controller, &about, reason, message).await;
                let (reason, message) = controller.event_reasons.sync_failure(reason, message);
                context
                    .warn(
                        &about,
                        related,
                        reason,
                        kind::name::<K>().action(),
                        &message,
                    )
                    .await;
            }
        }
    }

    /// Remembers whether a work item's last sync was refused a read.
    fn note_refused(&self, controller: &str, key: &WorkKey, item: Option<RefusedItem>) {
        let mut refused = self.refused.lock();
        match item {
            Some(item) => {
                refused
                    .entry(controller.to_string())
                    .or_default()
                    .insert(key.work.to_string(), item);
            }
            None => {
                if let Some(items) = refused.get_mut(controller) {
                    items.remove(&key.work.to_string());
                    if items.is_empty() {
                        refused.remove(controller);
                    }
                }
            }
        }
    }

    /// A controller's `ReadsAllowed` condition.
    fn reads_allowed(&self, controller: &str) -> Result<(), Problem> {
        let refused = self.refused.lock();
        match refused.get(controller) {
            Some(items) => status::reads_allowed(items.values().map(|item| &item.problem)),
            None => Ok(()),
        }
    }

    /// Brings every controller's status up to date (and what its kind reports besides),
    /// writing only what changed.
    async fn write_statuses(&self, context: &Arc<Context>) {
        let loaded = self.all();
        let mut reports: HashMap<String, (Health, Counts, Option<RolloutReport>)> = HashMap::new();
        for controller in &loaded {
            K::report(context, controller).await;
            let name = &controller.id.name;
            let (candidate, candidate_serving, candidate_failing) =
                self.rollouts.candidate_counts(name, controller);
            let own = Counts {
                candidate,
                candidate_serving,
                candidate_failing,
                ..controller.outcomes.counts()
            };
            let counts = context.authority.total(&controller.id, own);
            // The replica writing the controller's status drives its rollout.
            if context
                .authority
                .may_write_for(&Item::controller(&controller.id))
            {
                self.advance_rollout(context, controller, counts.candidate_failing)
                    .await;
            }
            let rollout = self.rollouts.report(name, controller, counts);
            reports.insert(name.clone(), (controller.health.clone(), counts, rollout));
        }
        // The newest spec's problem wins over the health of a version still running.
        for (name, unloaded) in self.unloaded.lock().iter() {
            let (counts, rollout) = reports
                .remove(name)
                .map(|(_, counts, rollout)| (counts, rollout))
                .unwrap_or_default();
            reports.insert(name.clone(), (unloaded.health.clone(), counts, rollout));
        }
        for (name, (health, counts, rollout)) in reports {
            context
                .metrics
                .set_ready(&Self::id(&name), health.ready.is_ok());
            let reads = self.reads_allowed(&name);
            self.write_status(context, &name, &health, counts, &reads, rollout.as_ref())
                .await;
        }
    }

    /// A turn of a controller's staged rollout: a canary's next step starts, or its candidate
    /// is promoted or rolled back (by loading the controller again); a shadow is evaluated
    /// again when due. A snapshot that could not be saved is tried again.
    async fn advance_rollout(
        &self,
        context: &Arc<Context>,
        serving: &Arc<Controller<K>>,
        failing: u64,
    ) {
        let name = &serving.id.name;
        let Some(candidate) = self.rollouts.candidate(name) else {
            return;
        };
        self.rollouts.save(context, serving).await;
        let owner = Item::controller(&serving.id);
        match self.rollouts.advance(context, name, failing) {
            Advance::Nothing => {}
            Advance::Stepped => {
                enqueue_all(context, &candidate.controller, Sweep::Changed).await;
                if let Some(object) = context.informers.get(&self.resource, None, name) {
                    let note = format!(
                        "revision {} serves a larger share of the work items (step {} of {})",
                        candidate.revision(),
                        candidate.step() + 1,
                        candidate.controller.rollout.steps.len()
                    );
                    let published = context.note(&object, reasons::CANARY_STEP, "Rollout", &note);
                    shard::acting_for(owner, published).await;
                }
            }
            Advance::Reload => context.queue.add(WorkKey::load(&serving.id)),
        }
    }

    /// Writes a controller's status when it differs from what was last written.
    async fn write_status(
        &self,
        context: &Context,
        name: &str,
        health: &Health,
        counts: Counts,
        reads: &Result<(), Problem>,
        rollout: Option<&RolloutReport>,
    ) {
        if !context
            .authority
            .may_write_for(&Item::controller(&Self::id(name)))
        {
            return;
        }
        let previous = self
            .written_status
            .lock()
            .get(name)
            .cloned()
            .or_else(|| self.current_status(context, name));
        let Some(status) = status::changed(previous.as_ref(), health, counts, reads, rollout)
        else {
            return;
        };
        let api: Api<DynamicObject> =
            Api::all_with(context.client.clone(), &self.resource.api_resource());
        // Replaces the whole status, so hooks removed from the spec leave no stale entries.
        let patch: Patch<Value> = Patch::Json(
            serde_json::from_value(json!([{"op": "add", "path": "/status", "value": status}]))
                .expect("a valid JSON patch"),
        );
        context.metrics.count_write(&Self::id(name));
        match api
            .patch_status(name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {
                self.written_status.lock().insert(name.to_string(), status);
            }
            Err(error) => {
                tracing::warn!(controller = name, %error, "cannot write controller status")
            }
        }
    }

    /// The status the controller object carries now, as seen by the cache.
    fn current_status(&self, context: &Context, name: &str) -> Option<ControllerStatus> {
        let object = context.informers.get(&self.resource, None, name)?;
        serde_json::from_value(object.get("status")?.clone()).ok()
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
        let Some(object) = event.new.as_ref().or(event.old.as_ref()) else {
            return;
        };
        if event.resource == self.resource {
            // A controller object's own status (which the operator writes) never reloads it,
            // but may say where its rollout went on another replica.
            let status_only = matches!((&event.old, &event.new), (Some(old), Some(new)) if only_status_changed(old, new));
            let name = object::name(object);
            if !status_only {
                context.queue.add(WorkKey::load(&Self::id(name)));
                return;
            }
            match self.rollouts.follow(name, object) {
                Advance::Nothing => {}
                Advance::Stepped => {
                    if let Some(candidate) = self.rollouts.candidate(name) {
                        // The router goes on with the next event; the sweep ends on its own.
                        let (context, controller) = (context.clone(), candidate.controller.clone());
                        let _sweep = start_sweep(move || {
                            K::enqueue_all(&context, &controller, Sweep::Changed);
                        });
                    }
                }
                Advance::Reload => context.queue.add(WorkKey::load(&Self::id(name))),
            }
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
            .iter()
            .filter(|object| !object::is_deleting(object))
            .map(|object| object::name(object).to_string())
            .collect()
    }

    fn settled(&self, context: &Context, name: &str) -> bool {
        self.loaded.read().contains_key(name)
            || self.unloaded.lock().contains_key(name)
            || context
                .informers
                .get(&self.resource, None, name)
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

/// Checks at load what can be checked before any object is seen: that the account may list
/// every cluster-scoped type the controller acts on (namespaced types are checked per
/// namespace, when a work item hands their objects to a hook).
async fn check_static_reads(
    context: &Context,
    account: &crate::api::ServiceAccountRef,
    interest: &kind::Interest,
) -> Result<(), Problem> {
    for resource in interest.types.iter().filter(|t| !t.namespaced) {
        let scope = ReadScope::new(ReadVerb::List, resource, None);
        if let Err(refusal) = context.access.check(account, &scope).await {
            return Err(Problem::new(refusal.reason(), refusal).refusing(None));
        }
    }
    Ok(())
}
