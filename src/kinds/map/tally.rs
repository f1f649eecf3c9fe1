//! What each parent's aggregated status counts, kept up to date by the events routed to the
//! controller, so the status loop never reads a parent's whole fan-out again: at 10,000 pairs
//! that read took 7% of the operator's CPU while a map converged, every status interval. A
//! parent is counted afresh from the cache when its fan-out is read (its sync, a resync); events
//! move single inputs and outputs in and out between. What an event notes is the object as the
//! cache holds it when the event is routed, never the event's own copy, so an event routed late
//! (held back while the operator's own write was in flight, then delivered again) cannot put
//! an older state back.

use super::plan::{Mapper, OutputCondition, StatusCounts};
use crate::resources::ResourceType;
use crate::runtime::keys::ObjRef;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

/// The tallies of the parents counted so far. A parent not counted yet has no status written.
#[derive(Debug, Default)]
pub struct Tallies {
    parents: Mutex<HashMap<ObjRef, Arc<Mutex<Tally>>>>,
    /// Keys the digests (per process, so no one can choose names that collide).
    keys: RandomState,
}

/// One parent's selected inputs and owned outputs, each under a 64-bit digest of its reference
/// (a fifth of the memory of the reference itself; two objects of one parent sharing a digest,
/// about 1 in 10^11 at 10,000 pairs, would count as one). Each keeps its type, not its place
/// in the controller's list: a reload that reorders the types keeps the counts right.
#[derive(Debug, Default)]
struct Tally {
    inputs: HashMap<u64, ResourceType>,
    outputs: HashMap<u64, (ResourceType, Box<[OutputCondition]>)>,
}

/// An input or output as a parent counts it: `None` where it is not (or no longer) selected
/// or owned.
pub enum Counted {
    Input(ObjRef, Option<ResourceType>),
    Output(ObjRef, Option<(ResourceType, Vec<OutputCondition>)>),
}

impl Tallies {
    /// Counts a parent afresh from what `read` returns (`None` when the parent is gone, which
    /// leaves it uncounted): its fan-out, read while the parent's tally is locked. An event
    /// routed meanwhile changed the cache before the read (which sees it) or waits for the
    /// lock and is noted after (the tally holds sets: noting a state twice changes nothing).
    pub fn recount<T, E>(
        &self,
        parent: &ObjRef,
        read: impl FnOnce() -> Result<Option<T>, E>,
        count: impl FnOnce(&T, &mut dyn FnMut(Counted)),
    ) -> Result<Option<T>, E> {
        let entry = self
            .parents
            .lock()
            .entry(parent.clone())
            .or_default()
            .clone();
        let mut tally = entry.lock();
        let read = read();
        *tally = Tally::default();
        match &read {
            Ok(Some(fan_out)) => count(fan_out, &mut |counted| {
                tally.set(self.digest(&counted), counted);
            }),
            // Unless a newer count (after a forget) took the parent's place meanwhile.
            Ok(None) | Err(_) => {
                let mut parents = self.parents.lock();
                if parents
                    .get(parent)
                    .is_some_and(|held| Arc::ptr_eq(held, &entry))
                {
                    parents.remove(parent);
                }
            }
        }
        read
    }

    /// Records an input's or output's state in one parent's counts; returns whether they
    /// changed. A parent not counted yet is left alone (its first count reads the cache).
    pub fn note(&self, parent: &ObjRef, counted: Counted) -> bool {
        let Some(tally) = self.parents.lock().get(parent).cloned() else {
            return false;
        };
        let digest = self.digest(&counted);
        tally.lock().set(digest, counted)
    }

    /// The counts of a parent, once it has been counted.
    pub fn counts(&self, parent: &ObjRef, mapper: &Mapper) -> Option<StatusCounts> {
        let tally = self.parents.lock().get(parent).cloned()?;
        let tally = tally.lock();
        let mut counts = StatusCounts::new(mapper);
        for input_type in tally.inputs.values() {
            counts.add_input(mapper, input_type);
        }
        for (output_type, conditions) in tally.outputs.values() {
            counts.add_output(mapper, output_type, conditions);
        }
        Some(counts)
    }

    /// Forgets a parent's counts: it is gone, or its selection is about to be read again.
    pub fn forget(&self, parent: &ObjRef) {
        self.parents.lock().remove(parent);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.parents.lock().len()
    }

    fn digest(&self, counted: &Counted) -> u64 {
        let (Counted::Input(reference, _) | Counted::Output(reference, _)) = counted;
        self.keys.hash_one(reference)
    }
}

