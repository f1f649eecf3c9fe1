//! The operator: shared watches feeding one dispatcher, a bounded pool of workers draining one
//! queue, and the loops that resync controllers and report their status. It owns a registry per
//! kind of controller it is started with (`crate::kinds::runtime()` names them all).

use crate::api::{API_VERSION, KindName, ResourceRef};
use crate::cases::record::Recorder;
use crate::runtime::context::{Context, Identities, OperatorConfig, sweep};
use crate::runtime::keys::{ControllerId, Work, WorkKey};
use crate::runtime::load::scripts;
use crate::runtime::reads::access::AccessReviews;
use crate::runtime::reads::rbac::{self, RBAC_TYPES, RbacChanges, RbacKind, RbacSender};
use crate::runtime::registry::{KindEntry, KindRuntime};
use crate::runtime::replicas::authority::Authority;
use crate::runtime::replicas::leader::{Elector, Leadership};
use crate::runtime::replicas::membership::Membership;
use crate::runtime::replicas::shard::{self, Admit, Assignment, Item, Shards};
use crate::runtime::report::events::Events;
use crate::runtime::report::metrics::Metrics;
use crate::runtime::watch::cache::{CacheMetrics, Informers, PassedOver, WatchLease};
use crate::runtime::watch::discovery::{Discovery, ResolvedType};
use crate::runtime::watch::event::{CacheEvent, ObjectEvent};
use crate::runtime::watch::schemas::LiveSchemas;
use crate::runtime::work::queue::WorkQueue;
use crate::runtime::write::apply::Applier;
use crate::runtime::write::fingerprint::Sweep;
use crate::runtime::write::own_writes::{OwnWrites, Redelivery};
use crate::script::ScriptEngine;
use crate::telemetry::ItemTrace;
use futures::FutureExt as _;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument as _;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "the metascript.dev CRDs are not installed ({0}); apply crds/metascript.dev.yaml first"
    )]
    MissingCrds(crate::resources::ResolveError),
    #[error("cannot build a client: {0}")]
    Client(String),
    #[error("cannot watch {what}: {message}")]
    Watch { what: String, message: String },
    #[error("--controller-selector {selector:?}: {message}")]
    ControllerSelector { selector: String, message: String },
    #[error("cannot watch the scripts directory {path}: {source}")]
    ScriptsDir {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },
}

/// The registries of every kind, as the dispatcher, workers and loops drive them.
type Kinds = Arc<[Arc<dyn KindRuntime>]>;

/// A running operator; dropping it stops every task.
pub struct Operator {
    context: Arc<Context>,
    kinds: Kinds,
    /// Aborted when dropped: a start that fails half-way leaves nothing running.
    tasks: JoinSet<()>,
    elector: Option<Arc<Elector>>,
    membership: Option<Arc<Membership>>,
    _scripts_watcher: Option<scripts::ScriptsWatcher>,
    /// The watches of its own controller objects, with `--controller-selector`.
    _own_watches: Vec<WatchLease>,
}

