//! The MapController custom resource: for each input a parent selects, outputs owned by the parent.

use crate::api::{
    ChildRule, ControllerObject, ControllerSpec, ControllerStatus, Field, Hook, HookContract,
    HookKind, KindInfo, KindName, ResourceRef, Selects, controller_spec, fields,
    on_delete_by_default, set_hooks,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

controller_spec! {
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
        printcolumn = r#"{"name":"CPU/min","type":"string","description":"Hook CPU time per minute over the last ten minutes (status.usage).","jsonPath":".status.usage.cpuPerMinute"}"#,
        printcolumn = r#"{"name":"Writes/min","type":"number","description":"API writes per minute over the last ten minutes (status.usage).","jsonPath":".status.usage.writesPerMinute"}"#,
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
    }
    /// Map every input of every parent again this often even when nothing changed.
    resync_period_seconds;
    /// The hooks: `map` (required) and `tombstone`.
    hooks: MapHooks;
    /// Every write the controller makes (children, deletions, labels, annotations, status,
    /// finalizers) is sent impersonating this ServiceAccount, so the controller can do only
    /// what RBAC grants that account. Without it the operator writes as itself, when its
    /// `--allow-unimpersonated` flag allows that.
    service_account_name;
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
        spec.common(
            &self.metadata,
            on_delete_by_default(
                "spec.outputResources",
                spec.output_resources
                    .iter()
                    .map(|o| o.update_strategy.is_none()),
            ),
        )
        .spec(
            std::iter::once(spec.parent_resource.clone())
                .chain(spec.input_resources.iter().cloned())
                .chain(spec.output_resources.iter().map(|o| o.resource_ref()))
                .map(|whole| (whole, Selects::Whole)),
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
