//! DecoratorController planning: which objects are targets, what their hooks are asked, and what
//! a hook's answer means for the cluster.

use super::DECORATOR_LABEL;
use super::api::{DecoratorController, KIND, ResourceRule};
use crate::api::{HookVersion, ResourceRef};
use crate::object;
use crate::plan::children::{self, ChildType};
use crate::plan::response::{self, InvalidResponse, json_type};
use crate::plan::{FinalizerChange, Plan, StatusChange, sanity};
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::selector::LabelSelector;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// A DecoratorController with its resource types resolved: everything planning needs that does
/// not change from one target to the next.
#[derive(Clone, Debug)]
pub struct Decorator {
    pub name: String,
    /// The controller object exactly as hooks receive it in `controller`.
    pub controller_json: Value,
    pub rules: Vec<(ResourceRule, ResourceType)>,
    pub attachments: Vec<ChildType>,
    pub has_finalize: bool,
    pub has_customize: bool,
    /// The types hooks may read (`spec.reads`).
    pub reads: std::sync::Arc<[ResourceType]>,
    /// The finalizer this controller puts on targets when it has a finalize hook (computed
    /// once: it is checked on every target event).
    finalizer: String,
}

/// Which hook, if any, a target needs now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Selected and alive: call `sync`.
    Sync,
    /// Deleted or opted out while holding our finalizer: call `finalize`.
    Finalize,
    /// Holds our finalizer but the controller has no finalize hook any more: just release it.
    Release,
    /// Nothing to do.
    Idle,
}

impl Phase {
    /// Whether a target in this phase runs a hook (and so needs its related objects).
    pub fn runs_hook(self) -> bool {
        matches!(self, Phase::Sync | Phase::Finalize)
    }
}

/// What was observed for one target when its hook is called.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub target: &'a Value,
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
            name: kube::ResourceExt::name_any(controller),
            controller_json: children::controller_json(controller, KIND),
            rules,
            attachments: children::resolve_child_types(&spec.attachments, resolver)?,
            has_finalize: spec.hooks.finalize.is_some(),
            has_customize: spec.hooks.customize.is_some(),
            reads: crate::resources::resolve_reads(&spec.reads, resolver)?,
            finalizer: finalizer_for(&kube::ResourceExt::name_any(controller)),
        })
    }

    /// The finalizer this controller puts on targets when it has a finalize hook.
    pub fn finalizer(&self) -> &str {
        &self.finalizer
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
        let labels = object::labels(target);
        let annotations = object::annotations(target);
        self.rules.iter().any(|(rule, resource)| {
            resource.describes(target) && rule.selects(&labels, &annotations)
        })
    }

    pub fn phase(&self, target: &Value) -> Phase {
        let holds_finalizer = object::has_finalizer(target, self.finalizer());
        if self.selects(target) && !object::is_deleting(target) {
            Phase::Sync
        } else if holds_finalizer && self.has_finalize {
            Phase::Finalize
        } else if holds_finalizer {
            Phase::Release
        } else {
            Phase::Idle
        }
    }

    /// Whether `child` is an attachment of this decorator on `target`: controlled by the target
    /// and labelled with this decorator's name, so other decorators' attachments and the
    /// target's own children are never touched.
    pub fn owns(&self, target: &Value, child: &Value) -> bool {
        object::label(child, DECORATOR_LABEL) == Some(self.name.as_str())
            && object::is_controlled_by(child, target)
            && self.attachments.iter().any(|t| t.resource.describes(child))
    }

    pub fn customize_request(&self, target: &Value) -> Value {
        object::fields([
            ("controller", self.controller_json.clone()),
            ("parent", target.clone()),
        ])
    }

    /// Reads a customize response: the related resource rules it asks for, read the way the
    /// customize hook's `version` means them.
    pub fn related_rules(
        &self,
        response: &Value,
        version: HookVersion,
    ) -> Result<Vec<RelatedRule>, InvalidResponse> {
        let fields = response::fields(response)?;
        response::list(fields, "relatedResources")?
            .iter()
            .enumerate()
            .map(|(index, item)| {
                let mut rule: RelatedRule =
                    serde_json::from_value(item.clone()).map_err(|error| {
                        InvalidResponse::new(
                            format!("relatedResources[{index}]"),
                            error.to_string(),
                        )
                    })?;
                if rule.api_version.is_empty() || rule.resource.is_empty() {
                    return Err(InvalidResponse::new(
                        format!("relatedResources[{index}]"),
                        "apiVersion and resource are required",
                    ));
                }
                rule.version = version;
                Ok(rule)
            })
            .collect()
    }

    /// Groups related objects for the request the same way as attachments.
    pub fn group_related<'a>(
        &self,
        target: &Value,
        types: impl IntoIterator<Item = &'a ResourceType>,
        related: impl IntoIterator<Item = &'a Value>,
        version: HookVersion,
    ) -> Value {
        children::group_for_request(target, types, related, version)
    }

    /// The sync or finalize hook request, in the shape of the hook's `version`.
    pub fn request(&self, phase: Phase, observed: &Observed, version: HookVersion) -> Value {
        let related = if observed.related.is_object() {
            observed.related.clone()
        } else {
            json!({})
        };
        object::fields([
            ("controller", self.controller_json.clone()),
            ("object", observed.target.clone()),
            (
                "attachments",
                children::group_for_request(
                    observed.target,
                    self.attachments.iter().map(|t| &t.resource),
                    observed.attachments.iter().copied(),
                    version,
                ),
            ),
            ("related", related),
            ("finalizing", (phase == Phase::Finalize).into()),
        ])
    }

    /// The plan for a target whose finalizer must go without calling any hook.
    pub fn release_plan(&self) -> Plan {
        Plan {
            finalizer: Some(FinalizerChange::Remove(self.finalizer.clone())),
            ..Plan::default()
        }
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
            &[(DECORATOR_LABEL, &self.name)],
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
            finalizer: None,
            resync_after_seconds: response::resync_after(fields)?,
        };
        let holds_finalizer = object::has_finalizer(target, self.finalizer());
        plan.finalizer = match phase {
            Phase::Finalize => match fields.get("finalized") {
                Some(Value::Bool(true)) if holds_finalizer => {
                    Some(FinalizerChange::Remove(self.finalizer.clone()))
                }
                None | Some(Value::Null) | Some(Value::Bool(_)) => None,
                Some(other) => {
                    return Err(InvalidResponse::new(
                        "finalized",
                        format!("expected a boolean, got {}", json_type(other)),
                    ));
                }
            },
            _ if self.has_finalize && !holds_finalizer => {
                Some(FinalizerChange::Add(self.finalizer.clone()))
            }
            _ if !self.has_finalize && holds_finalizer => {
                Some(FinalizerChange::Remove(self.finalizer.clone()))
            }
            _ => None,
        };
        Ok(plan)
    }
}

