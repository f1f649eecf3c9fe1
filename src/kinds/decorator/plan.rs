//! DecoratorController planning: which objects are targets, what their hooks are asked, and what
//! a hook's answer means for the cluster.

use super::DECORATOR_LABEL;
use super::api::{DecoratorController, ResourceRule};
use crate::api::HookVersion;
use crate::kinds::one_object::{Common, ObjectRequest};
use crate::object;
use crate::plan::children::{self, ChildType};
use crate::plan::lifecycle::Phase;
use crate::plan::response::{self, InvalidResponse, json_type};
use crate::plan::synced::{self, SyncedPlace};
use crate::plan::{Plan, StatusChange, sanity};
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::script::Json;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// A DecoratorController with its resource types resolved: everything planning needs that does
/// not change from one target to the next.
#[derive(Clone, Debug)]
pub struct Decorator {
    pub(crate) common: Common,
    pub rules: Vec<(ResourceRule, ResourceType)>,
    pub attachments: Vec<ChildType>,
    synced: SyncedPlace,
}

/// What was observed for one target when its hook is called.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// The target, or only its head when the request lends its text (`lent`).
    pub target: &'a Value,
    /// The target as its request shows it.
    pub lent: Json<'a>,
    /// Children attached by this decorator (see [`Decorator::owns`]).
    pub attachments: Vec<&'a Value>,
    /// Related objects, as grouped by [`Decorator::group_related`].
    pub related: Value,
}

impl Decorator {
    pub fn new(
        controller: &DecoratorController,
        resolver: &dyn ResourceResolver,
    ) -> Result<Decorator, ResolveError> {
        let spec = &controller.spec;
        let rules = spec
            .resources
            .iter()
            .map(|rule| Ok((rule.clone(), resolver.resolve(&rule.resource_ref())?)))
            .collect::<Result<Vec<_>, ResolveError>>()?;
        Ok(Decorator {
            rules,
            attachments: children::resolve_child_types(&spec.attachments, resolver)?,
            common: Common::new(
                controller,
                (
                    spec.hooks.finalize.is_some(),
                    spec.hooks.customize.is_some(),
                ),
                &spec.reads,
                resolver,
            )?,
            synced: SyncedPlace::decorated(&kube::ResourceExt::name_any(controller)),
        })
    }

    /// Where its targets carry the `Synced` condition.
    pub fn synced_place(&self) -> &SyncedPlace {
        &self.synced
    }

    /// The resolved type of a target object, when it is of a type this controller targets.
    pub fn target_type(&self, target: &Value) -> Option<&ResourceType> {
        self.rules
            .iter()
            .map(|(_, resource)| resource)
            .find(|resource| resource.describes(target))
    }

    /// Whether an object matches one of the resource rules, selectors included.
    pub fn selects(&self, target: &Value) -> bool {
        self.rules
            .iter()
            .any(|(rule, resource)| resource.describes(target) && rule.selects(target))
    }

    /// Whether its rules of `resource` select by labels alone: none has an annotation selector.
    pub fn selects_by_labels_alone(&self, resource: &ResourceType) -> bool {
        self.rules
            .iter()
            .filter(|(_, rule_type)| rule_type == resource)
            .all(|(rule, _)| rule.annotation_selector.is_none())
    }

    /// Whether `child` is an attachment of this decorator on `target`: controlled by the target
    /// and labelled with this decorator's name, so other decorators' attachments and the
    /// target's own children are never touched.
    pub fn owns(&self, target: &Value, child: &Value) -> bool {
        object::label(child, DECORATOR_LABEL) == Some(self.common.name.as_str())
            && object::is_controlled_by(child, target)
            && self.attachments.iter().any(|t| t.resource.describes(child))
    }

    /// The sync or finalize hook request, in the shape of the hook's `version`.
    pub(crate) fn request<'a>(
        &'a self,
        phase: Phase,
        observed: &'a Observed,
        version: HookVersion,
    ) -> ObjectRequest<'a> {
        let attachments = children::group_for_request(
            observed.target,
            self.attachments.iter().map(|t| &t.resource),
            observed.attachments.iter().copied(),
            version,
        );
        self.common.request(
            phase,
            ("object", observed.lent),
            ("attachments", attachments),
            &observed.related,
        )
    }

    /// Turns a sync or finalize response into the writes that converge the target.
    pub fn plan(
        &self,
        phase: Phase,
        observed: &Observed,
        response: &Value,
    ) -> Result<Plan, InvalidResponse> {
        let target = observed.target;
        let target_type = self.target_type(target).ok_or_else(|| {
            InvalidResponse::new(
                "object",
                "the target is not of a type this controller targets",
            )
        })?;
        let fields = response::fields(response)?;
        let items = response::list(fields, "attachments")?;
        let desired = children::desired_children(
            items,
            "attachments",
            target,
            target_type.namespaced,
            &self.attachments,
            &[(DECORATOR_LABEL, &self.common.name)],
        )?;
        let (apply, delete) = children::reconcile(
            desired,
            &observed.attachments,
            &self.attachments,
            "no longer returned by the hook",
        );
        let labels = response::string_updates(fields, "labels")?;
        for (key, value) in &labels {
            sanity::check_label(key, value.as_deref().unwrap_or_default())
                .map_err(|reason| InvalidResponse::new(format!("labels.{key}"), reason))?;
        }
        let mut plan = Plan {
            apply,
            delete,
            metadata_patch: metadata_patch(
                target,
                &labels,
                &response::string_updates(fields, "annotations")?,
            ),
            status: status_change(target, fields.get("status"))?,
            resync_after_seconds: response::resync_after(fields)?,
            ..Plan::default()
        };
        plan.finalizer = self.common.finalizer_change(phase, fields, target)?;
        Ok(plan)
    }
}

/// A merge patch of the target's labels and annotations, only for keys that actually change.
fn metadata_patch(
    target: &Value,
    labels: &BTreeMap<String, Option<String>>,
    annotations: &BTreeMap<String, Option<String>>,
) -> Option<Value> {
    let mut metadata = Map::new();
    for (field, updates, current) in [
        ("labels", labels, object::labels(target)),
        ("annotations", annotations, object::annotations(target)),
    ] {
        let changes: Map<String, Value> = updates
            .iter()
            .filter(|(key, value)| current.get(*key) != value.as_ref())
            .map(|(key, value)| {
                (
                    key.clone(),
                    value.clone().map_or(Value::Null, Value::String),
                )
            })
            .collect();
        if !changes.is_empty() {
            metadata.insert(field.into(), Value::Object(changes));
        }
    }
    (!metadata.is_empty()).then(|| json!({"metadata": metadata}))
}

/// `status`: absent or null leaves it; a map replaces it when the current status lacks any of it.
fn status_change(
    target: &Value,
    status: Option<&Value>,
) -> Result<Option<StatusChange>, InvalidResponse> {
    match status {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => {
            let desired = Value::Object(map.clone());
            let current = target.get("status").cloned().unwrap_or_else(|| json!({}));
            // The API server defaults status fields the hook never sets (e.g. a StatefulSet's
            // availableReplicas), so "already has everything returned" counts as unchanged;
            // comparing for equality would rewrite the status on every sync. The operator's
            // conditions are left out of the comparison.
            let unchanged = object::is_subset(
                &synced::without_operators(&desired),
                &synced::without_operators(&current),
            );
            Ok((!unchanged).then_some(StatusChange::Replace(desired)))
        }
        Some(other) => Err(InvalidResponse::new(
            "status",
            format!(
                "expected a map (or null to leave status alone), got {}",
                json_type(other)
            ),
        )),
    }
}
