//! One map parent's sync: what it fans out into (the inputs it selects, the outputs it owns),
//! the map call of one (parent, input) pair, and what happens to the outputs of an input that is
//! gone. The operator runs each pair as its own work item; `render` walks them in order.

use super::api::{MAP, TOMBSTONE};
use super::plan::Mapper;
use super::{MAP_KEY_LABEL, MAP_LABEL};
use crate::api::HookKind;
use crate::hooks::HookRunner;
use crate::object;
use crate::plan::adoption::Claimant;
use crate::plan::{Plan, StatusChange, SyncError, stamp_provenance};
use crate::reads::{ReadScope, ReadVerb};
use crate::selector::LabelSelector;
use crate::store::ObjectStore;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The most inputs one parent may select: each is a pair, a hook call and an output, queued
/// at once. Five times the largest fan-out benchmarked (bench_map, 10,000 inputs); past it a
/// parent's queue and outputs would crowd out every other controller's.
pub(super) const MAX_PAIRS_PER_PARENT: usize = 50_000;

/// What one map parent fans out into, read from a store in one go: the inputs it selects (a
/// pair each) and the outputs it owns (grouped by map key; a group whose key no selected input
/// has is detached). `render` walks it in order and computes the parent's status from it; the
/// operator queues each pair and group as its own work item, so pairs run in parallel, and
/// counts it for the parent's status (then keeps the counts up to date from events: `tally`).
#[derive(Debug)]
pub(super) struct MapFanOut {
    pub inputs: Vec<Arc<Value>>,
    pub outputs: Vec<Arc<Value>>,
}

impl MapFanOut {
    /// Reads a parent's inputs and outputs. An unreadable selector is an error, never "no
    /// inputs" (which would detach every output); so is a selection past
    /// [`MAX_PAIRS_PER_PARENT`].
    pub(super) fn read(
        mapper: &Mapper,
        store: &dyn ObjectStore,
        parent: &Value,
    ) -> Result<MapFanOut, SyncError> {
        let selector = mapper.parent_selector(parent)?;
        let inputs = selected_inputs(mapper, store, parent, &selector);
        if inputs.len() > MAX_PAIRS_PER_PARENT {
            return Err(SyncError::TooManyPairs {
                parent: object::ObjectKey::of(parent).to_string(),
                selected: inputs.len(),
                max: MAX_PAIRS_PER_PARENT,
            });
        }
        Ok(MapFanOut {
            inputs,
            outputs: owned_outputs(mapper, store, parent),
        })
    }

    /// The parent's outputs by map key.
    pub(super) fn groups(&self, mapper: &Mapper) -> BTreeMap<String, Vec<&Value>> {
        mapper.group_by_key(self.outputs.iter().map(Arc::as_ref))
    }

    /// The map keys of the selected inputs.
    pub(super) fn live_keys(&self) -> BTreeSet<String> {
        self.inputs
            .iter()
            .map(|input| Mapper::map_key(input))
            .collect()
    }

    /// Output groups whose input is no longer selected, by map key.
    pub(super) fn detached(&self, mapper: &Mapper) -> Vec<(String, Vec<&Value>)> {
        let live = self.live_keys();
        self.groups(mapper)
            .into_iter()
            .filter(|(key, _)| !live.contains(key))
            .collect()
    }

    /// The status aggregated on the parent, when it differs from what it carries.
    pub(super) fn status(&self, mapper: &Mapper, parent: &Value) -> Option<StatusChange> {
        let selected: Vec<&Value> = self.inputs.iter().map(Arc::as_ref).collect();
        let owned: Vec<&Value> = self.outputs.iter().map(Arc::as_ref).collect();
        mapper.aggregate_status(parent, &selected, &owned)
    }
}

/// One step of a map parent's sync: a selected input mapped, a detached group settled, or the
/// aggregated status.
#[derive(Debug)]
pub(super) struct MapStep {
    pub hook: Option<HookKind>,
    pub map_key: String,
    /// The input the step is about (absent for detached groups and the status step).
    pub input: Option<Arc<Value>>,
    pub result: Result<Plan, SyncError>,
}

