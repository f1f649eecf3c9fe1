//! The MapController custom resource: for each input a parent selects, outputs owned by the parent.

use crate::api::{
    ChildRule, CommonSpec, Compatibility, ControllerObject, ControllerSpec, ControllerStatus,
    EndpointConfig, Field, Hook, HookContract, HookKind, InlineTest, KindInfo, KindName, Library,
    ResourceRef, Rollout, fields, on_delete_by_default, set_hooks,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// For every input a parent selects, outputs owned by the parent: the map hook's answer.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "metascript.dev",
    version = "v1alpha1",
    kind = "MapController",
    shortname = "mapc",
    status = "ControllerStatus",
    printcolumn = r#"{"name":"Loaded","type":"string","description":"The Ready condition: types resolved, watches started, the newest scripts compiled. FAILING counts the objects whose last sync failed.","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Pairs","type":"integer","jsonPath":".status.targets"}"#,
    printcolumn = r#"{"name":"Synced","type":"integer","jsonPath":".status.synced"}"#,
    printcolumn = r#"{"name":"Failing","type":"integer","jsonPath":".status.failing"}"#,
    printcolumn = r#"{"name":"Map-Script","type":"string","jsonPath":".status.scripts.map.digest","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MapControllerSpec {
    /// The policy objects that select inputs and own the outputs.
    pub parent_resource: ResourceRef,
    /// The types of the (non-owned) objects fed to the map hook, one at a time.
    #[schemars(length(min = 1))]
    pub input_resources: Vec<ResourceRef>,
    /// The types of object the map hook may return.
    #[schemars(length(min = 1))]
    pub output_resources: Vec<ChildRule>,
    /// Map every input of every parent again this often even when nothing changed.
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
    /// The hooks: `map` (required) and `tombstone`.
    pub hooks: MapHooks,
    /// Every write the controller makes (children, deletions, labels, annotations, status,
    /// finalizers) is sent impersonating this ServiceAccount, so the controller can do only
    /// what RBAC grants that account. Without it the operator writes as itself, when its
    /// `--allow-unimpersonated` flag allows that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// The namespace of `serviceAccountName`, required with it: who may use an account (verb
    /// `use` on `serviceaccounts.metascript.dev`) is granted in its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_namespace: Option<String>,
    /// Test cases for the hooks (at most 32): run before the controller is admitted (a failing
    /// one rejects it), before any new revision of it serves, and by `metascript validate`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tests: Vec<InlineTest>,
    /// Credentials and CA bundles for the webhook hooks on each host, read with the
    /// controller's ServiceAccount; a hook that sets any of its own uses those instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_configs: Vec<EndpointConfig>,
    /// Behaviour kept from the tool the controller was moved from (`metascript convert` sets
    /// it); see `docs/migrating.md`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<Compatibility>,
    /// How a new revision of this controller (its spec or the scripts it runs) reaches the
    /// objects it acts on: at once (the default), evaluated in the shadows until promoted, or
    /// as a canary serving a growing share; see `docs/operations.md#staged-rollouts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MapHooks {
    /// Turns one input into its outputs.
    pub map: Hook,
    /// Decides which outputs of an input that is gone (or no longer selected) to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone: Option<Hook>,
}

impl ControllerObject for MapController {
    const KIND: KindName = KIND;

    fn name(&self) -> String {
        kube::ResourceExt::name_any(self)
    }

    fn spec(&self) -> ControllerSpec {
        let spec = &self.spec;
        CommonSpec {
            metadata: &self.metadata,
            resync_period_seconds: spec.resync_period_seconds,
            reads: &spec.reads,
            libraries: &spec.libraries,
            service_account_name: spec.service_account_name.as_deref(),
            service_account_namespace: spec.service_account_namespace.as_deref(),
            tests: &spec.tests,
            on_delete_by_default: on_delete_by_default(
                "spec.outputResources",
                spec.output_resources
                    .iter()
                    .map(|o| o.update_strategy.is_none()),
            ),
            endpoint_configs: &spec.endpoint_configs,
            compatibility: spec.compatibility.as_ref(),
            rollout: spec.rollout.as_ref(),
        }
        .spec(
            std::iter::once(spec.parent_resource.clone())
                .chain(spec.input_resources.iter().cloned())
                .chain(spec.output_resources.iter().map(|o| o.resource_ref())),
            set_hooks([
                (MAP, Some(&spec.hooks.map)),
                (TOMBSTONE, spec.hooks.tombstone.as_ref()),
            ]),
        )
    }
}

static INFO: KindInfo = KindInfo {
    short: "map",
    object_kind: "MapController",
    plural: "mapcontrollers",
    short_name: "mapc",
    action: "Map",
    // The statics themselves, not the consts below: those would make the initializers a cycle.
    hooks: &[HookKind(&MAP_HOOK), HookKind(&TOMBSTONE_HOOK)],
    request_types: &[
        ("parent", "spec.parentResource"),
        ("input", "spec.inputResources"),
    ],
};

/// The MapController kind.
pub const KIND: KindName = KindName(&INFO);

const MAP_KEY: Field = Field::new(
    "mapKey",
    "string",
    "The key of the input, as outputs are tagged.",
);
const OUTPUTS_REQUEST: Field = Field::new(
    "outputs",
    "table<string, table<string, table<string, any>>>",
    "Outputs of this input by `<Kind>.<apiVersion>`, then by name.",
);

static MAP_HOOK: HookContract = HookContract {
    kind: KindName(&INFO),
    name: "map",
    subject: "input",
    request: &[
        fields::CONTROLLER,
        fields::PARENT,
        MAP_KEY,
        Field::new("input", "table<string, any>", "The input object."),
        OUTPUTS_REQUEST,
    ],
    response: &[Field::objects(
        "outputs",
        "The desired outputs of the input (a flat list).",
    )],
};
static TOMBSTONE_HOOK: HookContract = HookContract {
    kind: KindName(&INFO),
    name: "tombstone",
    subject: "parent",
    request: &[fields::CONTROLLER, fields::PARENT, MAP_KEY, OUTPUTS_REQUEST],
    response: &[Field::objects(
        "outputs",
        "The outputs of the vanished input to keep.",
    )],
};

/// Turns one input into its outputs.
pub const MAP: HookKind = HookKind(&MAP_HOOK);
/// Decides which outputs of an input that is gone (or no longer selected) to keep.
pub const TOMBSTONE: HookKind = HookKind(&TOMBSTONE_HOOK);
