//! What the operator counts, and the HTTP endpoint that exposes it with the health probes.

use crate::api::{HookKind, ServiceAccountRef};
use crate::hooks::HookCall;
use crate::runtime::keys::ControllerId;
use crate::runtime::report::usage::{Ledger, UsageReport};
use crate::runtime::work::health::WorkerHealth;
use crate::runtime::work::queue::FlowLoad;
use crate::script::CallCost;
use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Which controller a sample is about. Bounded: one label set per controller object, removed
/// with the controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `decorator` or `map`.
    pub kind: &'static str,
    pub controller: String,
}

impl ControllerLabels {
    pub fn of(controller: &ControllerId) -> ControllerLabels {
        ControllerLabels {
            kind: controller.kind.as_str(),
            controller: controller.name.clone(),
        }
    }
}

/// Which hook of which controller a sample is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabels {
    pub kind: &'static str,
    pub controller: String,
    /// sync, finalize, customize, map or tombstone.
    pub hook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub kind: &'static str,
    pub controller: String,
    /// The Event reason (HookFailed, InvalidResponse, ApplyFailed, …).
    pub reason: Cow<'static, str>,
}

/// Which ServiceAccount a sample is about (`<namespace>/<name>`). Bounded by the accounts
/// controllers name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccountLabels {
    pub service_account: String,
}

impl AccountLabels {
    pub fn of(account: &ServiceAccountRef) -> AccountLabels {
        AccountLabels {
            service_account: format!("{}/{}", account.namespace, account.name),
        }
    }
}

/// Whose Events were dropped (see [`crate::runtime::report::events`]). Bounded: one label set per controller
/// and origin.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DroppedEventLabels {
    /// `decorator`, `map` or `composite`.
    pub kind: String,
    pub controller: String,
    /// `operator` (its own reports) or `script` (a hook's `event`).
    pub origin: &'static str,
}

/// Which watched type a sample is about (`Kind.apiVersion`). Bounded by the types watched.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

/// A watched type and what its watches select.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    pub resource: String,
    /// `all` or `labels`.
    pub selection: &'static str,
}

/// What this build is, as labels of a gauge that is always 1 (the Prometheus convention).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
    pub rhai: &'static str,
    pub luau: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// 50 µs to ~13 s.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.00005, 4.0, 10))
}

