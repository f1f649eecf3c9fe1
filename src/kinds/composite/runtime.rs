//! CompositeControllers in the running operator: which events reach which parents (a child's
//! controller, the parents whose selector an orphan matches, the parents whose customize rules
//! select a related object), syncing one parent, and releasing every parent's finalizer when the
//! controller itself is deleted.

use super::api::{CompositeController, KIND};
use super::plan::Composite;
use super::sync;
use crate::api::{ResourceRef, ServiceAccountRef};
use crate::object::{self, ObjectKey};
use crate::plan::lifecycle::{Phase, finalizer_for};
use crate::plan::related::related_objects;
use crate::plan::synced::SyncedPlace;
use crate::plan::{Deletion, Plan};
use crate::reasons;
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::runtime::context::{Context, Failure};
use crate::runtime::keys::{ControllerId, ObjRef, Work, WorkKey};
use crate::runtime::kind::{Controller, Interest, Kind, Outcome};
use crate::runtime::registry::routes::{only_status_changed, status_changed};
use crate::runtime::sync::finalizers;
use crate::runtime::sync::related::{CustomizeCache, RelatedIndex, Watched};
use crate::runtime::sync::synced;
use crate::runtime::watch::cache::ObjectEvent;
use crate::runtime::write::apply::{PlanTarget, Written};
use crate::runtime::write::fingerprint::{self, Seen, Sweep};
use crate::script::CallScope;
use crate::store::ObjectStore;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct CompositeKind;

/// What a CompositeController remembers across reloads.
#[derive(Default)]
pub struct CompositeState {
    related: RelatedIndex,
    customized: CustomizeCache,
    expectations: Mutex<HashMap<ObjRef, Expectation>>,
}

/// What the last sync of a parent wrote and deleted, until the watch caches show it (the
/// expectations of Kubernetes' own controllers). A sync planned from caches that lag behind the
/// controller's own writes would take a child it just created for missing, or one it just
/// moved for still waiting, and a rolling update would then move more than one child at a
/// time; so a parent is not planned again until its caches have caught up, or for at most
/// [`EXPECTATION_TTL`] (an object deleted by someone else right after the write never shows
/// the version the write produced).
struct Expectation {
    written: Vec<(ObjectKey, String)>,
    deleted: Vec<Deletion>,
    since: Instant,
}

const EXPECTATION_TTL: Duration = Duration::from_secs(10);

/// How soon a parent whose caches lag behind its last sync is looked at again (its objects'
/// events usually queue it sooner).
const CATCH_UP_DELAY: Duration = Duration::from_millis(200);

impl Kind for CompositeKind {
    type Object = CompositeController;
    type Planner = Composite;
    type State = CompositeState;
    type OutcomeKey = ObjRef;

    fn build(
        controller: &CompositeController,
        resolver: &dyn ResourceResolver,
    ) -> Result<Composite, ResolveError> {
        Composite::new(controller, resolver)
    }

    fn interest(composite: &Composite) -> Interest {
        Interest {
            types: std::iter::once(composite.parent.clone())
                .chain(composite.owned_types())
                .collect(),
            every_type: composite.has_customize,
        }
    }

    async fn installed(
        context: &Arc<Context>,
        controller: &Arc<Controller<Self>>,
        object: &Value,
        _first: bool,
    ) {
        let has_finalize = controller.planner.has_finalize;
        finalizers::keep_cleanup_finalizer(context, &controller.id, object, has_finalize).await;
    }

    /// Removes the controller's finalizer from every parent, then its own cleanup finalizer.
    /// Children stay: their parents own them.
    async fn release(
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Value,
    ) -> Result<(), Failure> {
        let controller: CompositeController = serde_json::from_value(object.clone())
            .map_err(|e| Failure::new(reasons::INVALID_SPEC, e))?;
        let spec = &controller.spec;
        let account = ServiceAccountRef::as_it_ran(
            spec.service_account_name.as_deref(),
            spec.service_account_namespace.as_deref(),
        );
        let parent = ResourceRef {
            api_version: spec.parent_resource.api_version.clone(),
            resource: spec.parent_resource.resource.clone(),
        };
        let finalizer = finalizer_for(KIND, &id.name);
        finalizers::release_finalizers(context, id, object, account.as_ref(), &[parent], &finalizer)
            .await
    }

    fn enqueue_all(context: &Context, controller: &Controller<Self>, sweep: Sweep) -> u64 {
        let composite = &controller.planner;
        let mut skipped = 0;
        for parent in ObjectStore::list(&*context.informers, &composite.parent, None) {
            if !composite.wants(&parent) {
                continue;
            }
            let parent_ref = ObjRef::of(&composite.parent, &parent);
            if sweep == Sweep::Changed && unchanged(context, controller, &parent_ref, &parent) {
                skipped += 1;
                continue;
            }
            controller.enqueue(context, Work::Object(parent_ref));
        }
        skipped
    }

