//! What one sync decided: the writes the operator performs, `render` prints and tests inspect.

use crate::object::ObjectKey;
use serde::Serialize;
use serde_json::Value;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Children to create or update with server-side apply, complete with owner reference,
    /// labels and applied digest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub apply: Vec<Value>,
    /// Children to delete.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub delete: Vec<Deletion>,
    /// Objects whose controller reference changes: orphans adopted, children released. Made
    /// before anything is applied, so a child is the parent's before the parent's writes
    /// count on it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Claim>,
    /// JSON merge patch of the parent's or target's metadata (labels and annotations only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata_patch: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusChange>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<FinalizerChange>,
    /// The hook asked to be called again for this object after this many seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resync_after_seconds: Option<f64>,
    /// Children among `apply` that the store did not hold when the plan was checked for
    /// take-overs ([`super::adoption`]): created, unless one appeared meanwhile.
    #[serde(skip)]
    pub unseen: std::collections::BTreeSet<ObjectKey>,
}

impl Plan {
    /// True when carrying out the plan writes nothing.
    pub(crate) fn is_noop(&self) -> bool {
        self.apply.is_empty()
            && self.delete.is_empty()
            && self.claims.is_empty()
            && !self.writes_object()
    }

    /// True when carrying out the plan writes the parent or target itself.
    pub(crate) fn writes_object(&self) -> bool {
        self.metadata_patch.is_some() || self.status.is_some() || self.finalizer.is_some()
    }

    /// True when the plan writes a status the hook gave (not only the operator's conditions).
    pub(crate) fn writes_hook_status(&self) -> bool {
        matches!(self.status, Some(StatusChange::Replace(_)))
    }

    /// When the hook asked to be called again. The response's bounds
    /// ([`super::response::resync_after`]) keep the seconds within what a timer holds; a value
    /// that is not is no resync, never a panic.
    pub(crate) fn resync_after(&self) -> Option<std::time::Duration> {
        self.resync_after_seconds
            .and_then(|seconds| std::time::Duration::try_from_secs_f64(seconds).ok())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deletion {
    #[serde(flatten)]
    pub key: ObjectKey,
    /// Deletion is conditioned on this uid, so a newer object with the same name is never hit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub reason: &'static str,
}

/// A change to which object controls another, as Kubernetes controllers claim their children:
/// an orphan matching the parent's selector is adopted, a child that no longer matches is
/// released (`docs/hook-contract.md`, "Ownership").
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    #[serde(flatten)]
    pub key: ObjectKey,
    /// The object's resourceVersion when it was read. The write tests it, so an object that
    /// changed meanwhile (another controller adopted it, its labels moved) is left for the next
    /// sync to judge again instead of being overwritten.
    pub resource_version: String,
    pub change: ClaimChange,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ClaimChange {
    /// Add this controller reference (`first`: the object has no `ownerReferences` yet).
    Adopt { reference: Value, first: bool },
    /// Remove the controller reference at this index of `ownerReferences`.
    Release { index: usize },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StatusChange {
    /// Replace `status` entirely (the decorator's `status` response field).
    Replace(Value),
    /// Merge these fields into `status` (the map controller's aggregated counts).
    Merge(Value),
    /// Set `status.conditions` to these, only if the object is still at this resourceVersion:
    /// the operator's `Synced` condition written on its own, which must not undo conditions
    /// others wrote since it read them.
    Conditions {
        conditions: Value,
        resource_version: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FinalizerChange {
    Add(String),
    Remove(String),
}
