//! DecoratorControllers in the running operator: which events reach which targets, syncing one
//! target (customize, then sync or finalize, then the plan's writes), and releasing every
//! target's finalizer when the controller itself is deleted.

use super::DECORATOR_LABEL;
use super::api::{DecoratorController, KIND};
use super::plan::Decorator;
use super::sync;
use crate::api::{ResourceRef, ServiceAccountRef};
use crate::object;
use crate::plan::Plan;
use crate::plan::lifecycle::{Phase, finalizer_for};
use crate::plan::related as related_plan;
use crate::plan::synced::SyncedPlace;
use crate::reasons;
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::runtime::context::{Context, Failure};
use crate::runtime::keys::{ControllerId, ObjRef, Work, WorkKey};
use crate::runtime::kind::{Controller, Interest, Kind, Outcome};
use crate::runtime::registry::routes::{only_status_changed, status_changed};
use crate::runtime::sync::finalizers;
use crate::runtime::sync::related::{CustomizeCache, RelatedIndex, Watched};
use crate::runtime::sync::synced;
use crate::runtime::watch::cache::ObjectEvent;
use crate::runtime::write::apply::{PlanTarget, Written};
use crate::runtime::write::fingerprint::{self, Seen, Sweep};
use crate::script::CallScope;
use crate::store::ObjectStore;
use serde_json::Value;
use std::sync::Arc;

pub struct DecoratorKind;

/// What a DecoratorController remembers across reloads.
#[derive(Default)]
pub struct DecoratorState {
    related: RelatedIndex,
    customized: CustomizeCache,
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
        let has_finalize = controller.planner.has_finalize;
        finalizers::keep_cleanup_finalizer(context, &controller.id, object, has_finalize).await;
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
        let account = ServiceAccountRef::as_it_ran(
            controller.spec.service_account_name.as_deref(),
            controller.spec.service_account_namespace.as_deref(),
        );
        let types: Vec<ResourceRef> = controller
            .spec
            .resources
            .iter()
            .map(|rule| rule.resource_ref())
            .collect();
        let finalizer = finalizer_for(KIND, &id.name);
        finalizers::release_finalizers(context, id, object, account.as_ref(), &types, &finalizer)
            .await
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
        for target in controller
            .state
            .related
            .affected(event, |target| context.get(target))
        {
            controller.enqueue(context, Work::Object(target));
        }
    }

    fn synced_on(
        _: &Context,
        decorator: &Decorator,
        target: &Value,
    ) -> Option<(SyncedPlace, ResourceType)> {
        let resource = decorator.target_type(target)?;
        resource
            .has_status
            .then(|| (decorator.synced_place().clone(), resource.clone()))
    }

    fn rollout_unit(work: &Work) -> Option<ObjRef> {
        match work {
            Work::Object(object) => Some(object.clone()),
            _ => None,
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
/// own write (but a status write) or a status change the rules ignore.
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
    // The controller's own status write is acted on, as in Metacontroller (`status_changed`).
    if !status_changed(event) && context.applier.own_writes.is_own(&controller.id, event) {
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
        for related in related_plan::related_objects(store, target, &rules) {
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
        controller.state.customized.remove(target);
        return Outcome::Forgotten(target.clone());
    };
    let scope = controller.scope(context, &controller.planner.reads);
    let failed = |failure: Failure| Outcome::Failed {
        key: target.clone(),
        about: object.clone(),
        failure: failure.scrubbed(&scope.secrets),
    };
    let mut plan = match plan_target(context, controller, &object, target, &scope).await {
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
    let clear = synced::succeeded(context, controller, &object, &mut plan);
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
    synced::write_alone(context, controller, &object, clear, &written).await;
    let fingerprint = seen(context, controller, target, &object)
        .and_then(|seen| fingerprint::after_sync(controller.version, seen, &written, &scope));
    Outcome::Synced {
        key: target.clone(),
        resync_after: plan.resync_after(),
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
                    index: &state.related,
                    customized: &state.customized,
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