    fn route(context: &Context, controller: &Controller<Self>, event: &ObjectEvent) {
        let Some(object) = event.new.as_ref().or(event.old.as_ref()) else {
            return;
        };
        let composite = &controller.planner;
        let news = controller.is_news(event);
        if event.resource == composite.parent && news {
            route_parent(context, controller, event, object);
        }
        let owned = composite.owned_types().contains(&event.resource);
        if owned && news {
            route_child(context, controller, event);
        }
        for parent in controller
            .state
            .related
            .affected(event, |parent| context.get(parent))
        {
            controller.enqueue(context, Work::Object(parent));
        }
    }

    fn synced_on(
        _: &Context,
        composite: &Composite,
        _: &Value,
    ) -> Option<(SyncedPlace, ResourceType)> {
        let resource = &composite.parent;
        resource
            .has_status
            .then(|| (SyncedPlace::parent(), resource.clone()))
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
            Work::Object(parent) => sync_parent(context, controller, parent).await,
            _ => Outcome::Done,
        }
    }

    async fn report(_: &Arc<Context>, _: &Arc<Controller<Self>>) {}
}

/// A parent event: queued when the controller has work for the new version or had for the old
/// one (a deleted parent, too, so it is forgotten), unless it is the event of the controller's
/// own write or a status change `ignoreStatusChanges` asks to ignore.
///
/// The controller's own status write is not ignored: the hook is called with the parent's
/// status, and hooks keep state there (Metacontroller's daemonjob records completion in status,
/// then deletes its DaemonSet on the sync that reads it back). Metacontroller syncs again on
/// that write, so a hook whose answer depends on the status it returned converges the same way
/// here; one whose status is stable finds nothing to write on that sync.
fn route_parent(
    context: &Context,
    controller: &Controller<CompositeKind>,
    event: &ObjectEvent,
    object: &Value,
) {
    let composite = &controller.planner;
    let wanted = [&event.old, &event.new]
        .into_iter()
        .flatten()
        .any(|version| composite.wants(version));
    if !wanted {
        return;
    }
    if let (Some(old), Some(new)) = (&event.old, &event.new)
        && composite.ignore_status_changes
        && only_status_changed(old, new)
    {
        return;
    }
    // A status written through the main resource (no status subresource) moves the generation,
    // and the write records the generation it expects to produce; a sync that read the parent
    // before the cache caught up with an earlier write of its own expects the wrong one. The
    // event of such a write is acted on rather than ignored as the controller's own, so the
    // next sync sets observedGeneration right.
    let behind =
        !composite.parent.has_status && event.new.as_deref().is_some_and(generation_behind);
    if !behind && !status_changed(event) && context.applier.own_writes.is_own(&controller.id, event)
    {
        return;
    }
    controller.enqueue(context, Work::Object(ObjRef::of(&event.resource, object)));
}

/// Whether a parent's `status.observedGeneration` is set and behind its generation.
fn generation_behind(parent: &Value) -> bool {
    let at = |pointer| parent.pointer(pointer).and_then(Value::as_i64);
    matches!(
        (at("/status/observedGeneration"), at("/metadata/generation")),
        (Some(observed), Some(generation)) if observed < generation
    )
}

/// A child (or ControllerRevision) event: its controller, before and after, if that is a
/// parent; and for an orphan, every parent whose selector matches it (one may adopt it). Even a
/// child exactly as this controller applied it syncs its parent: the hook sees the observed
/// children and reports on them in status.
fn route_child(context: &Context, controller: &Controller<CompositeKind>, event: &ObjectEvent) {
    let composite = &controller.planner;
    let mut parents = HashSet::new();
    let is_child = composite
        .children
        .iter()
        .any(|child| child.resource == event.resource);
    for version in [&event.old, &event.new].into_iter().flatten() {
        match ObjRef::owner_of(&composite.parent, version) {
            Some(parent) => {
                parents.insert(parent);
            }
            None if is_child
                && object::controller_ref(version).is_none()
                && !object::is_deleting(version) =>
            {
                let scope = composite.parent.scope_of(version);
                for parent in ObjectStore::list(&*context.informers, &composite.parent, scope) {
                    let adopts = composite.phase(&parent) == Phase::Sync
                        && composite
                            .selector(&parent)
                            .is_ok_and(|selector| selector.matches_labels_of(version));
                    if adopts {
                        parents.insert(ObjRef::of(&composite.parent, &parent));
                    }
                }
            }
            None => {}
        }
    }
    for parent in parents {
        controller.enqueue(context, Work::Object(parent));
    }
}

