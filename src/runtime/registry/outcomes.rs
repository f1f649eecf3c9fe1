//! Running a controller's work items and recording how they ended: counts, failures, and the
//! reads refused that an RBAC change can heal.

use super::Registry;
use crate::api::ServiceAccountRef;
use crate::reads::ReadScope;
use crate::runtime::context::Context;
use crate::runtime::keys::WorkKey;
use crate::runtime::kind::{self, Controller, Kind, Outcome};
use crate::runtime::reads::rbac::Batch;
use crate::runtime::report::problem::Problem;
use crate::runtime::sync::synced;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A work item refused a read: the key to retry, why, and the read (whose, and which) when the
/// refusal says, so an RBAC change retries only the work it can heal.
pub(super) struct RefusedItem {
    pub(super) key: WorkKey,
    pub(super) problem: Problem,
    read: Option<(ServiceAccountRef, ReadScope)>,
}

impl RefusedItem {
    /// Whether an RBAC change can have healed it (a refusal that names no read: any change).
    pub(super) fn healed_by(&self, batch: &Batch) -> bool {
        self.read
            .as_ref()
            .is_none_or(|(account, scope)| batch.covers(Some(account), scope.namespace.as_deref()))
    }
}

/// A controller's work items refused a read, by their description.
pub(super) type RefusedWork = BTreeMap<String, RefusedItem>;

impl<K: Kind> Registry<K> {
    /// After a work item: a controller past its budget gets no worker until it has paid back
    /// the excess (its work waits; the other controllers' goes on). The budget is the one the
    /// controller was last loaded with, which the ledger holds: the item may have run an older
    /// version.
    fn keep_to_budget(&self, context: &Context, controller: &Controller<K>) {
        let share = context.authority.share();
        let paced = context.metrics.usage.pace(&controller.id, share);
        if let Some((wait, paced)) = paced {
            context.queue.pause(&controller.id, wait);
            tracing::debug!(controller = %controller.id, wait_seconds = wait.as_secs_f64(), reason = %paced.reason, "over its budget; its work waits");
        }
    }

    /// Runs one item of a controller's work and records how it ended.
    pub(super) async fn sync(&self, context: &Arc<Context>, key: &WorkKey) {
        let Some(controller) = self.get(&key.controller.name) else {
            // Removed meanwhile: nothing will retry this.
            context.queue.forget(key);
            return;
        };
        // A canary candidate syncs the work items of its share; the serving revision the rest.
        let by_candidate = self
            .rollouts
            .candidate(&key.controller.name)
            .and_then(|candidate| {
                let unit = K::rollout_unit(&key.work)?.to_string();
                candidate.serves(&unit).then_some((candidate, unit))
            });
        let controller = by_candidate
            .as_ref()
            .map_or(controller, |(candidate, _)| candidate.controller.clone());
        let outcome = K::sync(context, &controller, &key.work).await;
        self.keep_to_budget(context, &controller);
        if let Some((candidate, unit)) = by_candidate {
            candidate.record(unit, matches!(outcome, Outcome::Failed { .. }));
        }
        let refused = match &outcome {
            Outcome::Failed { failure, .. } if failure.is_refused_read() => Some(RefusedItem {
                key: key.clone(),
                read: controller
                    .writer
                    .identity
                    .clone()
                    .zip(failure.refused_read().cloned()),
                problem: failure.clone(),
            }),
            _ => None,
        };
        let problem = refused.as_ref().map(|item| item.problem.clone());
        self.note_refused(&controller.id.name, key, refused);
        if let Some(problem) = problem {
            // About the controller, not the object: its author may not read that object's
            // namespace (the object is named in neither).
            crate::telemetry::fail_current(&problem.reason);
            context
                .metrics
                .count_failure(&controller.id, problem.reason.clone());
            let delay = context.queue.retry_later(key.clone());
            tracing::warn!(controller = %controller.id, work = %key.work, retry_in_seconds = delay.as_secs_f64(), reason = %problem.reason, error = %problem.message, "read refused");
            if let Outcome::Failed { key: failed, .. } = outcome {
                controller.outcomes.failed(failed);
            }
            if let Some(object) = context
                .informers
                .get(&self.resource, None, &controller.id.name)
            {
                context
                    .warn(
                        &object,
                        None,
                        &problem.reason,
                        kind::name::<K>().action(),
                        &problem.message,
                    )
                    .await;
            }
            return;
        }
        match outcome {
            Outcome::Done => context.queue.forget(key),
            Outcome::Synced {
                key: synced,
                resync_after,
                fingerprint,
            } => {
                context.queue.forget(key);
                context.queue.unthrottle(&controller.id);
                // A sync that asked to run again later expects to: a resync must not skip it.
                let fingerprint = fingerprint.filter(|_| resync_after.is_none());
                if controller.outcomes.succeeded(synced.clone(), fingerprint) {
                    K::recovered(&controller, &synced);
                }
                if let Some(delay) = resync_after {
                    context.queue.add_after(key.clone(), delay);
                }
            }
            Outcome::Forgotten(gone) => {
                context.queue.forget(key);
                context.forget_reads(key);
                if controller.outcomes.forget(&gone) {
                    K::recovered(&controller, &gone);
                }
            }
            Outcome::Failed {
                key: failed,
                about,
                failure,
            } => {
                let (reason, message) = (&*failure.reason, &failure.message);
                crate::telemetry::fail_current(&format_args!("{reason}: {message}"));
                context
                    .metrics
                    .count_failure(&controller.id, failure.reason.clone());
                let delay = context.queue.retry_later(key.clone());
                if failure.timed_out() {
                    // Its calls keep running out of time: hold it to one worker for a while,
                    // so the others' work is not stuck behind it.
                    let throttled = context.queue.throttle(&controller.id);
                    tracing::warn!(controller = %controller.id, throttled_seconds = throttled.as_secs(), "a hook ran out of time; the controller gets one worker while others wait");
                }
                controller.outcomes.failed(failed);
                // A namespace being deleted refuses every create in it until it is gone:
                // nobody needs to act, and no Event could be published in it anyway. The
                // condition and the metric say it; the log only when asked.
                let expected = failure.is_namespace_terminating();
                if expected {
                    tracing::debug!(controller = %controller.id, work = %key.work, retry_in_seconds = delay.as_secs_f64(), error = %message, "a write went to a namespace being deleted");
                } else {
                    tracing::warn!(controller = %controller.id, work = %key.work, retry_in_seconds = delay.as_secs_f64(), reason, error = %message, "sync failed");
                }
                synced::failed(context, &controller, &about, reason, message).await;
                if expected {
                    return;
                }
                let related = Some(&controller.reference);
                let (reason, message) = controller.event_reasons.sync_failure(reason, message);
                context
                    .warn(
                        &about,
                        related,
                        reason,
                        kind::name::<K>().action(),
                        &message,
                    )
                    .await;
            }
        }
    }

