//! The operator: shared watches feeding one dispatcher, a bounded pool of workers draining one
//! queue, and the loops that resync targets and report controller status.

use super::apply::Applier;
use super::cache::{Informers, ObjectEvent};
use super::decorator::{self, DecoratorRuntime};
use super::discovery::Discovery;
use super::map::{self, MapRuntime};
use super::metrics::{FailureLabels, Metrics};
use super::queue::WorkQueue;
use super::routes::{ObjRef, RelatedIndex, Routes};
use super::scripts;
use crate::api::{ControllerStatus, ResourceRef};
use crate::resources::ResourceType;
use crate::script::ScriptEngine;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use prometheus_client::metrics::counter::Counter;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Targets synced at once.
    pub workers: usize,
    /// The dev loop: files here replace ConfigMap keys of the same name, and are watched.
    pub scripts_dir: Option<PathBuf>,
    /// How often controller status is brought up to date (written only when it changed).
    pub status_interval: Duration,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        OperatorConfig {
            workers: 8,
            scripts_dir: None,
            status_interval: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "the metascript.dev CRDs are not installed ({0}); apply crds/metascript.dev.yaml first"
    )]
    MissingCrds(crate::resources::ResolveError),
    #[error("cannot watch {what}: {message}")]
    Watch { what: String, message: String },
    #[error("cannot watch the scripts directory {path}: {source}")]
    ScriptsDir {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },
}

/// A unit of work. Keys coalesce in the queue, and one key is never worked on twice at once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WorkKey {
    /// Load, reload or clean up a DecoratorController.
    Decorator(String),
    /// Sync one target of a DecoratorController.
    Target { controller: String, target: ObjRef },
    /// Load, reload or remove a MapController.
    Map(String),
    /// Fan a MapController parent out into its pairs and detached groups.
    Parent { controller: String, parent: ObjRef },
    /// Map one input for one parent (or settle its outputs when it is no longer selected).
    Pair {
        controller: String,
        parent: ObjRef,
        input: ObjRef,
    },
    /// Settle an output group whose input is not known to be selected.
    Detached {
        controller: String,
        parent: ObjRef,
        map_key: String,
    },
}

/// Everything the dispatcher, workers and loops share.
pub struct Shared {
    pub client: kube::Client,
    pub discovery: Arc<Discovery>,
    pub informers: Arc<Informers>,
    pub engine: ScriptEngine,
    pub applier: Applier,
    pub metrics: Metrics,
    pub recorder: Recorder,
    pub queue: WorkQueue<WorkKey>,
    pub config: OperatorConfig,
    pub decorator_type: ResourceType,
    pub map_type: ResourceType,
    /// ConfigMaps, as discovery resolved them: where `configMapRef` scripts live.
    pub config_map_type: ResourceType,
    pub decorators: RwLock<HashMap<String, Arc<DecoratorRuntime>>>,
    pub maps: RwLock<HashMap<String, Arc<MapRuntime>>>,
    /// Health of controllers that have no runtime (their types or scripts never loaded), by
    /// their load work key.
    pub unloaded: Mutex<HashMap<WorkKey, super::controller::Unloaded>>,
    pub routes: RwLock<Routes>,
    pub related: RelatedIndex,
    /// The status last written per controller (by load work key), so unchanged status is
    /// never rewritten.
    pub written_status: Mutex<HashMap<WorkKey, ControllerStatus>>,
}

/// A running operator; dropping it stops every task.
pub struct Operator {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    _scripts_watcher: Option<notify::RecommendedWatcher>,
}

