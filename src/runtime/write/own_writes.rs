//! Telling the operator's own writes from anyone else's changes, so a controller does not run
//! again on the watch event of a write it just made.
//!
//! Each write's answer carries the resourceVersion it produced; the event of that version is the
//! controller hearing itself. The watch is a connection of its own, so that event can arrive
//! before the write's answer does: while a write to an object is in flight, the writer's events
//! for it are held back, and when the answer comes they are dropped (its own versions) or
//! delivered again (anyone else's change, which must still be acted on).

use crate::object::{self, ObjectKey};
use crate::runtime::keys::ControllerId;
use crate::runtime::watch::event::ObjectEvent;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use tokio::sync::mpsc;

/// An event held back during a write, to be routed again to the controller that wrote.
#[derive(Debug)]
pub(crate) struct Redelivery {
    pub controller: ControllerId,
    pub event: ObjectEvent,
}

/// What a controller is known to have written to one object.
#[derive(Debug, Default)]
struct Record {
    in_flight: usize,
    /// Events seen while a write was in flight.
    held: Vec<ObjectEvent>,
    /// The versions its writes produced whose events have not arrived yet, oldest first.
    versions: VecDeque<String>,
}

/// A handful covers the writes one sync makes to one object.
const VERSIONS_KEPT: usize = 8;

pub struct OwnWrites {
    records: Mutex<HashMap<(ControllerId, ObjectKey), Record>>,
    redeliver: mpsc::UnboundedSender<Redelivery>,
}

impl OwnWrites {
    pub(crate) fn new(redeliver: mpsc::UnboundedSender<Redelivery>) -> OwnWrites {
        OwnWrites {
            records: Mutex::default(),
            redeliver,
        }
    }

    /// A write of `controller` to the object `key` is about to be sent.
    pub(crate) fn begin(&self, controller: &ControllerId, key: ObjectKey) {
        self.records
            .lock()
            .entry((controller.clone(), key))
            .or_default()
            .in_flight += 1;
    }

    /// The write's answer: the version it produced, or none when it failed; `from`, the version
    /// the write was based on, if it named one. A write answered with the version it was based
    /// on changed nothing, so no event of it will come: its version is somebody else's, whose
    /// event must not be taken for the controller's own. Events held back meanwhile that are
    /// not its own are delivered again.
    pub(crate) fn finish(
        &self,
        controller: &ControllerId,
        key: ObjectKey,
        from: Option<&str>,
        version: Option<String>,
    ) {
        let version = version.filter(|version| Some(version.as_str()) != from);
        let held = {
            let mut records = self.records.lock();
            let id = (controller.clone(), key);
            let Some(record) = records.get_mut(&id) else {
                return;
            };
            record.in_flight = record.in_flight.saturating_sub(1);
            if let Some(version) = version {
                record.versions.push_back(version);
                if record.versions.len() > VERSIONS_KEPT {
                    record.versions.pop_front();
                }
            }
            if record.in_flight > 0 {
                return;
            }
            let held = std::mem::take(&mut record.held);
            let mut redeliver = Vec::new();
            for event in held {
                if !consume(record, &event) {
                    redeliver.push(event);
                }
            }
            if record.versions.is_empty() {
                records.remove(&id);
            }
            redeliver
        };
        for event in held {
            // A closed channel means the operator is shutting down.
            let _ = self.redeliver.send(Redelivery {
                controller: controller.clone(),
                event,
            });
        }
    }

    /// Whether `controller` should ignore this event of an object it writes: it is the event of
    /// its own write, or a write is in flight (the event is held back and decided when the
    /// write's answer comes).
    pub(crate) fn is_own(&self, controller: &ControllerId, event: &ObjectEvent) -> bool {
        let Some(object) = event.head() else {
            return false;
        };
        let id = (controller.clone(), ObjectKey::of(object));
        let mut records = self.records.lock();
        let Some(record) = records.get_mut(&id) else {
            return false;
        };
        if record.in_flight > 0 {
            record.held.push(event.clone());
            return true;
        }
        let own = consume(record, event);
        if record.versions.is_empty() {
            records.remove(&id);
        }
        own
    }
}