    /// Remembers whether a work item's last sync was refused a read.
    pub(super) fn note_refused(&self, controller: &str, key: &WorkKey, item: Option<RefusedItem>) {
        let mut refused = self.refused.lock();
        match item {
            Some(item) => {
                refused
                    .entry(controller.to_string())
                    .or_default()
                    .insert(key.work.to_string(), item);
            }
            None => {
                if let Some(items) = refused.get_mut(controller) {
                    items.remove(&key.work.to_string());
                    if items.is_empty() {
                        refused.remove(controller);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::decorator::DecoratorKind;
    use crate::reads::ReadVerb;
    use crate::resources::ResourceType;
    use crate::runtime::keys::{ObjRef, Work};

    fn pods() -> ResourceType {
        crate::resources::StaticResolver::with_builtins()
            .find_kind("v1", "Pod")
            .expect("Pod is built in")
    }

    fn refused(name: &str) -> (WorkKey, Problem) {
        let key = WorkKey {
            controller: Registry::<DecoratorKind>::id("web"),
            work: Work::Object(ObjRef {
                resource: pods(),
                namespace: Some("shop".into()),
                name: name.into(),
            }),
        };
        let scope = ReadScope::new(ReadVerb::Get, &pods(), Some("shop"));
        let problem = Problem::new(
            crate::reasons::READ_FORBIDDEN,
            format!("may not get {name}"),
        )
        .refusing(Some(&scope));
        (key, problem)
    }

    /// Each work item refused a read counts once in `ReadsAllowed` until its next sync is not
    /// refused; the first refusal is the one named.
    #[test]
    fn refused_reads_are_recorded_per_work_item_until_one_is_not() {
        let registry = Registry::<DecoratorKind>::new(pods());
        assert_eq!(registry.reads_allowed("web"), Ok(()));
        let item = |(key, problem): (WorkKey, Problem)| RefusedItem {
            key: key.clone(),
            read: None,
            problem,
        };
        let (a, b) = (refused("a"), refused("b"));
        registry.note_refused("web", &a.0, Some(item(a.clone())));
        registry.note_refused("web", &a.0, Some(item(a.clone())));
        registry.note_refused("web", &b.0, Some(item(b.clone())));
        let problem = registry.reads_allowed("web").unwrap_err();
        assert_eq!(problem.reason, crate::reasons::READ_FORBIDDEN);
        assert_eq!(
            problem.message,
            "may not get a (and 1 more work item refused a read)"
        );
        registry.note_refused("web", &a.0, None);
        assert_eq!(
            registry.reads_allowed("web").unwrap_err().message,
            "may not get b"
        );
        registry.note_refused("web", &b.0, None);
        assert_eq!(registry.reads_allowed("web"), Ok(()));
        assert!(
            registry.refused.lock().is_empty(),
            "nothing kept for a healed controller"
        );
    }

    #[test]
    fn any_rbac_change_heals_a_refusal_that_names_no_read() {
        let (key, problem) = refused("a");
        let item = RefusedItem {
            key,
            problem,
            read: None,
        };
        assert!(item.healed_by(&Batch::default()));
    }
}
