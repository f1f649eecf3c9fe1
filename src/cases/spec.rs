//! The `*.test.yaml` format: which hook to run, and the cases to run it on.

use crate::api::Limits;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One test file. Either `controller` (manifest files holding the controller, plus any
/// ConfigMaps and CRDs it needs) with `hook`, or `script` (script files) with an optional
/// `hook` and `limits`. Listing several files runs every case against each, e.g. the Rhai and
/// the Lua version of a hook.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TestFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<OneOrMany>,
    /// A directory (relative to the test file) whose files replace ConfigMap keys of the same
    /// name, so a manifest's `configMapRef` scripts are read from the files next to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scripts_dir: Option<String>,
    /// More manifests (relative to the test file) loaded with every `controller` file: the
    /// CRDs of custom types it names, ConfigMaps its hooks reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<String>,
    /// Files or folders (relative to the test file) of CustomResourceDefinitions: what the
    /// objects a hook returns are checked against, besides the CRDs among `controller` and
    /// `manifests` and the built-in types' schemas.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crds: Vec<String>,
    /// Which controller of the manifests, when they hold more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<OneOrMany>,
    /// Libraries (files relative to the test file) every `script` file is compiled with, as a
    /// controller's `spec.libraries` would load them (manifests carry their own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub libraries: Vec<LibraryFile>,
    /// The kind of controller whose hook a `script` file is (`DecoratorController`,
    /// `MapController`; by default the first kind with a hook of that name). A `controller`
    /// manifest says its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The hook to run (default: the kind's first, e.g. sync).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// Limits for `script` files (manifests carry their own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// What `now()` returns, for every case that sets no clock of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<jiff::Timestamp>,
    /// Objects the hook's `get` and `list` see, in every case (a case's own `cluster` adds to
    /// them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster: Vec<Value>,
    pub cases: Vec<Case>,
}

/// A library of a test file's `script` files.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct LibraryFile {
    /// The library's name (in Lua, the global its table is bound to).
    pub name: String,
    /// Its file; the `.rhai` or `.lua` suffix tells the language.
    pub script: String,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(crate) fn items(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(item) => vec![item],
            OneOrMany::Many(items) => items.iter().map(String::as_str).collect(),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Case {
    pub name: String,
    /// The hook request, inline...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// ...or from a YAML/JSON file relative to the test file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_file: Option<String>,
    /// The expected response: by default a subset match (maps recursively, lists of the same
    /// length element by element).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Value>,
    /// Compare `expect` with the whole response.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
    /// The call must fail with an error containing this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<jiff::Timestamp>,
    /// Objects the hook's `get` and `list` see in this case, besides the file's `cluster`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster: Vec<Value>,
    /// The reads the call must have recorded, exactly and in order, as the operator tracks
    /// them (e.g. `get Namespace.v1 team-a`, `list Service.v1 namespace=shop labels=app=web`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_reads: Option<Vec<String>>,
    /// The Events the call must have asked for with `event`, exactly and in order (a failed
    /// call asks for none: the operator publishes none of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_events: Option<Vec<crate::api::ScriptEvent>>,
}
