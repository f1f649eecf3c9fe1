//! metascript: DecoratorController and MapController hooks as embedded Rhai and Lua scripts.
//!
//! The crate is layered so the sync logic stays pure: `api` holds the custom resource types,
//! `script` the engines and sandbox, `hooks` turns a controller's hook spec into a runnable script,
//! `controllers` plans what one sync must do from observed objects, and `cli` drives it all.

pub mod admission;
pub mod api;
pub mod cases;
pub mod cli;
pub mod controllers;
pub mod hooks;
pub mod object;
pub mod reads;
pub mod resources;
pub mod runtime;
pub mod script;
pub mod selector;
pub mod sync;
#[cfg(feature = "testing")]
pub mod testing;
pub mod validate;
pub mod version;
