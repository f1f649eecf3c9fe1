//! The runtime's orchestration tested over an in-memory API (no API server): each kind's sync
//! path and the registry's load, reload and removal, through the registry as the operator
//! drives it, in milliseconds.

mod api;
mod cluster;
mod composite;
mod decorator;
mod map;
mod registry;
mod shares;
mod steps;
mod sync_reads;
