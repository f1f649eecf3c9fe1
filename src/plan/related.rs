//! Related objects, as a `customize` hook selects them (Metacontroller's customize hook): the
//! request, the rules a response returns, and the objects those rules select from a store.
//! Shared by every kind with a customize hook (decorator, composite).

use super::SyncError;
use super::response::{self, InvalidResponse};
use crate::api::ResourceRef;
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
}

/// The related resource rules an object's customize hook returned, each with its resolved type.
pub type RelatedRules = Vec<(RelatedRule, ResourceType)>;

impl RelatedRule {
    pub fn resource_ref(&self) -> ResourceRef {
        ResourceRef {
            api_version: self.api_version.clone(),
            resource: self.resource.clone(),
        }
    }

    /// The namespace this rule looks in: the one given, else a namespaced object's own, else
    /// all.
    pub fn namespace_for<'a>(&'a self, target: &'a Value) -> Option<&'a str> {
        self.namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())
            .or_else(|| object::namespace(target))
    }

    /// Whether `candidate` (of this rule's type) is related to `target` under this rule.
    pub fn selects(&self, target: &Value, candidate: &Value) -> bool {
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
                .is_none_or(|selector| selector.matches(&object::labels(candidate)))
    }
}

/// The customize hook request: the controller and the object (as `parent`).
pub fn customize_request(controller: &Value, target: &Value) -> Value {
    object::fields([
        ("controller", controller.clone()),
        ("parent", target.clone()),
    ])
}

/// Reads a customize response: the related resource rules it asks for.
pub fn related_rules(response: &Value) -> Result<Vec<RelatedRule>, InvalidResponse> {
    let fields = response::fields(response)?;
    response::list(fields, "relatedResources")?
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let rule: RelatedRule = serde_json::from_value(item.clone()).map_err(|error| {
                InvalidResponse::new(format!("relatedResources[{index}]"), error.to_string())
            })?;
            if rule.api_version.is_empty() || rule.resource.is_empty() {
                return Err(InvalidResponse::new(
                    format!("relatedResources[{index}]"),
                    "apiVersion and resource are required",
                ));
            }
            Ok(rule)
        })
        .collect()
}

/// Resolves the type of each related resource rule (offline: no watch to start).
pub fn resolve_related(
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