impl Operator {
    /// Starts against the cluster `kube` describes, running the controllers of `kinds`; the
    /// operator's own requests go as its user, controllers' writes as their ServiceAccounts (see
    /// [`OperatorConfig`]).
    pub async fn start(
        kube: kube::Config,
        config: OperatorConfig,
        kinds: &[KindEntry],
    ) -> Result<Operator, StartError> {
        let kube = with_user_agent(kube, &config);
        let client = kube::Client::try_from(kube.clone())
            .map_err(|error| StartError::Client(error.to_string()))?;
        let discovery = Discovery::new(client.clone());
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
        let mut own_types = Vec::with_capacity(kinds.len());
        for kind in kinds {
            own_types.push((kind, resolve_own_type(&discovery, kind.name).await?));
        }
        crate::script::memory::set_pool_limit(config.script_memory);
        crate::script::memory::return_freed_pages_promptly();
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let metrics = config.metrics.clone();
        let informers = Informers::new(client.clone(), events_tx, CacheMetrics::of(&metrics));
        let schemas = match &config.schemas {
            Some(shared) => shared.clone(),
            None => Arc::new(LiveSchemas::for_cluster(client.clone()).await),
        };
        // Bounded: a burst of passed-over objects beyond it is in the log and the count only.
        let (passed_over_tx, passed_over) = mpsc::channel(64);
        informers.report_passed_over(passed_over_tx);
        let leadership = Arc::new(match &config.leader_election {
            Some(_) => Leadership::standby(metrics.leader.clone()),
            None => Leadership::always(metrics.leader.clone()),
        });
        let elector = config
            .leader_election
            .clone()
            .map(|lease| Arc::new(Elector::new(client.clone(), lease)));
        let shards = config
            .shards
            .clone()
            .map(|shards| Arc::new(Shards::new(shards, metrics.clone())));
        let membership = shards
            .as_ref()
            .map(|shards| Arc::new(Membership::new(client.clone(), shards.clone())));
        metrics.sharded.set(i64::from(shards.is_some()));
        if shards.is_some() {
            // Before anything is watched: views used only for shares keep nothing until this
            // replica's first view of the members says what it owns.
            informers
                .reshare(Assignment::nothing())
                .await
                .expect("nothing is watched yet");
        }
        let authority = Arc::new(Authority {
            leadership: leadership.clone(),
            shards,
        });
        let (redeliver_tx, redeliver_rx) = mpsc::unbounded_channel();
        let own_writes = OwnWrites::new(redeliver_tx);
        let access = Arc::new(AccessReviews::new(client.clone(), metrics.clone()));
        let webhooks = crate::runtime::load::egress::webhook_client(
            &client,
            &kube.cluster_url,
            &config.webhook_allow,
            config.webhook_max_response_bytes,
        )
        .await;
        let controller_selector = config
            .controller_selector
            .as_deref()
            .map(|text| {
                crate::selector::parse_label_selector(text).map_err(|error| {
                    StartError::ControllerSelector {
                        selector: text.to_string(),
                        message: error.to_string(),
                    }
                })
            })
            .transpose()?;
        let context = Arc::new(Context {
            controller_selector,
            events: Events::new(
                client.clone(),
                std::env::var("POD_NAME").ok(),
                metrics.clone(),
                kinds.iter().map(|kind| kind.name).collect(),
            ),
            applier: Applier::new(
                metrics.clone(),
                authority.clone(),
                own_writes,
                schemas.clone(),
                informers.clone(),
            ),
            identities: Identities::new(kube, crate::runtime::context::own_user(&client).await),
            leadership,
            authority,
            recorder: config.record_dir.clone().map(Recorder::new),
            metrics,
            client: client.clone(),
            discovery,
            informers,
            schemas,
            engine: ScriptEngine::new()
                .with_max_children(config.max_children)
                .with_limit_ceilings(config.limit_ceilings),
            webhooks,
            queue: WorkQueue::fair(
                |key: &WorkKey| key.controller.clone(),
                (config.workers as f64 * config.controller_share).ceil() as usize,
                // An eighth of the workers stays free for a controller whose work arrives while
                // another's fills the queue.
                config.workers - config.workers.div_ceil(8),
            )
            // What a controller runs depends on its load: a raised budget or a cheaper
            // script must not wait behind the work it changes.
            .with_urgent(|key: &WorkKey| key.work == Work::Load),
            dependencies: Default::default(),
            config: config.clone(),
            config_map_type,
            access,
        });
        watch_rbac(&context).await;
        let kinds: Kinds = own_types
            .iter()
            .map(|(kind, resolved)| (kind.registry)(resolved.resource.clone()))
            .collect();
        let mut tasks = JoinSet::new();
        let (rbac_sender, rbac_changes) = rbac::rbac_changes();
        let (read_tx, read_rx) = mpsc::unbounded_channel();
        tasks.spawn(dispatch(
            context.clone(),
            kinds.clone(),
            events_rx,
            redeliver_rx,
            rbac_sender,
            read_tx,
        ));
        tasks.spawn(requeue_readers(context.clone(), read_rx));
        tasks.spawn(forget_rbac_changes(
            context.clone(),
            kinds.clone(),
            rbac_changes,
        ));
        let mut own_watches = Vec::new();
        for (kind, resolved) in &own_types {
            let watched = match config.controller_selector.as_deref() {
                Some(selector) => context
                    .informers
                    .select(resolved, selector)
                    .await
                    .map(|lease| own_watches.push(lease)),
                None => context.informers.ensure(resolved).await,
            };
            watched.map_err(|error| StartError::Watch {
                what: format!("{}s", kind.name.object_kind()),
                message: error.to_string(),
            })?;
        }
        for _ in 0..config.workers.max(1) {
            tasks.spawn(work(context.clone(), kinds.clone()));
        }
        tasks.spawn(resync_loop(context.clone(), kinds.clone()));
        tasks.spawn(report_ready(
            context.clone(),
            kinds.clone(),
            config.ready.clone(),
        ));
        tasks.spawn(take_over_on_election(context.clone(), kinds.clone()));
        if let Some(elector) = &elector {
            let (elector, context) = (elector.clone(), context.clone());
            tasks.spawn(async move { elector.run(&context.leadership).await });
        }
        if let Some(membership) = &membership {
            let membership = membership.clone();
            tasks.spawn(async move { membership.run().await });
            tasks.spawn(take_over_on_reassignment(context.clone(), kinds.clone()));
        }
        tasks.spawn(status_loop(context.clone(), kinds.clone()));
        tasks.spawn(report_passed_over(context.clone(), passed_over));
        tasks.spawn(credentials_loop(context.clone(), kinds.clone()));
        tasks.spawn(retest_on_schema_changes(context.clone(), kinds.clone()));
        let scripts_watcher = match &config.scripts_dir {
            Some(dir) => {
                let (changed_tx, changed_rx) = mpsc::unbounded_channel();
                let watcher = scripts::watch_dir(dir, changed_tx).map_err(|source| {
                    StartError::ScriptsDir {
                        path: dir.clone(),
                        source,
                    }
                })?;
                tasks.spawn(reload_changed_scripts(
                    context.clone(),
                    kinds.clone(),
                    changed_rx,
                ));
                Some(watcher)
            }
            None => None,
        };
        tracing::info!(
            workers = config.workers,
            scripts_dir = config
                .scripts_dir
                .as_ref()
                .map(|dir| dir.display().to_string()),
            controller_selector = config.controller_selector.as_deref(),
            leader_election = config
                .leader_election
                .as_ref()
                .map(|lease| lease.name.as_str()),
            shard_group = config.shards.as_ref().map(|shards| shards.group.as_str()),
            "operator started"
        );
        Ok(Operator {
            context,
            kinds,
            tasks,
            elector,
            membership,
            _scripts_watcher: scripts_watcher,
            _own_watches: own_watches,
        })
    }

