//! One-object controllers in the running operator: syncing one object (its hooks on the
//! blocking pool, then the plan's writes and the fingerprint of what it saw), queueing every
//! object, and releasing every object's finalizer when the controller itself is deleted.
//! Which events reach which objects is the kind's ([`ObjectRuntime::route`]).

use super::{OneObject, Subject, sync};
use crate::api::{ControllerObject, ResourceRef, ServiceAccountRef};
use crate::plan::Plan;
use crate::plan::lifecycle::{Phase, finalizer_for};
use crate::plan::related::related_objects;
use crate::plan::synced::SyncedPlace;
use crate::reasons;
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::runtime::context::Context;
use crate::runtime::keys::{ControllerId, ObjRef, Work, WorkKey};
use crate::runtime::kind::{self, Controller, Interest, Kind, Outcome};
use crate::runtime::report::problem::Problem;
use crate::runtime::sync::finalizers;
use crate::runtime::sync::related::{CustomizeCache, RelatedIndex, Watched};
use crate::runtime::sync::synced;
use crate::runtime::watch::event::ObjectEvent;
use crate::runtime::watch::store::Swept;
use crate::runtime::write::apply::{PlanTarget, Written};
use crate::runtime::write::fingerprint::{self, Seen, Sweep};
use crate::script::CallScope;
use crate::store::ObjectStore;
use serde_json::Value;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// The kind of a one-object controller, as the runtime runs it.
pub(crate) struct ObjectKind<P>(PhantomData<fn() -> P>);

/// What a one-object controller remembers of each object's related objects across reloads.
#[derive(Default)]
pub(crate) struct RelatedState {
    pub related: RelatedIndex,
    pub customized: CustomizeCache,
}

/// What a one-object kind adds in the operator.
pub(crate) trait ObjectRuntime: OneObject {
    type Object: ControllerObject;
    /// What a controller remembers across reloads.
    type State: Default + Send + Sync + 'static;

    fn build(object: &Self::Object, resolver: &dyn ResourceResolver) -> Result<Self, ResolveError>;

    fn interest(&self) -> Interest;

    fn related(state: &Self::State) -> &RelatedState;

    /// The account a deleted controller ran as, and the types of the objects that may still
    /// hold its finalizer.
    fn released(object: &Self::Object) -> (Option<ServiceAccountRef>, Vec<ResourceRef>);

    /// The types of the objects it syncs.
    fn object_types(&self) -> impl Iterator<Item = &ResourceType>;

    /// Queues the work one watch event causes, but for related objects.
    fn route(
        context: &Context,
        controller: &Controller<ObjectKind<Self>>,
        event: &ObjectEvent,
        object: &Value,
    );

    fn synced_on(&self, object: &Value) -> Option<(SyncedPlace, ResourceType)>;

    /// The types of object the plan's writes may touch besides the object itself.
    fn owned_types(&self) -> Vec<ResourceType>;

    /// How long to wait before planning the object again, when the caches have not yet
    /// caught up with its last sync's writes.
    fn behind(
        _context: &Context,
        _controller: &Controller<ObjectKind<Self>>,
        _key: &ObjRef,
    ) -> Option<Duration> {
        None
    }

    /// A plan's writes were made (`written`; `None` when one failed, after those before it).
    fn executed(_state: &Self::State, _key: &ObjRef, _plan: &Plan, _written: Option<&Written>) {}

    /// The object is gone or no longer the controller's.
    fn forget(_state: &Self::State, _key: &ObjRef) {}
}

impl<P: ObjectRuntime> Kind for ObjectKind<P> {
    type Object = P::Object;
    type Planner = P;
    type State = P::State;
    type OutcomeKey = ObjRef;

    fn build(object: &P::Object, resolver: &dyn ResourceResolver) -> Result<P, ResolveError> {
        P::build(object, resolver)
    }

    fn interest(planner: &P) -> Interest {
        planner.interest()
    }

    async fn installed(
        context: &Arc<Context>,
        controller: &Arc<Controller<Self>>,
        object: &Value,
        _first: bool,
    ) {
        let has_finalize = controller.planner.common().has_finalize;
        finalizers::keep_cleanup_finalizer(context, &controller.id, object, has_finalize).await;
    }

    /// Removes the controller's finalizer from every object of its types, then its own cleanup
    /// finalizer. Children stay: their owners own them.
    async fn release(
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Value,
    ) -> Result<(), Problem> {
        let controller: P::Object = serde_json::from_value(object.clone())
            .map_err(|e| Problem::new(reasons::INVALID_SPEC, e))?;
        let (account, types) = P::released(&controller);
        let finalizer = finalizer_for(kind::name::<Self>(), &id.name);
        finalizers::release_finalizers(context, id, object, account.as_ref(), &types, &finalizer)
            .await
    }

