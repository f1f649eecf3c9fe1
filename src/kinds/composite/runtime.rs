//! CompositeControllers in the running operator, as one-object controllers
//! ([`crate::kinds::one_object`]): which events reach which parents (a child's controller, the
//! parents whose selector an orphan matches), what a deleted controller releases, and waiting
//! for the caches to show a parent's last writes before planning it again.

use super::api::CompositeController;
use super::plan::Composite;
use crate::api::{ResourceRef, ServiceAccountRef};
use crate::kinds::one_object::{ObjectKind, ObjectRuntime, OneObject, RelatedState};
use crate::object::{self, ObjectKey};
use crate::plan::lifecycle::Phase;
use crate::plan::synced::SyncedPlace;
use crate::plan::{Deletion, Plan};
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::runtime::context::Context;
use crate::runtime::keys::{ObjRef, Work};
use crate::runtime::kind::{Controller, Interest};
use crate::runtime::registry::routes::status_changed;
use crate::runtime::watch::event::ObjectEvent;
use crate::runtime::write::apply::Written;
use crate::store::ObjectStore;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

pub(crate) type CompositeKind = ObjectKind<Composite>;

/// What a CompositeController remembers across reloads.
#[derive(Default)]
pub(crate) struct CompositeState {
    related: RelatedState,
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

impl ObjectRuntime for Composite {
    type Object = CompositeController;
    type State = CompositeState;

    fn build(
        controller: &CompositeController,
        resolver: &dyn ResourceResolver,
    ) -> Result<Composite, ResolveError> {
        Composite::new(controller, resolver)
    }

    fn interest(&self) -> Interest {
        Interest {
            types: std::iter::once(self.parent.clone())
                .chain(self.owned_types())
                .collect(),
            every_type: self.common.has_customize,
        }
    }

    fn related(state: &CompositeState) -> &RelatedState {
        &state.related
    }

    /// The parent type only: its children stay, their parents own them.
    fn released(controller: &CompositeController) -> (Option<ServiceAccountRef>, Vec<ResourceRef>) {
        let spec = &controller.spec;
        let account = ServiceAccountRef::as_it_ran(
            spec.service_account_name.as_deref(),
            spec.service_account_namespace.as_deref(),
        );
        let parent = ResourceRef {
            api_version: spec.parent_resource.api_version.clone(),
            resource: spec.parent_resource.resource.clone(),
        };
        (account, vec![parent])
    }

    fn object_types(&self) -> impl Iterator<Item = &ResourceType> {
        std::iter::once(&self.parent)
    }

    /// A parent's own events, and its children's (a child's controller, the parents whose
    /// selector an orphan matches).
    fn route(
        context: &Context,
        controller: &Controller<CompositeKind>,
        event: &ObjectEvent,
        object: &Value,
    ) {
        let composite = &controller.planner;
        let news = controller.is_news(event);
        if event.resource == composite.parent && news {
            route_parent(context, controller, event, object);
        }
        let owned = composite.owned_types().contains(&event.resource);
        if owned && news {
            route_child(context, controller, event);
        }
    }

    fn synced_on(&self, _: &Value) -> Option<(SyncedPlace, ResourceType)> {
        let resource = &self.parent;
        resource
            .has_status
            .then(|| (SyncedPlace::parent(), resource.clone()))
    }

    fn owned_types(&self) -> Vec<ResourceType> {
        Composite::owned_types(self)
    }

    fn behind(
        context: &Context,
        controller: &Controller<CompositeKind>,
        parent_ref: &ObjRef,
    ) -> Option<Duration> {
        (!caught_up(context, controller, parent_ref)).then_some(CATCH_UP_DELAY)
    }

    /// Expected even when a write failed: those before it were made.
    fn executed(
        state: &CompositeState,
        parent_ref: &ObjRef,
        plan: &Plan,
        written: Option<&Written>,
    ) {
        let expectation = Expectation {
            written: written
                .map(|written| written.versions.clone())
                .unwrap_or_default(),
            deleted: plan.delete.clone(),
            since: Instant::now(),
        };
        state
            .expectations
            .lock()
            .insert(parent_ref.clone(), expectation);
    }

    fn forget(state: &CompositeState, parent_ref: &ObjRef) {
        state.expectations.lock().remove(parent_ref);
    }
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
        .any(|version| composite.wants(version.head()));
    if !wanted {
        return;
    }
    if composite.ignore_status_changes && event.only_status_changed() {
        return;
    }
    // A status written through the main resource (no status subresource) moves the generation,
    // and the write records the generation it expects to produce; a sync that read the parent
    // before the cache caught up with an earlier write of its own expects the wrong one. The
    // event of such a write is acted on rather than ignored as the controller's own, so the
    // next sync sets observedGeneration right.
    let behind = !composite.parent.has_status
        && event
            .new
            .as_ref()
            .is_some_and(|new| generation_behind(new.head()));
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
        let version = version.head();
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
