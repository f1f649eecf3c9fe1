//! Resource rules shared by both controller kinds: which types are watched, which objects of
//! them are selected, and how owned children are updated.

use crate::selector::{AnnotationSelector, LabelSelector};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A resource type named the way users write it: `apiVersion` plus lowercase plural `resource`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// `<group>/<version>`, or `<version>` for the core group (e.g. `v1`, `apps/v1`).
    pub api_version: String,
    /// The canonical lowercase plural name (e.g. `statefulsets`).
    pub resource: String,
}

/// Which objects of a type a DecoratorController targets.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRule {
    /// `<group>/<version>`, or `<version>` for the core group (e.g. `v1`, `apps/v1`).
    pub api_version: String,
    /// The canonical lowercase plural name (e.g. `statefulsets`).
    pub resource: String,
    /// Only objects whose labels match (every object of the type when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Only objects whose annotations match (every object of the type when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<AnnotationSelector>,
    /// When true, an event that changes only `status` does not re-sync the object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_status_changes: bool,
}

impl ResourceRule {
    pub fn resource_ref(&self) -> ResourceRef {
        ResourceRef {
            api_version: self.api_version.clone(),
            resource: self.resource.clone(),
        }
    }

    /// Whether an object with these labels and annotations is a target of this rule.
    pub fn selects(
        &self,
        labels: &std::collections::BTreeMap<String, String>,
        annotations: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        self.label_selector
            .as_ref()
            .is_none_or(|selector| selector.matches(labels))
            && self
                .annotation_selector
                .as_ref()
                .is_none_or(|selector| selector.matches(annotations))
    }
}

/// A type of object a controller creates and owns (attachments, outputs).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChildRule {
    /// `<group>/<version>`, or `<version>` for the core group (e.g. `v1`, `apps/v1`).
    pub api_version: String,
    /// The canonical lowercase plural name (e.g. `services`).
    pub resource: String,
    /// How an existing child that differs from what the hook returns is updated (default
    /// `OnDelete`: left alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
}

impl ChildRule {
    pub fn resource_ref(&self) -> ResourceRef {
        ResourceRef {
            api_version: self.api_version.clone(),
            resource: self.resource.clone(),
        }
    }

    pub fn update_method(&self) -> UpdateMethod {
        self.update_strategy
            .as_ref()
            .map(|strategy| strategy.method)
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// `OnDelete` (default), `Recreate` or `InPlace`.
    #[serde(default)]
    pub method: UpdateMethod,
}

/// How an existing child that differs from the desired state is brought in line.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum UpdateMethod {
    /// Leave existing children alone; only missing ones are created.
    #[default]
    OnDelete,
    /// Delete a differing child; it is created again on the next sync.
    Recreate,
    /// Apply the desired state over the existing child.
    InPlace,
}
