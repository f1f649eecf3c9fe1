//! Fingerprints of what a work item's hooks could see, so that a periodic resync skips the
//! items whose outcome cannot have changed since their last sync (`docs/operations.md`,
//! "Resync").
//!
//! A fingerprint is one hash over the version of the controller that ran (its generation and
//! every hook's digest), the identity and version of every object the request was built from,
//! and what each `get` and `list` of the hooks returned. It is recorded after a sync that
//! succeeded, deleted nothing, did not ask for `resyncAfterSeconds`, and whose hooks were pure
//! scripts (no clock, no randomness, no webhook: [`crate::script::Purity`]). A resync recomputes
//! it from the cache and queues the item only when it differs. The cache is all a call sees, so
//! an equal fingerprint means the same request and the same reads, and a pure hook gives the
//! same answer to them: skipping loses nothing a resync would have done.
//!
//! A sync's own writes move the versions of what it wrote; it records the versions those writes
//! produced, which is what the cache holds once their watch events arrive, so a sync that
//! converged something is skipped by the next resync without running once more.

use crate::object;
use crate::runtime::write::apply::Written;
use crate::script::CallScope;
use serde_json::Value;
use std::collections::BTreeMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// How a pass over everything a controller acts on treats each work item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sweep {
    /// Every item is synced: a load or reload, taking over as leader, a forced full resync.
    Everything,
    /// A periodic resync: an item whose fingerprint is unchanged is skipped.
    Changed,
}

/// What a version of a controller runs: its generation and each hook's digest.
pub(crate) fn controller_version(
    generation: Option<i64>,
    digests: &BTreeMap<String, String>,
) -> u64 {
    let mut hasher = DefaultHasher::new();
    (generation, digests).hash(&mut hasher);
    hasher.finish()
}

/// What a work item's request was built from: each object's identity, with its version.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    entries: Vec<(u64, u64)>,
}

/// Fields that change on every write without changing what an object says.
const VOLATILE: [&str; 2] = ["/metadata/resourceVersion", "/metadata/managedFields"];

impl Seen {
    /// An object at its resourceVersion.
    pub(crate) fn object(&mut self, object: &Value) {
        let version = object::str_at(object, "/metadata/resourceVersion").unwrap_or_default();
        self.entries.push((
            identity(
                object::api_version(object),
                object::kind(object),
                object::namespace(object),
                object::name(object),
            ),
            hash(version),
        ));
    }

    /// An object by its content, leaving out the fields `ignored` points at (JSON pointers)
    /// besides those every write changes: for an object whose changes to those fields alone
    /// must not count (a parent's status that the controller itself aggregates).
    pub(crate) fn content(&mut self, object: &Value, ignored: &[&str]) {
        let mut kept = object.clone();
        for pointer in VOLATILE.iter().chain(ignored) {
            remove(&mut kept, pointer);
        }
        let key = identity(
            object::api_version(object),
            object::kind(object),
            object::namespace(object),
            object::name(object),
        );
        self.entries.push((key, hash(&kept.to_string())));
    }

    /// The sync's own writes: each written object at the version its last write produced.
    pub(crate) fn written(&mut self, written: &Written) {
        for (key, version) in &written.versions {
            let id = identity(
                &key.api_version,
                &key.kind,
                key.namespace.as_deref(),
                &key.name,
            );
            let version = hash(version.as_str());
            match self.entries.iter_mut().find(|(seen, _)| *seen == id) {
                Some(entry) => entry.1 = version,
                None => self.entries.push((id, version)),
            }
        }
    }

    /// The fingerprint, whatever order the objects were seen in.
    pub(crate) fn fingerprint(mut self, controller_version: u64, reads: u64) -> u64 {
        self.entries.sort_unstable();
        let mut hasher = DefaultHasher::new();
        (controller_version, &self.entries, reads).hash(&mut hasher);
        hasher.finish()
    }
}

/// The fingerprint to record after a sync that succeeded, or `None` when the next resync must
/// run it anyway: a hook was impure, the reads collapsed to whole types (nothing to compare),
/// or the plan deleted something (what the cache holds next is not known).
pub(crate) fn after_sync(
    controller_version: u64,
    mut seen: Seen,
    written: &Written,
    scope: &CallScope,
) -> Option<u64> {
    if let Some(source) = scope.purity.impurity() {
        tracing::trace!(source, "impure hook call: synced on every resync");
        return None;
    }
    if written.deleted {
        return None;
    }
    let reads = match &scope.reads {
        Some(reads) => reads.seen_digest()?,
        None => crate::reads::nothing_read(),
    };
    seen.written(written);
    Some(seen.fingerprint(controller_version, reads))
}

/// Removes the field a JSON pointer names, then each object on its path that it left empty:
/// an object without the field and one whose only trace of it is an empty parent (`status: {}`
/// once the only status field is left out) say the same.
fn remove(value: &mut Value, pointer: &str) {
    let Some((parent, field)) = pointer.rsplit_once('/') else {
        return;
    };
    let Some(fields) = value.pointer_mut(parent).and_then(Value::as_object_mut) else {
        return;
    };
    fields.remove(field);
    if fields.is_empty() && !parent.is_empty() {
        remove(value, parent);
    }
}

