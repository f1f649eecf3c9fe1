//! The CompositeController custom resource: Metacontroller's API field for field (its docs:
//! `docs/src/api/compositecontroller.md`), with script hooks.

use crate::api::{
    AdoptPolicy, ChildRule, ControllerObject, ControllerSpec, ControllerStatus, Field, Hook,
    HookContract, HookKind, KindInfo, KindName, ResourceRef, Selection, Selects, UpdateMethod,
    UpdateStrategy, controller_spec, fields, on_delete_by_default, set_hooks,
};
use crate::selector::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

controller_spec! {
    /// A parent resource that owns children through controller references and its selector: the
    /// `sync` hook returns the parent's status and its desired children, which roll out by each
    /// child type's update strategy.
    #[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
    #[kube(
        group = "metascript.dev",
        version = "v1alpha1",
        kind = "CompositeController",
        shortname = "cc",
        status = "ControllerStatus",
        printcolumn = r#"{"name":"Loaded","type":"string","description":"The Ready condition: types resolved, watches started, the newest scripts compiled. FAILING counts the objects whose last sync failed.","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Parents","type":"integer","jsonPath":".status.targets"}"#,
        printcolumn = r#"{"name":"Synced","type":"integer","jsonPath":".status.synced"}"#,
        printcolumn = r#"{"name":"Failing","type":"integer","jsonPath":".status.failing"}"#,
        printcolumn = r#"{"name":"CPU/min","type":"string","description":"Hook CPU time per minute over the last ten minutes (status.usage).","jsonPath":".status.usage.cpuPerMinute"}"#,
        printcolumn = r#"{"name":"Writes/min","type":"number","description":"API writes per minute over the last ten minutes (status.usage).","jsonPath":".status.usage.writesPerMinute"}"#,
        printcolumn = r#"{"name":"Sync-Script","type":"string","jsonPath":".status.scripts.sync.digest","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )]
    #[serde(rename_all = "camelCase")]
    pub struct CompositeControllerSpec {
        /// The parent objects: each owns the children its `spec.selector` (or the generated
        /// selector) claims.
        pub parent_resource: ParentResourceRule,
        /// The types of child the hooks return, each with its update strategy.
        #[serde(default)]
        pub child_resources: Vec<CompositeChildRule>,
        /// Ignore parents' `spec.selector`: children are labelled `controller-uid: <parent uid>`
        /// and claimed by that label, as for a Job.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub generate_selector: Option<bool>,
    }
    /// Sync every parent again this often even when nothing changed.
    resync_period_seconds;
    /// The hooks: `sync` (required), `finalize` and `customize`.
    hooks: CompositeHooks;
    /// Every write the controller makes (children, claims, revisions, status, finalizers) is
    /// sent impersonating this ServiceAccount, so the controller can do only what RBAC grants
    /// that account. Without it the operator writes as itself, when its
    /// `--allow-unimpersonated` flag allows that.
    service_account_name;
}

/// The parent type, and which of its objects and fields matter.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ParentResourceRule {
    /// `<group>/<version>`, or `<version>` for the core group.
    pub api_version: String,
    /// The canonical lowercase plural name.
    pub resource: String,
    /// Only parents whose labels match (every parent when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Which parent fields a rolling update follows (default `spec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history: Option<RevisionHistory>,
    /// When true, a change to a parent's status alone does not sync it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_status_changes: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionHistory {
    /// Parent field paths (e.g. `spec.template`) whose changes roll children of a rolling
    /// type out one at a time; changes to other fields apply at once. Default `[spec]`.
    #[serde(default)]
    pub field_paths: Vec<String>,
}

/// A type of child a CompositeController's hooks return.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CompositeChildRule {
    /// `<group>/<version>`, or `<version>` for the core group.
    pub api_version: String,
    /// The canonical lowercase plural name.
    pub resource: String,
    /// How an existing child that differs from what the hook returns is updated (default
    /// `OnDelete`: left alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<CompositeUpdateStrategy>,
    /// Which existing objects of a returned name the parent may take as its children (default
    /// `Orphans`: those its selector matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt: Option<AdoptPolicy>,
}

impl CompositeChildRule {
    pub fn resource_ref(&self) -> ResourceRef {
        ResourceRef {
            api_version: self.api_version.clone(),
            resource: self.resource.clone(),
        }
    }

    pub fn method(&self) -> CompositeUpdateMethod {
        self.update_strategy
            .as_ref()
            .map(|strategy| strategy.method)
            .unwrap_or_default()
    }

