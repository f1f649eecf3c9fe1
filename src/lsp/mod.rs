//! `metascript lsp`: a language server (the Language Server Protocol, over stdio) for hook
//! scripts, in `.rhai` and `.lua` files and inline in controller manifests, where each script is
//! a region of the YAML whose places map to the file's own lines and columns
//! ([`crate::yaml::positions`]).
//!
//! It says nothing of its own about a script: its problems are `validate`'s findings (scripts
//! compile, types resolve, `spec.tests` pass) put where they are (`diagnose`); completion and
//! hover come from the helper table `metascript definitions` writes, the hooks' request and
//! response fields and the OpenAPI schemas of the types a controller names (`complete`,
//! `schema`), from the workspace's CustomResourceDefinitions and, when told to, a cluster's
//! (`cluster`). A code lens runs the `*.test.yaml` cases of the script it is on and shows their
//! failures as problems (`cases`). `docs/editors.md` says how to set editors up.

mod cases;
mod cluster;
mod complete;
mod diagnose;
mod schema;
pub(crate) mod scripts;
mod server;
mod workspace;

pub use cases::{CaseOutcome, CaseRunner};
pub(crate) use cluster::{ClusterCrds, ClusterError};
pub use server::{serve, serve_stdio};
