//! The finalizers a controller with a finalize hook leaves on the objects it syncs, and the one
//! the operator keeps on such a controller object so that deleting the controller first releases
//! them (otherwise nothing would ever remove them, and those objects could not be deleted).
//! Shared by every kind with a finalize hook.

use crate::api::{ResourceRef, ServiceAccountRef};
use crate::object;
use crate::plan::{FinalizerChange, Plan};
use crate::reasons;
use crate::runtime::context::Context;
use crate::runtime::keys::ControllerId;
use crate::runtime::report::problem::Problem;
use crate::runtime::write::apply::{PlanTarget, Writer};
use crate::store::ObjectStore;
use serde_json::Value;
use std::sync::Arc;

pub use crate::api::CLEANUP_FINALIZER;

/// Adds the cleanup finalizer to a controller object that has a finalize hook (the replica
/// that may write for the controller only: a standby or a new owner adds it when it takes
/// over, since it reloads every controller then). A failure is retried through the
/// controller's load.
pub(crate) async fn keep_cleanup_finalizer(
    context: &Arc<Context>,
    id: &ControllerId,
    object: &Value,
    has_finalize: bool,
) {
    if context.authority.may_write()
        && has_finalize
        && !object::has_finalizer(object, CLEANUP_FINALIZER)
    {
        let add = FinalizerChange::Add(CLEANUP_FINALIZER.into());
        if let Err(failure) = edit_own_finalizer(context, id, object, add).await {
            tracing::warn!(controller = %id, error = %failure.message, "cannot add the cleanup finalizer");
            context
                .queue
                .retry_later(crate::runtime::keys::WorkKey::load(id));
        }
    }
}

/// Removes `finalizer` from every object of the `types` a deleted controller synced, as the
/// controller's ServiceAccount, then the cleanup finalizer from the controller object itself.
pub(crate) async fn release_finalizers(
    context: &Context,
    id: &ControllerId,
    object: &Value,
    account: Option<&ServiceAccountRef>,
    types: &[ResourceRef],
    finalizer: &str,
) -> Result<(), Problem> {
    // Releasing only removes this controller's own finalizer, so a controller that named the
    // operator's account (saved before that was refused) is released by the operator itself
    // rather than left undeletable.
    let writer = match context.identities.writer(&context.client, account) {
        Err(crate::runtime::context::WriterError::OwnAccount(_)) => {
            context.identities.writer(&context.client, None)
        }
        other => other,
    }
    .map_err(|e| Problem::new(e.reason(), e))?;
    for reference in types {
        let resolved = context
            .discovery
            .resolve(reference)
            .await
            .map_err(|e| Problem::new(reasons::RESOLVE_FAILED, e))?;
        // A type its account may not list was never watched for it (it never loaded, or lost
        // the right): the release starts no watch for it either, and its finalizers, if any,
        // could not be removed as the account anyway.
        if let Some(account) = &writer.identity
            && let Err(problem) =
                crate::runtime::load::may_watch(context, account, &resolved.resource, false).await
        {
            tracing::info!(controller = %id, reason = %problem.reason, message = %problem.message, "not releasing a type the controller's account may not list");
            continue;
        }
        context
            .informers
            .ensure(&resolved)
            .await
            .map_err(|e| Problem::new(reasons::WATCH_FAILED, e))?;
        let resource = &resolved.resource;
        for held in ObjectStore::list(&*context.informers, resource, None) {
            if !object::has_finalizer(&held, finalizer) {
                continue;
            }
            let plan = Plan {
                finalizer: Some(FinalizerChange::Remove(finalizer.to_string())),
                ..Plan::default()
            };
            let target = PlanTarget {
                object: &held,
                resource,
                child_types: &[],
                controller: id,
                writer: &writer,
            };
            context.applier.execute(&target, &plan).await?;
        }
    }
    let remove = FinalizerChange::Remove(CLEANUP_FINALIZER.into());
    edit_own_finalizer(context, id, object, remove).await
}

/// Adds or removes a finalizer on a controller object.
async fn edit_own_finalizer(
    context: &Context,
    id: &ControllerId,
    object: &Value,
    change: FinalizerChange,
) -> Result<(), Problem> {
    let reference = ResourceRef {
        api_version: object::api_version(object).to_string(),
        resource: id.kind.plural().to_string(),
    };
    let resolved = context
        .discovery
        .resolve(&reference)
        .await
        .map_err(|e| Problem::new(reasons::RESOLVE_FAILED, e))?;
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
