//! One target's sync, start to end: its customize hook (the related rules), their types, then
//! sync or finalize over what a store holds, and the plan. The operator runs it over its watch
//! caches (on a blocking thread), `render` and `explain` over files and a cluster's objects, so
//! all three do exactly the same thing.

use super::api::{CUSTOMIZE, FINALIZE, SYNC};
use super::plan::{Decorator, Observed, Phase, RelatedRule};
use crate::api::HookKind;
use crate::hooks::{HookCode, HookRunner};
use crate::plan::{Plan, SyncError, stamp_provenance};
use crate::reads::{ReadScope, ReadVerb};
use crate::resources::{ResourceResolver, ResourceType};
use crate::store::ObjectStore;
use serde_json::Value;
use std::sync::Arc;

/// The related resource rules a target's customize hook returned, each with its resolved type.
pub type RelatedRules = Vec<(RelatedRule, ResourceType)>;

/// Where a target's sync gets the types of its customize hook's rules, and the rules
/// themselves when an earlier answer still holds.
pub trait Related {
    /// The rules a customize call returned for the target as it is now, if kept.
    fn cached(&self) -> Option<Vec<RelatedRule>> {
        None
    }

    /// Keeps a customize call's rules for later syncs of the target as it is now.
    fn keep(&self, _rules: &[RelatedRule]) {}

    /// The rules' types (the operator also starts watching them).
    fn resolve(&self, rules: Vec<RelatedRule>) -> Result<RelatedRules, SyncError>;
}

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
        true => related.resolve(customize(decorator, runner, target, related)?)?,
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
    stamp_provenance(&mut plan, runner, hook, target);
    Ok(Some(Synced {
        hook: Some(hook),
        plan,
    }))
}

/// The related resource rules of a target: kept from an earlier call, or the customize hook's
/// answer, validated. An answer is kept when it followed from the target alone: the call read
/// nothing else (no clock, randomness or `get`/`list`). A webhook's answer is kept too, as
/// Metacontroller keeps it: until the target or the controller changes.
fn customize(
    decorator: &Decorator,
    runner: &HookRunner,
    target: &Value,
    related: &dyn Related,
) -> Result<Vec<RelatedRule>, SyncError> {
    if let Some(rules) = related.cached() {
        return Ok(rules);
    }
    let reads_before = runner.scope.reads.as_ref().map(|r| r.count());
    let response = runner.call(CUSTOMIZE, &decorator.customize_request(target))?;
    let rules = decorator
        .related_rules(&response, runner.hooks.version(CUSTOMIZE))
        .map_err(|error| runner.hooks.invalid_response(CUSTOMIZE, error))?;
    let webhook = runner
        .hooks
        .get(CUSTOMIZE)
        .is_some_and(|hook| matches!(hook.code, HookCode::Webhook(_)));
    let pure = match runner.scope.purity.impurity() {
        None => true,
        Some(_) => webhook,
    };
    let read_nothing = runner.scope.reads.as_ref().map(|r| r.count()) == reads_before;
    if pure && read_nothing {
        related.keep(&rules);
    }
    Ok(rules)
}

/// Related rules offline: their types resolve without being watched, nothing is kept.
pub struct Unwatched<'a> {
    pub decorator: &'a Decorator,
    pub resolver: &'a dyn ResourceResolver,
}

impl Related for Unwatched<'_> {
    fn resolve(&self, rules: Vec<RelatedRule>) -> Result<RelatedRules, SyncError> {
        resolve_related(self.decorator, self.resolver, rules)
    }
}

/// Resolves the type of each related resource rule (offline: no watch to start).
pub fn resolve_related(
    decorator: &Decorator,
    resolver: &dyn ResourceResolver,
    rules: Vec<RelatedRule>,
) -> Result<RelatedRules, SyncError> {
    rules
        .into_iter()
        .map(|rule| {
            let resource =
                resolver
                    .resolve(&rule.resource_ref())
                    .map_err(|source| SyncError::Resolve {
                        controller: decorator.name.clone(),
                        source,
                    })?;
            Ok((rule, resource))
        })
        .collect()
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

/// The related objects a target's rules select.
pub fn related_objects(
    store: &dyn ObjectStore,
    target: &Value,
    rules: &[(RelatedRule, ResourceType)],
) -> Vec<Arc<Value>> {
    let mut related = Vec::new();
    for (rule, resource) in rules {
        related.extend(
            store
                .list(resource, resource.scope(rule.namespace_for(target)))
                .into_iter()
                .filter(|candidate| rule.selects(target, candidate)),
        );
    }
    related
}

/// What a target's hook request shows besides related objects, as reads its controller's
/// account must be allowed: the target (`get` in its namespace) and its attachments (`list` of
/// each type where the target's children live: its namespace, or every namespace for a
/// cluster-scoped target).
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

/// The reads the related rules of a target make: `get` where a rule names its objects, `list`
/// otherwise, in the rule's namespace, or in every namespace when it names none (hook version
/// v2, or a cluster-scoped target): a selection across namespaces needs the account to read
/// the type in all of them, as it would to list them itself.
pub fn related_scopes(rules: &[(RelatedRule, ResourceType)], target: &Value) -> Vec<ReadScope> {
    rules
        .iter()
        .map(|(rule, resource)| {
            let verb = match rule.names.is_empty() {
                true => ReadVerb::List,
                false => ReadVerb::Get,
            };
            ReadScope::new(verb, resource, rule.namespace_for(target))
        })
        .collect()
}
