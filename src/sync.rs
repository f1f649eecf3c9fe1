//! One sync, start to end: gather what a controller needs from an object store, call its hooks,
//! and plan. `render` runs it over files, the operator over its watch caches (on a blocking
//! thread), so both do exactly the same thing.

use crate::api::HookKind;
use crate::controllers::decorator::{Decorator, Observed, Phase, RelatedRule};
use crate::controllers::map::Mapper;
use crate::controllers::{
    MAP_KEY_LABEL, PROVENANCE_ANNOTATION, Plan, SOURCE_ANNOTATION, StatusChange,
};
use crate::hooks::{CallScope, ControllerHooks, HookError};
use crate::object;
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::script::ScriptEngine;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Read access to observed objects.
pub trait ObjectStore {
    /// Objects of a type, in one namespace or in all.
    fn list(&self, resource: &ResourceType, namespace: Option<&str>) -> Vec<Arc<Value>>;

    /// One object (`namespace` is ignored for cluster-scoped types). Stores with a key index
    /// override this.
    fn get(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        self.list(resource, resource.scope(namespace))
            .into_iter()
            .find(|o| object::name(o) == name)
    }

    /// Objects of a type whose controller is `owner`. Stores with an owner index override this.
    fn controlled_by(&self, resource: &ResourceType, owner: &Value) -> Vec<Arc<Value>> {
        self.list(resource, resource.scope_of(owner))
            .into_iter()
            .filter(|child| object::is_controlled_by(child, owner))
            .collect()
    }
}

/// One hook call as an observer sees it.
pub struct HookCall<'a> {
    pub hook: HookKind,
    pub took: std::time::Duration,
    pub request: &'a Value,
    pub response: Result<&'a Value, &'a HookError>,
}

/// Told of every hook call (metrics, recorded fixtures, `explain`).
pub type HookObserver<'a> = &'a (dyn Fn(&HookCall) + Sync);

/// What every hook call of a sync shares.
pub struct HookRunner<'a> {
    pub engine: &'a ScriptEngine,
    pub hooks: &'a ControllerHooks,
    pub observer: Option<HookObserver<'a>>,
    /// Shared by every hook call of the sync: what `get` and `list` read (recording what they
    /// read), and the Events the hooks ask for.
    pub scope: CallScope,
}

