//! A MapController without the operator: a parent's pairs and groups synced over a store
//! (`render`, `explain`), and a hook's response checked the way the operator would (test cases).

use super::api::TOMBSTONE;
use super::plan::Mapper;
use super::sync::{self, MapFanOut};
use crate::api::HookKind;
use crate::hooks::InvalidResponse;
use crate::object::ObjectKey;
use crate::plan::{Offline, Plan, Planner, Role, Step};
use crate::resources::ResourceType;
use serde_json::Value;
use std::sync::Arc;

impl Planner for Mapper {
    fn reads(&self) -> Arc<[ResourceType]> {
        self.reads.clone()
    }

    fn acts_on(&self, resource: &ResourceType, _: &Value) -> bool {
        self.parent == *resource || self.inputs.contains(resource)
    }

    fn sync_offline(&self, offline: &Offline, parent: &Value) -> Vec<Step> {
        if !self.parent.describes(parent) {
            return Vec::new();
        }
        let object = ObjectKey::of(parent);
        match sync::sync_map_parent(self, offline.runner, offline.store, parent) {
            Err(error) => vec![Step {
                object,
                detail: Vec::new(),
                hook: None,
                result: Err(error),
            }],
            Ok(steps) => steps
                .into_iter()
                .map(|step| {
                    let input = step.input.map(|i| ("input", ObjectKey::of(&i).to_string()));
                    let map_key = Some(("mapKey", step.map_key)).filter(|(_, k)| !k.is_empty());
                    Step {
                        object: object.clone(),
                        detail: input.into_iter().chain(map_key).collect(),
                        hook: step.hook,
                        result: step.result,
                    }
                })
                .collect(),
        }
    }

    fn explain(&self, offline: &Offline, object: &Value) -> Vec<Role> {
        // The input's role first: the parent's runs no hook, so the calls `explain` shows
        // follow the role that made them.
        let mut roles = Vec::new();
        if self.inputs.iter().any(|input| input.describes(object)) {
            roles.push(self.explain_input(offline, object));
        }
        if self.parent.describes(object) {
            let outcome = MapFanOut::read(self, offline.store, object).map(|fan_out| {
                format!(
                    "parent of {} selected input(s), {} output(s), {} detached group(s)",
                    fan_out.inputs.len(),
                    fan_out.outputs.len(),
                    fan_out.detached(self).len()
                )
            });
            roles.push(match outcome {
                Ok(summary) => Role {
                    summary,
                    outcome: Ok(None),
                },
                Err(error) => Role {
                    summary: "parent".into(),
                    outcome: Err(error),
                },
            });
        }
        roles
    }

    fn plan_response(
        &self,
        hook: HookKind,
        request: &Value,
        response: &Value,
    ) -> Result<Option<Plan>, InvalidResponse> {
        let parent = &request["parent"];
        if hook == TOMBSTONE {
            let detached: Vec<&Value> = request["outputs"]
                .as_object()
                .into_iter()
                .flat_map(|groups| groups.values())
                .filter_map(Value::as_object)
                .flat_map(|group| group.values())
                .collect();
            return self.plan_tombstone(parent, &detached, response).map(Some);
        }
        let key = request["mapKey"].as_str().unwrap_or_default();
        self.plan_map(parent, key, &[], response).map(Some)
    }
}

impl Mapper {
    /// An input: mapped for every parent that selects it.
    fn explain_input(&self, offline: &Offline, input: &Value) -> Role {
        let parents: Vec<std::sync::Arc<Value>> = offline
            .store
            .list(&self.parent, None)
            .filter(|p| {
                self.parent_selector(p)
                    .is_ok_and(|selector| self.selects_input(p, &selector, input))
            })
            .collect();
        let summary = format!("input of {} parent(s)", parents.len());
        let plans = parents
            .iter()
            .map(|parent| {
                let fan_out = MapFanOut::read(self, offline.store, parent)?;
                let groups = fan_out.groups(self);
                let observed = groups
                    .get(&Mapper::map_key(input))
                    .cloned()
                    .unwrap_or_default();
                sync::map_input(
                    self,
                    offline.runner,
                    offline.store,
                    parent,
                    input,
                    &observed,
                )
            })
            .collect::<Result<Vec<_>, _>>();
        Role {
            summary,
            outcome: plans.map(Some),
        }
    }
}