/// Whether the caches show everything the parent's last sync wrote and deleted (or waited long
/// enough). A failed write of that sync leaves nothing to wait for but what it wrote before.
fn caught_up(
    context: &Context,
    controller: &Controller<CompositeKind>,
    parent_ref: &ObjRef,
) -> bool {
    let mut expectations = controller.state.expectations.lock();
    let Some(expectation) = expectations.get(parent_ref) else {
        return true;
    };
    let composite = &controller.planner;
    let types: Vec<ResourceType> = std::iter::once(composite.parent.clone())
        .chain(composite.owned_types())
        .collect();
    let cached = |key: &ObjectKey| {
        let resource = types
            .iter()
            .find(|t| t.kind == key.kind && t.api_version == key.api_version)?;
        context
            .informers
            .get(resource, key.namespace.as_deref(), &key.name)
    };
    let shown = expectation.written.iter().all(|(key, version)| {
        cached(key).is_some_and(|object| {
            let seen = object::str_at(&object, "/metadata/resourceVersion").unwrap_or_default();
            at_least(seen, version)
        })
    });
    let gone = expectation.deleted.iter().all(|deletion| {
        cached(&deletion.key).is_none_or(|object| {
            object::is_deleting(&object)
                || deletion
                    .uid
                    .as_deref()
                    .is_some_and(|uid| object::uid(&object) != Some(uid))
        })
    });
    let done = (shown && gone) || expectation.since.elapsed() > EXPECTATION_TTL;
    if done {
        expectations.remove(parent_ref);
    }
    done
}

/// Whether the cache's version of an object is the one a write produced or a later one.
/// resourceVersions are opaque to clients, but they come from one etcd's revision counter, so
/// two numeric ones order; anything else must be equal.
fn at_least(seen: &str, written: &str) -> bool {
    match (seen.parse::<u64>(), written.parse::<u64>()) {
        (Ok(seen), Ok(written)) => seen >= written,
        _ => seen == written,
    }
}

/// Whether a parent's last sync was pure and saw exactly what the cache holds now.
fn unchanged(
    context: &Context,
    controller: &Controller<CompositeKind>,
    parent_ref: &ObjRef,
    parent: &Value,
) -> bool {
    let Some(recorded) = controller.outcomes.fingerprint(parent_ref) else {
        return false;
    };
    let Some(seen) = seen(context, controller, parent_ref, parent) else {
        return false;
    };
    let reads = context.current_reads(&controller.id, || Work::Object(parent_ref.clone()));
    seen.fingerprint(controller.version, reads) == recorded
}

/// What a sync of the parent builds its hook requests from, as the cache holds it now: the
/// parent, the children it claims, its ControllerRevisions and the objects its customize rules
/// relate to it. `None` when the parent's phase runs no hook or its selector is unreadable.
fn seen(
    context: &Context,
    controller: &Controller<CompositeKind>,
    parent_ref: &ObjRef,
    parent: &Value,
) -> Option<Seen> {
    let composite = &controller.planner;
    if !composite.phase(parent).runs_hook() {
        return None;
    }
    let selector = composite.selector(parent).ok()?;
    let store = &*context.informers;
    let mut seen = Seen::default();
    seen.object(parent);
    for child in sync::claimed(composite, store, parent, &selector) {
        seen.object(&child);
    }
    if let Some(revision_type) = &composite.revisions {
        for revision in sync::revisions(store, revision_type, parent) {
            seen.object(&revision);
        }
    }
    if composite.has_customize {
        let rules = controller.state.related.rules_of(parent_ref);
        for related in related_objects(store, parent, &rules) {
            seen.object(&related);
        }
    }
    Some(seen)
}