impl HookRunner<'_> {
    fn call(&self, kind: HookKind, request: &Value) -> Result<Value, HookError> {
        let started = std::time::Instant::now();
        let result = self.hooks.call(self.engine, kind, request, &self.scope);
        if let Some(observe) = self.observer {
            observe(&HookCall {
                hook: kind,
                took: started.elapsed(),
                request,
                response: result.as_ref(),
            });
        }
        result
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Hook(#[from] HookError),
    #[error("{controller}: related resource: {source}")]
    Resolve {
        controller: String,
        #[source]
        source: ResolveError,
    },
    #[error(transparent)]
    Selector(#[from] crate::controllers::map::InvalidSelector),
}

/// The related resource rules a target's customize hook returned, each with its resolved type.
pub type RelatedRules = Vec<(RelatedRule, ResourceType)>;

/// Runs the customize hook for a target: the related resource rules it returns, validated.
pub fn customize(
    decorator: &Decorator,
    runner: &HookRunner,
    target: &Value,
) -> Result<Vec<RelatedRule>, SyncError> {
    let response = runner.call(HookKind::Customize, &decorator.customize_request(target))?;
    decorator.related_rules(&response).map_err(|error| {
        runner
            .hooks
            .invalid_response(HookKind::Customize, error)
            .into()
    })
}

/// Resolves the type of each related resource rule.
pub fn resolve_related(
    decorator: &Decorator,
    resolver: &dyn ResourceResolver,
    rules: Vec<RelatedRule>,
) -> Result<RelatedRules, SyncError> {
    rules
        .into_iter()
        .map(|rule| {
            let resource =
                resolver
                    .resolve(&rule.resource_ref())
                    .map_err(|source| SyncError::Resolve {
                        controller: decorator.name.clone(),
                        source,
                    })?;
            Ok((rule, resource))
        })
        .collect()
}

/// Whether a target in this phase runs a hook (and so needs its related objects).
pub fn runs_hook(phase: Phase) -> bool {
    matches!(phase, Phase::Sync | Phase::Finalize)
}

impl SyncError {
    /// A short PascalCase reason, as used for Kubernetes Events.
    pub fn reason(&self) -> &'static str {
        match self {
            SyncError::Hook(HookError::Response(_)) => "InvalidResponse",
            SyncError::Hook(HookError::Script(_) | HookError::Webhook(_)) => "HookFailed",
            SyncError::Hook(HookError::Source(_) | HookError::Missing { .. }) => {
                "ScriptUnavailable"
            }
            SyncError::Resolve { .. } => "ResolveFailed",
            SyncError::Selector(_) => "InvalidSelector",
        }
    }
}

/// The decorator's plan for one target and the hook that made it (none when only a finalizer
/// is released), or `None` when the target needs nothing. `related` are the target's customize
/// rules (empty without a customize hook).
pub fn sync_decorator_target(
    decorator: &Decorator,
    runner: &HookRunner,
    store: &dyn ObjectStore,
    target: &Value,
    related: &[(RelatedRule, ResourceType)],
) -> Result<Option<(Option<HookKind>, Plan)>, SyncError> {
    let phase = decorator.phase(target);
    let kind = match phase {
        Phase::Idle => return Ok(None),
        Phase::Release => return Ok(Some((None, decorator.release_plan()))),
        Phase::Sync => HookKind::Sync,
        Phase::Finalize => HookKind::Finalize,
    };
    let related = decorator.group_related(
        target,
        related.iter().map(|(_, resource)| resource),
        related_objects(store, target, related)
            .iter()
            .map(Arc::as_ref),
    );
    let attachments = observed_attachments(decorator, store, target);
    let observed = Observed {
        target,
        attachments: attachments.iter().map(Arc::as_ref).collect(),
        related,
    };
    let response = runner.call(kind, &decorator.request(phase, &observed))?;
    let mut plan = decorator
        .plan(phase, &observed, &response)
        .map_err(|error| runner.hooks.invalid_response(kind, error))?;
    stamp_provenance(&mut plan, runner, "decorator", kind, target);
    Ok(Some((Some(kind), plan)))
}

/// Annotates every object a plan applies with who computed it from what (see
/// [`PROVENANCE_ANNOTATION`]). Added after planning, so it never makes an object differ: it
/// changes when the object is written anyway, and then says what that write came from.
fn stamp_provenance(
    plan: &mut Plan,
    runner: &HookRunner,
    kind: &str,
    hook: HookKind,
    source: &Value,
) {
    let digest = runner
        .hooks
        .get(hook)
        .map(|hook| hook.digest())
        .unwrap_or_default();
    let provenance = format!(
        "{kind}/{} {hook} {}",
        runner.hooks.controller,
        &digest[..digest.len().min(12)]
    );
    // Objects read from files (render, tests) have neither.
    let source = match (
        object::uid(source),
        object::str_at(source, "/metadata/resourceVersion"),
    ) {
        (None, None) => None,
        (uid, version) => Some(format!(
            "{}@{}",
            uid.unwrap_or_default(),
            version.unwrap_or_default()
        )),
    };
    for child in &mut plan.apply {
        object::set_string(child, "annotations", PROVENANCE_ANNOTATION, &provenance);
        if let Some(source) = &source {
            object::set_string(child, "annotations", SOURCE_ANNOTATION, source);
        }
    }
}

/// The attachments a target's request shows: its children of the attachment types that this
/// controller owns.
pub fn observed_attachments(
    decorator: &Decorator,
    store: &dyn ObjectStore,
    target: &Value,
) -> Vec<Arc<Value>> {
    decorator
        .attachments
        .iter()
        .flat_map(|child| store.controlled_by(&child.resource, target))
        .filter(|child| decorator.owns(target, child))
        .collect()
}

/// The related objects a target's rules select.
pub fn related_objects(
    store: &dyn ObjectStore,
    target: &Value,
    rules: &[(RelatedRule, ResourceType)],
) -> Vec<Arc<Value>> {
    let mut related = Vec::new();
    for (rule, resource) in rules {
        related.extend(
            store
                .list(resource, resource.scope(rule.namespace_for(target)))
                .into_iter()
                .filter(|candidate| rule.selects(target, candidate)),
        );
    }
    related
}

/// What one map parent fans out into, read from a store in one go: the inputs it selects (a
/// pair each) and the outputs it owns (grouped by map key; a group whose key no selected input
/// has is detached). `render` walks it in order; the operator queues each pair and group as its
/// own work item, so pairs run in parallel, and computes the parent's status from it.
#[derive(Debug)]
pub struct MapFanOut {
    pub inputs: Vec<Arc<Value>>,
    pub outputs: Vec<Arc<Value>>,
}

impl MapFanOut {
    /// Reads a parent's inputs and outputs. An unreadable selector is an error, never "no
    /// inputs" (which would detach every output).
    pub fn read(
        mapper: &Mapper,
        store: &dyn ObjectStore,
        parent: &Value,
    ) -> Result<MapFanOut, crate::controllers::map::InvalidSelector> {
        let selector = mapper.parent_selector(parent)?;
        Ok(MapFanOut {
            inputs: selected_inputs(mapper, store, parent, &selector),
            outputs: owned_outputs(mapper, store, parent),
        })
    }

    /// The parent's outputs by map key.
    pub fn groups(&self, mapper: &Mapper) -> BTreeMap<String, Vec<&Value>> {
        mapper.group_by_key(self.outputs.iter().map(Arc::as_ref))
    }

    /// The map keys of the selected inputs.
    pub fn live_keys(&self) -> BTreeSet<String> {
        self.inputs
            .iter()
            .map(|input| Mapper::map_key(input))
            .collect()
    }

    /// Output groups whose input is no longer selected, by map key.
    pub fn detached(&self, mapper: &Mapper) -> Vec<(String, Vec<&Value>)> {
        let live = self.live_keys();
        self.groups(mapper)
            .into_iter()
            .filter(|(key, _)| !live.contains(key))
            .collect()
    }

    /// The status aggregated on the parent, when it differs from what it carries.
    pub fn status(&self, mapper: &Mapper, parent: &Value) -> Option<StatusChange> {
        let selected: Vec<&Value> = self.inputs.iter().map(Arc::as_ref).collect();
        let owned: Vec<&Value> = self.outputs.iter().map(Arc::as_ref).collect();
        mapper.aggregate_status(parent, &selected, &owned)
    }
}

/// One step of a map parent's sync: a selected input mapped, a detached group settled, or the
/// aggregated status.
#[derive(Debug)]
pub struct MapStep {
    pub hook: Option<HookKind>,
    pub map_key: String,
    /// The input the step is about (absent for detached groups and the status step).
    pub input: Option<Arc<Value>>,
    pub result: Result<Plan, SyncError>,
}

/// Plans everything for one parent, one pair after another (the operator runs the same steps
/// as separate work items). A failing pair does not stop the others.
pub fn sync_map_parent(
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
            hook: Some(HookKind::Map),
            result: map_input(mapper, runner, parent, input, &observed),
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
    selector: &crate::selector::LabelSelector,
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
pub fn map_input(
    mapper: &Mapper,
    runner: &HookRunner,
    parent: &Value,
    input: &Value,
    observed: &[&Value],
) -> Result<Plan, SyncError> {
    let map_key = Mapper::map_key(input);
    let response = runner.call(HookKind::Map, &mapper.map_request(parent, input, observed))?;
    let mut plan = mapper
        .plan_map(parent, &map_key, observed, &response)
        .map_err(|error| runner.hooks.invalid_response(HookKind::Map, error))?;
    stamp_provenance(&mut plan, runner, "map", HookKind::Map, input);
    Ok(plan)
}

/// Decides a detached group: the tombstone hook picks what stays, or everything goes.
pub fn plan_detached(
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
            HookKind::Tombstone,
            &mapper.tombstone_request(parent, &map_key, detached),
        )
        .map_err(SyncError::from)
        .and_then(|response| {
            mapper
                .plan_tombstone(parent, detached, &response)
                .map_err(|error| {
                    runner
                        .hooks
                        .invalid_response(HookKind::Tombstone, error)
                        .into()
                })
        });
    MapStep {
        hook: Some(HookKind::Tombstone),
        map_key,
        input: None,
        result,
    }
}
