//! MapController planning: which inputs a parent selects, the key tying outputs to their input,
//! the map and tombstone requests, the plans for live and detached output groups, and the
//! status aggregated on the parent.

use super::api::{KIND, MapController};
use super::{MAP_KEY_LABEL, MAP_LABEL};
use crate::api::HookVersion;
use crate::object::{self, ObjectKey};
use crate::plan::children::{self, ChildType};
use crate::plan::response::{self, InvalidResponse};
use crate::plan::{InvalidSelector, Plan, StatusChange};
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::selector::LabelSelector;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// A MapController with its resource types resolved.
#[derive(Clone, Debug)]
pub struct Mapper {
    pub name: String,
    /// The controller object exactly as hooks receive it in `controller`.
    pub controller_json: Value,
    pub parent: ResourceType,
    pub inputs: Vec<ResourceType>,
    pub outputs: Vec<ChildType>,
    pub has_tombstone: bool,
    /// The types hooks may read (`spec.reads`).
    pub reads: std::sync::Arc<[ResourceType]>,
}

impl Mapper {
    pub fn new(
        controller: &MapController,
        resolver: &dyn ResourceResolver,
    ) -> Result<Mapper, ResolveError> {
        let spec = &controller.spec;
        let inputs = spec
            .input_resources
            .iter()
            .map(|reference| resolver.resolve(reference))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Mapper {
            name: kube::ResourceExt::name_any(controller),
            controller_json: children::controller_json(controller, KIND),
            parent: resolver.resolve(&spec.parent_resource)?,
            inputs,
            outputs: children::resolve_child_types(&spec.output_resources, resolver)?,
            has_tombstone: spec.hooks.tombstone.is_some(),
            reads: crate::resources::resolve_reads(&spec.reads, resolver)?,
        })
    }

    /// The parent's duck-typed `spec.selector`; missing or empty selects every input in scope.
    pub fn parent_selector(&self, parent: &Value) -> Result<LabelSelector, InvalidSelector> {
        LabelSelector::from_json(parent.pointer("/spec/selector").unwrap_or(&Value::Null)).map_err(
            |source| InvalidSelector {
                parent: ObjectKey::of(parent).to_string(),
                source,
            },
        )
    }

    /// Whether `input` feeds `parent`: of an input type, in the parent's namespace (any namespace
    /// for a cluster-scoped parent), matching the selector, and not controlled by the parent
    /// itself (which guards a type that is both input and output against recursion).
    pub fn selects_input(&self, parent: &Value, selector: &LabelSelector, input: &Value) -> bool {
        self.inputs.iter().any(|t| t.describes(input))
            && (!self.parent.namespaced || object::namespace(input) == object::namespace(parent))
            && !object::is_controlled_by(input, parent)
            && selector.matches_labels_of(input)
    }

    /// The opaque, stable, label-safe key of an input: a digest of its group, kind, namespace
    /// and name. A deleted and recreated input keeps its key and so finds its old outputs.
    pub fn map_key(input: &Value) -> String {
        object::identity_digest(
            object::group_of(object::api_version(input)),
            object::kind(input),
            object::namespace(input).unwrap_or_default(),
            object::name(input),
        )
    }

    /// Whether `output` is one of this controller's outputs under `parent`.
    pub fn owns(&self, parent: &Value, output: &Value) -> bool {
        object::label(output, MAP_LABEL) == Some(self.name.as_str())
            && object::is_controlled_by(output, parent)
            && self.outputs.iter().any(|t| t.resource.describes(output))
    }

    /// Owned outputs grouped by map key (outputs without a key are ignored).
    pub fn group_by_key<'a>(
        &self,
        outputs: impl IntoIterator<Item = &'a Value>,
    ) -> BTreeMap<String, Vec<&'a Value>> {
        let mut groups: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
        for output in outputs {
            if let Some(key) = object::label(output, MAP_KEY_LABEL) {
                groups.entry(key.to_string()).or_default().push(output);
            }
        }
        groups
    }

    fn grouped_outputs(&self, parent: &Value, outputs: &[&Value], version: HookVersion) -> Value {
        children::group_for_request(
            parent,
            self.outputs.iter().map(|t| &t.resource),
            outputs.iter().copied(),
            version,
        )
    }

    pub fn map_request(
        &self,
        parent: &Value,
        input: &Value,
        outputs: &[&Value],
        version: HookVersion,
    ) -> Value {
        object::fields([
            ("controller", self.controller_json.clone()),
            ("parent", parent.clone()),
            ("mapKey", Mapper::map_key(input).into()),
            ("input", input.clone()),
            ("outputs", self.grouped_outputs(parent, outputs, version)),
        ])
    }

    /// Converges one input's outputs to what the map hook returned.
    pub fn plan_map(
        &self,
        parent: &Value,
        map_key: &str,
        observed: &[&Value],
        response: &Value,
    ) -> Result<Plan, InvalidResponse> {
        let fields = response::fields(response)?;
        let desired = children::desired_children(
            response::list(fields, "outputs")?,
            "outputs",
            parent,
            self.parent.namespaced,
            &self.outputs,
            &[(MAP_LABEL, &self.name), (MAP_KEY_LABEL, map_key)],
        )?;
        let (apply, delete) = children::reconcile(
            desired,
            observed,
            &self.outputs,
            "no longer returned by the map hook",
        );
        Ok(Plan {
            apply,
            delete,
            ..Plan::default()
        })
    }

    pub fn tombstone_request(
        &self,
        parent: &Value,
        map_key: &str,
        outputs: &[&Value],
        version: HookVersion,
    ) -> Value {
        object::fields([
            ("controller", self.controller_json.clone()),
            ("parent", parent.clone()),
            ("mapKey", map_key.into()),
            ("outputs", self.grouped_outputs(parent, outputs, version)),
        ])
    }

    /// Deletes the detached outputs the tombstone hook did not ask to keep. Kept outputs are
    /// named by type, namespace and name; anything else in the response is an error.
    pub fn plan_tombstone(
        &self,
        parent: &Value,
        detached: &[&Value],
        response: &Value,
    ) -> Result<Plan, InvalidResponse> {
        let fields = response::fields(response)?;
        let observed: BTreeMap<ObjectKey, &Value> =
            detached.iter().map(|o| (ObjectKey::of(o), *o)).collect();
        let mut keep = BTreeSet::new();
        for (index, item) in response::list(fields, "outputs")?.iter().enumerate() {
            let mut key = ObjectKey::of(item);
            if key.namespace.is_none() {
                key.namespace = object::namespace(parent).map(str::to_string);
            }
            let found = observed.contains_key(&key) || {
                key.namespace = None;
                observed.contains_key(&key)
            };
            if !found {
                return Err(InvalidResponse::new(
                    format!("outputs[{index}]"),
                    format!(
                        "{} is not one of the detached outputs of this map key (the tombstone \
                         hook can only keep outputs it was sent)",
                        ObjectKey::of(item)
                    ),
                ));
            }
            keep.insert(key);
        }
        Ok(Plan {
            delete: detached
                .iter()
                .filter(|o| !keep.contains(&ObjectKey::of(o)) && !object::is_deleting(o))
                .map(|o| {
                    children::deletion(o, "input is gone and the tombstone hook did not keep it")
                })
                .collect(),
            ..Plan::default()
        })
    }

    /// Without a tombstone hook, detached outputs are deleted.
    pub fn plan_detached(&self, detached: &[&Value]) -> Plan {
        Plan {
            delete: detached
                .iter()
                .filter(|o| !object::is_deleting(o))
                .map(|o| children::deletion(o, "input is gone"))
                .collect(),
            ..Plan::default()
        }
    }

    /// The aggregated status of a parent selecting `selected_inputs` and owning
    /// `owned_outputs`, when it differs from the parent's current status.
    pub fn aggregate_status(
        &self,
        parent: &Value,
        selected_inputs: &[&Value],
        owned_outputs: &[&Value],
    ) -> Option<StatusChange> {
        let mut counts = StatusCounts::new(self);
        for input in selected_inputs {
            if let Some(input_type) = self.input_type_of(input) {
                counts.add_input(self, input_type);
            }
        }
        for output in owned_outputs {
            if let Some((output_type, conditions)) = self.output_counted(output) {
                counts.add_output(self, output_type, &conditions);
            }
        }
        self.status_change(parent, &counts)
    }

    /// The declared input type of an object.
    pub fn input_type_of(&self, input: &Value) -> Option<&ResourceType> {
        self.inputs.iter().find(|t| t.describes(input))
    }

    /// An owned output as its parent's status counts it: its declared type and its conditions.
    pub fn output_counted(&self, output: &Value) -> Option<(&ResourceType, Vec<OutputCondition>)> {
        let output_type = self
            .outputs
            .iter()
            .map(|o| &o.resource)
            .find(|t| t.describes(output))?;
        Some((output_type, output_conditions(output)))
    }

    /// The status for `counts`: per input type the number selected, per output type the number
    /// owned and, per condition type seen on them, how many have it True. Returns a change only
    /// when it differs from the parent's current status.
    pub fn status_change(&self, parent: &Value, counts: &StatusCounts) -> Option<StatusChange> {
        let mut inputs = Map::new();
        for (resource, total) in self.inputs.iter().zip(&counts.inputs) {
            inputs.insert(resource.plural.clone(), json!({"total": total}));
        }
        let mut outputs = Map::new();
        for (child, of_type) in self.outputs.iter().zip(&counts.outputs) {
            let mut entry = Map::new();
            entry.insert("total".into(), of_type.total.into());
            for (kind, count) in &of_type.conditions {
                entry.entry(kind.as_str()).or_insert((*count).into());
            }
            outputs.insert(child.resource.plural.clone(), Value::Object(entry));
        }
        let current = json!({
            "inputs": parent.pointer("/status/inputs").cloned().unwrap_or(Value::Null),
            "outputs": parent.pointer("/status/outputs").cloned().unwrap_or(Value::Null),
        });
        let desired = json!({"inputs": inputs, "outputs": outputs});
        object::merge_patch(&current, &desired).map(StatusChange::Merge)
    }
}

