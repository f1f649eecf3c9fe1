//! Keeps the `Synced` condition of parents and targets ([`crate::plan::synced`]) true to their
//! last sync: a good sync's plan carries it, a failed one writes it on its own.

use super::apply::PlanTarget;
use super::context::Context;
use super::kind::{Controller, Kind};
use crate::plan::Plan;
use crate::plan::synced::{self, SyncResult};
use serde_json::Value;

/// Now, to the second, as Kubernetes writes condition times.
fn now() -> String {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Second).unwrap_or(now).to_string()
}

/// Adds to a good sync's plan what turns the object's condition True.
pub fn succeeded<K: Kind>(controller: &Controller<K>, object: &Value, plan: &mut Plan) {
    if let Some((place, _)) = K::synced_on(&controller.planner, object) {
        synced::report(plan, object, &place, &SyncResult::Ok, &now());
    }
}

/// Writes the object's condition False with the failure's reason and message. A condition that
/// cannot be written (the account may not patch that status, the object is gone) is logged
/// and left: the Event already says the same.
pub async fn failed<K: Kind>(
    context: &Context,
    controller: &Controller<K>,
    object: &Value,
    reason: &str,
    message: &str,
) {
    let Some((place, resource)) = K::synced_on(&controller.planner, object) else {
        return;
    };
    let mut plan = Plan::default();
    let failure = SyncResult::Failed { reason, message };
    synced::report(&mut plan, object, &place, &failure, &now());
    if plan.is_noop() {
        return;
    }
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
