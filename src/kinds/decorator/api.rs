//! The DecoratorController custom resource (Metacontroller's API, with script hooks).

use crate::api::{
    ChildRule, ControllerObject, ControllerSpec, ControllerStatus, Field, Hook, HookContract,
    HookKind, KindInfo, KindName, ResourceRef, Selection, Selects, controller_spec, fields,
    on_delete_by_default, set_hooks,
};
use crate::selector::{AnnotationSelector, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

controller_spec! {
    /// Adds attachments, labels, annotations and status to every object matching `resources`.
    #[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
    #[kube(
        group = "metascript.dev",
        version = "v1alpha1",
        kind = "DecoratorController",
        shortname = "dec",
        status = "ControllerStatus",
        printcolumn = r#"{"name":"Loaded","type":"string","description":"The Ready condition: types resolved, watches started, the newest scripts compiled. FAILING counts the objects whose last sync failed.","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Targets","type":"integer","jsonPath":".status.targets"}"#,
        printcolumn = r#"{"name":"Synced","type":"integer","jsonPath":".status.synced"}"#,
        printcolumn = r#"{"name":"Failing","type":"integer","jsonPath":".status.failing"}"#,
        printcolumn = r#"{"name":"CPU/min","type":"string","description":"Hook CPU time per minute over the last ten minutes (status.usage).","jsonPath":".status.usage.cpuPerMinute"}"#,
        printcolumn = r#"{"name":"Writes/min","type":"number","description":"API writes per minute over the last ten minutes (status.usage).","jsonPath":".status.usage.writesPerMinute"}"#,
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
    }
    /// Re-sync every target this often even when nothing changed.
    resync_period_seconds;
    /// The hooks: `sync` (required), `finalize` and `customize`.
    hooks: DecoratorHooks;
    /// Every write the controller makes (children, deletions, labels, annotations, status,
    /// finalizers) is sent impersonating this ServiceAccount, so the controller can do only
    /// what RBAC grants that account. Without it the operator writes as itself, when its
    /// `--allow-unimpersonated` flag allows that.
    service_account_name;
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

impl ControllerObject for DecoratorController {
    const KIND: KindName = KIND;

    fn name(&self) -> String {
        kube::ResourceExt::name_any(self)
    }

    fn spec(&self) -> ControllerSpec {
        let spec = &self.spec;
        let hooks = &spec.hooks;
        spec.common(
            &self.metadata,
            on_delete_by_default(
                "spec.attachments",
                spec.attachments.iter().map(|a| a.update_strategy.is_none()),
            ),
        )
        .spec(
            spec.resources
                .iter()
                .map(|r| (r.resource_ref(), Selects::Rule(r.selection())))
                // Whole: a hand-made object with an attachment's name must be seen to be judged
                // by `adopt`, and it carries no label of the decorator's.
                .chain(
                    spec.attachments
                        .iter()
                        .map(|a| (a.resource_ref(), Selects::Whole)),
                ),
            set_hooks([
                (SYNC, Some(&hooks.sync)),
                (FINALIZE, hooks.finalize.as_ref()),
                (CUSTOMIZE, hooks.customize.as_ref()),
            ]),
        )
    }
}

/// Which objects of a type a DecoratorController targets.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRule {
    /// `<group>/<version>`, or `<version>` for the core group (e.g. `v1`, `apps/v1`).
    pub api_version: String,
    /// The canonical lowercase plural name (e.g. `statefulsets`).
    pub resource: String,
    /// Only objects whose labels match (every object of the type when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Only objects whose annotations match (every object of the type when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<AnnotationSelector>,
    /// When true, an event that changes only `status` does not re-sync the object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_status_changes: bool,
}

impl ResourceRule {
    pub fn resource_ref(&self) -> ResourceRef {
        ResourceRef {
            api_version: self.api_version.clone(),
            resource: self.resource.clone(),
        }
    }

    /// Whether an object's labels and annotations make it a target of this rule.
    pub fn selects(&self, object: &serde_json::Value) -> bool {
        self.selection().selects(object)
    }

    /// What the rule selects of its type's objects.
    pub(crate) fn selection(&self) -> Selection {
        Selection {
            labels: self.label_selector.clone(),
            annotations: self.annotation_selector.clone(),
        }
    }
}

static INFO: KindInfo = KindInfo {
    short: "decorator",
    object_kind: "DecoratorController",
    plural: "decoratorcontrollers",
    short_name: "dec",
    action: "Sync",
    // The statics themselves, not the consts below: those would make the initializers a cycle.
    hooks: &[
        HookKind(&SYNC_HOOK),
        HookKind(&FINALIZE_HOOK),
        HookKind(&CUSTOMIZE_HOOK),
    ],
    request_types: &[("object", "spec.resources"), ("parent", "spec.resources")],
};

/// The DecoratorController kind.
pub const KIND: KindName = KindName(&INFO);

const OBJECT: Field = Field::new(
    "object",
    "table<string, any>",
    "The object being decorated.",
);
const ATTACHMENTS_REQUEST: Field = Field::new(
    "attachments",
    "table<string, table<string, table<string, any>>>",
    "Owned children by `<Kind>.<apiVersion>`, then by name.",
);
const SYNC_REQUEST: &[Field] = &[
    fields::CONTROLLER,
    OBJECT,
    ATTACHMENTS_REQUEST,
    fields::RELATED,
    fields::FINALIZING,
];
const SYNC_RESPONSE: &[Field] = &[
    Field::new(
        "labels",
        "table<string, string|lightuserdata>",
        "Labels to set; a null value removes one.",
    ),
    Field::new(
        "annotations",
        "table<string, string|lightuserdata>",
        "Annotations to set; a null value removes one.",
    ),
    fields::STATUS,
    Field::objects("attachments", "The desired owned children (a flat list)."),
    fields::RESYNC_AFTER_SECONDS,
    fields::FINALIZED,
];

