//! DecoratorControllers in the running operator, as one-object controllers
//! ([`crate::kinds::one_object`]): which events reach which targets, and what a deleted
//! controller releases.

use super::DECORATOR_LABEL;
use super::api::DecoratorController;
use super::plan::Decorator;
use crate::api::{ResourceRef, ServiceAccountRef};
use crate::kinds::one_object::{ObjectKind, ObjectRuntime, OneObject, RelatedState};
use crate::object;
use crate::plan::synced::SyncedPlace;
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::runtime::context::Context;
use crate::runtime::keys::{ObjRef, Work};
use crate::runtime::kind::{Controller, Interest};
use crate::runtime::registry::routes::status_changed;
use crate::runtime::watch::event::ObjectEvent;
use serde_json::Value;

pub(crate) type DecoratorKind = ObjectKind<Decorator>;

impl ObjectRuntime for Decorator {
    type Object = DecoratorController;
    type State = RelatedState;

    fn build(
        controller: &DecoratorController,
        resolver: &dyn ResourceResolver,
    ) -> Result<Decorator, ResolveError> {
        Decorator::new(controller, resolver)
    }

    fn interest(&self) -> Interest {
        Interest {
            types: self
                .object_types()
                .chain(self.attachments.iter().map(|child| &child.resource))
                .cloned()
                .collect(),
            every_type: self.common.has_customize,
        }
    }

    fn related(state: &RelatedState) -> &RelatedState {
        state
    }

    /// The target types: the controller's finalizer may be on any of their objects.
    fn released(controller: &DecoratorController) -> (Option<ServiceAccountRef>, Vec<ResourceRef>) {
        let account = ServiceAccountRef::as_it_ran(
            controller.spec.service_account_name.as_deref(),
            controller.spec.service_account_namespace.as_deref(),
        );
        let types = controller
            .spec
            .resources
            .iter()
            .map(|rule| rule.resource_ref())
            .collect();
        (account, types)
    }

    fn object_types(&self) -> impl Iterator<Item = &ResourceType> {
        self.rules.iter().map(|(_, resource)| resource)
    }

    /// The object itself when it is (or was) a target, and its owner when it is an attachment.
    fn route(
        context: &Context,
        controller: &Controller<DecoratorKind>,
        event: &ObjectEvent,
        object: &Value,
    ) {
        let decorator = &controller.planner;
        if decorator.object_types().any(|t| *t == event.resource) && controller.is_news(event) {
            route_target(context, controller, event, object);
        }
        let is_attachment = decorator
            .attachments
            .iter()
            .any(|child| child.resource == event.resource);
        if is_attachment && object::label(object, DECORATOR_LABEL) == Some(&controller.id.name) {
            // Even an attachment exactly as this controller applied it re-syncs its target: the
            // hook sees observed attachments and may report on them (e.g. in status).
            if let Some(target) = decorator
                .object_types()
                .find_map(|t| ObjRef::owner_of(t, object))
            {
                controller.enqueue(context, Work::Object(target));
            }
        }
    }

    fn synced_on(&self, target: &Value) -> Option<(SyncedPlace, ResourceType)> {
        let resource = self.target_type(target)?;
        resource
            .has_status
            .then(|| (self.synced_place().clone(), resource.clone()))
    }

    fn owned_types(&self) -> Vec<ResourceType> {
        self.attachments
            .iter()
            .map(|c| c.resource.clone())
            .collect()
    }
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
        .any(|version| decorator.wants(version.head()));
    if !wanted {
        return;
    }
    if ignores_status(decorator, &event.resource) && event.only_status_changed() {
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
