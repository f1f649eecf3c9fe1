//! The status every controller kind reports about itself.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the operator reports about the controller: whether it runs, the scripts it runs, and
/// how its objects' last syncs went.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ControllerStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (types resolved, every hook loaded) and `ScriptsLoaded` (the newest scripts
    /// compiled).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// What this controller syncs: decorator targets, or map (parent, input) pairs.
    #[serde(default)]
    #[schemars(with = "i64")]
    pub targets: u64,
    /// Of those, how many synced successfully on their last attempt.
    #[serde(default)]
    #[schemars(with = "i64")]
    pub synced: u64,
    /// Of those, how many failed on their last attempt.
    #[serde(default)]
    #[schemars(with = "i64")]
    pub failing: u64,
    /// The script each hook runs, by hook name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scripts: BTreeMap<String, ScriptStatus>,
    /// With a staged `spec.rollout`: the revision serving and the one being rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::RolloutStatus>,
    /// What the controller costs the operator, summed over the replicas running it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageStatus>,
}

/// What a controller used: since counting began, and over the last minutes. Rewritten when its
/// figures change, and only for them at most every `--usage-refresh`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UsageStatus {
    /// When counting began: when the first replica still running the controller loaded it
    /// (RFC 3339). Counts of replicas gone are no longer in the figures.
    pub since: String,
    /// When these figures were taken (RFC 3339).
    pub updated: String,
    /// Hook CPU time per minute over `recent`, for people (`12ms`, `1.5s`).
    #[serde(rename = "cpuPerMinute")]
    pub cpu_per_minute: String,
    /// API writes per minute over `recent`.
    pub writes_per_minute: f64,
    /// How many wall-clock minutes `recent` covers: 10, or fewer while the controller is new.
    pub recent_minutes: i64,
    /// The last `recentMinutes` minutes (the current one included).
    pub recent: UsageFigures,
    /// Since `since`.
    pub total: UsageFigures,
}

/// What a controller used over a span.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UsageFigures {
    /// Calls of its hooks, scripts and webhooks.
    #[schemars(with = "i64")]
    pub hook_calls: u64,
    /// CPU time of the threads running its script hooks, in milliseconds.
    #[serde(rename = "hookCPUMillis")]
    pub hook_cpu_millis: f64,
    /// Rhai operations, or Luau interrupts (function calls and loop iterations): what
    /// `maxOperations` is judged by.
    #[schemars(with = "i64")]
    pub operations: u64,
    /// The most memory one script call held at once, in bytes (to 16 KiB).
    #[schemars(with = "i64")]
    pub peak_memory_bytes: u64,
    /// Calls of its webhook hooks.
    #[schemars(with = "i64")]
    pub webhook_calls: u64,
    /// The webhook calls' mean wall-clock time, in milliseconds.
    pub webhook_mean_millis: f64,
    /// Writes for its objects (apply, patch, delete; its own status not counted).
    #[schemars(with = "i64")]
    pub writes: u64,
    /// Failed attempts of its work items, by reason (`HookFailed`, `ApplyFailed`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(with = "BTreeMap<String, i64>")]
    pub failures: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScriptStatus {
    /// sha256 of the language and source of the script now running.
    pub digest: String,
    /// Where the source came from (inline field, ConfigMap key or local file).
    pub source: String,
    /// True when the newest source failed to compile and the previous version keeps running.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready` or `ScriptsLoaded`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Why, in PascalCase (e.g. `ScriptError`, `ServiceAccountRequired`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Why, for people: for a script error, the hook, line and column.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The generation of the spec the condition describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