    /// Every object the controller has work for: selected ones and those holding its
    /// finalizer. A sweep of everything reads only each object's head (whether the controller
    /// wants it), and not even that of one its own label-selected watches hold when its rules
    /// select by labels alone; one of changes reads it whole, to compare its fingerprint (the
    /// planner may read its spec: a parent's selector), one at a time as the list is taken.
    fn enqueue_all(context: &Context, controller: &Controller<Self>, sweep: Sweep) -> u64 {
        let mut skipped = 0;
        for resource in controller.planner.object_types() {
            match sweep {
                Sweep::Everything => enqueue_every(context, controller, resource),
                Sweep::Changed => skipped += enqueue_changed(context, controller, resource),
            }
        }
        skipped
    }

    /// What the kind routes the event to, and the objects whose customize rules select it.
    fn route(context: &Context, controller: &Controller<Self>, event: &ObjectEvent) {
        let Some(object) = event.head() else {
            return;
        };
        P::route(context, controller, event, object);
        for key in P::related(&controller.state)
            .related
            .affected(event, |key| context.get(key))
        {
            controller.enqueue(context, Work::Object(key));
        }
    }

    fn synced_on(_: &Context, planner: &P, object: &Value) -> Option<(SyncedPlace, ResourceType)> {
        planner.synced_on(object)
    }

    fn rollout_unit(work: &Work) -> Option<ObjRef> {
        match work {
            Work::Object(object) => Some(object.clone()),
            _ => None,
        }
    }

    async fn sync(
        context: &Arc<Context>,
        controller: &Arc<Controller<Self>>,
        work: &Work,
    ) -> Outcome<ObjRef> {
        match work {
            Work::Object(key) => sync_object(context, controller, key).await,
            _ => Outcome::Done,
        }
    }

    async fn report(_: &Arc<Context>, _: &Arc<Controller<Self>>) {}
}

/// Queues every object of `resource` the controller wants.
fn enqueue_every<P: ObjectRuntime>(
    context: &Context,
    controller: &Controller<ObjectKind<P>>,
    resource: &ResourceType,
) {
    let planner = &controller.planner;
    let leases = match planner.selects_by_labels_alone(resource) {
        true => &controller.watches[..],
        false => &[],
    };
    for swept in context.informers.sweep(resource, leases) {
        let key = match swept {
            Swept::Selected(key) => key,
            Swept::Kept(kept) => {
                let head = kept.head();
                if !planner.wants(&head) {
                    continue;
                }
                ObjRef::of(resource, &head)
            }
        };
        controller.enqueue(context, Work::Object(key));
    }
}

/// Queues every object of `resource` the controller wants whose last sync saw something else
/// than the cache holds now; how many it passed over.
fn enqueue_changed<P: ObjectRuntime>(
    context: &Context,
    controller: &Controller<ObjectKind<P>>,
    resource: &ResourceType,
) -> u64 {
    let mut skipped = 0;
    for object in ObjectStore::list(&*context.informers, resource, None) {
        if !controller.planner.wants(&object) {
            continue;
        }
        let key = ObjRef::of(resource, &object);
        if unchanged(context, controller, &key, &object) {
            skipped += 1;
            continue;
        }
        controller.enqueue(context, Work::Object(key));
    }
    skipped
}

/// Whether an object's last sync was pure and saw exactly what the cache holds now.
fn unchanged<P: ObjectRuntime>(
    context: &Context,
    controller: &Controller<ObjectKind<P>>,
    key: &ObjRef,
    object: &Value,
) -> bool {
    let Some(recorded) = controller.outcomes.fingerprint(key) else {
        return false;
    };
    let Some(seen) = seen(context, controller, key, object) else {
        return false;
    };
    let reads = context.current_reads(&controller.id, || Work::Object(key.clone()));
    seen.fingerprint(controller.version, reads) == recorded
}

/// What a sync of the object builds its hook requests from, as the cache holds it now: the
/// object, its observed children and the objects its customize rules relate to it. `None` when
/// the object's phase runs no hook or its children cannot be read.
fn seen<P: ObjectRuntime>(
    context: &Context,
    controller: &Controller<ObjectKind<P>>,
    key: &ObjRef,
    object: &Value,
) -> Option<Seen> {
    let planner = &controller.planner;
    if !planner.phase(object).runs_hook() {
        return None;
    }
    let store = &*context.informers;
    let mut seen = Seen::default();
    seen.object(object);
    for child in planner.observed(store, object)? {
        seen.object(&child);
    }
    if planner.has_customize() {
        let rules = P::related(&controller.state).related.rules_of(key);
        for related in related_objects(store, object, &rules) {
            seen.object(&related);
        }
    }
    Some(seen)
}