impl Tally {
    /// Most events note what is counted already: compared before anything is stored or cloned.
    fn set(&mut self, digest: u64, counted: Counted) -> bool {
        match counted {
            Counted::Input(_, Some(input_type)) => {
                let changed = self.inputs.get(&digest) != Some(&input_type);
                if changed {
                    self.inputs.insert(digest, input_type);
                }
                changed
            }
            Counted::Input(_, None) => self.inputs.remove(&digest).is_some(),
            Counted::Output(_, Some((output_type, conditions))) => {
                let changed = self.outputs.get(&digest).is_none_or(|(held_type, held)| {
                    *held_type != output_type || **held != *conditions
                });
                if changed {
                    self.outputs
                        .insert(digest, (output_type, conditions.into_boxed_slice()));
                }
                changed
            }
            Counted::Output(_, None) => self.outputs.remove(&digest).is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::TypeInfo;

    fn configmaps() -> ResourceType {
        ResourceType::from(TypeInfo {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespaced: true,
            has_status: false,
        })
    }

    fn configmap(name: &str) -> ObjRef {
        ObjRef {
            resource: configmaps(),
            namespace: Some("default".into()),
            name: name.into(),
        }
    }

    fn ready(is_true: bool) -> Vec<OutputCondition> {
        vec![OutputCondition {
            kind: "ready".into(),
            is_true,
        }]
    }

    fn counted(tallies: &Tallies, parent: &ObjRef) -> Option<(usize, usize)> {
        let tally = tallies.parents.lock().get(parent).cloned()?;
        let tally = tally.lock();
        let ready = tally
            .outputs
            .values()
            .filter(|(_, conditions)| conditions.iter().any(|c| c.is_true))
            .count();
        Some((tally.inputs.len(), ready))
    }

    #[test]
    fn notes_move_single_objects_and_noting_a_state_twice_changes_nothing() {
        let tallies = Tallies::default();
        let parent = configmap("parent");
        let (a, b, out) = (configmap("a"), configmap("b"), configmap("out"));
        let input = |reference: &ObjRef, selected: bool| {
            Counted::Input(reference.clone(), selected.then(configmaps))
        };
        let output =
            |is_ready: bool| Counted::Output(out.clone(), Some((configmaps(), ready(is_ready))));
        // Not counted yet: notes are ignored.
        assert!(!tallies.note(&parent, input(&a, true)));
        let read: Result<Option<()>, ()> =
            tallies.recount(&parent, || Ok(Some(())), |_, count| count(input(&a, true)));
        assert_eq!(read, Ok(Some(())));
        assert!(!tallies.note(&parent, input(&a, true)));
        assert!(tallies.note(&parent, input(&b, true)));
        assert!(tallies.note(&parent, output(false)));
        assert!(!tallies.note(&parent, output(false)));
        assert_eq!(counted(&tallies, &parent), Some((2, 0)));
        assert!(tallies.note(&parent, output(true)));
        assert!(tallies.note(&parent, input(&a, false)));
        assert!(!tallies.note(&parent, input(&a, false)));
        assert_eq!(counted(&tallies, &parent), Some((1, 1)));
    }

    #[test]
    fn a_recount_that_finds_the_parent_gone_leaves_a_newer_count_alone() {
        let tallies = Tallies::default();
        let parent = configmap("parent");
        let input = || Counted::Input(configmap("a"), Some(configmaps()));
        let stale: Result<Option<()>, ()> = tallies.recount(
            &parent,
            || {
                // While this count reads, the parent is forgotten and counted again.
                tallies.forget(&parent);
                let newer: Result<Option<()>, ()> =
                    tallies.recount(&parent, || Ok(Some(())), |_, count| count(input()));
                assert_eq!(newer, Ok(Some(())));
                Ok(None)
            },
            |_, _| {},
        );
        assert_eq!(stale, Ok(None));
        assert_eq!(counted(&tallies, &parent), Some((1, 0)));
    }

    #[test]
    fn a_recount_replaces_and_a_parent_gone_or_unreadable_is_not_counted() {
        let tallies = Tallies::default();
        let parent = configmap("parent");
        let input = Counted::Input(configmap("a"), Some(configmaps()));
        let _: Result<Option<()>, ()> =
            tallies.recount(&parent, || Ok(Some(())), |_, count| count(input));
        let _: Result<Option<()>, ()> = tallies.recount(&parent, || Ok(Some(())), |_, _| {});
        assert_eq!(counted(&tallies, &parent), Some((0, 0)));
        let gone: Result<Option<()>, ()> = tallies.recount(&parent, || Ok(None), |_, _| {});
        assert_eq!(gone, Ok(None));
        assert_eq!(tallies.len(), 0);
        let _: Result<Option<()>, ()> = tallies.recount(&parent, || Ok(Some(())), |_, _| {});
        let unreadable: Result<Option<()>, &str> =
            tallies.recount(&parent, || Err("bad selector"), |_, _| {});
        assert!(unreadable.is_err());
        assert_eq!(tallies.len(), 0);
        let input = Counted::Input(configmap("a"), Some(configmaps()));
        assert!(!tallies.note(&parent, input));
    }
}