impl Operator {
    pub async fn start(
        client: kube::Client,
        config: OperatorConfig,
    ) -> Result<Operator, StartError> {
        let discovery = Discovery::new(client.clone());
        let decorator_type = resolve_own_type(&discovery, "decoratorcontrollers").await?;
        let map_type = resolve_own_type(&discovery, "mapcontrollers").await?;
        let config_map_type = discovery
            .resolve(&ResourceRef {
                api_version: "v1".into(),
                resource: "configmaps".into(),
            })
            .await
            .map_err(|error| StartError::Watch {
                what: "ConfigMaps".into(),
                message: error.to_string(),
            })?
            .resource;
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let informers = Informers::new(client.clone(), events_tx);
        let reporter = Reporter {
            controller: "metascript".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let metrics = Metrics::default();
        let shared = Arc::new(Shared {
            recorder: Recorder::new(client.clone(), reporter),
            applier: Applier::new(client.clone(), metrics.writes.clone()),
            metrics,
            client,
            discovery,
            informers,
            engine: ScriptEngine::new(),
            queue: WorkQueue::new(),
            config: config.clone(),
            decorator_type: decorator_type.resource.clone(),
            map_type: map_type.resource.clone(),
            config_map_type,
            decorators: RwLock::default(),
            maps: RwLock::default(),
            unloaded: Mutex::default(),
            routes: RwLock::default(),
            related: RelatedIndex::default(),
            written_status: Mutex::default(),
        });
        let mut tasks = vec![tokio::spawn(dispatch(shared.clone(), events_rx))];
        for (what, resolved) in [
            ("DecoratorControllers", &decorator_type),
            ("MapControllers", &map_type),
        ] {
            shared
                .informers
                .ensure(resolved)
                .await
                .map_err(|error| StartError::Watch {
                    what: what.into(),
                    message: error.to_string(),
                })?;
        }
        for _ in 0..config.workers.max(1) {
            tasks.push(tokio::spawn(work(shared.clone())));
        }
        tasks.push(tokio::spawn(resync_loop(shared.clone())));
        tasks.push(tokio::spawn(status_loop(shared.clone())));
        let scripts_watcher = match &config.scripts_dir {
            Some(dir) => {
                let (changed_tx, changed_rx) = mpsc::unbounded_channel();
                let watcher = scripts::watch_dir(dir, changed_tx).map_err(|source| {
                    StartError::ScriptsDir {
                        path: dir.clone(),
                        source,
                    }
                })?;
                tasks.push(tokio::spawn(reload_changed_scripts(
                    shared.clone(),
                    changed_rx,
                )));
                Some(watcher)
            }
            None => None,
        };
        tracing::info!(workers = config.workers, scripts_dir = ?config.scripts_dir, "operator started");
        Ok(Operator {
            shared,
            tasks,
            _scripts_watcher: scripts_watcher,
        })
    }

    /// Write requests made so far (apply, patch, delete).
    pub fn writes(&self) -> Counter {
        self.shared.metrics.writes.clone()
    }

    /// Script work items run so far (hook calls for decorator targets and map pairs).
    pub fn syncs(&self) -> Counter {
        self.shared.metrics.syncs.clone()
    }

    /// The operator's metrics, for the `/metrics` endpoint.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Queues every target and parent of every controller, as a periodic resync would.
    pub fn resync_all(&self) {
        for runtime in self.shared.decorators().values() {
            decorator::enqueue_targets(&self.shared, runtime);
        }
        for (name, runtime) in self.shared.maps().iter() {
            map::enqueue_parents(&self.shared, name, runtime);
        }
    }

    /// Work waiting in the queue (not counting work in progress).
    pub fn queued(&self) -> usize {
        self.shared.queue.len()
    }

    pub async fn shutdown(mut self) {
        self.shared.queue.shut_down();
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.shared.queue.shut_down();
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Shared {
    pub fn decorators(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<DecoratorRuntime>>> {
        self.decorators.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn decorator(&self, name: &str) -> Option<Arc<DecoratorRuntime>> {
        self.decorators().get(name).cloned()
    }

    pub fn maps(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<MapRuntime>>> {
        self.maps.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn map(&self, name: &str) -> Option<Arc<MapRuntime>> {
        self.maps().get(name).cloned()
    }

    /// Drops what is remembered about a removed controller (by its load work key).
    pub fn forget_controller(&self, key: &WorkKey) {
        self.unloaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.written_status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    pub fn routes(&self) -> std::sync::RwLockReadGuard<'_, Routes> {
        self.routes.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Recomputes the routes after the set of loaded controllers changed.
    pub fn rebuild_routes(&self) {
        let mut routes = Routes::default();
        for (name, runtime) in self.decorators().iter() {
            runtime.add_routes(name, &mut routes);
        }
        for (name, runtime) in self.maps().iter() {
            runtime.add_routes(name, &mut routes);
        }
        // Controllers that did not load still reload when a script source of theirs changes.
        for (key, unloaded) in self
            .unloaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            unloaded.sources.add_routes(key, &mut routes);
        }
        *self.routes.write().unwrap_or_else(|e| e.into_inner()) = routes;
    }

    /// Counts a failed sync.
    pub fn count_failure(&self, kind: &'static str, reason: &'static str) {
        self.metrics
            .failures
            .get_or_create(&FailureLabels { kind, reason })
            .inc();
    }

    /// Publishes a Kubernetes Event about an object; failures are only logged.
    pub async fn event(
        &self,
        object: &Value,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(crate::object::api_version(object).to_string()),
            kind: Some(crate::object::kind(object).to_string()),
            name: Some(crate::object::name(object).to_string()),
            namespace: crate::object::namespace(object).map(str::to_string),
            uid: crate::object::uid(object).map(str::to_string),
            ..Default::default()
        };
        // Event notes are limited to 1 kB.
        let mut note = note;
        if note.len() > 1000 {
            let mut cut = 1000;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push('…');
        }
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, object = %crate::object::ObjectKey::of(object), "cannot publish event");
        }
    }
}

/// Resolves one of the operator's own types. CRDs just created take a moment to appear in
/// discovery, so a miss is retried for a while before it counts as "not installed".
async fn resolve_own_type(
    discovery: &Discovery,
    resource: &str,
) -> Result<super::discovery::ResolvedType, StartError> {
    let reference = ResourceRef {
        api_version: "metascript.dev/v1alpha1".into(),
        resource: resource.into(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match discovery.resolve(&reference).await {
            Ok(resolved) => return Ok(resolved),
            Err(error) if tokio::time::Instant::now() >= deadline => {
                return Err(StartError::MissingCrds(error));
            }
            Err(error) => {
                tracing::info!(resource, %error, "waiting for the metascript.dev CRDs to be served");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Routes every watch event to the work it causes.
async fn dispatch(shared: Arc<Shared>, mut events: mpsc::UnboundedReceiver<ObjectEvent>) {
    while let Some(event) = events.recv().await {
        let Some(object) = event.new.as_ref().or(event.old.as_ref()) else {
            continue;
        };
        let name = crate::object::name(object).to_string();
        // A controller object's own status (which the operator writes) never reloads it.
        let reload = match &event.resource {
            resource if *resource == shared.decorator_type => {
                Some(WorkKey::Decorator(name.clone()))
            }
            resource if *resource == shared.map_type => Some(WorkKey::Map(name.clone())),
            _ => None,
        };
        if let Some(reload) = reload {
            let status_only = matches!((&event.old, &event.new), (Some(old), Some(new)) if super::routes::only_status_changed(old, new));
            if !status_only {
                shared.queue.add(reload);
            }
            continue;
        }
        if event.resource == shared.config_map_type {
            let key = (
                crate::object::namespace(object)
                    .unwrap_or_default()
                    .to_string(),
                name,
            );
            for reload in shared.routes().config_maps.get(&key).into_iter().flatten() {
                shared.queue.add(reload.clone());
            }
        }
        decorator::route_event(&shared, &event);
        map::route_event(&shared, &event);
    }
}

async fn work(shared: Arc<Shared>) {
    while let Some(key) = shared.queue.next().await {
        match &key {
            WorkKey::Decorator(name) => decorator::load(&shared, name, &key).await,
            WorkKey::Target { controller, target } => {
                decorator::sync_target(&shared, controller, target, &key).await
            }
            WorkKey::Map(name) => map::load(&shared, name, &key).await,
            WorkKey::Parent { controller, parent } => {
                map::sync_parent(&shared, controller, parent).await
            }
            WorkKey::Pair {
                controller,
                parent,
                input,
            } => map::sync_pair(&shared, controller, parent, input, &key).await,
            WorkKey::Detached {
                controller,
                parent,
                map_key,
            } => map::sync_detached(&shared, controller, parent, map_key, &key).await,
        }
        shared.queue.done(&key);
    }
}

/// Queues every target or parent of a controller each `resyncPeriodSeconds`.
async fn resync_loop(shared: Arc<Shared>) {
    let mut due: HashMap<WorkKey, tokio::time::Instant> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let now = tokio::time::Instant::now();
        let mut periods: Vec<(WorkKey, Duration)> = Vec::new();
        for (name, runtime) in shared.decorators().iter() {
            if let Some(period) = runtime.resync_period {
                periods.push((WorkKey::Decorator(name.clone()), period));
            }
        }
        for (name, runtime) in shared.maps().iter() {
            if let Some(period) = runtime.resync_period {
                periods.push((WorkKey::Map(name.clone()), period));
            }
        }
        due.retain(|key, _| periods.iter().any(|(k, _)| k == key));
        for (key, period) in periods {
            let next = due.entry(key.clone()).or_insert(now + period);
            if *next > now {
                continue;
            }
            *next = now + period;
            match &key {
                WorkKey::Decorator(name) => {
                    if let Some(runtime) = shared.decorator(name) {
                        decorator::enqueue_targets(&shared, &runtime);
                    }
                }
                WorkKey::Map(name) => {
                    if let Some(runtime) = shared.map(name) {
                        map::enqueue_parents(&shared, name, &runtime);
                    }
                }
                _ => {}
            }
        }
    }
}

/// Keeps each controller's status current, writing only when it changed.
async fn status_loop(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(shared.config.status_interval);
    loop {
        tick.tick().await;
        shared.metrics.queue_depth.set(shared.queue.len() as i64);
        decorator::write_statuses(&shared).await;
        map::write_statuses(&shared).await;
        write_unloaded_statuses(&shared).await;
    }
}

/// Reports controllers that could not be loaded at all (no runtime to report them).
async fn write_unloaded_statuses(shared: &Arc<Shared>) {
    let unloaded: Vec<(WorkKey, super::status::Health)> = shared
        .unloaded
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(key, unloaded)| (key.clone(), unloaded.health.clone()))
        .collect();
    for (key, health) in unloaded {
        let (resource, name) = match &key {
            WorkKey::Decorator(name) => (&shared.decorator_type, name),
            WorkKey::Map(name) => (&shared.map_type, name),
            _ => continue,
        };
        super::controller::write_status(shared, &key, resource, name, &health, (0, 0, 0)).await;
    }
}

/// The dev loop: a saved script file reloads the controllers whose hooks name it.
async fn reload_changed_scripts(shared: Arc<Shared>, mut changed: mpsc::UnboundedReceiver<String>) {
    while let Some(file) = changed.recv().await {
        let controllers = shared
            .routes()
            .script_keys
            .get(&file)
            .cloned()
            .unwrap_or_default();
        tracing::info!(file, ?controllers, "script file changed");
        for reload in controllers {
            shared.queue.add(reload);
        }
    }
}
