//! metascript: Kubernetes controllers (DecoratorController, MapController, CompositeController)
//! whose hooks are embedded Rhai and Lua scripts.
//!
//! The crate is a stack of layers; a module imports only the layers below it (`layering`, a
//! test, reads every `use crate::` and fails on an edge that goes up). From the bottom:
//!
//! | layer | what it is |
//! |---|---|
//! | `object`, `reasons`, `version`, `selector` | JSON object helpers, Event reasons, build info, selectors |
//! | `telemetry` | the spans of a traced work item (OpenTelemetry; off unless an exporter is installed) |
//! | `yaml` | YAML documents as JSON values, and where each value (and each character of an inline script) is in the file |
//! | `api` | the shared API vocabulary: hooks, rules, status, test cases, what a kind is |
//! | `tenancy` | who may make a controller run as which ServiceAccount |
//! | `resources` | resource types and how they resolve |
//! | `schema` | checking an object against its type's OpenAPI schema and CEL rules |
//! | `store` | reading observed objects (caches, manifests, test cases) |
//! | `reads` | the scripts' `get` and `list`, with dependency tracking |
//! | `script` | the engines, sandbox, helpers and per-call scope |
//! | `hooks` | a controller's hooks ready to call (scripts or webhooks) |
//! | `plan` | the pure planning every kind shares, and the offline face of a planner |
//! | `cases` | hook test cases: the format, judging, recording |
//! | `runtime` | the operator, whatever the kind: watches, queue, apply, registries |
//! | `kinds` | one folder per kind (API type, planner, sync, offline, runtime) and their list |
//! | `validate` | checking a controller before it runs (`validate`, admission) |
//! | `lsp` | the language server for editors (`metascript lsp`) |
//! | `admission` | the validating webhook |
//! | `cli` | the `metascript` command line |
//! | `testing` | a local control plane for tests (feature `testing`) |

#![warn(unreachable_pub)]

pub mod object;
pub mod reasons;
pub mod selector;
pub mod telemetry;
pub mod version;
pub mod yaml;

pub mod api;
pub mod resources;
pub mod schema;
pub mod store;
pub mod tenancy;

pub mod reads;
pub mod script;

pub mod hooks;
pub mod plan;

pub mod cases;
pub mod runtime;

pub mod kinds;

pub mod validate;

pub mod lsp;

pub mod admission;
pub mod cli;
#[cfg(feature = "testing")]
pub mod testing;

#[cfg(test)]
mod fuzzing;
#[cfg(test)]
mod layering;