/// The operator's metrics. Cheap to clone: every field shares its value.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Write requests made (apply, patch, delete) by all controllers: zero on a resync of an
    /// unchanged cluster. Not exported (the per-controller family sums to it).
    pub writes: Counter,
    /// Script work items run by all controllers. Not exported, like `writes`.
    pub syncs: Counter,
    pub controller_writes: Family<ControllerLabels, Counter>,
    /// Rewrites of a controller's status for its `status.usage` alone (at most one per
    /// `--usage-refresh`). Apart from `controller_writes`, which stays at zero while nothing
    /// the controller acts on changes.
    pub usage_writes: Family<ControllerLabels, Counter>,
    /// Script work items run (hook calls for decorator targets and map pairs).
    pub controller_syncs: Family<ControllerLabels, Counter>,
    pub failures: Family<FailureLabels, Counter>,
    /// Time spent in script work (hooks and planning) per item, in seconds.
    pub sync_seconds: HistogramFamily<ControllerLabels>,
    /// Time one hook call took (script or webhook), in seconds.
    pub hook_seconds: HistogramFamily<HookLabels>,
    /// CPU time of the threads running the controller's script hooks, in seconds.
    pub hook_cpu_seconds: Family<ControllerLabels, Counter<f64, AtomicU64>>,
    /// Time spent checking outputs against their schemas before applying them, in seconds.
    pub output_check_seconds: Family<ControllerLabels, Counter<f64, AtomicU64>>,
    /// Hook calls that failed (the script raised an error or exceeded a budget, the response
    /// was unusable, the source was unavailable).
    pub hook_failures: Family<HookLabels, Counter>,
    /// Work items waiting in the queue, now or later (a requested resync, a backoff).
    pub queue_depth: Gauge,
    /// Of those, the ones due now: waiting only for a worker.
    pub queue_ready: Gauge,
    /// Work items of a controller waiting (now or later), and workers it holds.
    pub controller_queued: Family<ControllerLabels, Gauge>,
    pub controller_running: Family<ControllerLabels, Gauge>,
    /// Bytes of the shared script memory pool drawn by the calls running now, and its size.
    pub script_memory: Gauge,
    pub script_memory_limit: Gauge,
    /// 1 while this replica leads (always, without leader election), else 0.
    pub leader: Gauge,
    /// 1 per controller whose Ready condition is True, else 0.
    pub controller_ready: Family<ControllerLabels, Gauge>,
    /// 1 while this replica paces the controller's work for its budget, else 0.
    pub controller_throttled: Family<ControllerLabels, Gauge>,
    /// Reads (`get`, `list`) the controller's work items depend on now.
    pub dependencies: Family<ControllerLabels, Gauge>,
    /// Work items a resync did not queue: nothing their last (pure) sync saw had changed.
    pub resync_skipped: Family<ControllerLabels, Counter>,
    pub build_info: Family<BuildLabels, Gauge>,
    /// 1 when this replica runs sharded (`--shards auto`), else 0: what tells alerts which of
    /// the shard and leader gauges mean something.
    pub sharded: Gauge,
    /// Sharded (`--shards auto`): the live replicas this one sees.
    pub shard_members: Gauge,
    /// Sharded: 1 while this replica may write its items (a member, warmed up, its view of
    /// the members fresh), else 0.
    pub shard_writable: Gauge,
    /// Sharded: changes of the members this replica saw (each hands items over).
    pub shard_handovers: Counter,
    /// Sharded: writes this replica refused to send because it did not own their item then
    /// (or its lease had lapsed).
    pub shard_refused_writes: Counter,
    /// Sharded: work items of the controller this replica owns and has synced.
    pub owned_items: Family<ControllerLabels, Gauge>,
    /// SubjectAccessReviews sent to learn what an account may read (the rest of the checks
    /// are answered from the cache).
    pub access_reviews: Family<AccountLabels, Counter>,
    /// Forgets of cached access answers after RBAC changes (at most one a second, however
    /// many changes each gathers).
    pub rbac_forgets: Counter,
    /// Events not published: their controller (or the object) was out of tokens.
    pub events_dropped: Family<DroppedEventLabels, Counter>,
    /// Watched objects passed over because they cannot be decoded (one per list or watch event
    /// that carried one).
    pub undecodable_objects: Family<ResourceLabels, Counter>,
    /// Objects held in the watch cache, per type.
    pub cached_objects: Family<ResourceLabels, Gauge>,
    /// Watches running, per type and selection (`all`, or `labels` for one per label selector).
    pub watches: Family<WatchLabels, Gauge>,
    /// What each controller used, for its `status.usage` (not exported: the families above
    /// carry the same counts to Prometheus).
    pub usage: Arc<Ledger>,
    /// Controllers removed lately, and when ([`Metrics::forget`]).
    gone: Arc<RwLock<HashMap<ControllerId, Instant>>>,
}

/// How long a removed controller's late records are refused: longer than a work item runs
/// (its hooks' and writes' timeouts are minutes at most).
const GONE_FOR: Duration = Duration::from_secs(600);

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            writes: Counter::default(),
            syncs: Counter::default(),
            controller_writes: Family::default(),
            usage_writes: Family::default(),
            controller_syncs: Family::default(),
            failures: Family::default(),
            sync_seconds: Family::new_with_constructor(duration_histogram),
            hook_seconds: Family::new_with_constructor(duration_histogram),
            hook_cpu_seconds: Family::default(),
            output_check_seconds: Family::default(),
            hook_failures: Family::default(),
            queue_depth: Gauge::default(),
            queue_ready: Gauge::default(),
            controller_queued: Family::default(),
            controller_running: Family::default(),
            script_memory: Gauge::default(),
            script_memory_limit: Gauge::default(),
            leader: Gauge::default(),
            controller_ready: Family::default(),
            controller_throttled: Family::default(),
            dependencies: Family::default(),
            resync_skipped: Family::default(),
            sharded: Gauge::default(),
            shard_members: Gauge::default(),
            shard_writable: Gauge::default(),
            shard_handovers: Counter::default(),
            shard_refused_writes: Counter::default(),
            owned_items: Family::default(),
            access_reviews: Family::default(),
            rbac_forgets: Counter::default(),
            events_dropped: Family::default(),
            undecodable_objects: Family::default(),
            cached_objects: Family::default(),
            watches: Family::default(),
            usage: Arc::default(),
            gone: Arc::default(),
            build_info: {
                let build_info: Family<BuildLabels, Gauge> = Family::default();
                build_info
                    .get_or_create(&BuildLabels {
                        version: crate::version::VERSION,
                        commit: crate::version::COMMIT,
                        rhai: crate::version::RHAI,
                        luau: crate::version::LUAU,
                    })
                    .set(1);
                build_info
            },
        }
    }
}

