//! What a MapController remembers between work items: which parents each input fed (so a
//! parent hears of an input that stopped matching), which input each (parent, map key) group
//! came from (so an output event finds its pair), the outputs of each group (so a pair never
//! scans all of a parent's outputs), what each parent's aggregated status counts, the
//! parents whose status is due, and each parent's part of its pairs' fingerprints.

use super::tally::Tallies;
use crate::object;
use crate::runtime::keys::{Group, ObjRef};
use crate::runtime::write::fingerprint::Seen;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// The indexes' values are short lists (an input usually feeds one parent, a map call writes a
/// few outputs): vectors hold them in a quarter of a hash set's memory, which counts at 10,000
/// pairs. Adding to one scans it, so the cost grows with the parents selecting one input and
/// with the outputs of one map call (at most `--max-children`, 1,000 by default): tens of
/// microseconds at a thousand.
#[derive(Debug, Default)]
pub struct Bindings {
    fed: Mutex<HashMap<ObjRef, Vec<ObjRef>>>,
    inputs: Mutex<HashMap<Group, ObjRef>>,
    outputs: Mutex<OutputIndex>,
    tallies: Tallies,
    dirty_status: Mutex<HashSet<ObjRef>>,
    /// Per parent, the resourceVersion it was seen at and what its pairs' fingerprints take
    /// from it: every map call of a parent would otherwise serialize the whole parent again.
    parents_seen: Mutex<HashMap<ObjRef, (String, Seen)>>,
}

/// How many parents' parts of their pairs' fingerprints are held at most.
const PARENTS_SEEN_HELD: usize = 1024;

#[derive(Debug, Default)]
struct OutputIndex {
    by_group: HashMap<Group, Vec<ObjRef>>,
    group_of: HashMap<ObjRef, Group>,
}

impl Bindings {
    pub fn bind(&self, group: &Group, input: &ObjRef) {
        insert(
            self.fed.lock().entry(input.clone()).or_default(),
            &group.parent,
        );
        self.inputs.lock().insert(group.clone(), input.clone());
    }

    pub fn unbind(&self, group: &Group, input: &ObjRef) {
        let mut fed = self.fed.lock();
        if let Some(parents) = fed.get_mut(input) {
            parents.retain(|parent| *parent != group.parent);
            if parents.is_empty() {
                fed.remove(input);
            }
        }
        self.inputs.lock().remove(group);
    }

    pub fn parents_fed_by(&self, input: &ObjRef) -> Vec<ObjRef> {
        self.fed
            .lock()
            .get(input)
            .map(|parents| parents.to_vec())
            .unwrap_or_default()
    }

    pub fn input_of(&self, group: &Group) -> Option<ObjRef> {
        self.inputs.lock().get(group).cloned()
    }

    /// Files an output under its group; `None` removes it from wherever it was.
    pub fn index_output(&self, output: &ObjRef, group: Option<Group>) {
        let mut index = self.outputs.lock();
        if let Some(previous) = index.group_of.remove(output) {
            index.remove_from_group(&previous, output);
        }
        if let Some(group) = group {
            insert(index.by_group.entry(group.clone()).or_default(), output);
            index.group_of.insert(output.clone(), group);
        }
    }

    pub fn outputs_of(&self, group: &Group) -> Vec<ObjRef> {
        self.outputs
            .lock()
            .by_group
            .get(group)
            .map(|refs| refs.to_vec())
            .unwrap_or_default()
    }

    pub fn tallies(&self) -> &Tallies {
        &self.tallies
    }

    /// A parent's part of its pairs' fingerprints (`seen`), worked out once per version of it.
    pub fn parent_seen(
        &self,
        reference: &ObjRef,
        parent: &Value,
        seen: impl FnOnce(&Value) -> Seen,
    ) -> Seen {
        // Without a version (an object not from the API server) nothing tells two apart.
        let Some(version) = object::str_at(parent, "/metadata/resourceVersion") else {
            return seen(parent);
        };
        if let Some((at, seen)) = self.parents_seen.lock().get(reference)
            && at == version
        {
            return seen.clone();
        }
        let fresh = seen(parent);
        let mut held = self.parents_seen.lock();
        // A pair of a parent deleted meanwhile may remember it after it was forgotten: the
        // memo is bounded (one entry makes room for another), so such strays cannot pile up.
        if held.len() >= PARENTS_SEEN_HELD
            && let Some(evicted) = held.keys().next().cloned()
        {
            held.remove(&evicted);
        }
        held.insert(reference.clone(), (version.to_string(), fresh.clone()));
        fresh
    }

    /// Marks a parent's aggregated status for recomputation by the status loop.
    pub fn status_changed(&self, parent: &ObjRef) {
        self.dirty_status.lock().insert(parent.clone());
    }

    pub fn take_dirty_status(&self) -> Vec<ObjRef> {
        self.dirty_status.lock().drain().collect()
    }

    /// Forgets everything about a deleted parent. Rare, so a pass over the maps is fine.
    pub fn forget_parent(&self, parent: &ObjRef) {
        self.fed.lock().retain(|_, parents| {
            parents.retain(|fed| fed != parent);
            !parents.is_empty()
        });
        self.inputs
            .lock()
            .retain(|group, _| group.parent != *parent);
        let mut outputs = self.outputs.lock();
        outputs.by_group.retain(|group, _| group.parent != *parent);
        outputs.group_of.retain(|_, group| group.parent != *parent);
        drop(outputs);
        self.tallies.forget(parent);
        self.dirty_status.lock().remove(parent);
        self.parents_seen.lock().remove(parent);
    }