/// The finalizer of the DecoratorController with this name. Finalizer names are qualified
/// names, whose name part is at most 63 characters; longer controller names are digested.
pub fn finalizer_for(controller: &str) -> String {
    let mut name = format!("decorator-{controller}");
    if name.len() > 63 {
        name = format!("decorator-{}", object::short_digest(controller));
    }
    format!("metascript.dev/{name}")
}

/// One entry of a customize response's `relatedResources`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RelatedRule {
    pub api_version: String,
    pub resource: String,
    #[serde(default)]
    pub label_selector: Option<LabelSelector>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub names: Vec<String>,
    /// The version of the customize hook that asked for it, which decides where an unset
    /// `namespace` looks.
    #[serde(skip)]
    pub version: HookVersion,
}

impl RelatedRule {
    pub fn resource_ref(&self) -> ResourceRef {
        ResourceRef {
            api_version: self.api_version.clone(),
            resource: self.resource.clone(),
        }
    }

    /// The namespace this rule looks in: the one given, else (`v1`) a namespaced target's own,
    /// else all.
    pub fn namespace_for<'a>(&'a self, target: &'a Value) -> Option<&'a str> {
        let given = self.namespace.as_deref().filter(|ns| !ns.is_empty());
        match self.version {
            HookVersion::V1 => given.or_else(|| object::namespace(target)),
            HookVersion::V2 => given,
        }
    }

    /// Whether `candidate` (of this rule's type) is related to `target` under this rule.
    pub fn selects(&self, target: &Value, candidate: &Value) -> bool {
        let namespace_ok = match (self.namespace_for(target), object::namespace(candidate)) {
            (Some(wanted), Some(actual)) => wanted == actual,
            (Some(_), None) => true, // cluster-scoped related objects have no namespace
            (None, _) => true,
        };
        namespace_ok
            && (self.names.is_empty() || self.names.iter().any(|n| n == object::name(candidate)))
            && self
                .label_selector
                .as_ref()
                .is_none_or(|selector| selector.matches(&object::labels(candidate)))
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
            // comparing for equality would rewrite the status on every sync.
            Ok((!object::is_subset(&desired, &current)).then_some(StatusChange::Replace(desired)))
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