/// Syncs one object: hooks on the blocking pool, then the plan's writes. An object that is gone
/// or no longer the controller's is forgotten.
async fn sync_object<P: ObjectRuntime>(
    context: &Arc<Context>,
    controller: &Arc<Controller<ObjectKind<P>>>,
    key: &ObjRef,
) -> Outcome<ObjRef> {
    let only = controller
        .planner
        .plans_from_head()
        .then_some(crate::store::HEAD_AND_STATUS);
    let read = context
        .read_for_sync(key, only)
        .filter(|read| controller.planner.phase(&read.object) != Phase::Idle);
    let Some(read) = read else {
        let related = P::related(&controller.state);
        related.related.remove(key);
        related.customized.remove(key);
        P::forget(&controller.state, key);
        return Outcome::Forgotten(key.clone());
    };
    let object = read.object.clone();
    if let Some(delay) = P::behind(context, controller, key) {
        return Outcome::Synced {
            key: key.clone(),
            resync_after: Some(delay),
            fingerprint: None,
        };
    }
    let scope = controller.scope(context, controller.planner.reads());
    let failed = |failure: Problem| Outcome::Failed {
        key: key.clone(),
        about: object.clone(),
        failure: failure.scrubbed(&scope.secrets),
    };
    let text = read.text().cloned();
    let mut plan = match plan_object(context, controller, &object, text, key, &scope).await {
        Ok(Some(plan)) => plan,
        Ok(None) => {
            return Outcome::Synced {
                key: key.clone(),
                resync_after: None,
                fingerprint: None,
            };
        }
        Err(failure) => return failed(failure),
    };
    let clear = synced::succeeded(context, controller, &object, &mut plan);
    // A status from the hook is checked against the type's schema with the whole object.
    let object = match plan.writes_hook_status() {
        true => read.whole(),
        false => object.clone(),
    };
    let mut written = Written::default();
    if !plan.is_noop() {
        let owned_types = controller.planner.owned_types();
        let target = PlanTarget {
            object: &object,
            resource: &key.resource,
            child_types: &owned_types,
            controller: &controller.id,
            writer: &controller.writer,
        };
        let executed = context.applier.execute(&target, &plan).await;
        P::executed(&controller.state, key, &plan, executed.as_ref().ok());
        written = match executed {
            Ok(written) => written,
            Err(error) => return failed(error.into()),
        };
        tracing::debug!(controller = %controller.id, object = %key, claimed = plan.claims.len(), applied = plan.apply.len(), deleted = plan.delete.len(), "synced");
    }
    synced::write_alone(context, controller, &object, clear, &written).await;
    let fingerprint = seen(context, controller, key, &object)
        .and_then(|seen| fingerprint::after_sync(controller.version, seen, &written, &scope));
    Outcome::Synced {
        key: key.clone(),
        resync_after: plan.resync_after(),
        fingerprint,
    }
}

/// Plans an object on the blocking pool (customize, then sync or finalize), then records what
/// its hooks read and publishes the Events they asked for. Every hook of the sync runs in
/// `scope`, so what they read together is what the object depends on.
async fn plan_object<P: ObjectRuntime>(
    context: &Arc<Context>,
    controller: &Arc<Controller<ObjectKind<P>>>,
    object: &Arc<Value>,
    text: Option<Arc<str>>,
    key: &ObjRef,
    scope: &CallScope,
) -> Result<Option<Plan>, Problem> {
    let (planner, object_now, key_now, state, id, version) = (
        controller.planner.clone(),
        object.clone(),
        key.clone(),
        controller.state.clone(),
        controller.id.clone(),
        controller.version,
    );
    let planned = context
        .blocking(
            &controller.id,
            &controller.hooks,
            scope,
            move |context, runner| {
                // Nothing its account may not read reaches its hooks.
                if planner.phase(&object_now).runs_hook() {
                    let reads = planner.observed_scopes(&key_now.resource, &object_now);
                    crate::plan::admit(runner.scope, &id.name, &reads)?;
                }
                // The customize hook's types are resolved and watched before sync reads them
                // from the caches, and indexed so their changes re-sync this object.
                let related_state = P::related(&state);
                let related = Watched {
                    context,
                    id: &id,
                    index: &related_state.related,
                    customized: &related_state.customized,
                    version,
                    target_ref: &key_now,
                    target: &object_now,
                    scope: runner.scope,
                };
                let subject = Subject {
                    tree: &object_now,
                    text: text.as_deref(),
                };
                sync(&*planner, runner, &*context.informers, subject, &related)
            },
        )
        .await;
    context.record_reads(
        &WorkKey::new(&controller.id, Work::Object(key.clone())),
        scope,
    );
    if planned.is_ok() {
        let action = kind::name::<ObjectKind<P>>().action();
        context
            .publish_script_events(object, &controller.reference, action, &scope.events)
            .await;
    }
    Ok(planned?.map(|synced| synced.plan))
}
