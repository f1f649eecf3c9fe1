//! The services every controller kind shares: the client, discovery, the watch caches, the
//! script engine, the applier, metrics, Events and the work queue. It knows no
//! kind of controller.

use crate::api::ServiceAccountRef;
use crate::api::{Budget, EventType};
use crate::cases::record::{Recorded, Recorder};
use crate::hooks::egress::AllowEntry;
use crate::hooks::{ControllerHooks, HookCall, HookRunner, WebhookClient};
use crate::object;
use crate::plan::SyncError;
use crate::reads::{ReadAccess, ReadPolicy};
use crate::reasons;
use crate::resources::ResourceType;
use crate::runtime::keys::{ControllerId, ObjRef, Work, WorkKey};
use crate::runtime::lru::Lru;
use crate::runtime::reads::access::AccessReviews;
use crate::runtime::reads::dependencies::DependencyIndex;
use crate::runtime::replicas::authority::Authority;
use crate::runtime::replicas::leader::{Leadership, LeaseConfig};
use crate::runtime::replicas::shard::ShardConfig;
use crate::runtime::report::events::{Asked, Events, Origin};
use crate::runtime::report::metrics::Metrics;
use crate::runtime::report::problem::{Cause, Problem};
use crate::runtime::watch::cache::{Informers, SyncRead};
use crate::runtime::watch::discovery::Discovery;
use crate::runtime::watch::schemas::LiveSchemas;
use crate::runtime::work::health::WorkerHealth;
use crate::runtime::work::queue::WorkQueue;
use crate::runtime::write::apply::{Applier, ApplyError, Writer};
use crate::script::ceilings::LimitCeilings;
use crate::script::{CallScope, EventSink, ScriptEngine};
use k8s_openapi::api::core::v1::ObjectReference;
use parking_lot::Mutex;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Credentials rotate rarely, and each poll is a read per Secret per controller that names one.
pub(crate) const DEFAULT_CREDENTIALS_POLL_INTERVAL: Duration = Duration::from_secs(30);

/// The operator's namespace when it runs outside a pod and none is given.
pub const DEFAULT_NAMESPACE: &str = "metascript-system";

/// One controller may hold half the workers while another has work waiting.
pub const DEFAULT_CONTROLLER_SHARE: f64 = 0.5;

#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Work items run at once.
    pub workers: usize,
    /// The dev loop: files here replace ConfigMap keys of the same name, and are watched.
    pub scripts_dir: Option<PathBuf>,
    /// How often controller status is brought up to date (written only when it changed).
    pub status_interval: Duration,
    /// How old `status.usage` must be before a change of it alone is written.
    pub usage_refresh: Duration,
    /// The budget of a controller that sets none (`--default-cpu-budget`, `--default-write-budget`).
    pub default_budget: Budget,
    /// The most budget any controller gets (`--max-cpu-budget`, `--max-write-budget`).
    pub max_budget: Budget,
    /// How often the Secrets and ConfigMaps webhook credentials name are read again, so a
    /// rotation reloads its controller (they are not watched).
    pub credentials_poll_interval: Duration,
    /// Serve only the controller objects whose labels match this selector (kubectl syntax),
    /// so several operators can share a cluster, or a canary can take a few controllers.
    pub controller_selector: Option<String>,
    /// Take part in leader election through this lease; only the leader writes. None: run
    /// alone (one replica, or a laptop), or sharded.
    pub leader_election: Option<LeaseConfig>,
    /// Share the work with the other live replicas of this group, each writing its own items
    /// ([`crate::runtime::replicas::shard`]). Exclusive with `leader_election`.
    pub shards: Option<ShardConfig>,
    /// Whether a controller without `serviceAccountName` may write as the operator itself.
    /// Shared clusters should say no: then every controller can do only what its own account
    /// may.
    pub allow_unimpersonated: bool,
    /// Record every hook call here as a test case (`metascript run --record DIR`).
    pub record_dir: Option<PathBuf>,
    /// Periodic resyncs sync every work item, even those a fingerprint shows unchanged
    /// (see [`crate::runtime::write::fingerprint`]).
    pub full_resync: bool,
    /// The memory all script calls may hold at once beyond each call's small floor
    /// ([`crate::script::memory`]).
    pub script_memory: usize,
    /// The most objects one hook response may return in a list.
    pub max_children: usize,
    /// The share of the workers one controller may hold while another has work waiting.
    pub controller_share: f64,
    /// Where webhook hooks may connect (`--webhook-allow`); nowhere when empty. The API
    /// server's addresses are added at start, guarded like loopback ([`crate::hooks::egress`]).
    pub webhook_allow: Vec<AllowEntry>,
    /// The longest webhook answer read (`--webhook-max-response-bytes`).
    pub webhook_max_response_bytes: u64,
    /// Where the operator keeps the snapshots of the revisions its staged rollouts serve
    /// (`apps/v1` ControllerRevisions; `--snapshot-namespace`, by default its own namespace).
    pub snapshot_namespace: String,
    /// Where the operator counts (shared, so an endpoint can serve them before it starts).
    pub metrics: Metrics,
    /// Set once every controller that existed at start has been loaded (or found unloadable):
    /// the caches its types need are warm, on a standby too.
    pub ready: Arc<AtomicBool>,
    /// The most a hook's `limits` may ask for (`--max-hook-*`).
    pub limit_ceilings: LimitCeilings,
    /// Whether every worker is alive and moving (`/healthz`); shared, like `metrics`.
    pub health: Arc<WorkerHealth>,
    /// What outputs are checked against, shared with the admission webhook of the same
    /// process so each CRD is watched once; `None`: the operator makes its own.
    pub schemas: Option<Arc<LiveSchemas>>,
}

