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