impl Metrics {
    pub fn registry(&self) -> Registry {
        let mut registry = Registry::with_prefix("metascript");
        registry.register(
            "api_writes",
            "Write requests made to the API server, per controller",
            self.controller_writes.clone(),
        );
        registry.register(
            "syncs",
            "Script work items run, per controller",
            self.controller_syncs.clone(),
        );
        registry.register(
            "sync_failures",
            "Failed syncs by controller and reason",
            self.failures.clone(),
        );
        registry.register(
            "sync_duration_seconds",
            "Time spent running hooks and planning, per work item",
            self.sync_seconds.clone(),
        );
        registry.register(
            "hook_duration_seconds",
            "Time one hook call took, per controller and hook",
            self.hook_seconds.clone(),
        );
        registry.register(
            "hook_failures",
            "Hook calls that failed, per controller and hook",
            self.hook_failures.clone(),
        );
        registry.register(
            "queue_depth",
            "Work items waiting, now or later (a requested resync, a backoff)",
            self.queue_depth.clone(),
        );
        registry.register(
            "queue_ready",
            "Work items due now, waiting only for a worker",
            self.queue_ready.clone(),
        );
        registry.register(
            "controller_queued",
            "Work items of the controller waiting, now or after a delay (backoff, resync)",
            self.controller_queued.clone(),
        );
        registry.register(
            "controller_running",
            "Workers the controller's work holds now",
            self.controller_running.clone(),
        );
        registry.register(
            "script_memory_bytes",
            "Bytes of the shared script memory (--script-memory) the running calls hold",
            self.script_memory.clone(),
        );
        registry.register(
            "script_memory_limit_bytes",
            "The size of the shared script memory (--script-memory)",
            self.script_memory_limit.clone(),
        );
        registry.register(
            "controller_ready",
            "1 when the controller's Ready condition is True (types resolved, every hook loaded)",
            self.controller_ready.clone(),
        );
        registry.register(
            "controller_throttled",
            "1 while this replica makes the controller's work wait for its budget (spec.budget)",
            self.controller_throttled.clone(),
        );
        registry.register(
            "dependencies",
            "Reads (get, list) the controller's work items depend on: a change to one re-syncs \
             the work item that read it",
            self.dependencies.clone(),
        );
        registry.register(
            "usage_writes",
            "Rewrites of a controller's status for its status.usage alone",
            self.usage_writes.clone(),
        );
        registry.register(
            "hook_cpu_seconds",
            "CPU seconds of the threads running a controller's script hooks",
            self.hook_cpu_seconds.clone(),
        );
        registry.register(
            "output_check_seconds",
            "Seconds spent checking what plans write against their types' schemas and CEL \
             rules before applying them",
            self.output_check_seconds.clone(),
        );
        registry.register(
            "resync_skipped",
            "Work items a periodic resync skipped because nothing their last pure sync saw had \
             changed",
            self.resync_skipped.clone(),
        );
        registry.register(
            "build_info",
            "The operator's version, commit and script engine versions (always 1)",
            self.build_info.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica is the leader (the one that writes), else 0",
            self.leader.clone(),
        );
        registry.register(
            "owned_items",
            "Sharded: work items of the controller this replica owns and has synced",
            self.owned_items.clone(),
        );
        registry.register(
            "sharded",
            "1 when this replica runs sharded (--shards auto), else 0",
            self.sharded.clone(),
        );
        registry.register(
            "shard_members",
            "Sharded: the live replicas this one sees",
            self.shard_members.clone(),
        );
        registry.register(
            "shard_writable",
            "Sharded: 1 while this replica may write its items (a member, warmed up, its view \
             of the members fresh)",
            self.shard_writable.clone(),
        );
        registry.register(
            "shard_handovers",
            "Sharded: changes of the members this replica saw, each handing items over",
            self.shard_handovers.clone(),
        );
        registry.register(
            "shard_refused_writes",
            "Sharded: writes not sent because this replica did not own their item then, or its \
             lease had lapsed",
            self.shard_refused_writes.clone(),
        );
        registry.register(
            "access_reviews",
            "SubjectAccessReviews sent to learn what a controller's ServiceAccount may read, per \
             account (the rest of the checks are answered from the cache)",
            self.access_reviews.clone(),
        );
        registry.register(
            "rbac_forgets",
            "Forgets of cached read-access answers after RBAC changes (at most one a second, \
             each gathering that second's changes)",
            self.rbac_forgets.clone(),
        );
        registry.register(
            "events_dropped",
            "Events not published because their controller, or the object they are about, was \
             out of tokens (per controller and origin: operator or script)",
            self.events_dropped.clone(),
        );
        registry.register(
            "undecodable_objects",
            "Watched objects passed over because they cannot be decoded (nested deeper than the \
             operator reads), per type: one per list or watch event that carried one",
            self.undecodable_objects.clone(),
        );
        registry.register(
            "cached_objects",
            "Objects held in the watch cache, per type: the objects of the type, or those the \
             label selectors of the controllers that need it match",
            self.cached_objects.clone(),
        );
        registry.register(
            "watches",
            "Watches running, per type and selection: `all` (every object of the type) or \
             `labels` (one per distinct label selector while nothing needs the whole type)",
            self.watches.clone(),
        );
        registry
    }

