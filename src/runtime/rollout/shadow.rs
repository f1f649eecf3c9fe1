//! A shadow candidate's evaluation: its hooks run over every object it acts on, and what it
//! would write is compared with the caches, writing nothing.

use crate::api::ShadowReport;
use crate::hooks::{HookCall, HookRunner};
use crate::object::ObjectKey;
use crate::plan::diff::{Summary, changes, describe};
use crate::plan::{Offline, Planner};
use crate::resources::ResourceType;
use crate::runtime::context::Context;
use crate::runtime::kind::{Controller, Kind};
use crate::store::ObjectStore;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// The changes and errors a shadow report shows, and how long each may be.
const SHADOW_EXAMPLES: usize = 5;
const EXAMPLE_BYTES: usize = 1500;

/// Evaluates a candidate on every object it acts on, as `metascript diff` does: its hooks run
/// (with its budgets and its account's reads) and each plan is compared with the caches;
/// nothing is written, no Event published, no read recorded. The calls count as the
/// controller's (its metrics, its `status.usage`, and so its budget: the next work item pays
/// for them), never recorded as test cases.
pub(super) async fn shadow_pass<K: Kind>(
    context: &Arc<Context>,
    candidate: &Arc<Controller<K>>,
) -> ShadowReport {
    let types = K::interest(&candidate.planner).types;
    let (context, candidate) = (context.clone(), candidate.clone());
    let evaluated = tokio::task::spawn_blocking(move || {
        // Each object decoded as its turn comes and dropped after: a pass over every Pod of a
        // cluster must not hold them all decoded at once (ten times their cached text).
        let subjects = types.iter().flat_map(|resource| {
            ObjectStore::list(&*context.informers, resource, None)
                .filter(|object| candidate.planner.acts_on(resource, object))
        });
        let by_kind: HashMap<(String, String), &ResourceType> = types
            .iter()
            .map(|t| ((t.api_version.clone(), t.kind.clone()), t))
            .collect();
        let lookup = |key: &ObjectKey| {
            let resource = by_kind.get(&(key.api_version.clone(), key.kind.clone()))?;
            context
                .informers
                .get(resource, key.namespace.as_deref(), &key.name)
        };
        let mut summary = Summary::default();
        let mut examples = Vec::new();
        let manager = candidate.id.field_manager();
        // The types the serving revision wrote are followed already; a candidate's new ones are
        // left to the API server until it serves.
        let schemas = context.schemas.shared();
        let observe = |call: &HookCall| context.metrics.observe_call(&candidate.id, call);
        for subject in subjects {
            let scope = candidate.scope(&context, &candidate.planner.reads());
            let runner = HookRunner {
                engine: &context.engine,
                hooks: &candidate.hooks,
                webhooks: &context.webhooks,
                observer: Some(&observe),
                scope: &scope,
            };
            let offline = Offline {
                runner: &runner,
                store: &*context.informers,
                resolver: &*context.discovery,
                schemas: &*schemas,
            };
            let (steps, _) = offline.sync(candidate.planner.as_ref(), &subject);
            for step in steps {
                let (found, error) = match &step.result {
                    Ok(plan) => {
                        let observed: HashMap<ObjectKey, Arc<Value>> = plan
                            .apply
                            .iter()
                            .map(ObjectKey::of)
                            .chain(plan.delete.iter().map(|d| d.key.clone()))
                            .filter_map(|key| Some((key.clone(), lookup(&key)?)))
                            .collect();
                        let found = changes(plan, &subject, &manager, |key| {
                            observed.get(key).map(|object| &**object)
                        });
                        (found, None)
                    }
                    Err(error) => (Vec::new(), Some(error.to_string())),
                };
                summary.add(&found, error.is_some());
                if examples.len() < SHADOW_EXAMPLES && (!found.is_empty() || error.is_some()) {
                    let mut example = format!("{}:\n", step.subject());
                    if let Some(error) = &error {
                        example.push_str(&format!("  the sync fails: {error}\n"));
                    }
                    for change in &found {
                        example.push_str(&describe(change));
                    }
                    // Shown in the controller's status: scrubbed like a failure's message.
                    let example = scope.secrets.scrub(&example).into_owned();
                    examples.push(truncate(example, EXAMPLE_BYTES));
                }
            }
        }
        (summary, examples)
    })
    .await;
    let (summary, examples) = evaluated.unwrap_or_else(|error| {
        let mut failed = Summary::default();
        failed.add(&[], true);
        (failed, vec![format!("the evaluation stopped: {error}")])
    });
    ShadowReport {
        evaluated_at: jiff::Timestamp::now().to_string(),
        evaluated: summary.evaluated as u64,
        would_create: summary.create as u64,
        would_update: summary.update as u64,
        would_delete: summary.delete as u64,
        would_claim: summary.claim as u64,
        errors: summary.errors as u64,
        examples,
    }
}

/// At most `bytes` of `text`, cut at a character boundary, saying it was cut.
fn truncate(mut text: String, bytes: usize) -> String {
    if text.len() <= bytes {
        return text;
    }
    let mut end = bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("…\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_examples_are_cut_at_a_character() {
        assert_eq!(truncate("short".into(), 10), "short");
        let cut = truncate("é".repeat(10), 5);
        assert_eq!(cut, "éé…\n");
    }
}
