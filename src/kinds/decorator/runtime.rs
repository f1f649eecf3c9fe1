//! DecoratorControllers in the running operator: which events reach which targets, syncing one
//! target (customize, then sync or finalize, then the plan's writes), and releasing every
//! target's finalizer when the controller itself is deleted.

use super::DECORATOR_LABEL;
use super::api::{DecoratorController, KIND};
use super::plan::{Decorator, Phase, RelatedRule, finalizer_for};
use super::related::RelatedIndex;
use super::sync::{self, Related, RelatedRules};
use crate::api::{ResourceRef, ServiceAccountRef};
use crate::object;
use crate::plan::{FinalizerChange, Plan, SyncError};
use crate::reasons;
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::runtime::apply::{PlanTarget, Writer, Written};
use crate::runtime::cache::ObjectEvent;
use crate::runtime::context::{Context, Failure};
use crate::runtime::fingerprint::{self, Seen, Sweep};
use crate::runtime::keys::{ControllerId, ObjRef, Work, WorkKey};
use crate::runtime::kind::{Controller, Interest, Kind, Outcome};
use crate::runtime::routes::only_status_changed;
use crate::script::CallScope;
use crate::store::ObjectStore;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The finalizer the operator keeps on a DecoratorController with a finalize hook, so that
/// deleting the controller first releases every target it holds a finalizer on.
pub const CLEANUP_FINALIZER: &str = "metascript.dev/release-targets";

pub struct DecoratorKind;

/// What a DecoratorController remembers across reloads.
#[derive(Default)]
pub struct DecoratorState {
    related: RelatedIndex,
    customized: CustomizeCache,
}

/// The customize hook's answers per target, kept while the target (its uid and
/// resourceVersion) and the controller (its version) are the ones it answered for.
#[derive(Default)]
struct CustomizeCache(parking_lot::Mutex<HashMap<ObjRef, (String, Vec<RelatedRule>)>>);

impl CustomizeCache {
    /// What an answer is kept for: the target as it is, and the controller as it runs.
    fn key(target: &Value, version: u64) -> String {
        format!(
            "{}@{}#{version}",
            object::uid(target).unwrap_or_default(),
            object::str_at(target, "/metadata/resourceVersion").unwrap_or_default()
        )
    }
}

/// A target's related rules in the operator: its customize answer kept while it holds, and the
/// rules' types resolved, watched and indexed, so their objects' changes re-sync the target.
struct Watched<'a> {
    context: &'a Context,
    id: &'a ControllerId,
    state: &'a DecoratorState,
    version: u64,
    target_ref: &'a ObjRef,
    target: &'a Value,
    /// The work item's scope: related objects are handed to the hooks only where the
    /// controller's account may read them.
    scope: &'a CallScope,
}

impl Related for Watched<'_> {
    fn cached(&self) -> Option<Vec<RelatedRule>> {
        let key = CustomizeCache::key(self.target, self.version);
        let kept = self.state.customized.0.lock();
        let (kept_for, rules) = kept.get(self.target_ref)?;
        (*kept_for == key).then(|| rules.clone())
    }

    fn keep(&self, rules: &[RelatedRule]) {
        let key = CustomizeCache::key(self.target, self.version);
        self.state
            .customized
            .0
            .lock()
            .insert(self.target_ref.clone(), (key, rules.to_vec()));
    }

    fn resolve(&self, rules: Vec<RelatedRule>) -> Result<RelatedRules, SyncError> {
        let related = tokio::runtime::Handle::current().block_on(watch_related(
            self.context,
            self.id,
            rules,
        ))?;
        // Before they are indexed: a refused rule relates nothing to the target.
        crate::plan::admit(
            self.scope,
            &self.id.name,
            &sync::related_scopes(&related, self.target),
        )?;
        self.state
            .related
            .set(self.target_ref, self.target, related.clone());
        Ok(related)
    }
}

impl Kind for DecoratorKind {
    type Object = DecoratorController;
    type Planner = Decorator;
    type State = DecoratorState;
    type OutcomeKey = ObjRef;

    fn build(
        controller: &DecoratorController,
        resolver: &dyn ResourceResolver,
    ) -> Result<Decorator, ResolveError> {
        Decorator::new(controller, resolver)
    }

