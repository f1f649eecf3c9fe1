//! Keeps the `Synced` condition of parents and targets ([`crate::plan::synced`]) true to their
//! last sync: a good sync's status write carries it, a failure (or the end of one) is written
//! on its own.

use crate::object::ObjectKey;
use crate::plan::synced::{self, SyncResult};
use crate::plan::{Plan, StatusChange};
use crate::runtime::context::Context;
use crate::runtime::kind::{Controller, Kind};
use crate::runtime::report::events::truncate_note;
use crate::runtime::write::apply::{PlanTarget, Written};
use serde_json::Value;

/// Now, to the second, as Kubernetes writes condition times.
fn now() -> String {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Second).unwrap_or(now).to_string()
}

/// Puts a good sync's condition into its plan's status write, or returns the write of its own
/// that clears a failure, for [`write_alone`] once the plan has been carried out.
pub(crate) fn succeeded<K: Kind>(
    context: &Context,
    controller: &Controller<K>,
    object: &Value,
    plan: &mut Plan,
) -> Option<StatusChange> {
    let (place, _) = K::synced_on(context, &controller.planner, object)?;
    synced::report(plan, object, &place, &SyncResult::Ok, now)
}

/// Writes the object's condition False with the failure's reason and message, cut as its
/// Event's note is (the API server's advice at the end survives).
pub(crate) async fn failed<K: Kind>(
    context: &Context,
    controller: &Controller<K>,
    object: &Value,
    reason: &str,
    message: &str,
) {
    let Some((place, _)) = K::synced_on(context, &controller.planner, object) else {
        return;
    };
    let message = truncate_note(message);
    let failure = SyncResult::Failed {
        reason,
        message: &message,
    };
    let change = synced::report(&mut Plan::default(), object, &place, &failure, now);
    write_alone(context, controller, object, change, &Written::default()).await;
}

/// Writes a condition on its own, after the sync's own writes (`written`: the version they
/// left the object at is the one it is conditioned on). One that cannot be written (the object
/// changed meanwhile, the account may not patch that status, the object is gone) is logged
/// and left: someone else's change syncs the object again, and the Event says the same.
pub(crate) async fn write_alone<K: Kind>(
    context: &Context,
    controller: &Controller<K>,
    object: &Value,
    change: Option<StatusChange>,
    written: &Written,
) {
    let (Some(mut change), Some((_, resource))) =
        (change, K::synced_on(context, &controller.planner, object))
    else {
        return;
    };
    let key = ObjectKey::of(object);
    if let StatusChange::Conditions {
        resource_version, ..
    } = &mut change
        && let Some((_, version)) = written.versions.iter().rev().find(|(k, _)| *k == key)
    {
        *resource_version = version.clone();
    }
    let plan = Plan {
        status: Some(change),
        ..Plan::default()
    };
    let target = PlanTarget {
        object,
        resource: &resource,
        child_types: &[],
        controller: &controller.id,
        writer: &controller.writer,
    };
    if let Err(error) = context.applier.execute(&target, &plan).await {
        tracing::debug!(controller = %controller.id, %error, "cannot write the Synced condition");
    }
}
