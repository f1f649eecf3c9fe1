//! What a kind of controller contributes to the runtime: how to read its objects, which events
//! concern it, what work they cause and how one item of work runs. Loading, reloading,
//! removal, status and failure handling are the runtime's ([`crate::runtime::registry`]), written once.

use crate::api::{Budget, ControllerObject, EventReasons, KindName, Rollout};
use crate::hooks::ControllerHooks;
use crate::plan::Planner;
use crate::plan::rollout::Share;
use crate::reads::ReadPolicy;
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::runtime::context::Context;
use crate::runtime::keys::{ControllerId, Work, WorkKey};
use crate::runtime::load::ScriptSources;
use crate::runtime::load::credentials::CredentialWatch;
use crate::runtime::replicas::shard::Sharded;
use crate::runtime::report::problem::Problem;
use crate::runtime::report::status::{Health, SyncOutcomes};
use crate::runtime::watch::cache::WatchLease;
use crate::runtime::watch::event::ObjectEvent;
use crate::runtime::write::apply::Writer;
use crate::runtime::write::fingerprint::Sweep;
use k8s_openapi::api::core::v1::ObjectReference;
use parking_lot::RwLock;
use serde_json::Value;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub trait Kind: Sized + Send + Sync + 'static {
    /// The controller object, as its API type (which names the kind and its hooks).
    type Object: ControllerObject;
    /// The pure planner built from a controller object.
    type Planner: Planner + Clone;
    /// What a controller remembers across reloads (indexes, bindings).
    type State: Default + Send + Sync + 'static;
    /// What the status counts are kept by: a target, a (parent, map key) group. Its text is
    /// what a canary rollout picks its share by; sharded, the replica owning its item keeps it.
    type OutcomeKey: Clone + Eq + Hash + std::fmt::Display + Send + Sync + Sharded + 'static;

    /// Builds the planner; every type the spec names has been resolved already.
    fn build(
        object: &Self::Object,
        resolver: &dyn ResourceResolver,
    ) -> Result<Self::Planner, ResolveError>;

    /// Which events the controller wants to see.
    fn interest(planner: &Self::Planner) -> Interest;

    /// Runs once a version is installed (`first`: no version ran before).
    fn installed(
        context: &Arc<Context>,
        controller: &Arc<Controller<Self>>,
        object: &Value,
        first: bool,
    ) -> impl Future<Output = ()> + Send;

    /// Undoes what must not outlive a controller object being deleted (after it stopped
    /// running); an error is retried.
    fn release(
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Value,
    ) -> impl Future<Output = Result<(), Problem>> + Send;

    /// Queues every work item the controller has (a reload, a resync); with
    /// [`Sweep::Changed`], only those whose fingerprint differs from their last sync's. Returns
    /// how many it skipped.
    fn enqueue_all(context: &Context, controller: &Controller<Self>, sweep: Sweep) -> u64;

    /// Queues the work one watch event causes (of a type `interest` named, or any type).
    fn route(context: &Context, controller: &Controller<Self>, event: &ObjectEvent);

    /// What a work item is about, as its outcome is kept: the unit a canary rollout serves
    /// from one revision or the other. `None`: work either revision may do (the serving one
    /// does it), such as a map parent's fan-out to its pairs.
    fn rollout_unit(work: &Work) -> Option<Self::OutcomeKey>;

    /// Whether a work item only queues other work and writes nothing of its own (a map parent
    /// fanning out into its pairs): work no unit is about. Sharded, every replica runs it and
    /// keeps what it owns.
    fn fans_out(work: &Work) -> bool {
        *work != Work::Load && Self::rollout_unit(work).is_none()
    }

    /// Runs one work item (never `Work::Load`).
    fn sync(
        context: &Arc<Context>,
        controller: &Arc<Controller<Self>>,
        work: &Work,
    ) -> impl Future<Output = Outcome<Self::OutcomeKey>> + Send;

    /// Where the `Synced` condition of `object` (a target or parent the work was about) goes,
    /// and the object's type; `None` where its type has no status subresource, so the object
    /// has nowhere to say it.
    fn synced_on(
        context: &Context,
        planner: &Self::Planner,
        object: &Value,
    ) -> Option<(crate::plan::synced::SyncedPlace, ResourceType)>;

    /// A unit that was failing synced well, or is gone: what reports its failure elsewhere
    /// (a map parent's condition, over all its pairs) looks again.
    fn recovered(_controller: &Controller<Self>, _unit: &Self::OutcomeKey) {}

    /// Reports what the status loop keeps current besides the controller's own status.
    fn report(
        context: &Arc<Context>,
        controller: &Arc<Controller<Self>>,
    ) -> impl Future<Output = ()> + Send;
}

/// The kind's names (from its API type).
pub(crate) fn name<K: Kind>() -> KindName {
    <K::Object as ControllerObject>::KIND
}

/// Which watch events a controller wants routed to it.
pub struct Interest {
    pub types: Vec<ResourceType>,
    /// Events of every watched type (a customize hook may relate to any type, chosen per
    /// target at sync time).
    pub every_type: bool,
}