    fn interest(decorator: &Decorator) -> Interest {
        Interest {
            types: target_types(decorator)
                .chain(decorator.attachments.iter().map(|child| &child.resource))
                .cloned()
                .collect(),
            every_type: decorator.has_customize,
        }
    }

    async fn installed(
        context: &Arc<Context>,
        controller: &Arc<Controller<Self>>,
        object: &Value,
        _first: bool,
    ) {
        // A standby adds it when it takes over (it reloads every controller then).
        let leading = context.leadership.is_leader();
        if leading
            && controller.planner.has_finalize
            && !object::has_finalizer(object, CLEANUP_FINALIZER)
        {
            let add = FinalizerChange::Add(CLEANUP_FINALIZER.into());
            if let Err(failure) = edit_own_finalizer(context, &controller.id, object, add).await {
                tracing::warn!(controller = %controller.id, error = %failure.message, "cannot add the cleanup finalizer");
                context.queue.retry_later(WorkKey::load(&controller.id));
            }
        }
    }

    /// Removes the controller's finalizer from every object of its target types, then its own
    /// cleanup finalizer.
    async fn release(
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Value,
    ) -> Result<(), Failure> {
        let controller: DecoratorController = serde_json::from_value(object.clone())
            .map_err(|e| Failure::new(reasons::INVALID_SPEC, e))?;
        let finalizer = finalizer_for(&id.name);
        let account = ServiceAccountRef::from_spec(
            controller.spec.service_account_name.as_deref(),
            controller.spec.service_account_namespace.as_deref(),
        );
        let writer = context
            .identities
            .writer(&context.client, account.as_ref())
            .map_err(|e| Failure::new(reasons::IMPERSONATION_FAILED, e))?;
        for rule in &controller.spec.resources {
            let resolved = context
                .discovery
                .resolve(&rule.resource_ref())
                .await
                .map_err(|e| Failure::new(reasons::RESOLVE_FAILED, e))?;
            context
                .informers
                .ensure(&resolved)
                .await
                .map_err(|e| Failure::new(reasons::WATCH_FAILED, e))?;
            let resource = &resolved.resource;
            for target in ObjectStore::list(&*context.informers, resource, None) {
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
                    controller: id,
                    writer: &writer,
                };
                context.applier.execute(&plan_target, &plan).await?;
            }
        }
        let remove = FinalizerChange::Remove(CLEANUP_FINALIZER.into());
        edit_own_finalizer(context, id, object, remove).await
    }

    /// Every object the controller has work for: selected ones and those holding its
    /// finalizer.
    fn enqueue_all(context: &Context, controller: &Controller<Self>, sweep: Sweep) -> u64 {
        let decorator = &controller.planner;
        let mut skipped = 0;
        for resource in target_types(decorator) {
            for target in ObjectStore::list(&*context.informers, resource, None) {
                if !wants(decorator, &target) {
                    continue;
                }
                let target_ref = ObjRef::of(resource, &target);
                if sweep == Sweep::Changed && unchanged(context, controller, &target_ref, &target) {
                    skipped += 1;
                    continue;
                }
                controller.enqueue(context, Work::Object(target_ref));
            }
        }
        skipped
    }

    /// The object itself when it is (or was) a target, its owner when it is an attachment,
    /// and the targets whose customize rules select it.
    fn route(context: &Context, controller: &Controller<Self>, event: &ObjectEvent) {
        let Some(object) = event.new.as_ref().or(event.old.as_ref()) else {
            return;
        };
        let decorator = &controller.planner;
        if target_types(decorator).any(|t| *t == event.resource) && controller.is_news(event) {
            route_target(context, controller, event, object);
        }
        let is_attachment = decorator
            .attachments
            .iter()
            .any(|child| child.resource == event.resource);
        if is_attachment && object::label(object, DECORATOR_LABEL) == Some(&controller.id.name) {
            // Even an attachment exactly as this controller applied it re-syncs its target: the
            // hook sees observed attachments and may report on them (e.g. in status).
            if let Some(target) = target_types(decorator).find_map(|t| ObjRef::owner_of(t, object))
            {
                controller.enqueue(context, Work::Object(target));
            }
        }
        for (target, rules) in controller.state.related.candidates(&event.resource, object) {
            let Some(target_object) = context.get(&target) else {
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
                controller.enqueue(context, Work::Object(target));
            }
        }
    }

    async fn sync(
        context: &Arc<Context>,
        controller: &Arc<Controller<Self>>,
        work: &Work,
    ) -> Outcome<ObjRef> {
        match work {
            Work::Object(target) => sync_target(context, controller, target).await,
            _ => Outcome::Done,
        }
    }

    async fn report(_: &Arc<Context>, _: &Arc<Controller<Self>>) {}
}

