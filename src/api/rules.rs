//! Resource rules shared by the kinds: how a type is named, and how owned children are updated.

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
    /// Which existing objects of a returned name the controller may take as its children
    /// (default `Orphans`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt: Option<AdoptPolicy>,
}

impl ChildRule {
    pub(crate) fn resource_ref(&self) -> ResourceRef {
        ResourceRef {
            api_version: self.api_version.clone(),
            resource: self.resource.clone(),
        }
    }

    pub(crate) fn update_method(&self) -> UpdateMethod {
        self.update_strategy
            .as_ref()
            .map(|strategy| strategy.method)
            .unwrap_or_default()
    }

    pub(crate) fn adopt_policy(&self) -> AdoptPolicy {
        self.adopt.unwrap_or_default()
    }
}

/// Which existing object a controller may make its child when a hook returns its name. The
/// default refuses to take over what someone else made: a parent deleted later would take the
/// object, and everything in it, with it.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum AdoptPolicy {
    /// Only objects this parent already controls.
    Never,
    /// Also orphans (no controller) that carry the labels the parent marks its children with:
    /// those it or another parent of the controller made, as Kubernetes controllers adopt what
    /// their selector matches.
    #[default]
    Orphans,
    /// Any object no other controller controls (Metacontroller's name-collision behaviour
    /// before it refused creates).
    Always,
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