/// Plans everything for one parent, one pair after another (the operator runs the same steps
/// as separate work items). A failing pair does not stop the others.
pub(super) fn sync_map_parent(
    mapper: &Mapper,
    runner: &HookRunner,
    store: &dyn ObjectStore,
    parent: &Value,
) -> Result<Vec<MapStep>, SyncError> {
    let fan_out = MapFanOut::read(mapper, store, parent)?;
    let groups = fan_out.groups(mapper);
    let mut steps = Vec::new();
    for input in &fan_out.inputs {
        let map_key = Mapper::map_key(input);
        let observed = groups.get(&map_key).cloned().unwrap_or_default();
        steps.push(MapStep {
            hook: Some(MAP),
            result: map_input(mapper, runner, store, parent, input, &observed),
            map_key,
            input: Some(input.clone()),
        });
    }
    for (map_key, detached) in fan_out.detached(mapper) {
        steps.push(plan_detached(mapper, runner, parent, map_key, &detached));
    }
    if let Some(status) = fan_out.status(mapper, parent) {
        steps.push(MapStep {
            hook: None,
            map_key: String::new(),
            input: None,
            result: Ok(Plan {
                status: Some(status),
                ..Plan::default()
            }),
        });
    }
    Ok(steps)
}

/// The inputs a parent selects: of the input types, in the parent's namespace (every namespace
/// for a cluster-scoped parent), matching its selector, not its own outputs.
fn selected_inputs(
    mapper: &Mapper,
    store: &dyn ObjectStore,
    parent: &Value,
    selector: &LabelSelector,
) -> Vec<Arc<Value>> {
    let namespace = mapper.parent.scope_of(parent);
    mapper
        .inputs
        .iter()
        .flat_map(|resource| store.list(resource, resource.scope(namespace)))
        .filter(|input| mapper.selects_input(parent, selector, input))
        .collect()
}

/// The outputs of this MapController that a parent owns.
fn owned_outputs(mapper: &Mapper, store: &dyn ObjectStore, parent: &Value) -> Vec<Arc<Value>> {
    mapper
        .outputs
        .iter()
        .flat_map(|child| store.controlled_by(&child.resource, parent))
        .filter(|output| mapper.owns(parent, output))
        .collect()
}

/// Runs the map hook for one selected input and plans its outputs (`observed`: the parent's
/// outputs tagged with the input's map key).
pub(super) fn map_input(
    mapper: &Mapper,
    runner: &HookRunner,
    store: &dyn ObjectStore,
    parent: &Value,
    input: &Value,
    observed: &[&Value],
) -> Result<Plan, SyncError> {
    let map_key = Mapper::map_key(input);
    let request = mapper.map_request(parent, input, observed, runner.hooks.version(MAP));
    let response = runner.call(MAP, &request)?;
    let mut plan = mapper
        .plan_map(parent, &map_key, observed, &response)
        .map_err(|error| runner.hooks.invalid_response(MAP, error))?;
    Claimant {
        owner: parent,
        types: &mapper.outputs,
        labels: &[(MAP_LABEL, &mapper.name), (MAP_KEY_LABEL, &map_key)],
    }
    .admit(&mapper.name, &mut plan, store)?;
    stamp_provenance(&mut plan, runner, MAP, input);
    Ok(plan)
}

/// Decides a detached group: the tombstone hook picks what stays, or everything goes.
pub(super) fn plan_detached(
    mapper: &Mapper,
    runner: &HookRunner,
    parent: &Value,
    map_key: String,
    detached: &[&Value],
) -> MapStep {
    debug_assert!(
        detached
            .iter()
            .all(|o| object::label(o, MAP_KEY_LABEL) == Some(&map_key))
    );
    if !mapper.has_tombstone {
        return MapStep {
            hook: None,
            map_key,
            input: None,
            result: Ok(mapper.plan_detached(detached)),
        };
    }
    let result = runner
        .call(
            TOMBSTONE,
            &mapper.tombstone_request(parent, &map_key, detached, runner.hooks.version(TOMBSTONE)),
        )
        .map_err(SyncError::from)
        .and_then(|response| {
            mapper
                .plan_tombstone(parent, detached, &response)
                .map_err(|error| runner.hooks.invalid_response(TOMBSTONE, error).into())
        });
    MapStep {
        hook: Some(TOMBSTONE),
        map_key,
        input: None,
        result,
    }
}

/// What a parent's map and tombstone requests show, as reads its controller's account must be
/// allowed: the parent (`get`), its inputs and outputs (`list` of each type in the parent's
/// namespace, or in every namespace for a cluster-scoped parent: a selection across namespaces
/// needs the account to read the type in all of them, as it would to list them itself).
pub(super) fn observed_scopes(mapper: &Mapper, parent: &Value) -> Vec<ReadScope> {
    let namespace = mapper.parent.scope_of(parent);
    let mut scopes = vec![ReadScope::object(&mapper.parent, parent)];
    scopes.extend(
        mapper
            .inputs
            .iter()
            .chain(mapper.outputs.iter().map(|output| &output.resource))
            .map(|resource| ReadScope::new(ReadVerb::List, resource, namespace)),
    );
    scopes
}
