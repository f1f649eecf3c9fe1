//! One target's sync, start to end: its customize hook (the related rules), their types, then
//! sync or finalize over what a store holds, and the plan. The operator runs it over its watch
//! caches (on a blocking thread), `render` and `explain` over files and a cluster's objects, so
//! all three do exactly the same thing.

use super::DECORATOR_LABEL;
use super::api::{CUSTOMIZE, FINALIZE, SYNC};
use super::plan::{Decorator, Observed};
use crate::api::HookKind;
use crate::hooks::HookRunner;
use crate::plan::adoption::Claimant;
use crate::plan::lifecycle::Phase;
use crate::plan::related::{self, Related, related_objects};
use crate::plan::{Plan, SyncError, stamp_provenance};
use crate::reads::{ReadScope, ReadVerb};
use crate::resources::ResourceType;
use crate::store::ObjectStore;
use serde_json::Value;
use std::sync::Arc;

/// What one target's sync decided.
pub struct Synced {
    /// The hook that planned; none when only a finalizer is released.
    pub hook: Option<HookKind>,
    pub plan: Plan,
}

/// Plans one target: `None` when it needs nothing. With a customize hook, its rules (called for,
/// or kept from an earlier call) are turned into types by `related` before sync or finalize runs.
pub fn sync_target(
    decorator: &Decorator,
    runner: &HookRunner,
    store: &dyn ObjectStore,
    target: &Value,
    related: &dyn Related,
) -> Result<Option<Synced>, SyncError> {
    let phase = decorator.phase(target);
    let hook = match phase {
        Phase::Idle => return Ok(None),
        Phase::Release => {
            return Ok(Some(Synced {
                hook: None,
                plan: decorator.release_plan(),
            }));
        }
        Phase::Sync => SYNC,
        Phase::Finalize => FINALIZE,
    };
    let related = match decorator.has_customize {
        true => related.resolve(related::customize(
            runner,
            CUSTOMIZE,
            &decorator.customize_request(target),
            related,
        )?)?,
        false => Vec::new(),
    };
    let related_objects = related_objects(store, target, &related);
    let attachments = observed_attachments(decorator, store, target);
    let version = runner.hooks.version(hook);
    let observed = Observed {
        target,
        attachments: attachments.iter().map(Arc::as_ref).collect(),
        related: decorator.group_related(
            target,
            related.iter().map(|(_, resource)| resource),
            related_objects.iter().map(Arc::as_ref),
            version,
        ),
    };
    let response = runner.call(hook, &decorator.request(phase, &observed, version))?;
    let mut plan = decorator
        .plan(phase, &observed, &response)
        .map_err(|error| runner.hooks.invalid_response(hook, error))?;
    Claimant {
        owner: target,
        types: &decorator.attachments,
        labels: &[(DECORATOR_LABEL, &decorator.name)],
    }
    .admit(&decorator.name, &mut plan, store)?;
    stamp_provenance(&mut plan, runner, hook, target);
    Ok(Some(Synced {
        hook: Some(hook),
        plan,
    }))
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

/// What a target's hook request shows besides related objects, as reads its controller's
/// account must be allowed: the target (`get` in its namespace) and its attachments (`list` of
/// each type where the target's children live: its namespace, or every namespace for a
/// cluster-scoped target). Related objects are checked by [`crate::plan::related`].
pub fn observed_scopes(
    decorator: &Decorator,
    target_type: &ResourceType,
    target: &Value,
) -> Vec<ReadScope> {
    let mut scopes = vec![ReadScope::object(target_type, target)];
    scopes.extend(decorator.attachments.iter().map(|child| {
        ReadScope::new(
            ReadVerb::List,
            &child.resource,
            target_type.scope_of(target),
        )
    }));
    scopes
}