    /// Sets each controller's queue gauges, and the script memory in use; a controller with
    /// nothing queued or running reads 0.
    pub fn set_loads(&self, loads: &std::collections::HashMap<ControllerId, FlowLoad>) {
        for family in [&self.controller_queued, &self.controller_running] {
            family.clear();
        }
        for (controller, load) in loads {
            self.if_live(controller, |labels| {
                self.controller_queued
                    .get_or_create(labels)
                    .set(load.waiting as i64);
                self.controller_running
                    .get_or_create(labels)
                    .set(load.running as i64);
            });
        }
        self.script_memory
            .set(crate::script::memory::pool_used() as i64);
        self.script_memory_limit
            .set(crate::script::memory::pool_limit() as i64);
    }

    /// Records a controller's figures with `record`, unless it was removed less than
    /// [`GONE_FOR`] ago and not loaded since: its work still running when it went records
    /// nothing. Holds off [`Metrics::forget`] meanwhile, so nothing recorded survives it.
    fn if_live(&self, controller: &ControllerId, record: impl FnOnce(&ControllerLabels)) {
        self.unless_removed(controller, || record(&ControllerLabels::of(controller)));
    }

    /// Runs `record` and gives its result, unless the controller was removed less than
    /// [`GONE_FOR`] ago and not loaded since; holds off [`Metrics::forget`] while it runs. So
    /// what a removed controller's work still running would record outside the figures (its
    /// reads, in the dependency index) is refused as its figures are, and what was recorded
    /// before is there for the removal to take. Nothing in `record` may come through here
    /// again (a figure refused after removal): a read lock taken twice waits forever behind a
    /// removal waiting for the first.
    pub(crate) fn unless_removed<R>(
        &self,
        controller: &ControllerId,
        record: impl FnOnce() -> R,
    ) -> Option<R> {
        let gone = self.gone.read();
        let removed = |since: &Instant| since.elapsed() < GONE_FOR;
        (!gone.get(controller).is_some_and(removed)).then(record)
    }

    /// Counts one write request of a controller.
    pub fn count_write(&self, controller: &ControllerId) {
        self.writes.inc();
        self.if_live(controller, |labels| {
            self.controller_writes.get_or_create(labels).inc();
            self.usage.write(controller);
        });
    }

