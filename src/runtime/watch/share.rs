//! Which objects of a type a sharded replica keeps whole: its share. A controller's target or
//! parent is one work item, written by the replica that owns it (rendezvous hashing over the
//! live replicas, [`crate::runtime::replicas::shard`]); only that replica reads it. So a view
//! that only such controllers use ([`crate::api::ControllerSpec::shard_scoped`]) keeps the
//! text of the objects their rules select and this replica owns, and only what identifies the
//! others (namespace, name, uid, resourceVersion): enough to take an object's text when it
//! comes this replica's way without listing what it already knows, and to tell a deletion.
//! Anything else that names the type (a child, an input, a read, a finalize hook) keeps it
//! whole.

use crate::api::Selection;
use crate::resources::ResourceType;
use crate::runtime::keys::{ControllerId, ObjRef};
use crate::runtime::replicas::shard::{Assignment, Item};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// A controller that needs of a type only its share, and what its rules select of it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sharer {
    pub controller: ControllerId,
    pub selections: Vec<Selection>,
}

/// What one view keeps whole.
#[derive(Clone, Debug, Default)]
pub(super) struct Share {
    /// Sharded replicas only: the view's type and who owns what. Without it every object is
    /// kept.
    sharded: Option<(ResourceType, Arc<Assignment>)>,
    /// The controllers that use the type only as their share, by the lease that holds each.
    sharers: HashMap<u64, Sharer>,
    next_sharer: u64,
    /// Something needs every object: nothing is left out.
    whole: bool,
    /// Counts the changes of what is kept, so a list taken across one is refilled.
    generation: u64,
}

impl Share {
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Follows a new assignment of the items.
    pub(super) fn assign(&mut self, resource: &ResourceType, assignment: Arc<Assignment>) {
        let filtered = self.filters();
        self.sharded = Some((resource.clone(), assignment));
        // A view that keeps everything whatever the assignment does not change.
        if filtered || self.filters() {
            self.generation += 1;
        }
    }

    pub(super) fn add(&mut self, sharer: Sharer) -> u64 {
        self.next_sharer += 1;
        self.sharers.insert(self.next_sharer, sharer);
        self.generation += 1;
        self.next_sharer
    }

    /// A controller stopped using the type.
    pub(super) fn remove(&mut self, sharer: u64) {
        if self.sharers.remove(&sharer).is_some() {
            self.generation += 1;
        }
    }

    /// Keeps every object from now on; whether that changed anything.
    pub(super) fn keep_whole(&mut self) -> bool {
        let changed = !self.whole;
        self.whole = true;
        self.generation += u64::from(changed);
        changed
    }

    /// Whether only the sharers' share is kept.
    pub(super) fn filters(&self) -> bool {
        self.filtering().is_some()
    }

    /// Who owns what, when only the sharers' share is kept.
    fn filtering(&self) -> Option<(&ResourceType, &Assignment)> {
        let (resource, assignment) = self.sharded.as_ref()?;
        (!self.whole && !self.sharers.is_empty()).then_some((resource, assignment))
    }

    /// Whether the view keeps this object's text.
    pub(super) fn keeps(&self, object: &Value) -> bool {
        let Some((resource, assignment)) = self.filtering() else {
            return true;
        };
        let reference = ObjRef::of(resource, object);
        self.sharers.values().any(|sharer| {
            sharer.selections.iter().any(|s| s.selects(object))
                && assignment.owns(&Item::object(&sharer.controller, &reference))
        })
    }

    /// Whether some sharer's item for the object (selected or not) is this replica's: what a
    /// change of the members leaves kept without reading each object.
    pub(super) fn may_keep(&self, namespace: &str, name: &str) -> bool {
        let Some((resource, assignment)) = self.filtering() else {
            return true;
        };
        let reference = reference(resource, namespace, name);
        self.sharers
            .values()
            .any(|sharer| assignment.owns(&Item::object(&sharer.controller, &reference)))
    }

    /// Whether an object this replica knew by name only under `before` may be its to keep
    /// now: a sharer's item of it came its way (or the sharer is new). One whose items were
    /// already its own was left out by the rules' selectors, and its changes say when that
    /// ends. From or to keeping everything, any object may be.
    pub(super) fn gains(&self, before: &Share, namespace: &str, name: &str) -> bool {
        let (Some((resource, assignment)), Some((_, assigned_before))) =
            (self.filtering(), before.filtering())
        else {
            return self.may_keep(namespace, name);
        };
        let reference = reference(resource, namespace, name);
        self.sharers.values().any(|sharer| {
            let item = Item::object(&sharer.controller, &reference);
            // A sharer like one before (a controller's new version with the same rules) that
            // owned it then left it out then.
            assignment.owns(&item)
                && !(before.sharers.values().any(|b| b == sharer) && assigned_before.owns(&item))
        })
    }
}

/// An object of `resource` by its key in a view, as its work items name it.
fn reference(resource: &ResourceType, namespace: &str, name: &str) -> ObjRef {
    ObjRef {
        resource: resource.clone(),
        namespace: resource
            .scope(Some(namespace).filter(|n| !n.is_empty()))
            .map(str::to_string),
        name: name.to_string(),
    }
}