/// `--usage-refresh`: a controller busy for hours rewrites its status for usage twice a minute.
const DEFAULT_USAGE_REFRESH: Duration = Duration::from_secs(30);

impl Default for OperatorConfig {
    fn default() -> Self {
        OperatorConfig {
            workers: 16,
            scripts_dir: None,
            status_interval: Duration::from_secs(2),
            usage_refresh: DEFAULT_USAGE_REFRESH,
            default_budget: Budget::default(),
            max_budget: Budget::default(),
            credentials_poll_interval: DEFAULT_CREDENTIALS_POLL_INTERVAL,
            controller_selector: None,
            leader_election: None,
            shards: None,
            allow_unimpersonated: true,
            record_dir: None,
            full_resync: false,
            script_memory: crate::script::memory::DEFAULT_SCRIPT_MEMORY,
            max_children: crate::script::DEFAULT_MAX_CHILDREN,
            controller_share: DEFAULT_CONTROLLER_SHARE,
            webhook_allow: Vec::new(),
            webhook_max_response_bytes: crate::hooks::DEFAULT_MAX_RESPONSE_BYTES,
            snapshot_namespace: DEFAULT_NAMESPACE.to_string(),
            metrics: Metrics::default(),
            ready: Arc::default(),
            limit_ceilings: LimitCeilings::default(),
            health: Arc::default(),
            schemas: None,
        }
    }
}

impl From<SyncError> for Problem {
    fn from(error: SyncError) -> Self {
        let problem = Problem::new(error.reason(), &error);
        if let Some(refusal) = error.refusal() {
            problem.refusing(Some(refusal.scope()))
        } else if error.timed_out() {
            Problem {
                cause: Cause::TimedOut,
                ..problem
            }
        } else {
            problem
        }
    }
}

impl From<ApplyError> for Problem {
    fn from(error: ApplyError) -> Self {
        let cause = if error.is_namespace_terminating() {
            Cause::NamespaceTerminating
        } else {
            Cause::Reported
        };
        Problem {
            cause,
            ..Problem::new(error.reason(), error)
        }
    }
}

