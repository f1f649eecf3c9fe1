//! Building a controller's version from its object: its writer, credentials, hooks, planner
//! and static reads, or why it does not load.

use super::Registry;
use crate::api::{Budget, ControllerObject, SYNC_REQUESTED_ANNOTATION};
use crate::hooks::ConfigMapLookup;
use crate::object;
use crate::reads::{ReadScope, ReadVerb};
use crate::reasons;
use crate::runtime::context::Context;
use crate::runtime::keys::ControllerId;
use crate::runtime::kind::{self, Controller, Kind};
use crate::runtime::load::credentials::CredentialValues;
use crate::runtime::load::credentials::CredentialWatch;
use crate::runtime::load::{self, ScriptSources};
use crate::runtime::report::problem::Problem;
use crate::runtime::report::status::Health;
use crate::runtime::write::fingerprint::{self};
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

/// A controller whose newest spec could not be loaded (a previous version may still run): why,
/// and what would reload it.
pub(super) struct Unloaded {
    pub(super) health: Health,
    pub(super) sources: ScriptSources,
    /// Its webhook credentials as read for this attempt: a change there retries it at once.
    pub(super) credentials: Option<Arc<CredentialWatch>>,
}

impl Unloaded {
    /// Why it did not load, for a log line.
    pub(super) fn why(self) -> String {
        self.health
            .ready
            .err()
            .map_or_else(String::new, |problem| problem.message)
    }
}

