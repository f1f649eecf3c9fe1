//! MapController: a parent's `spec.selector` picks inputs; the `map` hook turns each input into
//! outputs owned by the parent and tagged with the input's map key; `tombstone` decides which
//! outputs of a vanished input stay. Its API type and hooks (`api`), its pure planner (`plan`),
//! a parent's fan-out and one pair's sync (`sync`), its face offline (`offline`) and in the
//! operator (`runtime`, `bindings`, and `tally` for its parents' status counts).

mod api;
mod bindings;
mod offline;
mod plan;
#[cfg(test)]
mod plan_tests;
mod runtime;
mod sync;
mod tally;

pub use api::{KIND, MAP, MapController, MapControllerSpec, MapHooks, TOMBSTONE};
pub use plan::Mapper;
pub use runtime::MapKind;

/// Label naming the MapController that produced an output.
pub const MAP_LABEL: &str = "metascript.dev/map";
/// Label tagging an output with the map key of its input.
pub const MAP_KEY_LABEL: &str = "metascript.dev/map-key";
