//! The pure planning pieces every kind shares, used by the operator, `render` and the tests.
//!
//! A sync is split in three: build the hook request from observed objects, run the hook (the
//! only impure step, through `crate::hooks`), and turn the response plus the same observed
//! objects into a [`Plan`]. Each kind's planner (`crate::kinds::*::plan`) is built from these;
//! nothing here talks to Kubernetes or knows a kind.

pub(crate) mod adoption;
pub(crate) mod children;
pub(crate) mod diff;
mod error;
pub(crate) mod lifecycle;
mod offline;
pub(crate) mod outputs;
mod provenance;
pub(crate) mod related;
pub(crate) mod response;
pub mod rollout;
pub(crate) mod sanity;
pub(crate) mod synced;
mod writes;

pub(crate) use error::{InvalidSelector, SyncError};
pub(crate) use offline::{Offline, Planner, Role, Step, observed_in};
pub(crate) use provenance::{stamp_provenance, strip_provenance};
pub(crate) use writes::{Claim, ClaimChange, Deletion, FinalizerChange, Plan, StatusChange};

/// Annotation holding the digest of the desired state last applied to a child, so that a field
/// the hook stops returning is noticed even though the observed object still has it.
pub(crate) const APPLIED_DIGEST_ANNOTATION: &str = "metascript.dev/applied-digest";
/// Who wrote a child or output, as `<kind>/<controller> <hook> <script>`: the first 12 hex
/// digits of the script's digest (the controller's `status.scripts` shows all of it).
pub(crate) const PROVENANCE_ANNOTATION: &str = "metascript.dev/provenance";
/// What a child or output was computed from: the target's (or input's) `<uid>@<resourceVersion>`
/// when it was last written.
pub(crate) const SOURCE_ANNOTATION: &str = "metascript.dev/source";

/// Hands a hook nothing its controller's account may not read: checks every read a work item
/// is about to show its hooks (`scopes`) against the scope's read policy (without one, a
/// controller reading with the operator's access, everything passes). Called on the blocking
/// thread the hooks run on, before the first hook call.
pub(crate) fn admit<'a>(
    scope: &crate::script::CallScope,
    controller: &str,
    scopes: impl IntoIterator<Item = &'a crate::reads::ReadScope>,
) -> Result<(), SyncError> {
    let Some(reads) = &scope.reads else {
        return Ok(());
    };
    reads
        .check_all(scopes)
        .map_err(|refusal| SyncError::Refused {
            controller: controller.to_string(),
            refusal,
        })
}
