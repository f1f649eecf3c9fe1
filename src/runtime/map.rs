//! MapControllers in the running operator. A parent event fans out into one work item per
//! (parent, input) pair, so map calls for different pairs run in parallel; an input event
//! reaches only the parents that select it now or were fed by it before; status is
//! aggregated separately and written only when it changes.

use super::apply::PlanTarget;
use super::cache::ObjectEvent;
use super::controller::{self, Failure, Loaded, ScriptSources, Version};
use super::operator::{Shared, WorkKey};
use super::routes::{ObjRef, Routes, only_status_changed, push_unique};
use super::status::{Health, SyncOutcomes};
use crate::api::MapController;
use crate::controllers::map::Mapper;
use crate::controllers::{MAP_KEY_LABEL, MAP_LABEL, Plan};
use crate::hooks::ControllerHooks;
use crate::object;
use crate::resources::ResourceType;
use crate::sync::{self, ObjectStore};
use kube::runtime::events::EventType;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One loaded MapController.
pub struct MapRuntime {
    pub generation: Option<i64>,
    pub mapper: Arc<Mapper>,
    pub hooks: Arc<ControllerHooks>,
    pub health: Health,
    /// The last outcome of each (parent, map key) pair.
    pub outcomes: Arc<SyncOutcomes<(ObjRef, String)>>,
    pub resync_period: Option<Duration>,
    pub bindings: Arc<Bindings>,
    sources: ScriptSources,
}

/// What each input was last mapped for: the parents it fed (so that when it stops matching,
/// those parents still hear of it) and, per parent and map key, the input (so an output
/// event finds its pair).
#[derive(Debug, Default)]
pub struct Bindings {
    fed: Mutex<HashMap<ObjRef, HashSet<ObjRef>>>,
    inputs: Mutex<HashMap<(ObjRef, String), ObjRef>>,
    /// Outputs by (parent, map key), so a pair finds its outputs without scanning all of the
    /// parent's (which made converging quadratic in the number of inputs).
    outputs: Mutex<OutputIndex>,
    /// Parents whose aggregated status may be out of date.
    dirty_status: Mutex<HashSet<ObjRef>>,
}

impl Bindings {
    fn bind(&self, parent: &ObjRef, input: &ObjRef, map_key: &str) {
        lock(&self.fed)
            .entry(input.clone())
            .or_default()
            .insert(parent.clone());
        lock(&self.inputs).insert((parent.clone(), map_key.to_string()), input.clone());
    }

    fn unbind(&self, parent: &ObjRef, input: &ObjRef, map_key: &str) {
        let mut fed = lock(&self.fed);
        if let Some(parents) = fed.get_mut(input) {
            parents.remove(parent);
            if parents.is_empty() {
                fed.remove(input);
            }
        }
        lock(&self.inputs).remove(&(parent.clone(), map_key.to_string()));
    }

