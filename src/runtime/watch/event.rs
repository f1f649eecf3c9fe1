//! A change of one cached object, as the caches send it and as controllers route it.
//!
//! An object's states in an event are read the way routing reads them: most routes read only
//! the head and status (labels, owners, finalizers, conditions), so a state the view kept as
//! text is decoded only in those until something reads it whole. An update also says which of
//! its parts changed, told from the texts ([`Parts`]).

use crate::resources::ResourceType;
use crate::runtime::watch::compare::Parts;
use crate::runtime::watch::store::Change;
use crate::store::{HEAD_AND_STATUS, Kept};
use serde_json::Value;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// A change to one cached object.
#[derive(Clone, Debug)]
pub struct ObjectEvent {
    pub resource: ResourceType,
    /// The previous state; `None` when the object was added (or seen for the first time).
    pub old: Option<ObjectState>,
    /// The new state; `None` when the object was deleted (or left the view: no watch of its
    /// type selects it any more).
    pub new: Option<ObjectState>,
    /// For an update (`old` and `new`), which parts of the object it changed.
    pub parts: Parts,
    /// When the change comes from a (re)list: when the listed objects replaced the cache. A
    /// controller that queued everything from the cache after that moment has seen it already.
    pub listed_at: Option<Instant>,
}

impl ObjectEvent {
    /// The head and status of its newest state: what names the object, its labels and owners.
    pub(crate) fn head(&self) -> Option<&Value> {
        self.new
            .as_ref()
            .or(self.old.as_ref())
            .map(ObjectState::head)
    }

    /// Whether the event updated the object's status and nothing else.
    pub(crate) fn only_status_changed(&self) -> bool {
        self.old.is_some() && self.new.is_some() && self.parts.only_status()
    }

    /// A change as a watch would report it, for tests of what routes it.
    #[cfg(test)]
    pub(crate) fn of(resource: &ResourceType, old: Option<Value>, new: Option<Value>) -> Self {
        let parts = match (&old, &new) {
            (Some(old), Some(new)) => Parts::between(&old.to_string(), &new.to_string()),
            _ => Parts::default(),
        };
        ObjectEvent {
            resource: resource.clone(),
            old: old.map(|old| Arc::new(old).into()),
            new: new.map(|new| Arc::new(new).into()),
            parts,
            listed_at: None,
        }
    }
}

/// One state of an object in an event. Read whole through `Deref`; [`ObjectState::head`]
/// reads its head and status, decoding no more of a state kept as text.
#[derive(Clone, Debug)]
pub struct ObjectState(Arc<Lazy>);

#[derive(Debug)]
struct Lazy {
    /// The text, for a state the view did not hold decoded.
    text: Option<Arc<str>>,
    whole: OnceLock<Arc<Value>>,
    head: OnceLock<Arc<Value>>,
}

impl ObjectState {
    fn of(kept: Kept) -> ObjectState {
        let (text, whole) = match kept {
            Kept::Decoded(value) => (None, OnceLock::from(value)),
            Kept::Json(text) => (Some(text), OnceLock::new()),
        };
        ObjectState(Arc::new(Lazy {
            text,
            whole,
            head: OnceLock::new(),
        }))
    }

    /// The whole object, decoded on first use.
    pub fn whole(&self) -> &Arc<Value> {
        self.0.whole.get_or_init(|| self.kept().decoded())
    }

    /// Its `apiVersion`, `kind`, `metadata` and `status` (the whole object where it is decoded
    /// already).
    pub fn head(&self) -> &Value {
        if let Some(whole) = self.0.whole.get() {
            return whole;
        }
        self.0
            .head
            .get_or_init(|| self.kept().only(HEAD_AND_STATUS))
    }

    fn kept(&self) -> Kept {
        Kept::Json(
            self.0
                .text
                .clone()
                .expect("a state without text was decoded when made"),
        )
    }
}

impl Deref for ObjectState {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.whole()
    }
}

impl From<Arc<Value>> for ObjectState {
    fn from(value: Arc<Value>) -> ObjectState {
        ObjectState::of(Kept::Decoded(value))
    }
}

/// A change to one cached object as the caches send it: its states as the view keeps them. A
/// list of every object of a type waits to be routed as text, not as ten times that.
#[derive(Debug)]
pub struct CacheEvent {
    resource: ResourceType,
    change: Change,
    listed_at: Option<Instant>,
}

impl CacheEvent {
    pub(super) fn of(resource: &ResourceType, change: Change, listed_at: Option<Instant>) -> Self {
        CacheEvent {
            resource: resource.clone(),
            change,
            listed_at,
        }
    }
}

impl From<CacheEvent> for ObjectEvent {
    fn from(event: CacheEvent) -> ObjectEvent {
        let Change { old, new, parts } = event.change;
        ObjectEvent {
            resource: event.resource,
            old: old.map(ObjectState::of),
            new: new.map(ObjectState::of),
            parts,
            listed_at: event.listed_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_only_changes_are_told_apart() {
        let resource = crate::resources::StaticResolver::with_builtins()
            .find_kind("v1", "ConfigMap")
            .unwrap();
        let old =
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"a": 1}, "status": {"x": 1}});
        let status_only =
            json!({"metadata": {"resourceVersion": "2"}, "spec": {"a": 1}, "status": {"x": 2}});
        let spec_change =
            json!({"metadata": {"resourceVersion": "2"}, "spec": {"a": 2}, "status": {"x": 2}});
        let only_status = |old: &Value, new: &Value| {
            ObjectEvent::of(&resource, Some(old.clone()), Some(new.clone())).only_status_changed()
        };
        assert!(only_status(&old, &status_only));
        assert!(!only_status(&old, &spec_change));
        assert!(!only_status(&old, &old));
        assert!(!ObjectEvent::of(&resource, None, Some(status_only)).only_status_changed());
    }

    #[test]
    fn a_state_kept_as_text_decodes_its_head_alone_until_read_whole() {
        let object = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"containers": []},
            "status": {"phase": "Pending"}
        });
        let state = ObjectState::of(Kept::Json(object.to_string().into()));
        let head = state.head();
        assert_eq!(head["metadata"], object["metadata"]);
        assert_eq!(head["status"], object["status"]);
        assert!(head.get("spec").is_none());
        assert!(state.0.whole.get().is_none());
        assert_eq!(&*state, &object);
        // Once whole, the head is the whole.
        assert_eq!(state.head(), &object);
        let decoded = ObjectState::from(Arc::new(object.clone()));
        assert_eq!(decoded.head(), &object);
    }
}
