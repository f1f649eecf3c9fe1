//! The pure planning pieces every kind shares, used by the operator, `render` and the tests.
//!
//! A sync is split in three: build the hook request from observed objects, run the hook (the
//! only impure step, through `crate::hooks`), and turn the response plus the same observed
//! objects into a [`Plan`]. Each kind's planner (`crate::kinds::*::plan`) is built from these;
//! nothing here talks to Kubernetes or knows a kind.

pub mod children;
mod error;
pub mod lifecycle;
mod offline;
mod provenance;
pub mod related;
pub mod response;
pub mod sanity;
mod writes;

pub use children::ChildType;
pub use error::{InvalidSelector, SyncError};
pub use offline::{Offline, Planner, Role, Step};
pub use provenance::{stamp_provenance, strip_provenance};
pub use writes::{Claim, ClaimChange, Deletion, FinalizerChange, Plan, StatusChange};

/// Annotation holding the digest of the desired state last applied to a child, so that a field
/// the hook stops returning is noticed even though the observed object still has it.
pub const APPLIED_DIGEST_ANNOTATION: &str = "metascript.dev/applied-digest";
/// Who wrote a child or output, as `<kind>/<controller> <hook> <script>`: the first 12 hex
/// digits of the script's digest (the controller's `status.scripts` shows all of it).
pub const PROVENANCE_ANNOTATION: &str = "metascript.dev/provenance";
/// What a child or output was computed from: the target's (or input's) `<uid>@<resourceVersion>`
/// when it was last written.
pub const SOURCE_ANNOTATION: &str = "metascript.dev/source";