/// Whether the event is of a version the record holds; that version and every older one are
/// used up. Anyone else's version leaves the record as it is (it may be older than the
/// controller's own, still to come); a deletion clears it.
fn consume(record: &mut Record, event: &ObjectEvent) -> bool {
    let Some(new) = event.new.as_ref().map(|new| new.head()) else {
        record.versions.clear();
        return false;
    };
    let version = object::str_at(new, "/metadata/resourceVersion");
    match version.and_then(|v| record.versions.iter().position(|own| own == v)) {
        Some(position) => {
            record.versions.drain(..=position);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::StaticResolver;
    use serde_json::json;

    fn event(version: &str) -> ObjectEvent {
        let configmaps = StaticResolver::with_builtins()
            .find_kind("v1", "ConfigMap")
            .unwrap();
        let new = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "out", "namespace": "ns", "resourceVersion": version}
        });
        ObjectEvent::of(&configmaps, None, Some(new))
    }

    fn setup() -> (
        OwnWrites,
        mpsc::UnboundedReceiver<Redelivery>,
        ControllerId,
        ObjectKey,
    ) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let controller = ControllerId::new(crate::kinds::map::KIND, "m");
        let key = ObjectKey::of(event("1").new.as_deref().unwrap());
        (OwnWrites::new(sender), receiver, controller, key)
    }

    #[test]
    fn the_event_of_an_own_write_is_recognised_once() {
        let (writes, _, controller, key) = setup();
        writes.begin(&controller, key.clone());
        writes.finish(&controller, key, None, Some("5".into()));
        assert!(!writes.is_own(&controller, &event("4")), "someone else's");
        assert!(writes.is_own(&controller, &event("5")));
        assert!(!writes.is_own(&controller, &event("5")), "used up");
        let other = ControllerId::new(crate::kinds::map::KIND, "other");
        assert!(!writes.is_own(&other, &event("5")));
        assert!(writes.records.lock().is_empty());
    }

    #[test]
    fn an_event_that_beats_the_answer_is_held_then_dropped_if_own_else_delivered_again() {
        let (writes, mut redelivered, controller, key) = setup();
        writes.begin(&controller, key.clone());
        assert!(writes.is_own(&controller, &event("4")), "held back");
        assert!(writes.is_own(&controller, &event("5")), "held back");
        writes.finish(&controller, key, None, Some("5".into()));
        let again = redelivered
            .try_recv()
            .expect("someone else's version comes back");
        assert_eq!(
            object::str_at(
                again.event.new.as_deref().unwrap(),
                "/metadata/resourceVersion"
            ),
            Some("4")
        );
        assert!(redelivered.try_recv().is_err(), "its own version does not");
    }

    #[test]
    fn a_write_that_changed_nothing_owns_no_version() {
        let (writes, mut redelivered, controller, key) = setup();
        // Someone changed the object to version 6; the watch has not said so yet when a write
        // based on version 6 comes back with it, unchanged.
        writes.begin(&controller, key.clone());
        writes.finish(&controller, key.clone(), Some("6"), Some("6".into()));
        assert!(
            !writes.is_own(&controller, &event("6")),
            "the change to version 6 was someone else's"
        );
        // Held back during such a write, it is delivered again.
        writes.begin(&controller, key.clone());
        assert!(writes.is_own(&controller, &event("7")), "held back");
        writes.finish(&controller, key, Some("7"), Some("7".into()));
        assert!(redelivered.try_recv().is_ok());
        assert!(writes.records.lock().is_empty());
    }

    #[test]
    fn several_writes_in_one_sync_are_all_recognised_and_a_failure_delivers_everything() {
        let (writes, mut redelivered, controller, key) = setup();
        for version in ["7", "8"] {
            writes.begin(&controller, key.clone());
            writes.finish(&controller, key.clone(), None, Some(version.into()));
        }
        assert!(writes.is_own(&controller, &event("7")));
        assert!(writes.is_own(&controller, &event("8")));

        writes.begin(&controller, key.clone());
        assert!(writes.is_own(&controller, &event("9")));
        writes.finish(&controller, key, None, None);
        assert!(
            redelivered.try_recv().is_ok(),
            "a failed write owns nothing"
        );
        assert!(writes.records.lock().is_empty());
    }
}