/// What a parent's aggregated status counts, by declared input and output type (in the order
/// the controller declares them).
#[derive(Debug)]
pub struct StatusCounts {
    inputs: Vec<u64>,
    outputs: Vec<OutputCounts>,
}

#[derive(Debug, Default)]
struct OutputCounts {
    total: u64,
    /// Per condition type seen (lowerCamelCase), how many outputs have it True.
    conditions: BTreeMap<String, u64>,
}

impl StatusCounts {
    pub fn new(mapper: &Mapper) -> StatusCounts {
        StatusCounts {
            inputs: vec![0; mapper.inputs.len()],
            outputs: mapper
                .outputs
                .iter()
                .map(|_| OutputCounts::default())
                .collect(),
        }
    }

    /// Counts a selected input (of a type the controller no longer declares: not at all).
    pub fn add_input(&mut self, mapper: &Mapper, input_type: &ResourceType) {
        let position = mapper.inputs.iter().position(|t| t == input_type);
        if let Some(total) = position.and_then(|at| self.inputs.get_mut(at)) {
            *total += 1;
        }
    }

    /// Counts an owned output with its conditions.
    pub fn add_output(
        &mut self,
        mapper: &Mapper,
        output_type: &ResourceType,
        conditions: &[OutputCondition],
    ) {
        let position = mapper
            .outputs
            .iter()
            .position(|o| o.resource == *output_type);
        let Some(counts) = position.and_then(|at| self.outputs.get_mut(at)) else {
            return;
        };
        counts.total += 1;
        for condition in conditions {
            let count = counts.conditions.entry(condition.kind.clone()).or_default();
            if condition.is_true {
                *count += 1;
            }
        }
    }
}

/// One of an output's conditions, as its parent's status counts it.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputCondition {
    /// The condition type in lowerCamelCase.
    pub kind: String,
    pub is_true: bool,
}

/// An output's conditions (`status.conditions` entries with a type).
fn output_conditions(output: &Value) -> Vec<OutputCondition> {
    let conditions = output
        .pointer("/status/conditions")
        .and_then(Value::as_array);
    conditions
        .into_iter()
        .flatten()
        .filter_map(|condition| {
            Some(OutputCondition {
                kind: lower_camel(condition.get("type")?.as_str()?),
                is_true: condition.get("status").and_then(Value::as_str) == Some("True"),
            })
        })
        .collect()
}

/// `Ready` → `ready`, `FileSystemResizePending` → `fileSystemResizePending`.
fn lower_camel(kind: &str) -> String {
    let mut chars = kind.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
