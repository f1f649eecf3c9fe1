//! DecoratorControllers in the running operator: loading each controller (types, watches,
//! scripts), routing events to its targets, syncing a target, and reporting status.

use super::apply::PlanTarget;
use super::cache::ObjectEvent;
use super::controller::{self, Failure, Loaded, ScriptSources, Version};
use super::operator::{Shared, WorkKey};
use super::routes::{ObjRef, Routes, push_unique};
use super::status::{Health, SyncOutcomes};
use crate::api::DecoratorController;
use crate::controllers::decorator::{Decorator, Phase};
use crate::controllers::{DECORATOR_LABEL, FinalizerChange, Plan};
use crate::hooks::ControllerHooks;
use crate::object;
use crate::resources::ResourceType;
use crate::sync::{self, ObjectStore};
use kube::runtime::events::EventType;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The finalizer the operator keeps on a DecoratorController with a finalize hook, so that
/// deleting the controller first releases every target it holds a finalizer on.
pub const CLEANUP_FINALIZER: &str = "metascript.dev/release-targets";

/// One loaded DecoratorController.
pub struct DecoratorRuntime {
    pub generation: Option<i64>,
    pub decorator: Arc<Decorator>,
    /// The hooks running: the newest that compiled.
    pub hooks: Arc<ControllerHooks>,
    pub health: Health,
    pub outcomes: Arc<SyncOutcomes<ObjRef>>,
    pub resync_period: Option<Duration>,
    sources: ScriptSources,
}

impl DecoratorRuntime {
    pub fn add_routes(&self, name: &str, routes: &mut Routes) {
        let reload = WorkKey::Decorator(name.to_string());
        let name = &name.to_string();
        for (_, resource) in &self.decorator.rules {
            push_unique(routes.targets.entry(resource.clone()).or_default(), name);
        }
        for child in &self.decorator.attachments {
            push_unique(
                routes.children.entry(child.resource.clone()).or_default(),
                name,
            );
        }
        self.sources.add_routes(&reload, routes);
    }

    fn target_types(&self) -> impl Iterator<Item = &ResourceType> {
        self.decorator.rules.iter().map(|(_, resource)| resource)
    }
}

/// Loads (or reloads, or tears down) a DecoratorController from the cache.
pub async fn load(shared: &Arc<Shared>, name: &str, key: &WorkKey) {
    let Some(object) = shared.informers.get(&shared.decorator_type, None, name) else {
        remove(shared, name);
        return;
    };
    if object::is_deleting(&object) {
        // Stop syncing first, so no sync re-adds a finalizer while they are being released.
        remove(shared, name);
        if let Err(error) = release_all_targets(shared, name, &object).await {
            tracing::warn!(controller = name, %error, "cannot release targets yet");
            shared.queue.retry_later(key.clone());
        }
        return;
    }
    let controller: DecoratorController = match serde_json::from_value((*object).clone()) {
        Ok(controller) => controller,
        Err(error) => {
            tracing::error!(controller = name, %error, "unreadable DecoratorController");
            return;
        }
    };
    let generation = controller.metadata.generation;
    let spec = &controller.spec;
    let types = spec
        .resources
        .iter()
        .map(|r| r.resource_ref())
        .chain(spec.attachments.iter().map(|a| a.resource_ref()))
        .collect();
    let hooks = spec
        .hooks
        .named()
        .into_iter()
        .map(|(k, h)| (k, h.clone()))
        .collect();
    let previous = shared.decorator(name);
    let running = previous.as_ref().map(|p| Version {
        planner: p.decorator.clone(),
        hooks: p.hooks.clone(),
        generation: p.generation,
    });
    let build = || Decorator::new(&controller, &*shared.discovery);
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
    let runtime = DecoratorRuntime {
        generation: version.generation,
        decorator: version.planner,
        hooks: version.hooks,
        health: prepared.health.clone(),
        outcomes: previous.map(|p| p.outcomes.clone()).unwrap_or_default(),
        resync_period: controller::resync_period(spec.resync_period_seconds),
        sources,
    };
    install(shared, name, key, &object, runtime, &prepared).await;
}