    /// The operator's metrics, for the `/metrics` endpoint and for counting writes and syncs
    /// (in total, or per controller).
    pub fn metrics(&self) -> &Metrics {
        &self.context.metrics
    }

    /// SubjectAccessReviews sent so far to check what controllers' accounts may read (the
    /// rest of the checks were answered from the cache).
    pub fn access_reviews(&self) -> u64 {
        self.context.access.reviews()
    }

    /// Whether the operator watches the type of this apiVersion and resource (plural): a
    /// type is watched only once some controller's account may list it.
    pub fn is_watching(&self, api_version: &str, resource: &str) -> bool {
        self.context.informers.watches(api_version, resource)
    }

    /// Write requests made so far by every controller (apply, patch, delete).
    pub fn writes(&self) -> u64 {
        self.context.metrics.writes.get()
    }

    /// Script work items run so far for every controller.
    pub fn syncs(&self) -> u64 {
        self.context.metrics.syncs.get()
    }

    /// Queues everything every controller acts on, as a periodic resync would.
    pub fn resync_all(&self) {
        for kind in self.kinds.iter() {
            for name in kind.names() {
                kind.resync(&self.context, &name);
            }
        }
    }

    /// Queues everything one controller acts on, as its periodic resync would.
    pub fn resync(&self, controller: &ControllerId) {
        if let Some(kind) = self.kinds.iter().find(|k| k.kind() == controller.kind) {
            kind.resync(&self.context, &controller.name);
        }
    }

