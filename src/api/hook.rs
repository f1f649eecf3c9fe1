//! How a controller names the code behind each hook: an embedded script (inline or in a ConfigMap)
//! or, for Metacontroller compatibility, a webhook.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One hook of a controller. Exactly one of `script` or `webhook` is set.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.script) != has(self.webhook)",
    "message": "a hook needs exactly one of script or webhook"
}]))]
pub struct Hook {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<ScriptSpec>,
    /// Reserved for Metacontroller compatibility; accepted by the schema, not run by this operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
}

/// A script: its source inline or in a ConfigMap key, its language, and its budgets.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.inline) != has(self.configMapRef)",
        "message": "a script needs exactly one of inline or configMapRef"
    },
    {
        "rule": "!has(self.inline) || has(self.language)",
        "message": "an inline script needs a language (rhai or lua)"
    }
]))]
pub struct ScriptSpec {
    /// `rhai` or `lua`. Optional for `configMapRef`, where the key's `.rhai`/`.lua` suffix decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "language_schema")]
    pub language: Option<Language>,
    /// The script's source, in the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// The script's source, in a ConfigMap key (editing it reloads the hook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapKeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    /// The ConfigMap's namespace.
    pub namespace: String,
    /// The ConfigMap's name.
    pub name: String,
    /// The key holding the script; a `.rhai` or `.lua` suffix tells the language.
    pub key: String,
}

/// `rhai` or `lua`, without the `null` schemars would list for an `Option` (kubectl's
/// client-side validation refuses an enum containing null).
fn language_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": ["rhai", "lua"]})
}

/// The language a script is written in.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Rhai,
    Lua,
}

impl Language {
    /// The language a file or ConfigMap key name implies by its suffix.
    pub fn from_file_name(name: &str) -> Option<Language> {
        if name.ends_with(".rhai") {
            Some(Language::Rhai)
        } else if name.ends_with(".lua") || name.ends_with(".luau") {
            Some(Language::Lua)
        } else {
            None
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Language::Rhai => "rhai",
            Language::Lua => "lua",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-call budgets. Every field is optional; unset fields take the defaults documented in
/// `docs/scripting.md`.
// The schema declares the fields int64: the API server warns about the uint64 format.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Budget of Rhai operations, or of Lua interrupt ticks (function calls and loop iterations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub max_operations: Option<u64>,
    /// Wall-clock budget of one call, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub timeout_millis: Option<u64>,
    /// Heap budget of one call in bytes (Lua).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub max_memory_bytes: Option<u64>,
    /// Largest string a script may build, in bytes (Rhai).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub max_string_size: Option<u64>,
    /// Largest array a script may build (Rhai).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub max_array_size: Option<u64>,
    /// Largest map a script may build (Rhai).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub max_map_size: Option<u64>,
}

/// Metacontroller's webhook form, kept so existing manifests validate.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    /// The webhook's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// How long a call may take (a Go duration, e.g. `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// The path, appended to the service's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Which hook of which controller kind is being run; used in every error message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookKind {
    Sync,
    Finalize,
    Customize,
    Map,
    Tombstone,
}

impl HookKind {
    pub const ALL: [HookKind; 5] = [
        HookKind::Sync,
        HookKind::Finalize,
        HookKind::Customize,
        HookKind::Map,
        HookKind::Tombstone,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::Sync => "sync",
            HookKind::Finalize => "finalize",
            HookKind::Customize => "customize",
            HookKind::Map => "map",
            HookKind::Tombstone => "tombstone",
        }
    }

    pub fn parse(name: &str) -> Option<HookKind> {
        Some(match name {
            "sync" => HookKind::Sync,
            "finalize" => HookKind::Finalize,
            "customize" => HookKind::Customize,
            "map" => HookKind::Map,
            "tombstone" => HookKind::Tombstone,
            _ => return None,
        })
    }
}

impl fmt::Display for HookKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