/// Identifies an object by group (not version: one object, whichever version it is read at),
/// kind, namespace and name.
fn identity(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    (object::group_of(api_version), kind, namespace, name).hash(&mut hasher);
    hasher.finish()
}

fn hash(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reads::ReadAccess;
    use crate::script::Purity;
    use crate::store::MemoryStore;
    use serde_json::json;
    use std::sync::Arc;

    fn config_map(name: &str, version: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
            "data": {"k": name}
        })
    }

    fn seen(objects: &[&Value]) -> Seen {
        let mut seen = Seen::default();
        for object in objects {
            seen.object(object);
        }
        seen
    }

    fn written(versions: &[(&Value, &str)]) -> Written {
        Written {
            versions: versions
                .iter()
                .map(|(o, v)| (object::ObjectKey::of(o), v.to_string()))
                .collect(),
            deleted: false,
        }
    }

    fn no_reads() -> ReadAccess {
        ReadAccess::new(Arc::new(MemoryStore::new([])), Vec::new())
    }

    fn scope(purity: &Purity) -> CallScope {
        CallScope {
            purity: purity.clone(),
            ..CallScope::reading(no_reads())
        }
    }

    #[test]
    fn a_fingerprint_follows_versions_not_order() {
        let (a, b) = (config_map("a", "1"), config_map("b", "2"));
        let one = seen(&[&a, &b]).fingerprint(1, 0);
        assert_eq!(one, seen(&[&b, &a]).fingerprint(1, 0));
        assert_ne!(one, seen(&[&a, &config_map("b", "3")]).fingerprint(1, 0));
        assert_ne!(one, seen(&[&a]).fingerprint(1, 0), "an object less");
        assert_ne!(one, seen(&[&a, &b]).fingerprint(2, 0), "another version");
        assert_ne!(one, seen(&[&a, &b]).fingerprint(1, 1), "other reads");
    }

    #[test]
    fn content_leaves_out_versions_and_the_fields_named() {
        let parent = json!({
            "apiVersion": "example.com/v1", "kind": "Template",
            "metadata": {"name": "t", "resourceVersion": "5", "managedFields": [{"manager": "x"}]},
            "spec": {"prefix": "X_"},
            "status": {"outputs": {"total": 3}, "note": "kept"}
        });
        let digest = |object: &Value| {
            let mut seen = Seen::default();
            seen.content(object, &["/status/outputs"]);
            seen.fingerprint(1, 0)
        };
        let mut status_written = parent.clone();
        status_written["metadata"]["resourceVersion"] = json!("6");
        status_written["metadata"]["managedFields"] = json!([{"manager": "y"}]);
        status_written["status"]["outputs"]["total"] = json!(4);
        assert_eq!(digest(&parent), digest(&status_written));
        let mut spec_changed = parent.clone();
        spec_changed["spec"]["prefix"] = json!("Y_");
        assert_ne!(digest(&parent), digest(&spec_changed));
        let mut other_status = parent.clone();
        other_status["status"]["note"] = json!("changed");
        assert_ne!(digest(&parent), digest(&other_status));
        // A first status write adds the status the controller aggregates, and nothing else.
        let mut before = parent.clone();
        before.as_object_mut().unwrap().remove("status");
        let mut after = parent.clone();
        after["status"] = json!({"outputs": {"total": 1}});
        assert_eq!(digest(&before), digest(&after));
    }

    #[test]
    fn own_writes_are_recorded_at_the_versions_they_produced() {
        let (input, output) = (config_map("in", "1"), config_map("out", "2"));
        let created = config_map("new", "7");
        // The call saw the input and one output; it rewrote that output and created another.
        let recorded = after_sync(
            1,
            seen(&[&input, &output]),
            &written(&[(&output, "9"), (&created, "7")]),
            &scope(&Purity::new()),
        )
        .expect("a pure sync is recorded");
        // The cache once the writes' events arrived: what a resync computes.
        let cache = seen(&[&input, &config_map("out", "9"), &created]);
        let reads = no_reads().seen_digest().unwrap();
        assert_eq!(recorded, cache.fingerprint(1, reads));
        assert_eq!(reads, crate::reads::nothing_read());
    }

    #[test]
    fn impure_or_deleting_syncs_are_not_recorded() {
        let impure = Purity::new();
        impure.taint("now()");
        let object = config_map("a", "1");
        assert_eq!(
            after_sync(1, seen(&[&object]), &Written::default(), &scope(&impure),),
            None
        );
        let deleted = Written {
            deleted: true,
            ..Written::default()
        };
        assert_eq!(
            after_sync(1, seen(&[&object]), &deleted, &scope(&Purity::new())),
            None
        );
    }
}