    /// Work waiting in the queue (not counting work in progress).
    pub fn queued(&self) -> usize {
        self.context.queue.len()
    }

    /// One controller's work items waiting, due later or in progress.
    pub fn pending(&self, controller: &ControllerId) -> usize {
        self.context
            .queue
            .pending(|key| key.controller == *controller)
    }

    /// Whether this replica leads (always, without leader election).
    pub fn is_leader(&self) -> bool {
        self.context.leadership.is_leader()
    }

    /// Stops every task, then gives up the lease (after the last write), so a standby takes
    /// over at once, or (sharded) the other replicas take this one's items at once.
    pub async fn shutdown(mut self) {
        self.context.config.health.stopping();
        self.context.queue.shut_down();
        self.tasks.shutdown().await;
        if let Some(elector) = &self.elector
            && let Err(error) = elector.release(&self.context.leadership).await
        {
            tracing::warn!(%error, "cannot release the lease; a standby takes over when it expires");
        }
        if let Some(membership) = &self.membership
            && let Err(error) = membership.leave().await
        {
            tracing::warn!(%error, "cannot delete this replica's shard lease; the others take its items when it expires");
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        // The tasks are aborted as they are dropped.
        self.context.config.health.stopping();
        self.context.queue.shut_down();
    }
}

/// Names the operator, and the replica when there are several, in the User-Agent of every
/// request (its own and those it makes as controllers' accounts), so the API server's audit
/// log says which replica wrote what.
fn with_user_agent(mut kube: kube::Config, config: &OperatorConfig) -> kube::Config {
    let identity = config
        .shards
        .as_ref()
        .map(|shards| &shards.identity)
        .or(config.leader_election.as_ref().map(|lease| &lease.identity));
    let agent = match identity {
        Some(identity) => format!("metascript/{} ({identity})", crate::version::VERSION),
        None => format!("metascript/{}", crate::version::VERSION),
    };
    match http::HeaderValue::from_str(&agent) {
        Ok(value) => kube.headers.push((http::header::USER_AGENT, value)),
        Err(error) => tracing::warn!(%error, agent, "cannot name this replica in the User-Agent"),
    }
    kube
}

/// Resolves one kind's controller type. CRDs just created take a moment to appear in
/// discovery, so a miss is retried for a while before it counts as "not installed".
async fn resolve_own_type(
    discovery: &Discovery,
    kind: KindName,
) -> Result<ResolvedType, StartError> {
    let reference = ResourceRef {
        api_version: API_VERSION.into(),
        resource: kind.plural().into(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match discovery.resolve(&reference).await {
            Ok(resolved) => return Ok(resolved),
            Err(error) if tokio::time::Instant::now() >= deadline => {
                return Err(StartError::MissingCrds(error));
            }
            Err(error) => {
                tracing::info!(resource = kind.plural(), %error, "waiting for the metascript.dev CRDs to be served");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Watches Roles, ClusterRoles and their bindings, so a change forgets the cached answers about
/// what controllers' accounts may read that it can alter, and retries what was refused there
/// (see [`forget_rbac_changes`]). Without the watch (the operator may not list them) answers
/// still expire (see [`crate::runtime::reads::access::ACCESS_TTL`]).
async fn watch_rbac(context: &Context) {
    for (api_version, plural) in RBAC_TYPES {
        let reference = ResourceRef {
            api_version: api_version.into(),
            resource: plural.into(),
        };
        let watched = match context.discovery.resolve(&reference).await {
            Ok(resolved) => context
                .informers
                .ensure(&resolved)
                .await
                .map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        if let Err(error) = watched {
            tracing::warn!(resource = plural, %error, "cannot watch RBAC; what controllers may read is re-checked only when cached answers expire");
        }
    }
}

/// Routes every watch event to the work it causes, and the events held back during a write
/// (see [`OwnWrites`]) to the controller that wrote. Events of a type some hook read go on to
/// [`requeue_readers`] too.
async fn dispatch(
    context: Arc<Context>,
    kinds: Kinds,
    mut events: mpsc::UnboundedReceiver<CacheEvent>,
    mut redeliveries: mpsc::UnboundedReceiver<Redelivery>,
    rbac: RbacSender,
    read: mpsc::UnboundedSender<ObjectEvent>,
) {
    loop {
        tokio::select! {
            Some(event) = events.recv() => {
                let event = ObjectEvent::from(event);
                // What controllers' accounts may read may have changed: gathered, and acted
                // on once a second (see `forget_rbac_changes`).
                if let Some(kind) = RbacKind::of(&event.resource)
                    && let Some(reach) =
                        rbac::reach(kind, event.old.as_deref(), event.new.as_deref())
                {
                    rbac.changed(reach);
                }
                // Controllers may act on RBAC objects too: routed as any other event.
                for kind in kinds.iter() {
                    kind.route(&context, &event);
                }
                if context.dependencies.watches_type(&event.resource) {
                    // Gone only once the operator stops.
                    let _ = read.send(event);
                }
            }
            Some(Redelivery { controller, event }) = redeliveries.recv() => {
                if let Some(kind) = kinds.iter().find(|k| k.kind() == controller.kind) {
                    kind.redeliver(&context, &controller.name, &event);
                }
            }
            else => return,
        }
    }
}

/// The most events matched against what hooks read in one go on the blocking pool: enough to
/// spread the hand-off over a burst, few enough that the first is not held up by the last.
const READ_BATCH: usize = 256;

/// Queues the work whose hooks read what an event changed (`get`, `list`), found by index
/// ([`crate::runtime::reads::dependencies`]). Apart from the dispatcher, on the blocking pool: authors choose
/// how many lists their work items make and how large their selectors are, and matching them
/// must not hold up the routing of every other controller's events, nor a runtime thread. A
/// read whose event is matched late is safe: [`Context::record_reads`] re-queues an item whose
/// reads changed while it ran.
async fn requeue_readers(context: Arc<Context>, mut events: mpsc::UnboundedReceiver<ObjectEvent>) {
    let mut batch = Vec::with_capacity(READ_BATCH);
    while events.recv_many(&mut batch, READ_BATCH).await > 0 {
        let (context, batch) = (context.clone(), std::mem::take(&mut batch));
        sweep("matching an event against what hooks read", move || {
            for event in &batch {
                for key in context.dependencies.affected(event) {
                    context.queue.add(key);
                }
            }
        })
        .await;
    }
}

/// Acts on RBAC changes a window at a time: forgets the cached answers the window's changes can
/// alter, then retries the work refused a read they can alter (the window settled, so the API
/// server's authorizer has seen them).
async fn forget_rbac_changes(context: Arc<Context>, kinds: Kinds, mut changes: RbacChanges) {
    while let Some(batch) = changes.next().await {
        tracing::debug!(
            changes = batch.changes(),
            everything = batch.is_everything(),
            "RBAC changed; forgetting the read-access answers it can alter"
        );
        // Forgotten first: a retry must not find the old answer.
        let batch = Arc::new(batch);
        context.access.forget(batch.clone());
        context.metrics.rbac_forgets.inc();
        for kind in kinds.iter() {
            kind.rbac_changed(&context, &batch);
        }
    }
}

/// Runs work items. A standby only loads controllers (so its caches are warm and its scripts
/// compiled when it takes over) and skips the rest, which taking over redoes. Sharded, a
/// replica runs the items it owns (the others' are skipped; its own wait while it may not
/// write yet), and each runs acting for its item: every write it makes is checked against
/// that item's owner.
async fn work(context: Arc<Context>, kinds: Kinds) {
    let slot = context.config.health.register();
    while let Some((key, waited)) = context.queue.next_waited().await {
        slot.begin(|| format!("{}, {:?}", key.controller, key.work));
        run(&context, &kinds, &key, waited).await;
        slot.end();
        context.queue.done(&key);
    }
}

/// Reports a work item that panicked and retries it with backoff.
async fn panicked(context: &Context, key: &WorkKey, message: &str) {
    tracing::error!(controller = %key.controller, work = ?key.work, %message, "a work item panicked; it is retried with backoff");
    context
        .metrics
        .count_failure(&key.controller, crate::reasons::PANICKED);
    // Said on the object too, where its users look; the message stays in the log (a panic's
    // text may quote what it was working on).
    if let Some(about) = key.work.subject().and_then(|subject| context.get(subject)) {
        let note = format!(
            "the operator panicked while {} synced this object (a bug: please report it with \
             the operator's log); retried with backoff",
            key.controller
        );
        let reason = crate::reasons::PANICKED;
        context.warn(&about, None, reason, "Sync", &note).await;
    }
    context.queue.retry_later(key.clone());
}

/// The trace of a work item a worker took after it `waited`, and the span its run is in (none
/// when it is not traced).
fn trace_item(key: &WorkKey, waited: Duration) -> (Option<ItemTrace>, tracing::Span) {
    let name = match key.work {
        Work::Load => "load",
        _ => "sync",
    };
    let trace = ItemTrace::begin(name, waited, || {
        let mut attributes = vec![("metascript.controller", key.controller.to_string_short())];
        if let Some(subject) = key.work.subject() {
            attributes.push(("metascript.object", subject.to_string()));
        }
        if let Work::Pair { input, .. } = &key.work {
            attributes.push(("metascript.input", input.to_string()));
        }
        attributes
    });
    let Some(trace) = trace else {
        return (None, tracing::Span::none());
    };
    let span = tracing::info_span!(
        target: "metascript::trace",
        "run",
        controller = %key.controller,
        work = %key.work,
        trace_id = %trace.trace_id(),
    );
    trace.adopt(&span);
    (Some(trace), span)
}

/// Runs a work item this replica may run now (traced, when sampled), after it `waited` for a
/// worker; one it may not is deferred or skipped, untraced. A panic is a bug, but one work
/// item's: the worker goes on with the next one, and the item is retried with backoff like
/// any failure.
async fn run(context: &Arc<Context>, kinds: &Kinds, key: &WorkKey, waited: Duration) {
    let Some(kind) = kinds.iter().find(|k| k.kind() == key.controller.kind) else {
        return;
    };
    match context.authority.admit(key, kind.fans_out(&key.work)) {
        Admit::Run => {
            let (trace, span) = trace_item(key, waited);
            let work = shard::acting_for(Item::of(key), kind.work(context, key));
            if let Err(message) = caught(work).instrument(span.clone()).await {
                if let Some(trace) = &trace {
                    trace.fail(&"panicked");
                }
                panicked(context, key, &message)
                    .instrument(span.clone())
                    .await;
            }
            // The run's span ends before its trace does.
            drop(span);
            drop(trace);
        }
        Admit::Later(delay) => context.queue.add_after(key.clone(), delay),
        Admit::Skip => {}
    }
}

/// A Warning Event on each object a watch passed over (it cannot be decoded), so whoever owns
/// it learns why no controller acts on it; the log and `metascript_undecodable_objects_total`
/// say it too.
async fn report_passed_over(context: Arc<Context>, mut reports: mpsc::Receiver<PassedOver>) {
    while let Some(PassedOver { resource, object }) = reports.recv().await {
        let Some(name) = &object.name else {
            continue;
        };
        let regarding = serde_json::json!({
            "apiVersion": resource.api_version, "kind": resource.kind,
            "metadata": {"name": name, "namespace": object.namespace, "uid": object.uid}
        });
        let note = format!(
            "{}: the operator passes it over, so no controller acts on it, until it changes",
            object.reason
        );
        context
            .warn(
                &regarding,
                None,
                crate::reasons::UNDECODABLE,
                "Watch",
                &note,
            )
            .await;
    }
}

/// Runs `work`, turning a panic into what it said.
async fn caught(work: impl Future<Output = ()>) -> Result<(), String> {
    std::panic::AssertUnwindSafe(work)
        .catch_unwind()
        .await
        .map_err(|panic| {
            panic
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_string())
        })
}

/// Sets `ready` once every controller that existed at start has been loaded (or found
/// unloadable), then stops: readiness must not flap when controllers come and go later (a
/// replica taken out of the webhook Service for that would refuse admissions).
async fn report_ready(context: Arc<Context>, kinds: Kinds, ready: Arc<AtomicBool>) {
    let initial: Vec<Vec<String>> = kinds.iter().map(|k| k.controller_names(&context)).collect();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let settled = kinds
            .iter()
            .zip(&initial)
            .all(|(kind, names)| names.iter().all(|name| kind.settled(&context, name)));
        if settled {
            ready.store(true, Ordering::Relaxed);
            tracing::info!("every controller loaded; ready");
            return;
        }
    }
}

/// Everything a standby skipped is redone when it becomes the leader.
async fn take_over_on_election(context: Arc<Context>, kinds: Kinds) {
    let mut changes = context.leadership.subscribe();
    changes.mark_unchanged();
    while changes.changed().await.is_ok() {
        if *changes.borrow_and_update() {
            tracing::info!("leading: syncing everything");
            take_over(&context, &kinds, Sweep::Everything).await;
        }
    }
}

/// Sharded: when the members change, each replica's caches take the objects of the items it
/// gained and drop those of the items it lost; then it syncs the items it gained (it has no
/// outcome for them, so a sweep of what changed picks them) and forgets those it lost.
async fn take_over_on_reassignment(context: Arc<Context>, kinds: Kinds) {
    let Some(shards) = context.authority.shards.clone() else {
        return;
    };
    let mut changes = shards.subscribe();
    // The first view may have come before this subscribed.
    reshare(&context, &shards).await;
    while changes.changed().await.is_ok() {
        reshare(&context, &shards).await;
        take_over(&context, &kinds, Sweep::Changed).await;
    }
}

/// Has the caches keep this replica's share of the current members' view, retrying a list
/// that fails with backoff (each attempt follows the newest view). Meanwhile an item whose
/// object is not in the cache yet is synced once it comes: it is sent as added.
async fn reshare(context: &Context, shards: &Shards) {
    let mut delay = Duration::from_millis(500);
    loop {
        match context.informers.reshare(shards.assignment()).await {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(%error, retry_seconds = delay.as_secs_f64(), "cannot take this replica's share into the caches; retrying");
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Every kind takes over what it now owns.
async fn take_over(context: &Arc<Context>, kinds: &Kinds, items: Sweep) {
    let (context, kinds) = (context.clone(), kinds.clone());
    sweep("a take-over", move || {
        for kind in kinds.iter() {
            kind.take_over(&context, items);
        }
    })
    .await;
}

/// Resyncs each controller every `resyncPeriodSeconds`.
async fn resync_loop(context: Arc<Context>, kinds: Kinds) {
    let mut due: HashMap<ControllerId, tokio::time::Instant> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        if !context.leadership.is_leader() {
            continue;
        }
        let now = tokio::time::Instant::now();
        let periods: Vec<(ControllerId, Duration)> =
            kinds.iter().flat_map(|k| k.resync_periods()).collect();
        due.retain(|id, _| periods.iter().any(|(p, _)| p == id));
        for (id, period) in periods {
            let next = due.entry(id.clone()).or_insert(now + period);
            if *next > now {
                continue;
            }
            *next = now + period;
            if let Some(kind) = kinds.iter().find(|k| k.kind() == id.kind) {
                let (kind, context) = (kind.clone(), context.clone());
                sweep("a resync", move || kind.resync(&context, &id.name)).await;
            }
        }
    }
}

/// Keeps each controller's status current, writing only when it changed.
async fn status_loop(context: Arc<Context>, kinds: Kinds) {
    let mut tick = tokio::time::interval(context.config.status_interval);
    loop {
        tick.tick().await;
        context.metrics.queue_depth.set(context.queue.len() as i64);
        context
            .metrics
            .queue_ready
            .set(context.queue.ready_len() as i64);
        context.metrics.set_loads(&context.queue.loads());
        if !context.leadership.is_leader() {
            continue;
        }
        for kind in kinds.iter() {
            kind.write_statuses(&context).await;
        }
        if let Some(shards) = &context.authority.shards {
            let loaded: std::collections::HashSet<String> = kinds
                .iter()
                .flat_map(|kind| {
                    let kind_name = kind.kind();
                    kind.names()
                        .into_iter()
                        .map(move |name| ControllerId::new(kind_name, name).to_string_short())
                })
                .collect();
            shards.retain_report(|controller| loaded.contains(controller));
        }
    }
}

/// Reads again the Secrets and ConfigMaps webhook credentials name, and reloads a controller
/// whose changed. Only controllers that name some are read; only the leader polls (a standby
/// reloads every controller when it takes over).
async fn credentials_loop(context: Arc<Context>, kinds: Kinds) {
    let mut tick = tokio::time::interval(context.config.credentials_poll_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !context.leadership.is_leader() {
            continue;
        }
        for kind in kinds.iter() {
            for (id, watch) in kind.credential_watches() {
                match watch.changed().await {
                    Ok(false) => {}
                    Ok(true) => {
                        tracing::info!(controller = %id, "webhook credentials changed; reloading");
                        context.queue.add(WorkKey::load(&id));
                    }
                    Err(error) => {
                        tracing::warn!(controller = %id, %error, "cannot read webhook credentials again")
                    }
                }
            }
        }
    }
}

/// A changed CRD gives the controllers whose `spec.tests` failed another run of them.
async fn retest_on_schema_changes(context: Arc<Context>, kinds: Kinds) {
    let mut changes = context.schemas.changes();
    while changes.changed().await.is_ok() {
        for kind in kinds.iter() {
            kind.schemas_changed(&context);
        }
    }
}

/// The dev loop: a saved script file reloads the controllers whose hooks name it.
async fn reload_changed_scripts(
    context: Arc<Context>,
    kinds: Kinds,
    mut changed: mpsc::UnboundedReceiver<String>,
) {
    while let Some(file) = changed.recv().await {
        for kind in kinds.iter() {
            kind.script_file_changed(&context, &file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[allow(clippy::disallowed_methods)] // the panic is the point
    async fn a_panicking_work_item_is_caught_with_what_it_said() {
        // What `resyncAfterSeconds: 1e300` once did in a worker.
        let work = async {
            let seconds = f64::MAX;
            let _ = Duration::from_secs_f64(seconds);
        };
        let message = caught(work).await.expect_err("it panicked");
        assert!(
            message.contains("cannot convert float seconds"),
            "{message}"
        );
        assert_eq!(caught(async {}).await, Ok(()));
    }
}
