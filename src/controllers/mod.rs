//! The pure planning core shared by the operator, `render` and the tests.
//!
//! A sync is split in three: build the hook request from observed objects, run the hook (the
//! only impure step, done by the caller), and turn the response plus the same observed objects
//! into a [`Plan`]. Nothing here talks to Kubernetes.

pub mod children;
pub mod decorator;
pub mod map;
mod plan;
mod response;
pub mod sanity;

pub use children::ChildType;
pub use plan::{Deletion, FinalizerChange, Plan, StatusChange};
pub use response::InvalidResponse;
pub(crate) use response::{check_script_response, response_fields};

/// Label naming the DecoratorController that attached an object.
pub const DECORATOR_LABEL: &str = "metascript.dev/decorator";
/// Label naming the MapController that produced an output.
pub const MAP_LABEL: &str = "metascript.dev/map";
/// Label tagging an output with the map key of its input.
pub const MAP_KEY_LABEL: &str = "metascript.dev/map-key";
/// Annotation holding the digest of the desired state last applied to a child, so that a field
/// the hook stops returning is noticed even though the observed object still has it.
pub const APPLIED_DIGEST_ANNOTATION: &str = "metascript.dev/applied-digest";
/// Who wrote a child or output, as `<kind>/<controller> <hook> <script>`: the first 12 hex
/// digits of the script's digest (the controller's `status.scripts` shows all of it).
pub const PROVENANCE_ANNOTATION: &str = "metascript.dev/provenance";
/// What a child or output was computed from: the target's (or input's) `<uid>@<resourceVersion>`
/// when it was last written.
pub const SOURCE_ANNOTATION: &str = "metascript.dev/source";