    /// The rule as the shared child planning reads it: a rolling method is, child by child,
    /// the method it rolls with (`RollingRecreate` recreates the child it moves).
    pub fn child_rule(&self) -> ChildRule {
        let method = match self.method() {
            CompositeUpdateMethod::OnDelete => UpdateMethod::OnDelete,
            CompositeUpdateMethod::Recreate | CompositeUpdateMethod::RollingRecreate => {
                UpdateMethod::Recreate
            }
            CompositeUpdateMethod::InPlace | CompositeUpdateMethod::RollingInPlace => {
                UpdateMethod::InPlace
            }
        };
        ChildRule {
            api_version: self.api_version.clone(),
            resource: self.resource.clone(),
            update_strategy: Some(UpdateStrategy { method }),
            adopt: self.adopt,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CompositeUpdateStrategy {
    /// `OnDelete` (default), `Recreate`, `InPlace`, `RollingRecreate` or `RollingInPlace`.
    #[serde(default)]
    pub method: CompositeUpdateMethod,
    /// With a rolling method: what children already moved to the latest revision must show
    /// before the next one moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_checks: Option<StatusChecks>,
}

/// How an existing child that differs from the desired state is brought in line.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum CompositeUpdateMethod {
    /// Leave existing children alone; only missing ones are created.
    #[default]
    OnDelete,
    /// Delete a differing child; it is created again on the next sync.
    Recreate,
    /// Apply the desired state over the existing child.
    InPlace,
    /// Recreate differing children one at a time, each once the previous passes its checks.
    RollingRecreate,
    /// Update differing children in place one at a time, each once the previous passes its
    /// checks.
    RollingInPlace,
}

impl CompositeUpdateMethod {
    pub fn is_rolling(self) -> bool {
        matches!(
            self,
            CompositeUpdateMethod::RollingRecreate | CompositeUpdateMethod::RollingInPlace
        )
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusChecks {
    /// Conditions every child on the latest revision must have before the rollout goes on.
    #[serde(default)]
    pub conditions: Vec<StatusConditionCheck>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusConditionCheck {
    /// The condition type (e.g. `Ready`).
    #[serde(rename = "type")]
    pub type_: String,
    /// Its required status (not checked when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Its required reason (not checked when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CompositeHooks {
    /// Returns a parent's status and desired children.
    pub sync: Hook,
    /// Runs while a parent is deleted, until it answers `finalized: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalize: Option<Hook>,
    /// Selects related objects each parent's sync request includes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customize: Option<Hook>,
}

impl CompositeControllerSpec {
    /// Whether any child type rolls out (and so needs ControllerRevisions).
    pub fn rolls(&self) -> bool {
        self.child_resources
            .iter()
            .any(|rule| rule.method().is_rolling())
    }
}

/// ControllerRevisions, where rolling updates keep the parent's revisions.
pub(super) fn revisions_ref() -> ResourceRef {
    ResourceRef {
        api_version: "apps/v1".into(),
        resource: "controllerrevisions".into(),
    }
}

impl ControllerObject for CompositeController {
    const KIND: KindName = KIND;

    fn name(&self) -> String {
        kube::ResourceExt::name_any(self)
    }

    fn spec(&self) -> ControllerSpec {
        let spec = &self.spec;
        let hooks = &spec.hooks;
        let parent = ResourceRef {
            api_version: spec.parent_resource.api_version.clone(),
            resource: spec.parent_resource.resource.clone(),
        };
        let parent_selector = spec.parent_resource.label_selector.as_ref();
        spec.common(
            &self.metadata,
            on_delete_by_default(
                "spec.childResources",
                spec.child_resources
                    .iter()
                    .map(|c| c.update_strategy.is_none()),
            ),
        )
        .spec(
            std::iter::once((
                parent,
                Selects::Rule(Selection {
                    labels: parent_selector.cloned(),
                    annotations: None,
                }),
            ))
            .chain(
                spec.child_resources
                    .iter()
                    .map(|c| c.resource_ref())
                    .chain(spec.rolls().then(revisions_ref))
                    .map(|child| (child, Selects::Whole)),
            ),
            set_hooks([
                (SYNC, Some(&hooks.sync)),
                (FINALIZE, hooks.finalize.as_ref()),
                (CUSTOMIZE, hooks.customize.as_ref()),
            ]),
        )
    }
}

static INFO: KindInfo = KindInfo {
    short: "composite",
    object_kind: "CompositeController",
    plural: "compositecontrollers",
    short_name: "cc",
    action: "Sync",
    // The statics themselves, not the consts below: those would make the initializers a cycle.
    hooks: &[
        HookKind(&SYNC_HOOK),
        HookKind(&FINALIZE_HOOK),
        HookKind(&CUSTOMIZE_HOOK),
    ],
    request_types: &[("parent", "spec.parentResource")],
};

/// The CompositeController kind.
pub const KIND: KindName = KindName(&INFO);

const SYNC_REQUEST: &[Field] = &[
    fields::CONTROLLER,
    fields::PARENT,
    Field::new(
        "children",
        "table<string, table<string, table<string, any>>>",
        "The children the parent owns, by `<Kind>.<apiVersion>`, then by name.",
    ),
    fields::RELATED,
    fields::FINALIZING,
];
const SYNC_RESPONSE: &[Field] = &[
    Field::new(
        "status",
        "table<string, any>",
        "The parent's whole status (observedGeneration is added); null is an empty status.",
    ),
    Field::objects(
        "children",
        "The desired children (a flat list); owned children left out are deleted.",
    ),
    fields::RESYNC_AFTER_SECONDS,
    fields::FINALIZED,
];

static SYNC_HOOK: HookContract = HookContract {
    kind: KindName(&INFO),
    name: "sync",
    subject: "parent",
    request: SYNC_REQUEST,
    response: SYNC_RESPONSE,
};
static FINALIZE_HOOK: HookContract = HookContract {
    kind: KindName(&INFO),
    name: "finalize",
    subject: "parent",
    request: SYNC_REQUEST,
    response: SYNC_RESPONSE,
};
static CUSTOMIZE_HOOK: HookContract = HookContract {
    kind: KindName(&INFO),
    name: "customize",
    subject: "parent",
    request: &[fields::CONTROLLER, fields::PARENT],
    response: &[fields::RELATED_RESOURCES],
};

/// Returns a parent's status and desired children.
pub const SYNC: HookKind = HookKind(&SYNC_HOOK);
/// Runs while a parent is deleted, until it answers `finalized: true`.
pub const FINALIZE: HookKind = HookKind(&FINALIZE_HOOK);
/// Selects the related objects each parent's sync request includes.
pub const CUSTOMIZE: HookKind = HookKind(&CUSTOMIZE_HOOK);
