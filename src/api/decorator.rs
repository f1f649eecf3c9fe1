//! The DecoratorController custom resource (Metacontroller's API, with script hooks).

use super::{
    ChildRule, ControllerStatus, Hook, HookKind, InlineTest, Library, ResourceRef, ResourceRule,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Adds attachments, labels, annotations and status to every object matching `resources`.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "metascript.dev",
    version = "v1alpha1",
    kind = "DecoratorController",
    shortname = "dec",
    status = "ControllerStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Targets","type":"integer","jsonPath":".status.targets"}"#,
    printcolumn = r#"{"name":"Synced","type":"integer","jsonPath":".status.synced"}"#,
    printcolumn = r#"{"name":"Failing","type":"integer","jsonPath":".status.failing"}"#,
    printcolumn = r#"{"name":"Sync-Script","type":"string","jsonPath":".status.scripts.sync.digest","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerSpec {
    /// The types and selectors of the objects to decorate.
    #[schemars(length(min = 1))]
    pub resources: Vec<ResourceRule>,
    /// The types of object the hooks may attach to a target.
    #[serde(default)]
    pub attachments: Vec<ChildRule>,
    /// Re-sync every target this often even when nothing changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub resync_period_seconds: Option<i64>,
    /// Types the hooks may read with the `get` and `list` helpers, served from the operator's
    /// shared watch caches (watched from load). Every read is tracked: a change to what a call
    /// read re-syncs exactly the work that read it. Secrets cannot be declared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<ResourceRef>,
    /// Code shared by the hooks: each script hook loads the libraries of its language, in
    /// this order, before it runs (`docs/scripting.md#libraries`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub libraries: Vec<Library>,
    /// The hooks: `sync` (required), `finalize` and `customize`.
    pub hooks: DecoratorHooks,
    /// Every write the controller makes (children, deletions, labels, annotations, status,
    /// finalizers) is sent impersonating this ServiceAccount, so the controller can do only
    /// what RBAC grants that account. Without it the operator writes as itself, when its
    /// `--allow-unimpersonated` flag allows that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// The namespace of `serviceAccountName`; default `metascript-system`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_namespace: Option<String>,
    /// Test cases for the hooks: run before the controller is admitted (a failing one rejects
    /// it) and by `metascript validate`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<InlineTest>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorHooks {
    /// Returns a target's attachments, labels, annotations and status.
    pub sync: Hook,
    /// Runs when a target is deleted or stops matching, until it answers `finalized: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalize: Option<Hook>,
    /// Selects related objects each target's sync request includes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customize: Option<Hook>,
}

impl DecoratorHooks {
    /// The hooks that are set, with their names.
    pub fn named(&self) -> Vec<(HookKind, &Hook)> {
        [
            (HookKind::Sync, Some(&self.sync)),
            (HookKind::Finalize, self.finalize.as_ref()),
            (HookKind::Customize, self.customize.as_ref()),
        ]
        .into_iter()
        .filter_map(|(kind, hook)| Some((kind, hook?)))
        .collect()
    }
}