/// The share of work items a candidate revision serves ([`crate::runtime::rollout`]), changed in place
/// as its canary steps on. Here, beside the controller field that holds it, so that the
/// rollouts build on controllers and not the other way round.
#[derive(Debug)]
pub struct CandidateShare(RwLock<Share>);

impl CandidateShare {
    pub(super) fn new(share: Share) -> CandidateShare {
        CandidateShare(RwLock::new(share))
    }

    pub(crate) fn serves(&self, unit: &str) -> bool {
        self.0.read().serves(unit)
    }

    pub(super) fn get(&self) -> Share {
        *self.0.read()
    }

    pub(super) fn set(&self, share: Share) {
        *self.0.write() = share;
    }
}

/// One loaded controller: the version running and what it remembers.
pub struct Controller<K: Kind> {
    pub id: ControllerId,
    /// The controller object this version was loaded from (for a revision restored from its
    /// snapshot, as it was then).
    pub object: Arc<Value>,
    /// Its revision ([`crate::plan::rollout::revision`]): what it runs, apart from how it
    /// rolls out.
    pub revision: String,
    /// Its `spec.rollout`.
    pub rollout: Rollout,
    /// What it may cost per minute: its `spec.budget` within the operator's default and ceiling.
    pub budget: Budget,
    /// Set on a candidate revision: the share of work items it serves, which is all it queues.
    pub share: Option<Arc<CandidateShare>>,
    /// The controller object, as Events about its targets name it.
    pub reference: ObjectReference,
    pub generation: Option<i64>,
    /// What runs (the generation and every hook digest), as the seed of every fingerprint.
    pub version: u64,
    pub planner: Arc<K::Planner>,
    /// The hooks running: the newest that compiled.
    pub hooks: Arc<ControllerHooks>,
    /// Keep the label-selected watches of the types it scopes running while it may run (a
    /// version kept after a failed edit keeps the watches it loaded with).
    pub watches: Arc<[WatchLease]>,
    pub health: Health,
    pub resync_period: Option<Duration>,
    /// Whose reasons its sync failure Events use (`spec.compatibility.eventReasons`).
    pub event_reasons: EventReasons,
    pub sources: ScriptSources,
    /// What its webhook credentials were read from, to notice their rotation.
    pub credentials: Option<Arc<CredentialWatch>>,
    /// Whom its writes go as.
    pub writer: Writer,
    /// What its hooks may be handed: what its ServiceAccount may read (`None`: a controller
    /// without one reads with the operator's access, as `--allow-unimpersonated` allows).
    pub reads: Option<Arc<dyn ReadPolicy>>,
    /// Kept across reloads.
    pub outcomes: Arc<SyncOutcomes<K::OutcomeKey>>,
    pub state: Arc<K::State>,
    /// When it last queued everything it acts on from the cache (at load): events of lists
    /// that completed before then are already covered, and routing them would sync twice.
    pub queued_all_at: Instant,
    /// The controller's `metascript.dev/sync-requested-at` annotation when it was loaded: a new
    /// value syncs everything it acts on once.
    pub sync_requested: Option<String>,
}

impl<K: Kind> Controller<K> {
    /// What its webhook credentials were when it loaded (a digest that hides them), `None` for
    /// a controller whose webhooks name none.
    pub(crate) fn credentials_digest(&self) -> Option<&str> {
        self.credentials.as_deref().map(CredentialWatch::digest)
    }

    /// Whether the event can still queue work the controller has not queued: not an object
    /// seen in a list that its queueing of everything already read. Deletions always are (what
    /// was deleted must be forgotten); kinds keep their indexes up to date with every event and
    /// only skip queueing.
    pub(crate) fn is_news(&self, event: &ObjectEvent) -> bool {
        event.new.is_none()
            || event
                .listed_at
                .is_none_or(|listed| listed > self.queued_all_at)
    }

    /// A scope for one work item's hooks: reading the types in `declared`, as the controller's
    /// account may.
    pub(crate) fn scope(
        &self,
        context: &Context,
        declared: &Arc<[ResourceType]>,
    ) -> crate::script::CallScope {
        context.scope(declared, self.reads.as_ref())
    }

    /// Queues one work item of this controller (of a candidate revision, only one of its
    /// share).
    pub(crate) fn enqueue(&self, context: &Context, work: Work) {
        if let Some(share) = &self.share
            && !K::rollout_unit(&work).is_some_and(|unit| share.serves(&unit.to_string()))
        {
            return;
        }
        context.queue.add(WorkKey::new(&self.id, work));
    }
}

/// How one work item ended, for the runtime to record.
pub enum Outcome<Key> {
    /// Nothing to record.
    Done,
    /// Synced; `resync_after` asks for another sync. `fingerprint`: what the sync saw, when its
    /// hooks were pure (see [`crate::runtime::write::fingerprint`]).
    Synced {
        key: Key,
        resync_after: Option<Duration>,
        fingerprint: Option<u64>,
    },
    /// What the work was about is gone or no longer the controller's: no longer counted.
    Forgotten(Key),
    /// Failed: retried with backoff, counted as failing, reported as an Event on `about`.
    Failed {
        key: Key,
        about: Arc<Value>,
        failure: Problem,
    },
}
