//! Test cases a controller carries in `spec.tests`: run against its hooks before it is
//! admitted, and by `metascript validate`. The same format as a `*.test.yaml` case.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InlineTest {
    /// What the test checks, shown when it fails.
    pub name: String,
    /// The hook to run: sync (the default for a DecoratorController), finalize, customize,
    /// map (the default for a MapController) or tombstone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// The hook request.
    #[schemars(schema_with = "any_json")]
    pub request: Value,
    /// The expected response: a subset match (maps recursively, lists element by element)
    /// unless `exact`. Without `expect` or `expectError` the hook need only succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub expect: Option<Value>,
    /// Compare `expect` with the whole response.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
    /// The call must fail with an error containing this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_error: Option<String>,
    /// What `now()` returns during the call (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<String>,
    /// Objects the hook's `get` and `list` see during the call (of the types in `spec.reads`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_json_list")]
    pub cluster: Vec<Value>,
    /// The reads the call must record, exactly and in order (e.g. `get Namespace.v1 team-a`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_reads: Option<Vec<String>>,
    /// The Events the call must ask for with `event`, exactly and in order (`[]`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_events: Option<Vec<super::ScriptEvent>>,
}

/// A list of any JSON values (objects, kept as given).
fn any_json_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}})
}

/// Any JSON value; the API server keeps it as given.
fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}