static SYNC_HOOK: HookContract = HookContract {
    kind: KindName(&INFO),
    name: "sync",
    subject: "object",
    request: SYNC_REQUEST,
    response: SYNC_RESPONSE,
};
static FINALIZE_HOOK: HookContract = HookContract {
    kind: KindName(&INFO),
    name: "finalize",
    subject: "object",
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

/// Returns a target's attachments, labels, annotations and status.
pub const SYNC: HookKind = HookKind(&SYNC_HOOK);
/// Runs while a target is deleted or stops matching, until it answers `finalized: true`.
pub const FINALIZE: HookKind = HookKind(&FINALIZE_HOOK);
/// Selects the related objects each target's sync request includes.
pub const CUSTOMIZE: HookKind = HookKind(&CUSTOMIZE_HOOK);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// What loading reads of a decorator with this spec and these finalizers.
    fn loaded(spec: Value, finalizers: &[&str]) -> ControllerSpec {
        let controller: DecoratorController = serde_json::from_value(json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "d", "finalizers": finalizers},
            "spec": spec,
        }))
        .unwrap();
        controller.spec()
    }

    /// The label-scoped types of a decorator with these rules, attachments and hooks.
    fn scoped(spec: Value, finalizers: &[&str]) -> Vec<(String, String)> {
        loaded(spec, finalizers)
            .label_scoped
            .into_iter()
            .map(|(reference, selector)| (reference.resource, selector))
            .collect()
    }

    fn rule(resource: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "resource": resource, "labelSelector": {"matchLabels": labels}})
    }

    fn sync() -> Value {
        json!({"sync": {"script": {"language": "rhai", "inline": "#{}"}}})
    }

    #[test]
    fn a_type_is_scoped_by_the_selectors_of_every_rule_naming_it() {
        let spec = json!({
            "resources": [rule("pods", json!({"app": "a"})), rule("pods", json!({"app": "b"})),
                          rule("services", json!({"app": "a"}))],
            "hooks": sync(),
        });
        assert_eq!(
            scoped(spec, &[]),
            [
                ("pods".into(), "app=a".into()),
                ("pods".into(), "app=b".into()),
                ("services".into(), "app=a".into()),
            ]
        );
    }

    #[test]
    fn a_type_something_else_needs_whole_is_not_scoped() {
        let unselected = json!({"apiVersion": "v1", "resource": "pods"});
        for (why, spec) in [
            (
                "a rule without a selector",
                json!({
                "resources": [rule("pods", json!({"app": "a"})), unselected], "hooks": sync()}),
            ),
            (
                "an empty selector",
                json!({
                "resources": [rule("pods", json!({}))], "hooks": sync()}),
            ),
            (
                "a value no label has",
                json!({
                "resources": [rule("pods", json!({"app": "a b"}))], "hooks": sync()}),
            ),
            (
                "an attachment of the type",
                json!({
                "resources": [rule("pods", json!({"app": "a"}))],
                "attachments": [{"apiVersion": "v1", "resource": "pods"}], "hooks": sync()}),
            ),
            (
                "a read of the type",
                json!({
                "resources": [rule("pods", json!({"app": "a"}))],
                "reads": [{"apiVersion": "v1", "resource": "pods"}], "hooks": sync()}),
            ),
        ] {
            assert_eq!(scoped(spec, &[]), [], "{why}");
        }
    }

    #[test]
    fn a_controller_that_finalizes_or_did_scopes_nothing() {
        let mut hooks = sync();
        hooks["finalize"] = hooks["sync"].clone();
        let rules = json!([rule("pods", json!({"app": "a"}))]);
        assert_eq!(scoped(json!({"resources": rules, "hooks": hooks}), &[]), []);
        assert_eq!(
            scoped(
                json!({"resources": rules, "hooks": sync()}),
                &[crate::api::CLEANUP_FINALIZER]
            ),
            [],
            "a finalize hook removed since: objects may still hold its finalizer"
        );
        assert_eq!(
            scoped(json!({"resources": rules, "hooks": sync()}), &["other"]).len(),
            1
        );
    }

    /// The shard-scoped types of a decorator, with how many rules select each.
    fn shard_scoped(spec: Value, finalizers: &[&str]) -> Vec<(String, usize)> {
        loaded(spec, finalizers)
            .shard_scoped
            .into_iter()
            .map(|(reference, selections)| (reference.resource, selections.len()))
            .collect()
    }

    #[test]
    fn a_sharded_replica_keeps_its_share_of_the_types_a_decorator_only_targets() {
        let spec = json!({
            "resources": [rule("pods", json!({"app": "a"})), rule("pods", json!({"app": "b"})),
                          {"apiVersion": "v1", "resource": "services"},
                          rule("configmaps", json!({"app": "a"}))],
            "attachments": [{"apiVersion": "v1", "resource": "secrets"}],
            "reads": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": sync(),
        });
        // Targets, with or without a selector; not an attachment, nor a type it reads.
        assert_eq!(
            shard_scoped(spec.clone(), &[]),
            [("pods".into(), 2), ("services".into(), 1)]
        );
        let mut finalizing = spec.clone();
        finalizing["hooks"]["finalize"] = finalizing["hooks"]["sync"].clone();
        assert_eq!(shard_scoped(finalizing, &[]), []);
        assert_eq!(shard_scoped(spec, &[crate::api::CLEANUP_FINALIZER]), []);
    }
}
