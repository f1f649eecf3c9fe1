//! Related objects, as a `customize` hook selects them (Metacontroller's customize hook): the
//! request, the rules a response returns (kept while they hold), and the objects those rules
//! select from a store. Shared by every kind with a customize hook (decorator, composite).

use super::SyncError;
use super::response::{self, InvalidResponse};
use crate::api::{HookKind, HookVersion, ResourceRef};
use crate::hooks::{HookCode, HookRunner};
use crate::object;
use crate::resources::{ResourceResolver, ResourceType};
use crate::selector::LabelSelector;
use crate::store::ObjectStore;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// One entry of a customize response's `relatedResources`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RelatedRule {
    pub api_version: String,
    pub resource: String,
    #[serde(default)]
    pub label_selector: Option<LabelSelector>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub names: Vec<String>,
    /// The version of the customize hook that asked for it, which decides where an unset
    /// `namespace` looks.
    #[serde(skip)]
    pub version: HookVersion,
}

/// The related resource rules an object's customize hook returned, each with its resolved type.
pub(crate) type RelatedRules = Vec<(RelatedRule, ResourceType)>;

impl RelatedRule {
    pub(crate) fn resource_ref(&self) -> ResourceRef {
        ResourceRef {
            api_version: self.api_version.clone(),
            resource: self.resource.clone(),
        }
    }

    /// The namespace this rule looks in: the one given, else (`v1`) a namespaced object's own,
    /// else all.
    pub(crate) fn namespace_for<'a>(&'a self, target: &'a Value) -> Option<&'a str> {
        let given = self.namespace.as_deref().filter(|ns| !ns.is_empty());
        match self.version {
            HookVersion::V1 => given.or_else(|| object::namespace(target)),
            HookVersion::V2 => given,
        }
    }

    /// Whether `candidate` (of this rule's type) is related to `target` under this rule.
    pub(crate) fn selects(&self, target: &Value, candidate: &Value) -> bool {
        let namespace_ok = match (self.namespace_for(target), object::namespace(candidate)) {
            (Some(wanted), Some(actual)) => wanted == actual,
            (Some(_), None) => true, // cluster-scoped related objects have no namespace
            (None, _) => true,
        };
        namespace_ok
            && (self.names.is_empty() || self.names.iter().any(|n| n == object::name(candidate)))
            && self
                .label_selector
                .as_ref()
                .is_none_or(|selector| selector.matches_labels_of(candidate))
    }
}

/// The customize hook request: the controller and the object (as `parent`).
pub(crate) fn customize_request(controller: &Value, target: &Value) -> Value {
    object::fields([
        ("controller", controller.clone()),
        ("parent", target.clone()),
    ])
}

/// Reads a customize response: the related resource rules it asks for, read the way the
/// customize hook's `version` means them.
pub(crate) fn related_rules(
    response: &Value,
    version: HookVersion,
) -> Result<Vec<RelatedRule>, InvalidResponse> {
    let fields = response::fields(response)?;
    response::list(fields, "relatedResources")?
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let mut rule: RelatedRule = serde_json::from_value(item.clone()).map_err(|error| {
                InvalidResponse::new(format!("relatedResources[{index}]"), error.to_string())
            })?;
            if rule.api_version.is_empty() || rule.resource.is_empty() {
                return Err(InvalidResponse::new(
                    format!("relatedResources[{index}]"),
                    "apiVersion and resource are required",
                ));
            }
            rule.version = version;
            Ok(rule)
        })
        .collect()
}

/// Where an object's sync gets the types of its customize hook's rules, and the rules
/// themselves when an earlier answer still holds.
pub(crate) trait Related {
    /// The rules a customize call returned for the object as it is now, if kept.
    fn cached(&self) -> Option<Vec<RelatedRule>> {
        None
    }

    /// Keeps a customize call's rules for later syncs of the object as it is now.
    fn keep(&self, _rules: &[RelatedRule]) {}

    /// The rules' types (the operator also starts watching them).
    fn resolve(&self, rules: Vec<RelatedRule>) -> Result<RelatedRules, SyncError>;
}

/// The related resource rules of an object: kept from an earlier call, or the customize hook's
/// answer to `request`, validated. An answer is kept when it followed from the object alone:
/// the call read nothing else (no clock, randomness or `get`/`list`). A webhook's answer is kept
/// too, as Metacontroller keeps it: until the object or the controller changes.
pub(crate) fn customize(
    runner: &HookRunner,
    hook: HookKind,
    request: &Value,
    related: &dyn Related,
) -> Result<Vec<RelatedRule>, SyncError> {
    if let Some(rules) = related.cached() {
        return Ok(rules);
    }
    let reads_before = runner.scope.reads.as_ref().map(|r| r.count());
    let response = runner.call(hook, request)?;
    let rules = related_rules(&response, runner.hooks.version(hook))
        .map_err(|error| runner.hooks.invalid_response(hook, error))?;
    let webhook = runner
        .hooks
        .get(hook)
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
pub(crate) struct Unwatched<'a> {
    /// The controller's name, for errors.
    pub controller: &'a str,
    pub resolver: &'a dyn ResourceResolver,
}

impl Related for Unwatched<'_> {
    fn resolve(&self, rules: Vec<RelatedRule>) -> Result<RelatedRules, SyncError> {
        resolve_related(self.controller, self.resolver, rules)
    }
}

/// Resolves the type of each related resource rule (offline: no watch to start).
pub(crate) fn resolve_related(
    controller: &str,
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
                        controller: controller.to_string(),
                        source,
                    })?;
            Ok((rule, resource))
        })
        .collect()
}

/// The related objects an object's rules select.
pub(crate) fn related_objects(
    store: &dyn ObjectStore,
    target: &Value,
    rules: &[(RelatedRule, ResourceType)],
) -> Vec<Arc<Value>> {
    let mut related = Vec::new();
    for (rule, resource) in rules {
        related.extend(
            store
                .list(resource, resource.scope(rule.namespace_for(target)))
                .filter(|candidate| rule.selects(target, candidate)),
        );
    }
    related
}

/// The reads the related rules of an object make: `get` where a rule names its objects, `list`
/// otherwise, in the rule's namespace, or in every namespace when it names none (hook version
/// v2, or a cluster-scoped object): a selection across namespaces needs the account to read
/// the type in all of them, as it would to list them itself.
pub(crate) fn related_scopes(
    rules: &[(RelatedRule, ResourceType)],
    target: &Value,
) -> Vec<crate::reads::ReadScope> {
    use crate::reads::{ReadScope, ReadVerb};
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