fn target_types(decorator: &Decorator) -> impl Iterator<Item = &ResourceType> {
    decorator.rules.iter().map(|(_, resource)| resource)
}

/// Whether the controller has work for a version of an object of a target type.
fn wants(decorator: &Decorator, target: &Value) -> bool {
    decorator.selects(target) || object::has_finalizer(target, decorator.finalizer())
}

/// A target event: queued when the controller has work for the new version or had for the old
/// one (a deleted target, too, so it is forgotten), unless it is the event of the controller's
/// own write or a status change the rules ignore.
fn route_target(
    context: &Context,
    controller: &Controller<DecoratorKind>,
    event: &ObjectEvent,
    object: &Value,
) {
    let decorator = &controller.planner;
    let wanted = [&event.old, &event.new]
        .into_iter()
        .flatten()
        .any(|version| wants(decorator, version));
    if !wanted {
        return;
    }
    if let (Some(old), Some(new)) = (&event.old, &event.new)
        && ignores_status(decorator, &event.resource)
        && only_status_changed(old, new)
    {
        return;
    }
    if context.applier.own_writes.is_own(&controller.id, event) {
        return;
    }
    controller.enqueue(context, Work::Object(ObjRef::of(&event.resource, object)));
}

fn ignores_status(decorator: &Decorator, resource: &ResourceType) -> bool {
    decorator
        .rules
        .iter()
        .any(|(rule, t)| t == resource && rule.ignore_status_changes)
}

/// Whether a target's last sync was pure and saw exactly what the cache holds now.
fn unchanged(
    context: &Context,
    controller: &Controller<DecoratorKind>,
    target_ref: &ObjRef,
    target: &Value,
) -> bool {
    let Some(recorded) = controller.outcomes.fingerprint(target_ref) else {
        return false;
    };
    let Some(seen) = seen(context, controller, target_ref, target) else {
        return false;
    };
    let reads = context.current_reads(&controller.id, || Work::Object(target_ref.clone()));
    seen.fingerprint(controller.version, reads) == recorded
}

/// What a sync of the target builds its hook requests from, as the cache holds it now: the
/// target, its observed attachments and the objects its customize rules relate to it. `None`
/// when the target's phase runs no hook.
fn seen(
    context: &Context,
    controller: &Controller<DecoratorKind>,
    target_ref: &ObjRef,
    target: &Value,
) -> Option<Seen> {
    let decorator = &controller.planner;
    if !decorator.phase(target).runs_hook() {
        return None;
    }
    let store = &*context.informers;
    let mut seen = Seen::default();
    seen.object(target);
    for attachment in sync::observed_attachments(decorator, store, target) {
        seen.object(&attachment);
    }
    if decorator.has_customize {
        let rules = controller.state.related.rules_of(target_ref);
        for related in sync::related_objects(store, target, &rules) {
            seen.object(&related);
        }
    }
    Some(seen)
}

/// Syncs one target: hooks on the blocking pool, then the plan's writes. A target that is gone
/// or no longer selected is forgotten.
async fn sync_target(
    context: &Arc<Context>,
    controller: &Arc<Controller<DecoratorKind>>,
    target: &ObjRef,
) -> Outcome<ObjRef> {
    let object = context
        .get(target)
        .filter(|object| controller.planner.phase(object) != Phase::Idle);
    let Some(object) = object else {
        controller.state.related.remove(target);
        controller.state.customized.0.lock().remove(target);
        return Outcome::Forgotten(target.clone());
    };
    let failed = |failure: Failure| Outcome::Failed {
        key: target.clone(),
        about: object.clone(),
        failure,
    };
    let scope = controller.scope(context, &controller.planner.reads);
    let plan = match plan_target(context, controller, &object, target, &scope).await {
        Ok(Some(plan)) => plan,
        Ok(None) => {
            return Outcome::Synced {
                key: target.clone(),
                resync_after: None,
                fingerprint: None,
            };
        }
        Err(failure) => return failed(failure),
    };
    let mut written = Written::default();
    if !plan.is_noop() {
        let child_types: Vec<ResourceType> = controller
            .planner
            .attachments
            .iter()
            .map(|c| c.resource.clone())
            .collect();
        let plan_target = PlanTarget {
            object: &object,
            resource: &target.resource,
            child_types: &child_types,
            controller: &controller.id,
            writer: &controller.writer,
        };
        written = match context.applier.execute(&plan_target, &plan).await {
            Ok(written) => written,
            Err(error) => return failed(error.into()),
        };
        tracing::debug!(controller = %controller.id, target = %target, applied = plan.apply.len(), deleted = plan.delete.len(), "synced");
    }
    let fingerprint = seen(context, controller, target, &object)
        .and_then(|seen| fingerprint::after_sync(controller.version, seen, &written, &scope));
    Outcome::Synced {
        key: target.clone(),
        resync_after: plan.resync_after_seconds.map(Duration::from_secs_f64),
        fingerprint,
    }
}