impl<K: Kind> Registry<K> {
    /// Reads a controller object as a version ready to run: its writer and webhook
    /// credentials, its hooks compiled (the previous version's kept when the newest do not
    /// compile), its planner built and its account's static reads checked. `pinned`: the
    /// scripts of a revision's snapshot, read instead of the ConfigMaps and dev-loop files.
    pub(super) async fn version(
        &self,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        previous: Option<&Arc<Controller<K>>>,
        pinned: Option<&(dyn ConfigMapLookup + Sync)>,
    ) -> Result<Controller<K>, Box<Unloaded>> {
        let parsed: K::Object = match serde_json::from_value((**object).clone()) {
            Ok(parsed) => parsed,
            Err(error) => {
                let generation = object
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64);
                let problem =
                    Problem::new(reasons::INVALID_SPEC, format!("unreadable spec: {error}"));
                return Err(Box::new(Unloaded {
                    health: Health::failed(generation, problem),
                    sources: ScriptSources::default(),
                    credentials: None,
                }));
            }
        };
        let spec = parsed.spec();
        let sources = ScriptSources::of(&spec);
        let previous_hooks = previous.map(|p| p.hooks.clone());
        // The writer before the hooks: webhook credentials are read with it, so a controller
        // can use only the Secrets its own account may read.
        let writer = match (&spec.service_account, context.config.allow_unimpersonated) {
            (Err(invalid), _) => Err(Problem::new(reasons::INVALID_SPEC, invalid)),
            (Ok(None), false) => Err(Problem::new(
                reasons::SERVICE_ACCOUNT_REQUIRED,
                "spec.serviceAccountName is required: this operator runs with \
                 --allow-unimpersonated=false, so every controller writes as a ServiceAccount of \
                 its own",
            )),
            (Ok(account), _) => context
                .identities
                .writer(&context.client, account.as_ref())
                .map_err(|error| Problem::new(error.reason(), error)),
        };
        let writer = match writer {
            Ok(writer) => writer,
            Err(problem) => {
                return Err(Box::new(Unloaded {
                    health: Health::failed(spec.generation, problem),
                    sources,
                    credentials: None,
                }));
            }
        };
        let credential_sources = spec.credential_sources();
        let credentials = match CredentialValues::read(&writer.client, &credential_sources).await {
            Ok(read) => read,
            Err(error) => {
                let problem = Problem::new(reasons::CREDENTIALS_READ_FAILED, error);
                return Err(Box::new(Unloaded {
                    health: Health::failed(spec.generation, problem),
                    sources,
                    credentials: None,
                }));
            }
        };
        let watch =
            CredentialWatch::new(&writer.client, credential_sources, &credentials).map(Arc::new);
        let prepared =
            match load::prepare(context, id, &spec, previous_hooks, &credentials, pinned).await {
                Ok(prepared) => prepared,
                Err(health) => {
                    return Err(Box::new(Unloaded {
                        health,
                        sources,
                        credentials: watch,
                    }));
                }
            };
        // When the newest scripts fail, the whole previous version keeps running, planner
        // included, so a hook added by the broken edit is not half enabled.
        let stale = match previous {
            Some(previous) if prepared.stale => Some(previous),
            _ => None,
        };
        let built = match stale {
            Some(previous) => Ok((previous.planner.clone(), previous.generation)),
            None => K::build(&parsed, &*context.discovery)
                .map(|planner| (Arc::new(planner), spec.generation))
                .map_err(|error| Problem::new(reasons::RESOLVE_FAILED, error)),
        };
        // What the newest spec and scripts are, apart from how they roll out.
        let newest = crate::plan::rollout::revision(
            &serde_json::to_value(&parsed)
                .ok()
                .and_then(|value| value.get("spec").cloned())
                .unwrap_or_default(),
            &load::digests(&prepared.hooks),
        );
        // One gate for every change of code: a new revision serves only once its own
        // `spec.tests` pass, whether the controller, a ConfigMap or a library changed (only the
        // first passes admission). What served before keeps serving, as after a compile error.
        let (prepared, stale, built) = match (stale, built) {
            (None, Ok(built))
                if !spec.tests.is_empty() && previous.is_none_or(|p| p.revision != newest) =>
            {
                let known = self
                    .failed_tests
                    .lock()
                    .get(&id.name)
                    .filter(|(failed, _)| *failed == newest)
                    .map(|(_, problem)| problem.clone());
                let tested = match known {
                    Some(problem) => Err(problem),
                    None => {
                        let tested = load::run_spec_tests(
                            context,
                            <K::Object as ControllerObject>::KIND,
                            &id.name,
                            &spec,
                            prepared.hooks.clone(),
                            built.0.clone(),
                        )
                        .await;
                        let mut failed = self.failed_tests.lock();
                        match &tested {
                            Ok(()) => failed.remove(&id.name),
                            Err(problem) => {
                                failed.insert(id.name.clone(), (newest.clone(), problem.clone()))
                            }
                        };
                        tested
                    }
                };
                match (tested, previous) {
                    (Ok(()), _) => (prepared, None, Ok(built)),
                    (Err(problem), Some(previous)) => {
                        tracing::warn!(controller = %id, error = %problem.message, "spec.tests failed; the previous version keeps running");
                        (
                            load::Prepared::kept(spec.generation, previous.hooks.clone(), problem),
                            Some(previous),
                            Ok((previous.planner.clone(), previous.generation)),
                        )
                    }
                    (Err(problem), None) => {
                        return Err(Box::new(Unloaded {
                            health: Health::failed(spec.generation, problem),
                            sources,
                            credentials: watch,
                        }));
                    }
                }
            }
            (stale, built) => (prepared, stale, built),
        };
        // Hooks are handed only what the controller's account may read; the types it acts on
        // that are cluster-scoped are checked now, the rest per namespace when used.
        let checked = match (built, &writer.identity) {
            (Ok(built), Some(account)) => {
                check_static_reads(context, account, &K::interest(&built.0))
                    .await
                    .map(|()| built)
            }
            (built, _) => built,
        };
        let (planner, generation) = match checked {
            Ok(built) => built,
            Err(problem) => {
                return Err(Box::new(Unloaded {
                    health: Health {
                        ready: Err(problem),
                        ..prepared.health
                    },
                    sources,
                    credentials: watch,
                }));
            }
        };
        let digests = load::digests(&prepared.hooks);
        // A version whose newest scripts failed runs what ran before: the same revision.
        let revision = match stale {
            Some(previous) => previous.revision.clone(),
            None => newest,
        };
        let reads = writer
            .identity
            .as_ref()
            .map(|account| context.access.policy(account));
        // The live object's, whichever revision this is (a snapshot's may be older): a budget
        // is no part of a revision, and serving and candidate revisions share one.
        let own_budget = match self.own(context, &id.name) {
            Some(live) => live
                .pointer("/spec/budget")
                .and_then(|budget| serde_json::from_value::<Budget>(budget.clone()).ok()),
            None => spec.budget,
        };
        let budget = Budget::effective(
            own_budget.as_ref(),
            &context.config.default_budget,
            &context.config.max_budget,
        );
        // Counted from the first work item on. A changed budget keeps what was owed but pays
        // it back at its own rate: the wait set for the old one no longer holds, and the next
        // work item sets the new one.
        let share = context.authority.share();
        if context.metrics.usage.budget(id, &budget, share) {
            context.queue.resume(id);
        }
        Ok(Controller {
            id: id.clone(),
            object: object.clone(),
            revision,
            rollout: spec.rollout.clone(),
            budget,
            share: None,
            reference: crate::runtime::report::events::reference(object),
            writer,
            reads,
            generation,
            version: fingerprint::controller_version(generation, &digests),
            planner,
            watches: match stale {
                Some(previous) => previous.watches.clone(),
                None => prepared.watches.into(),
            },
            hooks: prepared.hooks,
            health: prepared.health,
            resync_period: spec.resync_period,
            event_reasons: spec.compatibility.event_reasons,
            sources,
            credentials: watch,
            outcomes: previous.map(|p| p.outcomes.clone()).unwrap_or_default(),
            state: previous.map(|p| p.state.clone()).unwrap_or_default(),
            queued_all_at: previous.map_or_else(Instant::now, |p| p.queued_all_at),
            sync_requested: object::annotation(object, SYNC_REQUESTED_ANNOTATION)
                .map(str::to_string),
        })
    }
}

/// Checks at load what can be checked before any object is seen: that the account may list
/// every cluster-scoped type the controller acts on (namespaced types are checked per
/// namespace, when a work item hands their objects to a hook).
async fn check_static_reads(
    context: &Context,
    account: &crate::api::ServiceAccountRef,
    interest: &kind::Interest,
) -> Result<(), Problem> {
    for resource in interest.types.iter().filter(|t| !t.namespaced) {
        let scope = ReadScope::new(ReadVerb::List, resource, None);
        if let Err(refusal) = context.access.check(account, &scope).await {
            return Err(Problem::new(refusal.reason(), refusal).refusing(None));
        }
    }
    Ok(())
}