pub struct Context {
    /// The operator's own client: reads, its controllers' status, Events.
    pub client: kube::Client,
    pub identities: Identities,
    pub discovery: Arc<Discovery>,
    pub informers: Arc<Informers>,
    /// The schemas of the types controllers write: built-in ones bundled, the cluster's CRDs.
    pub schemas: Arc<LiveSchemas>,
    pub engine: ScriptEngine,
    /// Webhook hooks' client: it connects only where `config.webhook_allow` says.
    pub webhooks: WebhookClient,
    pub applier: Applier,
    pub metrics: Metrics,
    pub events: Events,
    /// Work items, a flow per controller.
    pub queue: WorkQueue<WorkKey, ControllerId>,
    /// What each work item's hooks read, to re-queue it when that changes.
    pub dependencies: DependencyIndex,
    pub config: OperatorConfig,
    /// `config.controller_selector`, read once at start (none: every controller).
    pub(crate) controller_selector: Option<crate::selector::Selector>,
    /// Whether this replica leads (always, unless it takes part in leader election).
    pub leadership: Arc<Leadership>,
    /// Whether this replica may write now, and what (sharded, the items it owns).
    pub authority: Arc<Authority>,
    pub recorder: Option<Recorder>,
    /// ConfigMaps, as discovery resolved them: where `configMapRef` scripts live.
    pub config_map_type: ResourceType,
    /// What controllers' ServiceAccounts may read (SubjectAccessReviews, cached).
    pub access: Arc<AccessReviews>,
}

/// The most impersonating clients kept. Controllers name their accounts, so an author who
/// renames one again and again would otherwise add a client (a connection pool and its TLS
/// state) each time. Far above the accounts one operator's controllers use at once; past it,
/// the client used least recently is dropped (its writers finish with their own handle) and
/// made again on next use, at the cost of a new connection.
const MAX_CLIENTS: usize = 1024;

/// Clients that impersonate the ServiceAccounts controllers name, one per account (each with
/// its own connection pool), made on first use and kept up to [`MAX_CLIENTS`].
pub struct Identities {
    base: kube::Config,
    /// The user the operator itself is, when the API server said (a SelfSubjectReview at
    /// start): no controller may run as it.
    own_user: Option<String>,
    clients: Mutex<Lru<ServiceAccountRef, kube::Client>>,
}

/// Why no writer can be made for a controller.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("{}", crate::tenancy::own_account_refusal(.0))]
    OwnAccount(ServiceAccountRef),
    #[error("no client can impersonate the account: {0}")]
    Client(#[from] kube::Error),
}

impl WriterError {
    pub fn reason(&self) -> &'static str {
        match self {
            WriterError::OwnAccount(_) => crate::reasons::SERVICE_ACCOUNT_REFUSED,
            WriterError::Client(_) => crate::reasons::IMPERSONATION_FAILED,
        }
    }
}

impl Identities {
    pub fn new(base: kube::Config, own_user: Option<String>) -> Identities {
        Identities::keeping(MAX_CLIENTS, base, own_user)
    }

    fn keeping(clients: usize, base: kube::Config, own_user: Option<String>) -> Identities {
        Identities {
            base,
            own_user,
            clients: Mutex::new(Lru::new(clients)),
        }
    }

    /// The writer for a controller: its account's client, or the operator's own client when it
    /// names none (and that is allowed). The operator's own account is refused: a controller
    /// running as it could write the operator's status, leases and snapshots.
    pub fn writer(
        &self,
        operator: &kube::Client,
        account: Option<&ServiceAccountRef>,
    ) -> Result<Writer, WriterError> {
        let Some(account) = account else {
            return Ok(Writer {
                client: operator.clone(),
                identity: None,
            });
        };
        if self.own_user.as_deref() == Some(account.username().as_str()) {
            return Err(WriterError::OwnAccount(account.clone()));
        }
        let mut clients = self.clients.lock();
        let client = match clients.get_mut(account) {
            Some(client) => client.clone(),
            None => {
                let mut config = self.base.clone();
                config.auth_info.impersonate = Some(account.username());
                let client = kube::Client::try_from(config)?;
                clients.insert(account.clone(), client.clone());
                client
            }
        };
        Ok(Writer {
            client,
            identity: Some(account.clone()),
        })
    }
}

