//! Writing each controller's status: its health, counts, refused reads and rollout, only
//! when it changed.

use super::Registry;
use crate::api::{Condition, ControllerStatus};
use crate::runtime::context::Context;
use crate::runtime::kind::Kind;
use crate::runtime::replicas::shard::Item;
use crate::runtime::report::problem::Problem;
use crate::runtime::report::status::{self, Counts, Facts, Health, RolloutReport};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// What becomes a controller's [`Facts`] once its refused reads are added: its health, counts,
/// rollout, and whether it has a budget.
type Report = (Health, Counts, Option<RolloutReport>, bool);

/// The `Throttled` condition of `status` when it just turned True: worth an Event.
fn newly_throttled<'a>(
    previous: Option<&ControllerStatus>,
    status: &'a ControllerStatus,
) -> Option<&'a Condition> {
    fn throttled(status: &ControllerStatus) -> Option<&Condition> {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Throttled" && c.status == "True")
    }
    let now = throttled(status)?;
    previous.and_then(throttled).is_none().then_some(now)
}

impl<K: Kind> Registry<K> {
    /// A controller's `ReadsAllowed` condition.
    pub(super) fn reads_allowed(&self, controller: &str) -> Result<(), Problem> {
        let refused = self.refused.lock();
        match refused.get(controller) {
            Some(items) => status::reads_allowed(items.values().map(|item| &item.problem)),
            None => Ok(()),
        }
    }

    /// Brings every controller's status up to date (and what its kind reports besides),
    /// writing only what changed.
    pub(super) async fn write_statuses(&self, context: &Arc<Context>) {
        let loaded = self.all();
        let mut reports: HashMap<String, Report> = HashMap::new();
        for controller in &loaded {
            K::report(context, controller).await;
            let name = &controller.id.name;
            let (candidate, candidate_serving, candidate_failing) =
                self.rollouts.candidate_counts(name, controller);
            let own = Counts {
                candidate,
                candidate_serving,
                candidate_failing,
                usage: context.metrics.usage_report(&controller.id),
                ..controller.outcomes.counts()
            };
            context
                .metrics
                .set_throttled(&controller.id, own.usage.paced.is_some());
            let counts = context.authority.total(&controller.id, own);
            // The replica writing the controller's status drives its rollout.
            if context
                .authority
                .may_write_for(&Item::controller(&controller.id))
            {
                self.rollouts
                    .lead(
                        context,
                        controller,
                        &self.resource,
                        counts.candidate_failing,
                    )
                    .await;
            }
            let rollout = self.rollouts.report(name, controller, &counts);
            let budgeted = controller.budget.is_set();
            reports.insert(
                name.clone(),
                (controller.health.clone(), counts, rollout, budgeted),
            );
        }
        // The newest spec's problem wins over the health of a version still running.
        for (name, unloaded) in self.unloaded.lock().iter() {
            let (counts, rollout, budgeted) = reports
                .remove(name)
                .map(|(_, counts, rollout, budgeted)| (counts, rollout, budgeted))
                .unwrap_or_default();
            let health = unloaded.health.clone();
            reports.insert(name.clone(), (health, counts, rollout, budgeted));
        }
        for (name, (health, counts, rollout, budgeted)) in reports {
            context
                .metrics
                .set_ready(&Self::id(&name), health.ready.is_ok());
            let reads = self.reads_allowed(&name);
            let facts = Facts {
                health: &health,
                reads: &reads,
                rollout: rollout.as_ref(),
                budgeted,
            };
            self.write_status(context, &name, &facts, counts).await;
        }
    }

    /// Writes a controller's status when it differs from what was last written.
    pub(super) async fn write_status(
        &self,
        context: &Context,
        name: &str,
        facts: &Facts<'_>,
        counts: Counts,
    ) {
        if !context
            .authority
            .may_write_for(&Item::controller(&Self::id(name)))
        {
            return;
        }
        let previous = self
            .written_status
            .lock()
            .get(name)
            .cloned()
            .or_else(|| self.current_status(context, name));
        let Some(status) = status::changed(
            previous.as_ref(),
            facts,
            counts,
            context.config.usage_refresh,
        ) else {
            return;
        };
        let api: Api<DynamicObject> =
            Api::all_with(context.client.clone(), &self.resource.api_resource());
        // Replaces the whole status, so hooks removed from the spec leave no stale entries.
        let patch: Patch<Value> = Patch::Json(
            serde_json::from_value(json!([{"op": "add", "path": "/status", "value": status}]))
                .expect("a valid JSON patch"),
        );
        match &previous {
            Some(previous) if status::usage_alone(previous, &status) => {
                context.metrics.count_usage_write(&Self::id(name))
            }
            _ => context.metrics.count_status_write(&Self::id(name)),
        }
        match api
            .patch_status(name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {
                let throttled = newly_throttled(previous.as_ref(), &status).cloned();
                self.written_status.lock().insert(name.to_string(), status);
                if let Some(condition) = throttled
                    && let Some(object) = context.informers.get(&self.resource, None, name)
                {
                    context
                        .warn(&object, None, "Throttled", "Pace", &condition.message)
                        .await;
                }
            }
            Err(error) => {
                tracing::warn!(controller = name, %error, "cannot write controller status")
            }
        }
    }

    /// The status the controller object carries now, as seen by the cache.
    pub(super) fn current_status(&self, context: &Context, name: &str) -> Option<ControllerStatus> {
        let object = context.informers.get(&self.resource, None, name)?;
        serde_json::from_value(object.get("status")?.clone()).ok()
    }
}