    /// Entries held, for tests that check nothing is left behind.
    #[cfg(test)]
    fn len(&self) -> usize {
        let outputs = self.outputs.lock();
        self.fed.lock().len()
            + self.inputs.lock().len()
            + outputs.by_group.len()
            + outputs.group_of.len()
            + self.tallies.len()
            + self.dirty_status.lock().len()
            + self.parents_seen.lock().len()
    }
}

/// Adds `reference` to a short list unless it is there already. The first entry gets a
/// place of its own (a vector's first push reserves four), as most lists stay at one.
fn insert(list: &mut Vec<ObjRef>, reference: &ObjRef) {
    if list.contains(reference) {
        return;
    }
    if list.is_empty() {
        list.reserve_exact(1);
    }
    list.push(reference.clone());
}

impl OutputIndex {
    fn remove_from_group(&mut self, group: &Group, output: &ObjRef) {
        if let Some(refs) = self.by_group.get_mut(group) {
            refs.retain(|indexed| indexed != output);
            if refs.is_empty() {
                self.by_group.remove(group);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::map::tally::Counted;
    use crate::resources::StaticResolver;
    use serde_json::json;

    fn reference(kind: &str, name: &str) -> ObjRef {
        let resource = StaticResolver::with_builtins()
            .find_kind("v1", kind)
            .expect("a built-in kind");
        ObjRef::of(
            &resource,
            &json!({"metadata": {"name": name, "namespace": "ns"}}),
        )
    }

    #[test]
    fn a_deleted_parent_leaves_nothing_behind_and_other_parents_keep_theirs() {
        let bindings = Bindings::default();
        let (kept, gone) = (
            reference("ConfigMap", "kept"),
            reference("ConfigMap", "gone"),
        );
        let input = reference("Secret", "input");
        for parent in [&kept, &gone] {
            let group = Group {
                parent: parent.clone(),
                key: "k".into(),
            };
            bindings.bind(&group, &input);
            bindings.index_output(&reference("Service", &parent.name), Some(group));
            bindings.status_changed(parent);
            let _: Result<Option<()>, ()> =
                bindings
                    .tallies()
                    .recount(parent, || Ok(Some(())), |_, _| {});
        }
        bindings.forget_parent(&gone);
        let counted = |parent: &ObjRef| {
            let input = reference("Secret", &parent.name);
            Counted::Input(input.clone(), Some(input.resource))
        };
        assert!(!bindings.tallies().note(&gone, counted(&gone)));
        assert!(bindings.tallies().note(&kept, counted(&kept)));
        assert_eq!(bindings.parents_fed_by(&input), std::slice::from_ref(&kept));
        let kept_group = Group {
            parent: kept.clone(),
            key: "k".into(),
        };
        assert_eq!(bindings.input_of(&kept_group), Some(input.clone()));
        assert_eq!(bindings.outputs_of(&kept_group).len(), 1);
        assert_eq!(bindings.take_dirty_status(), std::slice::from_ref(&kept));

        bindings.unbind(&kept_group, &input);
        bindings.index_output(&reference("Service", "kept"), None);
        bindings.tallies().forget(&kept);
        assert_eq!(bindings.len(), 0);
    }

    #[test]
    fn a_parent_is_seen_once_per_version() {
        let bindings = Bindings::default();
        let parent = reference("ConfigMap", "parent");
        let calls = std::cell::Cell::new(0);
        let seen = |object: &Value| {
            calls.set(calls.get() + 1);
            let mut seen = Seen::default();
            seen.content(object, &[]);
            seen
        };
        let first = json!({"metadata": {"name": "parent", "resourceVersion": "1"}, "spec": 1});
        let second = json!({"metadata": {"name": "parent", "resourceVersion": "2"}, "spec": 2});
        let fingerprint = |object: &Value| {
            bindings
                .parent_seen(&parent, object, seen)
                .fingerprint(0, 0)
        };
        assert_eq!(fingerprint(&first), fingerprint(&first));
        assert_eq!(calls.get(), 1);
        assert_ne!(fingerprint(&second), fingerprint(&first));
        assert_eq!(calls.get(), 3);
        // An object without a version is worked out every time, and never remembered.
        let unversioned = json!({"metadata": {"name": "parent"}, "spec": 3});
        assert_ne!(fingerprint(&unversioned), fingerprint(&first));
        assert_ne!(fingerprint(&unversioned), fingerprint(&first));
        assert_eq!(calls.get(), 5);
        bindings.forget_parent(&parent);
        assert_eq!(bindings.len(), 0);
    }

    /// A pair synced again, or an output's event seen again, adds nothing: the lists are sets.
    /// Each reference resolves its type anew, so equal references share no pointer.
    #[test]
    fn binding_or_indexing_again_keeps_one_entry() {
        let bindings = Bindings::default();
        let group = Group {
            parent: reference("ConfigMap", "parent"),
            key: "k".into(),
        };
        for _ in 0..2 {
            bindings.bind(&group, &reference("Secret", "input"));
            bindings.index_output(&reference("Service", "out"), Some(group.clone()));
        }
        let input = reference("Secret", "input");
        assert_eq!(
            bindings.parents_fed_by(&input),
            std::slice::from_ref(&group.parent)
        );
        assert_eq!(bindings.outputs_of(&group), [reference("Service", "out")]);
        bindings.unbind(&group, &input);
        assert!(bindings.parents_fed_by(&input).is_empty());
    }
}