/// The user the API server knows this client as: a SelfSubjectReview, else (an API server
/// older than 1.28, a review refused) the subject of the pod's ServiceAccount token, else
/// `None` (said in the log: controllers naming the operator's account are then not refused).
pub async fn own_user(client: &kube::Client) -> Option<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: kube::Api<SelfSubjectReview> = kube::Api::all(client.clone());
    let reviewed = api
        .create(&Default::default(), &SelfSubjectReview::default())
        .await;
    let error = match reviewed {
        Ok(review) => {
            if let Some(user) = review.status.and_then(|s| s.user_info?.username) {
                return Some(user);
            }
            "the review named no user".to_string()
        }
        Err(error) => error.to_string(),
    };
    let from_token = std::fs::read_to_string(IN_CLUSTER_TOKEN)
        .ok()
        .and_then(|token| token_subject(&token));
    if from_token.is_none() {
        tracing::warn!(%error, "cannot tell which user the operator is (SelfSubjectReview, and no ServiceAccount token): controllers naming its own ServiceAccount are not refused");
    }
    from_token
}

/// Where a pod's ServiceAccount token is mounted.
const IN_CLUSTER_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// The `sub` claim of a ServiceAccount token (`system:serviceaccount:<ns>:<name>`), read without
/// checking the signature: it only names the operator to itself.
fn token_subject(token: &str) -> Option<String> {
    use base64::Engine as _;
    let payload = token.trim().split('.').nth(1)?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&json).ok()?;
    claims["sub"]
        .as_str()
        .filter(|sub| sub.starts_with("system:serviceaccount:"))
        .map(str::to_string)
}

/// Starts a sweep over every work item of a controller or kind (each item's fingerprint
/// recomputed, what changed queued) on the blocking pool: CPU work that grows with the items
/// (about 0.4 s at 10,000 map pairs) and would hold a runtime thread (watches, the dispatcher,
/// connections) meanwhile. A caller that cannot wait drops the handle; the sweep ends on its own.
pub(crate) fn start_sweep(work: impl FnOnce() + Send + 'static) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(work)
}

/// [`start_sweep`], waited for; `what` names it in the log should it panic.
pub(crate) async fn sweep(what: &str, work: impl FnOnce() + Send + 'static) {
    if let Err(error) = start_sweep(work).await {
        tracing::warn!(%error, "{what} failed");
    }
}

/// Whether `--controller-selector` (none: every controller) selects a controller object.
fn selected_by(
    controller_selector: Option<&crate::selector::Selector>,
    controller: &Value,
) -> bool {
    controller_selector
        .is_none_or(|selector| selector.matches(&object::metadata_map(controller, "labels")))
}

impl Context {
    /// Whether this operator serves a controller object: its labels match
    /// `--controller-selector`. The watch of controller objects is label-selected, but another
    /// controller may need their type whole (a rule or a read of it), and the shared cache then
    /// holds other operators' controllers too.
    pub(crate) fn serves(&self, controller: &Value) -> bool {
        selected_by(self.controller_selector.as_ref(), controller)
    }

    /// An object from the watch cache.
    pub fn get(&self, reference: &ObjRef) -> Option<Arc<Value>> {
        self.informers.get(
            &reference.resource,
            reference.namespace.as_deref(),
            &reference.name,
        )
    }

    /// The object a sync is about, or only its top-level fields `only` ([`Informers::read_for_sync`]).
    pub(crate) fn read_for_sync(
        &self,
        reference: &ObjRef,
        only: Option<&[&str]>,
    ) -> Option<SyncRead> {
        self.informers.read_for_sync(
            &reference.resource,
            reference.namespace.as_deref(),
            &reference.name,
            only,
        )
    }

