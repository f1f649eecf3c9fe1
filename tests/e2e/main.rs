//! Every integration test, in one binary: linking a binary is the slowest part of a build, and
//! one binary shares one control plane (and one in-process operator) between all its tests.
//!
//! Tests isolate themselves by namespace and by uniquely named cluster-scoped objects (see
//! `support`). Tests that run an operator process of their own label their controllers so the
//! shared operator leaves them alone (`support::operator::OWN_OPERATOR_LABEL`).

mod support;

mod admission;
mod build_script;
mod cache_selection;
mod chart;
mod cli_diff;
mod cli_examples;
mod cli_no_cluster;
mod cli_run;
mod cluster_plane;
mod control_plane_smoke;
mod customize_cache;
mod example_namespaces;
mod hook_versions;
mod hostile;
mod impersonation;
mod install;
mod isolation;
mod json_schema;
mod leader_election;
mod lsp;
mod monitoring;
mod operator_cold_targets;
mod operator_composite;
mod operator_decorator;
mod operator_events;
mod operator_map;
mod operator_quiet;
mod operator_reads;
mod operator_resync;
mod operator_start;
mod operator_workloads;
mod output_schemas;
mod read_access;
mod rollout;
mod run_local;
mod runtime_cache;
mod safe_defaults;
mod sharding;
mod sync_now;
mod tenancy;
mod traces;
mod webhook_credentials;
mod webhook_hooks;