/// Plans a target on the blocking pool (customize, then sync or finalize), then records what
/// its hooks read and publishes the Events they asked for. Every hook of the sync runs in
/// `scope`, so what they read together is what the target depends on.
async fn plan_target(
    context: &Arc<Context>,
    controller: &Arc<Controller<DecoratorKind>>,
    object: &Arc<Value>,
    target: &ObjRef,
    scope: &CallScope,
) -> Result<Option<Plan>, Failure> {
    let (planner, target_object, target_ref, state, id, version) = (
        controller.planner.clone(),
        object.clone(),
        target.clone(),
        controller.state.clone(),
        controller.id.clone(),
        controller.version,
    );
    let planned = context
        .blocking(
            &controller.id,
            &controller.hooks,
            scope,
            move |context, runner| {
                if planner.phase(&target_object).runs_hook() {
                    let reads =
                        sync::observed_scopes(&planner, &target_ref.resource, &target_object);
                    crate::plan::admit(runner.scope, &id.name, &reads)?;
                }
                let related = Watched {
                    context,
                    id: &id,
                    state: &state,
                    version,
                    target_ref: &target_ref,
                    target: &target_object,
                    scope: runner.scope,
                };
                sync::sync_target(
                    &planner,
                    runner,
                    &*context.informers,
                    &target_object,
                    &related,
                )
            },
        )
        .await;
    context.record_reads(
        &WorkKey::new(&controller.id, Work::Object(target.clone())),
        scope,
    );
    if planned.is_ok() {
        context
            .publish_script_events(object, &controller.reference, KIND.action(), &scope.events)
            .await;
    }
    Ok(planned?.map(|synced| synced.plan))
}

/// Resolves the type of each related rule and makes sure it is watched, so the rules can be
/// evaluated against the cache.
async fn watch_related(
    context: &Context,
    id: &ControllerId,
    rules: Vec<RelatedRule>,
) -> Result<RelatedRules, SyncError> {
    let mut related = Vec::with_capacity(rules.len());
    for rule in rules {
        let resolved = context
            .discovery
            .resolve(&rule.resource_ref())
            .await
            .map_err(|source| SyncError::Resolve {
                controller: id.name.clone(),
                source,
            })?;
        context
            .informers
            .ensure(&resolved)
            .await
            .map_err(|error| SyncError::Watch {
                controller: id.name.clone(),
                message: error.to_string(),
            })?;
        related.push((rule, resolved.resource));
    }
    Ok(related)
}

/// Adds or removes the cleanup finalizer on a DecoratorController object.
async fn edit_own_finalizer(
    context: &Context,
    id: &ControllerId,
    object: &Value,
    change: FinalizerChange,
) -> Result<(), Failure> {
    let reference = ResourceRef {
        api_version: object::api_version(object).to_string(),
        resource: KIND.plural().to_string(),
    };
    let resolved = context
        .discovery
        .resolve(&reference)
        .await
        .map_err(|e| Failure::new(reasons::RESOLVE_FAILED, e))?;
    let plan = Plan {
        finalizer: Some(change),
        ..Plan::default()
    };
    // The controller object is the operator's own business, not the controller's.
    let writer = Writer {
        client: context.client.clone(),
        identity: None,
    };
    let target = PlanTarget {
        object,
        resource: &resolved.resource,
        child_types: &[],
        controller: id,
        writer: &writer,
    };
    context.applier.execute(&target, &plan).await?;
    Ok(())
}