    fn parents_fed_by(&self, input: &ObjRef) -> Vec<ObjRef> {
        lock(&self.fed)
            .get(input)
            .map(|p| p.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn input_of(&self, parent: &ObjRef, map_key: &str) -> Option<ObjRef> {
        lock(&self.inputs)
            .get(&(parent.clone(), map_key.to_string()))
            .cloned()
    }

    /// Files an output under its (parent, map key); `None` removes it from wherever it was.
    fn index_output(&self, output: &ObjRef, group: Option<(ObjRef, String)>) {
        let mut index = lock(&self.outputs);
        if let Some(previous) = index.group_of.remove(output)
            && let Some(refs) = index.by_group.get_mut(&previous)
        {
            refs.remove(output);
            if refs.is_empty() {
                index.by_group.remove(&previous);
            }
        }
        if let Some(group) = group {
            index
                .by_group
                .entry(group.clone())
                .or_default()
                .insert(output.clone());
            index.group_of.insert(output.clone(), group);
        }
    }

    fn outputs_of(&self, parent: &ObjRef, map_key: &str) -> Vec<ObjRef> {
        lock(&self.outputs)
            .by_group
            .get(&(parent.clone(), map_key.to_string()))
            .map(|refs| refs.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Marks a parent's aggregated status for recomputation by the status loop.
    pub fn status_changed(&self, parent: &ObjRef) {
        lock(&self.dirty_status).insert(parent.clone());
    }

    fn take_dirty_status(&self) -> Vec<ObjRef> {
        lock(&self.dirty_status).drain().collect()
    }
}

#[derive(Debug, Default)]
struct OutputIndex {
    by_group: HashMap<(ObjRef, String), HashSet<ObjRef>>,
    group_of: HashMap<ObjRef, (ObjRef, String)>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl MapRuntime {
    pub fn add_routes(&self, name: &str, routes: &mut Routes) {
        let reload = WorkKey::Map(name.to_string());
        let name = &name.to_string();
        push_unique(
            routes
                .parents
                .entry(self.mapper.parent.clone())
                .or_default(),
            name,
        );
        for input in &self.mapper.inputs {
            push_unique(routes.inputs.entry(input.clone()).or_default(), name);
        }
        for output in &self.mapper.outputs {
            push_unique(
                routes.outputs.entry(output.resource.clone()).or_default(),
                name,
            );
        }
        self.sources.add_routes(&reload, routes);
    }

    fn output_types(&self) -> Vec<ResourceType> {
        self.mapper
            .outputs
            .iter()
            .map(|o| o.resource.clone())
            .collect()
    }
}

/// Loads (or reloads, or removes) a MapController from the cache.
pub async fn load(shared: &Arc<Shared>, name: &str, key: &WorkKey) {
    let object = shared.informers.get(&shared.map_type, None, name);
    let Some(object) = object.filter(|o| !object::is_deleting(o)) else {
        remove(shared, name);
        return;
    };
    let controller: MapController = match serde_json::from_value((*object).clone()) {
        Ok(controller) => controller,
        Err(error) => {
            tracing::error!(controller = name, %error, "unreadable MapController");
            return;
        }
    };
    let generation = controller.metadata.generation;
    let spec = &controller.spec;
    let types = std::iter::once(spec.parent_resource.clone())
        .chain(spec.input_resources.iter().cloned())
        .chain(spec.output_resources.iter().map(|o| o.resource_ref()))
        .collect();
    let hooks = spec
        .hooks
        .named()
        .into_iter()
        .map(|(k, h)| (k, h.clone()))
        .collect();
    let previous = shared.map(name);
    let running = previous.as_ref().map(|p| Version {
        planner: p.mapper.clone(),
        hooks: p.hooks.clone(),
        generation: p.generation,
    });
    let build = || Mapper::new(&controller, &*shared.discovery);
    let loaded = controller::load_version(
        shared, key, &object, generation, types, hooks, running, build,
    );
    let Some(Loaded {
        version,
        prepared,
        sources,
    }) = loaded.await
    else {
        return;
    };
    let changed = previous.as_ref().is_none_or(|p| {
        p.generation != version.generation
            || controller::digests(&p.hooks) != controller::digests(&version.hooks)
    });
    let runtime = Arc::new(MapRuntime {
        generation: version.generation,
        mapper: version.planner,
        hooks: version.hooks,
        health: prepared.health.clone(),
        outcomes: previous
            .as_ref()
            .map(|p| p.outcomes.clone())
            .unwrap_or_default(),
        resync_period: controller::resync_period(spec.resync_period_seconds),
        bindings: previous
            .as_ref()
            .map(|p| p.bindings.clone())
            .unwrap_or_default(),
        sources,
    });
    shared
        .maps
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string(), runtime.clone());
    if previous.is_none() {
        // Installed first, so events from now on are indexed too (an output seen twice is
        // filed once).
        index_existing_outputs(shared, name, &runtime);
    }
    controller::loaded(shared, key, &object, &prepared).await;
    if changed {
        tracing::info!(controller = name, digests = ?controller::digests(&runtime.hooks), "controller loaded; syncing its parents");
        enqueue_parents(shared, name, &runtime);
    }
}

fn remove(shared: &Arc<Shared>, name: &str) {
    let removed = shared
        .maps
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(name);
    shared.forget_controller(&WorkKey::Map(name.to_string()));
    if removed.is_some() {
        shared.rebuild_routes();
        tracing::info!(controller = name, "controller removed");
    }
}

/// Queues every parent of a controller (each fans out into its pairs).
pub fn enqueue_parents(shared: &Shared, name: &str, runtime: &MapRuntime) {
    let parent_type = &runtime.mapper.parent;
    for parent in shared.informers.list(parent_type, None) {
        shared.queue.add(WorkKey::Parent {
            controller: name.to_string(),
            parent: ObjRef::of(parent_type, &parent),
        });
    }
}

/// Queues the work a watch event causes for MapControllers.
pub fn route_event(shared: &Shared, event: &ObjectEvent) {
    let Some(object) = event.new.as_ref().or(event.old.as_ref()) else {
        return;
    };
    let routes = shared.routes();
    // A parent: its pairs, unless only its status changed (the status we aggregate there).
    for name in routes.parents.get(&event.resource).into_iter().flatten() {
        let status_only = matches!((&event.old, &event.new), (Some(old), Some(new)) if only_status_changed(old, new));
        if event.new.is_some() && !status_only {
            shared.queue.add(WorkKey::Parent {
                controller: name.clone(),
                parent: ObjRef::of(&event.resource, object),
            });
        }
    }
    // An input: the pairs of the parents that select it now, selected it before, or were fed
    // by it (which covers a label change that moved it out of every selector).
    for name in routes.inputs.get(&event.resource).into_iter().flatten() {
        let Some(runtime) = shared.map(name) else {
            continue;
        };
        let input = ObjRef::of(&event.resource, object);
        let mut parents: HashSet<ObjRef> = runtime
            .bindings
            .parents_fed_by(&input)
            .into_iter()
            .collect();
        let mapper = &runtime.mapper;
        let namespace = if mapper.parent.namespaced {
            object::namespace(object)
        } else {
            None
        };
        for parent in shared.informers.list(&mapper.parent, namespace) {
            let Ok(selector) = mapper.parent_selector(&parent) else {
                continue;
            };
            let selects = [&event.old, &event.new]
                .into_iter()
                .flatten()
                .any(|version| mapper.selects_input(&parent, &selector, version));
            if selects {
                parents.insert(ObjRef::of(&mapper.parent, &parent));
            }
        }
        for parent in parents {
            shared.queue.add(WorkKey::Pair {
                controller: name.clone(),
                parent,
                input: input.clone(),
            });
        }
    }
    // An output: kept in the index, and its pair (or detached group) and its parent's status
    // looked at again.
    for name in routes.outputs.get(&event.resource).into_iter().flatten() {
        let Some(runtime) = shared.map(name) else {
            continue;
        };
        let output = ObjRef::of(&event.resource, object);
        let group = event
            .new
            .as_ref()
            .and_then(|new| output_group(&runtime, name, new));
        runtime.bindings.index_output(&output, group);
        if object::label(object, MAP_LABEL) != Some(name.as_str()) {
            continue;
        }
        let Some(parent) = parent_of(&runtime.mapper, object) else {
            continue;
        };
        // An output exactly as this controller's apply left it needs no second map call.
        let own = event
            .new
            .as_ref()
            .is_some_and(|new| shared.applier.own_writes.is_own(&field_manager(name), new));
        if let Some(map_key) = object::label(object, MAP_KEY_LABEL).filter(|_| !own) {
            let work = match runtime.bindings.input_of(&parent, map_key) {
                Some(input) => WorkKey::Pair {
                    controller: name.clone(),
                    parent: parent.clone(),
                    input,
                },
                None => WorkKey::Detached {
                    controller: name.clone(),
                    parent: parent.clone(),
                    map_key: map_key.to_string(),
                },
            };
            shared.queue.add(work);
        }
        runtime.bindings.status_changed(&parent);
    }
}

/// The (parent, map key) an object belongs to as one of this controller's outputs.
fn output_group(runtime: &MapRuntime, name: &str, output: &Value) -> Option<(ObjRef, String)> {
    if object::label(output, MAP_LABEL) != Some(name) {
        return None;
    }
    let map_key = object::label(output, MAP_KEY_LABEL)?;
    Some((parent_of(&runtime.mapper, output)?, map_key.to_string()))
}

/// Fills the output index of a freshly loaded controller from the cache; events keep it
/// current from then on.
fn index_existing_outputs(shared: &Shared, name: &str, runtime: &MapRuntime) {
    for output_type in runtime.output_types() {
        for output in shared.informers.list(&output_type, None) {
            if let Some(group) = output_group(runtime, name, &output) {
                runtime
                    .bindings
                    .index_output(&ObjRef::of(&output_type, &output), Some(group));
            }
        }
    }
}

/// The parent an output belongs to, from its controller owner reference.
fn parent_of(mapper: &Mapper, output: &Value) -> Option<ObjRef> {
    let reference = object::controller_ref(output)?;
    let parent = &mapper.parent;
    if object::str_at(reference, "/kind") != Some(parent.kind.as_str())
        || object::group_of(object::str_at(reference, "/apiVersion")?) != parent.group()
    {
        return None;
    }
    Some(ObjRef {
        resource: parent.clone(),
        namespace: if parent.namespaced {
            object::namespace(output).map(str::to_string)
        } else {
            None
        },
        name: object::str_at(reference, "/name")?.to_string(),
    })
}

fn get(shared: &Shared, reference: &ObjRef) -> Option<Arc<Value>> {
    shared.informers.get(
        &reference.resource,
        reference.namespace.as_deref(),
        &reference.name,
    )
}

/// The parts of an object a map key is computed from, for an input that no longer exists.
fn identity(reference: &ObjRef) -> Value {
    json!({
        "apiVersion": reference.resource.api_version,
        "kind": reference.resource.kind,
        "metadata": {"name": reference.name, "namespace": reference.namespace},
    })
}

/// A parent fans out: one pair per selected input, one item per detached output group, then
/// its status.
pub async fn sync_parent(shared: &Arc<Shared>, controller: &str, parent_ref: &ObjRef) {
    let Some(runtime) = shared.map(controller) else {
        return;
    };
    let Some(parent) = get(shared, parent_ref) else {
        return;
    };
    let mapper = &runtime.mapper;
    let selector = match mapper.parent_selector(&parent) {
        Ok(selector) => selector,
        Err(error) => {
            // Counted as a failing pair of the parent until its selector is fixed (an edit of
            // the parent brings it back here).
            runtime
                .outcomes
                .failed((parent_ref.clone(), String::new()), error.to_string());
            shared
                .event(
                    &parent,
                    EventType::Warning,
                    "InvalidSelector",
                    "Map",
                    error.to_string(),
                )
                .await;
            return;
        }
    };
    runtime
        .outcomes
        .forget(&(parent_ref.clone(), String::new()));
    let namespace = if mapper.parent.namespaced {
        object::namespace(&parent)
    } else {
        None
    };
    let mut live_keys = HashSet::new();
    for resource in &mapper.inputs {
        let scope = if resource.namespaced { namespace } else { None };
        for input in shared.informers.list(resource, scope) {
            if mapper.selects_input(&parent, &selector, &input) {
                live_keys.insert(Mapper::map_key(&input));
                shared.queue.add(WorkKey::Pair {
                    controller: controller.to_string(),
                    parent: parent_ref.clone(),
                    input: ObjRef::of(resource, &input),
                });
            }
        }
    }
    let outputs = owned_outputs(shared, &runtime, &parent);
    let groups = mapper.group_by_key(outputs.iter().map(Arc::as_ref));
    for map_key in groups.keys().filter(|key| !live_keys.contains(*key)) {
        shared.queue.add(WorkKey::Detached {
            controller: controller.to_string(),
            parent: parent_ref.clone(),
            map_key: map_key.clone(),
        });
    }
    runtime.bindings.status_changed(parent_ref);
}

fn owned_outputs(shared: &Shared, runtime: &MapRuntime, parent: &Value) -> Vec<Arc<Value>> {
    sync::owned_outputs(&runtime.mapper, &*shared.informers, parent)
}

/// One (parent, input) pair: map a selected input, or settle the outputs of one that is gone
/// or no longer selected (tombstone hook, or deletion).
pub async fn sync_pair(
    shared: &Arc<Shared>,
    controller: &str,
    parent_ref: &ObjRef,
    input_ref: &ObjRef,
    key: &WorkKey,
) {
    let Some(runtime) = shared.map(controller) else {
        return;
    };
    let Some(parent) = get(shared, parent_ref) else {
        return;
    };
    let input = get(shared, input_ref);
    let map_key = Mapper::map_key(input.as_deref().unwrap_or(&identity(input_ref)));
    let selected = match runtime.mapper.parent_selector(&parent) {
        Ok(selector) => input
            .as_ref()
            .is_some_and(|i| runtime.mapper.selects_input(&parent, &selector, i)),
        Err(error) => {
            let failure = Failure::new("InvalidSelector", error);
            return fail(
                shared,
                &runtime,
                &parent,
                (parent_ref, &map_key),
                key,
                failure,
            )
            .await;
        }
    };
    let result = match input.filter(|_| selected) {
        Some(input) => {
            runtime.bindings.bind(parent_ref, input_ref, &map_key);
            let (mapper, parent, outputs) = (
                runtime.mapper.clone(),
                parent.clone(),
                keyed_outputs(shared, &runtime, &parent, &map_key),
            );
            controller::blocking(shared, &runtime.hooks, move |_, runner| {
                let observed: Vec<&Value> = outputs.iter().map(Arc::as_ref).collect();
                sync::map_input(&mapper, runner, &parent, &input, &observed)
            })
            .await
        }
        None => {
            runtime.bindings.unbind(parent_ref, input_ref, &map_key);
            settle_detached(shared, &runtime, &parent, &map_key).await
        }
    };
    finish(
        shared,
        &runtime,
        &parent,
        (parent_ref, &map_key),
        selected,
        key,
        result,
    )
    .await;
}

/// An output group whose input is unknown: mapped again if some selected input has its key,
/// otherwise detached.
pub async fn sync_detached(
    shared: &Arc<Shared>,
    controller: &str,
    parent_ref: &ObjRef,
    map_key: &str,
    key: &WorkKey,
) {
    let Some(runtime) = shared.map(controller) else {
        return;
    };
    let Some(parent) = get(shared, parent_ref) else {
        return;
    };
    if let Some(input) = runtime.bindings.input_of(parent_ref, map_key) {
        shared.queue.add(WorkKey::Pair {
            controller: controller.to_string(),
            parent: parent_ref.clone(),
            input,
        });
        return;
    }
    let result = settle_detached(shared, &runtime, &parent, map_key).await;
    finish(
        shared,
        &runtime,
        &parent,
        (parent_ref, map_key),
        false,
        key,
        result,
    )
    .await;
}

fn keyed_outputs(
    shared: &Shared,
    runtime: &MapRuntime,
    parent: &Value,
    map_key: &str,
) -> Vec<Arc<Value>> {
    let parent_ref = ObjRef::of(&runtime.mapper.parent, parent);
    runtime
        .bindings
        .outputs_of(&parent_ref, map_key)
        .iter()
        .filter_map(|output| get(shared, output))
        // The index may briefly hold an output that changed hands; the object decides.
        .filter(|o| {
            runtime.mapper.owns(parent, o) && object::label(o, MAP_KEY_LABEL) == Some(map_key)
        })
        .collect()
}

async fn settle_detached(
    shared: &Arc<Shared>,
    runtime: &Arc<MapRuntime>,
    parent: &Arc<Value>,
    map_key: &str,
) -> Result<Plan, Failure> {
    let detached = keyed_outputs(shared, runtime, parent, map_key);
    if detached.is_empty() {
        return Ok(Plan::default());
    }
    let (mapper, parent, map_key) = (runtime.mapper.clone(), parent.clone(), map_key.to_string());
    controller::blocking(shared, &runtime.hooks, move |_, runner| {
        let observed: Vec<&Value> = detached.iter().map(Arc::as_ref).collect();
        sync::plan_detached(&mapper, runner, &parent, map_key, &observed).result
    })
    .await
}

/// Applies a pair's plan and records the outcome; only live pairs (a selected input) count
/// in status.
async fn finish(
    shared: &Arc<Shared>,
    runtime: &Arc<MapRuntime>,
    parent: &Value,
    pair: (&ObjRef, &str),
    live: bool,
    key: &WorkKey,
    result: Result<Plan, Failure>,
) {
    let applied = match result {
        Ok(plan) if plan.is_noop() => Ok(()),
        Ok(plan) => {
            let child_types = runtime.output_types();
            let target = PlanTarget {
                object: parent,
                resource: &runtime.mapper.parent,
                child_types: &child_types,
                field_manager: &field_manager(&runtime.mapper.name),
            };
            shared
                .applier
                .execute(&target, &plan)
                .await
                .map_err(|error| Failure::new("ApplyFailed", error))
        }
        Err(failure) => Err(failure),
    };
    match applied {
        Ok(()) => {
            shared.queue.forget(key);
            let pair = (pair.0.clone(), pair.1.to_string());
            if live {
                runtime.outcomes.succeeded(pair);
            } else {
                runtime.outcomes.forget(&pair);
            }
        }
        Err(failure) => fail(shared, runtime, parent, pair, key, failure).await,
    }
    // Inputs come and go with pairs; the counts in the parent's status follow.
    runtime.bindings.status_changed(pair.0);
}

async fn fail(
    shared: &Arc<Shared>,
    runtime: &MapRuntime,
    parent: &Value,
    pair: (&ObjRef, &str),
    key: &WorkKey,
    failure: Failure,
) {
    shared.count_failure("map", failure.reason);
    let delay = shared.queue.retry_later(key.clone());
    tracing::warn!(controller = %runtime.mapper.name, parent = %pair.0, map_key = pair.1, retry_in = ?delay, reason = failure.reason, error = %failure.message, "map failed");
    runtime.outcomes.failed(
        (pair.0.clone(), pair.1.to_string()),
        failure.message.clone(),
    );
    shared
        .event(
            parent,
            EventType::Warning,
            failure.reason,
            "Map",
            failure.message,
        )
        .await;
}

/// Aggregates a parent's status from the cache and writes it when it changed. Runs in the
/// status loop rather than the work queue, so the counts never wait behind a long queue.
async fn sync_status(shared: &Arc<Shared>, runtime: &MapRuntime, parent_ref: &ObjRef) {
    let controller = runtime.mapper.name.as_str();
    let Some(parent) = get(shared, parent_ref) else {
        return;
    };
    let mapper = &runtime.mapper;
    let Ok(selector) = mapper.parent_selector(&parent) else {
        return;
    };
    let inputs = sync::selected_inputs(mapper, &*shared.informers, &parent, &selector);
    let outputs = owned_outputs(shared, runtime, &parent);
    let selected: Vec<&Value> = inputs.iter().map(Arc::as_ref).collect();
    let owned: Vec<&Value> = outputs.iter().map(Arc::as_ref).collect();
    let Some(status) = mapper.aggregate_status(&parent, &selected, &owned) else {
        return;
    };
    let plan = Plan {
        status: Some(status),
        ..Plan::default()
    };
    let target = PlanTarget {
        object: &parent,
        resource: &mapper.parent,
        child_types: &[],
        field_manager: &field_manager(controller),
    };
    if let Err(error) = shared.applier.execute(&target, &plan).await {
        tracing::warn!(controller, parent = %parent_ref, %error, "cannot write aggregated status");
        runtime.bindings.status_changed(parent_ref);
    }
}

/// The server-side apply field manager of a MapController.
pub fn field_manager(name: &str) -> String {
    format!("metascript.dev/map-{name}")
}

/// Brings every MapController's status, and the aggregated status of every parent that may
/// have changed, up to date, writing only what changed.
pub async fn write_statuses(shared: &Arc<Shared>) {
    let runtimes: Vec<Arc<MapRuntime>> = shared.maps().values().cloned().collect();
    for runtime in runtimes {
        for parent in runtime.bindings.take_dirty_status() {
            sync_status(shared, &runtime, &parent).await;
        }
    }
    let loaded: Vec<(String, Health, (u64, u64, u64))> = shared
        .maps()
        .iter()
        .map(|(name, runtime)| {
            (
                name.clone(),
                runtime.health.clone(),
                runtime.outcomes.counts(),
            )
        })
        .collect();
    for (name, health, counts) in loaded {
        let key = WorkKey::Map(name.clone());
        controller::write_status(shared, &key, &shared.map_type, &name, &health, counts).await;
    }
}