/// Makes a freshly built runtime current; re-syncs every target when what runs changed.
async fn install(
    shared: &Arc<Shared>,
    name: &str,
    key: &WorkKey,
    object: &Value,
    runtime: DecoratorRuntime,
    prepared: &controller::Prepared,
) {
    let previous = shared.decorator(name);
    let changed = previous.as_ref().is_none_or(|p| {
        p.generation != runtime.generation
            || controller::digests(&p.hooks) != controller::digests(&runtime.hooks)
    });
    let runtime = Arc::new(runtime);
    shared
        .decorators
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string(), runtime.clone());
    controller::loaded(shared, key, object, prepared).await;
    if runtime.decorator.has_finalize && !object::has_finalizer(object, CLEANUP_FINALIZER) {
        let add = FinalizerChange::Add(CLEANUP_FINALIZER.into());
        if let Err(error) = edit_controller_finalizer(shared, object, add).await {
            tracing::warn!(controller = name, %error, "cannot add the cleanup finalizer");
            shared.queue.retry_later(key.clone());
        }
    }
    if changed {
        tracing::info!(controller = name, digests = ?controller::digests(&runtime.hooks), "controller loaded; syncing its targets");
        enqueue_targets(shared, &runtime);
    }
}

fn remove(shared: &Arc<Shared>, name: &str) {
    let key = WorkKey::Decorator(name.to_string());
    let removed = shared
        .decorators
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(name);
    shared.forget_controller(&key);
    shared.related.remove_controller(name);
    if removed.is_some() {
        shared.rebuild_routes();
        tracing::info!(controller = name, "controller removed");
    }
}