    /// Counts a write of the controller's own status: one of its writes, but not in its
    /// `status.usage` (the write that reports usage would change it again).
    pub fn count_status_write(&self, controller: &ControllerId) {
        self.writes.inc();
        self.if_live(controller, |labels| {
            self.controller_writes.get_or_create(labels).inc();
        });
    }

    /// Counts a rewrite of a controller's status for its usage alone.
    pub fn count_usage_write(&self, controller: &ControllerId) {
        self.if_live(controller, |labels| {
            self.usage_writes.get_or_create(labels).inc();
        });
    }

    /// Counts one script work item of a controller and records how long it took.
    pub fn count_sync(&self, controller: &ControllerId, seconds: f64) {
        self.syncs.inc();
        self.if_live(controller, |labels| {
            self.controller_syncs.get_or_create(labels).inc();
            self.sync_seconds.get_or_create(labels).observe(seconds);
        });
    }

    /// Records a hook call as its runner reports it ([`Metrics::observe_hook`]).
    pub(crate) fn observe_call(&self, controller: &ControllerId, call: &HookCall) {
        self.observe_hook(
            controller,
            call.hook,
            call.took,
            call.cost.as_ref(),
            call.response.is_ok(),
        );
    }

    /// Records one hook call of a controller: a script's with its cost, or a webhook's.
    pub fn observe_hook(
        &self,
        controller: &ControllerId,
        hook: HookKind,
        took: Duration,
        cost: Option<&CallCost>,
        ok: bool,
    ) {
        self.if_live(controller, |controller_labels| {
            self.usage.hook_call(controller, took, cost);
            if let Some(cost) = cost {
                self.hook_cpu_seconds
                    .get_or_create(controller_labels)
                    .inc_by(cost.cpu.as_secs_f64());
            }
            let labels = HookLabels {
                kind: controller.kind.as_str(),
                controller: controller.name.clone(),
                hook: hook.as_str(),
            };
            self.hook_seconds
                .get_or_create(&labels)
                .observe(took.as_secs_f64());
            if !ok {
                self.hook_failures.get_or_create(&labels).inc();
            }
        });
    }

    /// Counts a failed work item by its reason. Failures of a removed controller's last work
    /// count too (`forget` keeps its failure counts); only its usage does not.
    pub fn count_failure(&self, controller: &ControllerId, reason: impl Into<Cow<'static, str>>) {
        let reason = reason.into();
        self.if_live(controller, |_| self.usage.failure(controller, &reason));
        self.failures
            .get_or_create(&FailureLabels {
                kind: controller.kind.as_str(),
                controller: controller.name.clone(),
                reason,
            })
            .inc();
    }

    /// Writes made so far by one controller.
    pub fn writes_of(&self, controller: &ControllerId) -> u64 {
        self.controller_writes
            .get(&ControllerLabels::of(controller))
            .map_or(0, |counter| counter.get())
    }

    /// Failed calls of one controller's hook so far.
    pub fn hook_failures_of(&self, controller: &ControllerId, hook: HookKind) -> u64 {
        self.hook_failures
            .get(&HookLabels {
                kind: controller.kind.as_str(),
                controller: controller.name.clone(),
                hook: hook.as_str(),
            })
            .map_or(0, |counter| counter.get())
    }

    /// Script work items run so far for one controller.
    pub fn syncs_of(&self, controller: &ControllerId) -> u64 {
        self.controller_syncs
            .get(&ControllerLabels::of(controller))
            .map_or(0, |counter| counter.get())
    }

    /// Counts one SubjectAccessReview sent about an account.
    pub fn count_access_review(&self, account: &ServiceAccountRef) {
        self.access_reviews
            .get_or_create(&AccountLabels::of(account))
            .inc();
    }

    /// SubjectAccessReviews sent so far about one account.
    pub fn access_reviews_of(&self, account: &ServiceAccountRef) -> u64 {
        self.access_reviews
            .get(&AccountLabels::of(account))
            .map_or(0, |counter| counter.get())
    }