    /// Runs script work on tokio's blocking pool, never on the runtime's threads, and counts
    /// it for its controller; every hook call runs in the work item's `scope`.
    pub async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        controller: &ControllerId,
        hooks: &Arc<ControllerHooks>,
        scope: &CallScope,
        work: impl FnOnce(&Context, &HookRunner) -> Result<T, SyncError> + Send + 'static,
    ) -> Result<T, Problem> {
        let (context, hooks, controller) = (self.clone(), hooks.clone(), controller.clone());
        let mut scope = scope.clone();
        // The hook calls' spans belong to the work item's trace.
        let span = crate::telemetry::current_span();
        tokio::task::spawn_blocking(move || {
            let _traced = span.enter();
            // A recorded call must replay with the time it saw.
            let clock = context.recorder.as_ref().map(|_| jiff::Timestamp::now());
            scope.clock = clock;
            let observe = |call: &HookCall| {
                context.metrics.observe_call(&controller, call);
                if let (Some(recorder), Some(hook), Some(clock)) =
                    (&context.recorder, hooks.get(call.hook), clock)
                {
                    let recorded = Recorded {
                        controller: &controller.to_string_short(),
                        hook,
                        request: call.request,
                        response: call.response,
                        clock,
                        secrets: &scope.secrets,
                    };
                    if let Err(error) = recorder.record(&recorded) {
                        tracing::warn!(%error, "cannot record the hook call");
                    }
                }
            };
            let runner = HookRunner {
                engine: &context.engine,
                hooks: &hooks,
                webhooks: &context.webhooks,
                observer: Some(&observe),
                scope: &scope,
            };
            let started = std::time::Instant::now();
            let result = work(&context, &runner).map_err(Problem::from);
            context
                .metrics
                .count_sync(&controller, started.elapsed().as_secs_f64());
            result
        })
        .await
        .map_err(|e| Problem::new(reasons::SYNC_FAILED, format!("sync task failed: {e}")))?
    }

    /// A scope for one work item's hooks: reads from the watch caches, limited to the types
    /// the controller declares and to what its account may read (`policy`; everything the
    /// operator reads without one). Give it to every hook call of the work item, then
    /// [`Context::record_reads`].
    pub fn scope(
        &self,
        declared: &Arc<[ResourceType]>,
        policy: Option<&Arc<dyn ReadPolicy>>,
    ) -> CallScope {
        CallScope::reading(
            ReadAccess::new(self.informers.clone(), declared.clone()).with_policy(policy.cloned()),
        )
    }

    /// What the reads of a work item's last run return now, as [`ReadAccess::seen_digest`] had
    /// it then (see [`crate::runtime::write::fingerprint`]). `work` names the item; it is not even built for a
    /// controller whose items read nothing.
    pub fn current_reads(&self, controller: &ControllerId, work: impl FnOnce() -> Work) -> u64 {
        let dependencies = if self.dependencies.holds_any(controller) {
            self.dependencies.of(&WorkKey::new(controller, work()))
        } else {
            Vec::new()
        };
        crate::reads::current_digest(&*self.informers, &dependencies)
    }

    /// Replaces what a work item depends on with what its hooks just read. A change that
    /// landed after a read but before this (its event found nothing to re-sync) queues the
    /// work item again.
    pub fn record_reads(&self, key: &WorkKey, scope: &CallScope) {
        let Some(reads) = &scope.reads else {
            return;
        };
        // Most controllers read nothing: no exclusive lock on the shared index per sync for
        // them (unless an earlier version of the controller did read, and left entries).
        if reads.declares_nothing() && !self.dependencies.holds_any(&key.controller) {
            return;
        }
        // A removed controller's work still running records nothing: the removal took what
        // the index held of it, and nothing would take what came after.
        let recorded = self.metrics.unless_removed(&key.controller, || {
            let change = self.dependencies.set(key, reads.dependencies());
            self.metrics.add_dependencies(&key.controller, change);
        });
        if recorded.is_some() && reads.changed_since_read() {
            tracing::debug!(work = %key.work, controller = %key.controller, "what the hooks read changed meanwhile; syncing again");
            self.queue.add(key.clone());
        }
    }

    /// Forgets what a work item depends on (what it was about is gone). Through the same gate
    /// as [`Context::record_reads`]: once its controller is removed, the removal forgets
    /// everything, and a count here would bring the gauge's label back.
    pub fn forget_reads(&self, key: &WorkKey) {
        self.metrics.unless_removed(&key.controller, || {
            let change = self.dependencies.remove(key);
            if change != 0 {
                self.metrics.add_dependencies(&key.controller, change);
            }
        });
    }

    /// Publishes a Warning Event about an object, naming the controller it concerns as the
    /// related object (only when this replica may write for the work running: Events are
    /// writes too); failures are only logged.
    pub async fn warn(
        &self,
        about: &Value,
        related: Option<&ObjectReference>,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        self.publish(Asked {
            origin: Origin::Operator,
            type_: EventType::Warning,
            regarding: about,
            related,
            reason,
            action,
            note,
        })
        .await;
    }

    /// Publishes a Normal Event about an object (a leader only).
    pub async fn note(&self, about: &Value, reason: &str, action: &str, note: &str) {
        self.publish(Asked {
            origin: Origin::Operator,
            type_: EventType::Normal,
            regarding: about,
            related: None,
            reason,
            action,
            note,
        })
        .await;
    }

    /// Publishes the Events a work item's hooks asked for (`event`) about the object the work
    /// item is about, as the operator's own Warnings are (from buckets of their own, see
    /// [`crate::runtime::report::events`]). Callers publish them once the hooks planned, before applying: a
    /// script may say why it returns what it does, and that holds whether or not the apply
    /// then works. When planning failed they publish none: the failure's own Warning says what
    /// happened, and what the hooks said may not hold.
    pub async fn publish_script_events(
        &self,
        about: &Value,
        related: &ObjectReference,
        action: &str,
        events: &EventSink,
    ) {
        for event in events.events() {
            self.publish(Asked {
                origin: Origin::Script,
                type_: event.type_,
                regarding: about,
                related: Some(related),
                reason: &event.reason,
                action,
                note: &event.message,
            })
            .await;
        }
    }

    async fn publish(&self, asked: Asked<'_>) {
        if !self.authority.may_write() {
            return;
        }
        let (about, reason) = (asked.regarding, asked.reason);
        if let Err(error) = self.events.publish(asked).await {
            tracing::warn!(%error, object = %object::ObjectKey::of(about), reason, "cannot publish event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn an_operator_serves_only_the_controllers_its_selector_matches() {
        let controller =
            |labels: Value| serde_json::json!({"metadata": {"name": "c", "labels": labels}});
        let mine = controller(serde_json::json!({"team": "a"}));
        let theirs = controller(serde_json::json!({"team": "b"}));
        let unlabelled = controller(Value::Null);
        let selector = |text| crate::selector::parse_label_selector(text).unwrap();
        assert!(selected_by(None, &theirs));
        assert!(selected_by(Some(&selector("team=a")), &mine));
        assert!(!selected_by(Some(&selector("team=a")), &theirs));
        assert!(!selected_by(Some(&selector("team=a")), &unlabelled));
        assert!(selected_by(Some(&selector("!team")), &unlabelled));
    }

    /// Naming ever new accounts keeps at most the cap of clients, the most recently used.
    #[tokio::test]
    async fn impersonating_clients_are_kept_up_to_a_cap() {
        let base = kube::Config::new("https://127.0.0.1:1".parse().expect("a URL"));
        let identities = Identities::keeping(3, base.clone(), None);
        let operator = kube::Client::try_from(base).expect("a client");
        let account = |name: &str| ServiceAccountRef {
            namespace: "team".into(),
            name: name.into(),
        };
        for name in ["a", "b", "c", "a", "d", "e"] {
            let writer = identities
                .writer(&operator, Some(&account(name)))
                .expect("a writer");
            assert_eq!(writer.identity, Some(account(name)));
        }
        let clients = identities.clients.lock();
        assert_eq!(clients.len(), 3);
        let mut clients = clients;
        for (name, kept) in [
            ("a", true),
            ("b", false),
            ("c", false),
            ("d", true),
            ("e", true),
        ] {
            assert_eq!(clients.get_mut(&account(name)).is_some(), kept, "{name}");
        }
    }

    #[test]
    fn a_service_account_token_names_its_account() {
        let encode = |json: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
        let token = format!(
            "{}.{}.signature",
            encode(r#"{"alg":"RS256"}"#),
            encode(r#"{"sub":"system:serviceaccount:metascript-system:metascript","aud":["x"]}"#)
        );
        assert_eq!(
            token_subject(&format!("{token}\n")).as_deref(),
            Some("system:serviceaccount:metascript-system:metascript")
        );
        let user = format!("{}.{}.s", encode("{}"), encode(r#"{"sub":"alice"}"#));
        assert_eq!(token_subject(&user), None, "only an account's token");
        assert_eq!(token_subject("not a token"), None);
    }
}
