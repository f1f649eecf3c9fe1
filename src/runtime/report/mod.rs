//! What the operator tells people: the status of each controller object (with what it costs),
//! Events on the objects it syncs, and its metrics endpoint.

pub(crate) mod events;
pub mod metrics;
pub mod problem;
pub mod status;
pub mod usage;