/// Syncs one parent: hooks on the blocking pool, then the plan's writes. A parent that is gone
/// or no longer the controller's is forgotten.
async fn sync_parent(
    context: &Arc<Context>,
    controller: &Arc<Controller<CompositeKind>>,
    parent_ref: &ObjRef,
) -> Outcome<ObjRef> {
    let object = context
        .get(parent_ref)
        .filter(|object| controller.planner.phase(object) != Phase::Idle);
    let Some(object) = object else {
        controller.state.related.remove(parent_ref);
        controller.state.customized.remove(parent_ref);
        controller.state.expectations.lock().remove(parent_ref);
        return Outcome::Forgotten(parent_ref.clone());
    };
    if !caught_up(context, controller, parent_ref) {
        return Outcome::Synced {
            key: parent_ref.clone(),
            resync_after: Some(CATCH_UP_DELAY),
            fingerprint: None,
        };
    }
    let scope = controller.scope(context, &controller.planner.reads);
    let failed = |failure: Failure| Outcome::Failed {
        key: parent_ref.clone(),
        about: object.clone(),
        failure: failure.scrubbed(&scope.secrets),
    };
    let mut plan = match plan_parent(context, controller, &object, parent_ref, &scope).await {
        Ok(Some(plan)) => plan,
        Ok(None) => {
            return Outcome::Synced {
                key: parent_ref.clone(),
                resync_after: None,
                fingerprint: None,
            };
        }
        Err(failure) => return failed(failure),
    };
    let clear = synced::succeeded(context, controller, &object, &mut plan);
    let mut written = Written::default();
    if !plan.is_noop() {
        let owned_types = controller.planner.owned_types();
        let target = PlanTarget {
            object: &object,
            resource: &parent_ref.resource,
            child_types: &owned_types,
            controller: &controller.id,
            writer: &controller.writer,
        };
        let executed = context.applier.execute(&target, &plan).await;
        // Expected even when a write failed: those before it were made.
        let expectation = Expectation {
            written: executed
                .as_ref()
                .map(|written| written.versions.clone())
                .unwrap_or_default(),
            deleted: plan.delete.clone(),
            since: Instant::now(),
        };
        controller
            .state
            .expectations
            .lock()
            .insert(parent_ref.clone(), expectation);
        written = match executed {
            Ok(written) => written,
            Err(error) => return failed(error.into()),
        };
        tracing::debug!(controller = %controller.id, parent = %parent_ref, claimed = plan.claims.len(), applied = plan.apply.len(), deleted = plan.delete.len(), "synced");
    }
    synced::write_alone(context, controller, &object, clear, &written).await;
    let fingerprint = seen(context, controller, parent_ref, &object)
        .and_then(|seen| fingerprint::after_sync(controller.version, seen, &written, &scope));
    Outcome::Synced {
        key: parent_ref.clone(),
        resync_after: plan.resync_after(),
        fingerprint,
    }
}

/// Plans a parent on the blocking pool (customize, older revisions, then sync or finalize),
/// then records what its hooks read and publishes the Events they asked for. Every hook of the
/// sync runs in `scope`, so what they read together is what the parent depends on.
async fn plan_parent(
    context: &Arc<Context>,
    controller: &Arc<Controller<CompositeKind>>,
    object: &Arc<Value>,
    parent_ref: &ObjRef,
    scope: &CallScope,
) -> Result<Option<Plan>, Failure> {
    let (planner, parent, key, state, id, version) = (
        controller.planner.clone(),
        object.clone(),
        parent_ref.clone(),
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
                if planner.phase(&parent).runs_hook() {
                    let reads = sync::observed_scopes(&planner, &parent);
                    crate::plan::admit(runner.scope, &id.name, &reads)?;
                }
                // The customize hook's types are resolved and watched before sync reads them
                // from the caches, and indexed so their changes re-sync this parent.
                let related = Watched {
                    context,
                    id: &id,
                    index: &state.related,
                    customized: &state.customized,
                    version,
                    target_ref: &key,
                    target: &parent,
                    scope: runner.scope,
                };
                sync::sync_parent(&planner, runner, &*context.informers, &parent, &related)
            },
        )
        .await;
    context.record_reads(
        &WorkKey::new(&controller.id, Work::Object(parent_ref.clone())),
        scope,
    );
    if planned.is_ok() {
        context
            .publish_script_events(object, &controller.reference, KIND.action(), &scope.events)
            .await;
    }
    Ok(planned?.map(|synced| synced.plan))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_or_equal_resource_version_has_caught_up() {
        assert!(at_least("120", "120"));
        assert!(at_least("121", "120"));
        assert!(!at_least("99", "120"), "numeric, not textual, order");
        assert!(at_least("opaque", "opaque"));
        assert!(
            !at_least("opaque-2", "opaque-1"),
            "unordered versions must be equal"
        );
    }

    #[test]
    fn a_parent_whose_observed_generation_is_behind_is_noticed() {
        let parent = |observed: Option<i64>| {
            let mut parent = serde_json::json!({"metadata": {"generation": 4}});
            if let Some(observed) = observed {
                parent["status"] = serde_json::json!({"observedGeneration": observed});
            }
            parent
        };
        assert!(generation_behind(&parent(Some(3))));
        assert!(!generation_behind(&parent(Some(4))));
        assert!(
            !generation_behind(&parent(None)),
            "nothing recorded is not behind"
        );
    }
}