/// On deletion of a controller: removes its finalizer from every object of its target types,
/// then its own cleanup finalizer.
async fn release_all_targets(
    shared: &Arc<Shared>,
    name: &str,
    object: &Value,
) -> Result<(), String> {
    let controller: DecoratorController =
        serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    let finalizer = crate::controllers::decorator::finalizer_for(name);
    for rule in &controller.spec.resources {
        let resolved = shared
            .discovery
            .resolve(&rule.resource_ref())
            .await
            .map_err(|e| e.to_string())?;
        shared
            .informers
            .ensure(&resolved)
            .await
            .map_err(|e| e.to_string())?;
        let resource = &resolved.resource;
        for target in ObjectStore::list(&*shared.informers, resource, None) {
            if !object::has_finalizer(&target, &finalizer) {
                continue;
            }
            let plan = Plan {
                finalizer: Some(FinalizerChange::Remove(finalizer.clone())),
                ..Plan::default()
            };
            let plan_target = PlanTarget {
                object: &target,
                resource,
                child_types: &[],
                field_manager: &field_manager(name),
            };
            shared
                .applier
                .execute(&plan_target, &plan)
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    let remove = FinalizerChange::Remove(CLEANUP_FINALIZER.into());
    edit_controller_finalizer(shared, object, remove)
        .await
        .map_err(|e| e.to_string())
}

/// Adds or removes the cleanup finalizer on a DecoratorController object.
async fn edit_controller_finalizer(
    shared: &Shared,
    object: &Value,
    change: FinalizerChange,
) -> Result<(), super::apply::ApplyError> {
    let plan = Plan {
        finalizer: Some(change),
        ..Plan::default()
    };
    let target = PlanTarget {
        object,
        resource: &shared.decorator_type,
        child_types: &[],
        field_manager: "metascript.dev/operator",
    };
    shared.applier.execute(&target, &plan).await
}

/// The server-side apply field manager of a controller.
pub fn field_manager(name: &str) -> String {
    format!("metascript.dev/decorator-{name}")
}

/// Queues every object a controller has work for: selected ones and those holding its
/// finalizer.
pub fn enqueue_targets(shared: &Shared, runtime: &DecoratorRuntime) {
    let finalizer = runtime.decorator.finalizer();
    for resource in runtime.target_types() {
        for target in ObjectStore::list(&*shared.informers, resource, None) {
            if runtime.decorator.selects(&target) || object::has_finalizer(&target, finalizer) {
                shared.queue.add(WorkKey::Target {
                    controller: runtime.decorator.name.clone(),
                    target: ObjRef::of(resource, &target),
                });
            }
        }
    }
}

/// Queues the targets an event concerns: the object itself when it is (or was) a target, its
/// owner when it is an attachment, and the targets whose customize rules select it.
pub fn route_event(shared: &Shared, event: &ObjectEvent) {
    let Some(object) = event.new.as_ref().or(event.old.as_ref()) else {
        return;
    };
    let routes = shared.routes();
    for name in routes.targets.get(&event.resource).into_iter().flatten() {
        let Some(runtime) = shared.decorator(name) else {
            continue;
        };
        let decorator = &runtime.decorator;
        let wanted = event.new.as_ref().is_some_and(|new| {
            decorator.selects(new) || object::has_finalizer(new, decorator.finalizer())
        }) || event.old.as_ref().is_some_and(|old| decorator.selects(old));
        if !wanted || event.new.is_none() {
            continue;
        }
        if let (Some(old), Some(new)) = (&event.old, &event.new)
            && ignores_status(decorator, &event.resource)
            && super::routes::only_status_changed(old, new)
        {
            continue;
        }
        if event
            .new
            .as_ref()
            .is_some_and(|new| own_write(shared, name, new))
        {
            continue;
        }
        shared.queue.add(WorkKey::Target {
            controller: name.clone(),
            target: ObjRef::of(&event.resource, object),
        });
    }
    for name in routes.children.get(&event.resource).into_iter().flatten() {
        if object::label(object, DECORATOR_LABEL) != Some(name.as_str()) {
            continue;
        }
        let Some(runtime) = shared.decorator(name) else {
            continue;
        };
        // Even an attachment exactly as this controller applied it re-syncs its target: the
        // hook sees observed attachments and may report on them (e.g. in status).
        if let Some(target) = owner_of(&runtime, object) {
            shared.queue.add(WorkKey::Target {
                controller: name.clone(),
                target,
            });
        }
    }
    drop(routes);
    for ((controller, target), rules) in shared.related.candidates(&event.resource, object) {
        let Some(target_object) = get(shared, &target) else {
            continue;
        };
        let selected = [&event.old, &event.new]
            .into_iter()
            .flatten()
            .any(|candidate| {
                rules
                    .iter()
                    .any(|rule| rule.selects(&target_object, candidate))
            });
        if selected {
            shared.queue.add(WorkKey::Target { controller, target });
        }
    }
}

/// Whether this version of a target is the one this controller's own write (labels,
/// annotations, status, finalizer) produced: the sync that wrote it already planned from it.
fn own_write(shared: &Shared, controller: &str, object: &Value) -> bool {
    shared
        .applier
        .own_writes
        .is_own(&field_manager(controller), object)
}

fn ignores_status(decorator: &Decorator, resource: &ResourceType) -> bool {
    decorator
        .rules
        .iter()
        .any(|(rule, t)| t == resource && rule.ignore_status_changes)
}

/// The target an attachment belongs to, from its controller owner reference.
fn owner_of(runtime: &DecoratorRuntime, child: &Value) -> Option<ObjRef> {
    let reference = object::controller_ref(child)?;
    let kind = object::str_at(reference, "/kind")?;
    let group = object::group_of(object::str_at(reference, "/apiVersion")?);
    let resource = runtime
        .target_types()
        .find(|t| t.kind == kind && t.group() == group)?;
    Some(ObjRef {
        resource: resource.clone(),
        namespace: if resource.namespaced {
            object::namespace(child).map(str::to_string)
        } else {
            None
        },
        name: object::str_at(reference, "/name")?.to_string(),
    })
}

fn get(shared: &Shared, target: &ObjRef) -> Option<Arc<Value>> {
    shared
        .informers
        .get(&target.resource, target.namespace.as_deref(), &target.name)
}

/// Syncs one target: hooks on the blocking pool, then the plan's writes. A failure applies
/// nothing more, is retried with backoff, and is reported as an Event on the target.
pub async fn sync_target(shared: &Arc<Shared>, controller: &str, target: &ObjRef, key: &WorkKey) {
    let Some(runtime) = shared.decorator(controller) else {
        return;
    };
    let resource = target.resource.clone();
    let Some(object) = get(shared, target) else {
        runtime.outcomes.forget(target);
        shared.related.remove(controller, target);
        return;
    };
    let phase = runtime.decorator.phase(&object);
    if phase == Phase::Idle {
        runtime.outcomes.forget(target);
        shared.related.remove(controller, target);
        return;
    }
    match plan_target(shared, &runtime, &object, target, phase).await {
        Ok(None) => {
            shared.queue.forget(key);
            runtime.outcomes.succeeded(target.clone());
        }
        Ok(Some(plan)) => {
            let child_types: Vec<ResourceType> = runtime
                .decorator
                .attachments
                .iter()
                .map(|c| c.resource.clone())
                .collect();
            let plan_target = PlanTarget {
                object: &object,
                resource: &resource,
                child_types: &child_types,
                field_manager: &field_manager(controller),
            };
            let applied = if plan.is_noop() {
                Ok(())
            } else {
                shared.applier.execute(&plan_target, &plan).await
            };
            match applied {
                Ok(()) => {
                    shared.queue.forget(key);
                    runtime.outcomes.succeeded(target.clone());
                    if let Some(seconds) = plan.resync_after_seconds {
                        shared
                            .queue
                            .add_after(key.clone(), Duration::from_secs_f64(seconds));
                    }
                    if !plan.is_noop() {
                        tracing::debug!(controller, target = %target, applied = plan.apply.len(), deleted = plan.delete.len(), "synced");
                    }
                }
                Err(error) => {
                    fail(
                        shared,
                        &runtime,
                        &object,
                        target,
                        key,
                        Failure::new("ApplyFailed", error),
                    )
                    .await
                }
            }
        }
        Err(failure) => fail(shared, &runtime, &object, target, key, failure).await,
    }
}

async fn fail(
    shared: &Arc<Shared>,
    runtime: &DecoratorRuntime,
    object: &Value,
    target: &ObjRef,
    key: &WorkKey,
    failure: Failure,
) {
    shared.count_failure("decorator", failure.reason);
    let delay = shared.queue.retry_later(key.clone());
    tracing::warn!(controller = %runtime.decorator.name, target = %target, retry_in = ?delay, reason = failure.reason, error = %failure.message, "sync failed");
    runtime
        .outcomes
        .failed(target.clone(), failure.message.clone());
    shared
        .event(
            object,
            EventType::Warning,
            failure.reason,
            "Sync",
            failure.message,
        )
        .await;
}

/// Runs the customize hook (when there is one), makes sure the related types are watched,
/// then runs sync or finalize; all script work happens on the blocking pool.
async fn plan_target(
    shared: &Arc<Shared>,
    runtime: &Arc<DecoratorRuntime>,
    object: &Arc<Value>,
    target: &ObjRef,
    phase: Phase,
) -> Result<Option<Plan>, Failure> {
    let related = if runtime.decorator.has_customize && sync::runs_hook(phase) {
        let (decorator, target_object) = (runtime.decorator.clone(), object.clone());
        let rules = controller::blocking(shared, &runtime.hooks, move |shared, runner| {
            sync::customize(&decorator, runner, &*shared.discovery, &target_object)
        })
        .await?;
        for (_, resource) in &rules {
            let resolved = shared
                .discovery
                .resolve(&crate::api::ResourceRef {
                    api_version: resource.api_version.clone(),
                    resource: resource.plural.clone(),
                })
                .await
                .map_err(|e| Failure::new("ResolveFailed", e))?;
            shared
                .informers
                .ensure(&resolved)
                .await
                .map_err(|e| Failure::new("WatchFailed", e))?;
        }
        shared
            .related
            .set(&runtime.decorator.name, target, object, rules.clone());
        rules
    } else {
        Vec::new()
    };
    let (decorator, target_object) = (runtime.decorator.clone(), object.clone());
    let planned = controller::blocking(shared, &runtime.hooks, move |shared, runner| {
        sync::sync_decorator_target(
            &decorator,
            runner,
            &*shared.informers,
            &target_object,
            &related,
        )
    })
    .await?;
    Ok(planned.map(|(_, plan)| plan))
}

/// Brings every DecoratorController's status up to date, writing only what changed.
pub async fn write_statuses(shared: &Arc<Shared>) {
    let loaded: Vec<(String, Health, (u64, u64, u64))> = shared
        .decorators()
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
        let key = WorkKey::Decorator(name.clone());
        controller::write_status(shared, &key, &shared.decorator_type, &name, &health, counts)
            .await;
    }
}