    /// Counts one Event dropped for want of tokens.
    pub fn count_dropped_event(&self, kind: &str, controller: &str, origin: &'static str) {
        self.events_dropped
            .get_or_create(&DroppedEventLabels {
                kind: kind.to_string(),
                controller: controller.to_string(),
                origin,
            })
            .inc();
    }

    /// Adds the time one plan's output check took.
    pub fn count_output_check(&self, controller: &ControllerId, took: Duration) {
        self.if_live(controller, |labels| {
            self.output_check_seconds
                .get_or_create(labels)
                .inc_by(took.as_secs_f64());
        });
    }

    /// Seconds one controller's output checks took so far.
    pub fn output_check_seconds_of(&self, controller: &ControllerId) -> f64 {
        self.output_check_seconds
            .get(&ControllerLabels::of(controller))
            .map_or(0.0, |counter| counter.get())
    }

    /// Counts the work items a resync of a controller skipped.
    pub fn count_resync_skipped(&self, controller: &ControllerId, skipped: u64) {
        self.if_live(controller, |labels| {
            self.resync_skipped.get_or_create(labels).inc_by(skipped);
        });
    }

    /// Work items resyncs of one controller skipped so far.
    pub fn resync_skipped_of(&self, controller: &ControllerId) -> u64 {
        self.resync_skipped
            .get(&ControllerLabels::of(controller))
            .map_or(0, |counter| counter.get())
    }

    /// Drops the samples of a removed controller, so label sets do not pile up over time, and
    /// refuses what its work still running records until it is loaded again
    /// ([`Metrics::admit`]). Failure counts stay: they are few, and an alert may still be
    /// looking at them.
    pub fn forget(&self, controller: &ControllerId) {
        let now = Instant::now();
        // Held until the samples are gone: a record running now finishes first.
        let mut gone = self.gone.write();
        gone.retain(|_, since| now.duration_since(*since) < GONE_FOR);
        gone.insert(controller.clone(), now);
        let labels = ControllerLabels::of(controller);
        self.controller_writes.remove(&labels);
        self.controller_syncs.remove(&labels);
        self.sync_seconds.remove(&labels);
        self.controller_ready.remove(&labels);
        self.controller_throttled.remove(&labels);
        self.dependencies.remove(&labels);
        self.resync_skipped.remove(&labels);
        self.output_check_seconds.remove(&labels);
        self.hook_cpu_seconds.remove(&labels);
        self.usage_writes.remove(&labels);
        self.owned_items.remove(&labels);
        self.usage.forget(controller);
        for hook in controller.kind.hooks() {
            let labels = HookLabels {
                kind: controller.kind.as_str(),
                controller: controller.name.clone(),
                hook: hook.as_str(),
            };
            self.hook_seconds.remove(&labels);
            self.hook_failures.remove(&labels);
        }
    }

    /// Records a controller's figures again after [`Metrics::forget`]: it exists anew (it
    /// is being loaded, whether or not that succeeds).
    pub fn admit(&self, controller: &ControllerId) {
        // Every load comes here: the write lock only for one that was removed.
        if self.gone.read().contains_key(controller) {
            self.gone.write().remove(controller);
        }
    }

    /// Adds a change of a controller's dependency count (see [`crate::runtime::reads::dependencies`]).
    /// Not refused after `forget` itself: the gauge follows the index, which refuses a removed
    /// controller's late reads ([`Metrics::unless_removed`]).
    pub fn add_dependencies(&self, controller: &ControllerId, change: i64) {
        self.dependencies
            .get_or_create(&ControllerLabels::of(controller))
            .inc_by(change);
    }

    pub fn set_ready(&self, controller: &ControllerId, ready: bool) {
        self.if_live(controller, |labels| {
            self.controller_ready
                .get_or_create(labels)
                .set(i64::from(ready));
        });
    }

    /// Whether the controller's work waits for its budget now.
    pub fn set_throttled(&self, controller: &ControllerId, throttled: bool) {
        self.if_live(controller, |labels| {
            self.controller_throttled
                .get_or_create(labels)
                .set(i64::from(throttled));
        });
    }

    /// Sharded: the work items of the controller this replica owns.
    pub fn set_owned_items(&self, controller: &ControllerId, items: u64) {
        self.if_live(controller, |labels| {
            self.owned_items.get_or_create(labels).set(items as i64);
        });
    }

    /// The controller's usage for its status; empty for one removed lately, so a status pass
    /// racing its removal does not start its tally again.
    pub fn usage_report(&self, controller: &ControllerId) -> UsageReport {
        let mut report = UsageReport::default();
        self.if_live(controller, |_| report = self.usage.report(controller));
        report
    }
}

/// Serves `/metrics` (Prometheus text format), `/healthz` (the process is up and every worker
/// alive and moving) and `/readyz` (every controller that existed at start is loaded, so the
/// caches its types need are warm) until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: &Metrics,
    ready: Arc<AtomicBool>,
    health: Arc<WorkerHealth>,
) -> std::io::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let registry = Arc::new(metrics.registry());
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move {
                    let mut text = String::new();
                    match prometheus_client::encoding::text::encode(&mut text, &registry) {
                        Ok(()) => (
                            StatusCode::OK,
                            [(
                                "content-type",
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        ),
                        Err(error) => (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            [("content-type", "text/plain")],
                            error.to_string(),
                        ),
                    }
                }
            }),
        )
        .route(
            "/healthz",
            get(move || {
                let health = health.clone();
                async move {
                    match health.check() {
                        Ok(()) => (StatusCode::OK, "ok".to_string()),
                        Err(problems) => (StatusCode::SERVICE_UNAVAILABLE, problems),
                    }
                }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready.load(Ordering::Relaxed) {
                        (StatusCode::OK, "ready")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "starting")
                    }
                }
            }),
        );
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    }
    axum::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::decorator;
    use prometheus_client::encoding::text::encode;

    fn exported(metrics: &Metrics) -> String {
        let mut text = String::new();
        encode(&mut text, &metrics.registry()).unwrap();
        text
    }

    /// A sync still running when its controller is deleted finishes later: what it records
    /// must not bring back the series `forget` dropped.
    #[test]
    fn a_removed_controllers_late_work_records_nothing_until_it_is_loaded_again() {
        let metrics = Metrics::default();
        let id = ControllerId::new(decorator::KIND, "late");
        let other = ControllerId::new(decorator::KIND, "other");
        let work = |id: &ControllerId| {
            metrics.count_sync(id, 0.1);
            metrics.count_write(id);
            metrics.observe_hook(
                id,
                decorator::SYNC,
                Duration::from_millis(2),
                Some(&CallCost::default()),
                true,
            );
            metrics.count_failure(id, "HookFailed");
            metrics.set_ready(id, true);
            metrics.set_throttled(id, true);
            metrics.set_owned_items(id, 5);
        };
        work(&id);
        assert_eq!(metrics.syncs_of(&id), 1);
        assert!(exported(&metrics).contains("controller=\"late\""));

        metrics.forget(&id);
        work(&id);
        work(&other);
        assert_eq!(metrics.syncs_of(&id), 0);
        assert_eq!(metrics.writes_of(&id), 0);
        assert_eq!(metrics.usage.report(&id).total.hook_calls, 0);
        let text = exported(&metrics);
        // Failure counts of a removed controller stay, and count its last work too; nothing
        // else is left.
        let late: Vec<&str> = text
            .lines()
            .filter(|line| line.contains("controller=\"late\""))
            .collect();
        assert!(!late.is_empty(), "the failure counts are gone");
        assert!(
            late.iter()
                .all(|line| line.starts_with("metascript_sync_failures_total")),
            "{late:#?}"
        );
        assert!(late.iter().all(|line| line.ends_with(" 2")), "{late:#?}");
        assert!(metrics.usage.report(&id).total.failures.is_empty());
        assert_eq!(metrics.usage_report(&id), UsageReport::default());
        // Another controller's work counts as ever.
        assert_eq!(metrics.syncs_of(&other), 1);
        assert_eq!(metrics.writes_of(&other), 1);

        metrics.admit(&id);
        work(&id);
        assert_eq!(metrics.syncs_of(&id), 1);
        assert_eq!(metrics.usage.report(&id).total.hook_calls, 1);
    }
}
