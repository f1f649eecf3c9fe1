//! The kinds of controller, each in its own folder, and the one place that lists them.
//!
//! A kind is its API type and hooks, its pure planner, its sync, its face offline
//! ([`crate::plan::Planner`]) and its face in the operator ([`crate::runtime::kind::Kind`]).
//! Everything else reaches the kinds through [`ALL`] and [`ControllerKind`]: `render`,
//! `explain`, `metascript test`, `validate`, admission, the CRDs, editor definitions and the
//! operator. Adding a kind is a new folder, a line in [`ALL`], its CRD in `crds/` and its docs.

pub mod composite;
mod crds;
pub mod decorator;
pub mod map;
mod one_object;

pub use crds::{all_crds, crds_yaml, json_schema, json_schema_string};

use crate::api::{ControllerObject, ControllerSpec, ControllerStatus, HookKind, KindName};
use crate::object;
use crate::plan::Planner;
use crate::resources::{ResolveError, ResourceResolver};
use crate::runtime::KindEntry;
use crate::runtime::kind::Kind;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;
use std::marker::PhantomData;

/// Every kind, in the order `render`, the CRDs and the definitions list them.
pub static ALL: &[&dyn ControllerKind] = &[
    &Registered::<decorator::DecoratorKind>(PhantomData),
    &Registered::<map::MapKind>(PhantomData),
    &Registered::<composite::CompositeKind>(PhantomData),
];

/// What the generic code knows of a kind of controller.
pub trait ControllerKind: Sync {
    fn name(&self) -> KindName;

    /// Its CustomResourceDefinition.
    fn crd(&self) -> CustomResourceDefinition;

    /// Reads a controller object of this kind; the error names the field.
    fn parse(&self, object: &Value) -> Result<Box<dyn ParsedController>, ParseError>;

    /// The kind as the operator runs it.
    fn runtime(&self) -> KindEntry;
}

/// A controller object of some kind, read.
pub trait ParsedController: Send + Sync {
    fn name(&self) -> String;

    /// What loading reads of it: the types it names, its hooks, libraries and tests.
    fn spec(&self) -> ControllerSpec;

    /// Its planner, once the types it names resolve.
    fn planner(&self, resolver: &dyn ResourceResolver) -> Result<Box<dyn Planner>, ResolveError>;

    /// The status the operator last wrote on it.
    fn status(&self) -> Option<&ControllerStatus>;

    /// The object as read: what a field the kind does not know leaves out.
    fn to_json(&self) -> Value;
}

/// A controller object that cannot be read as its kind.
#[derive(Debug, thiserror::Error)]
#[error("{}{message}", if path == "." { String::new() } else { format!("{path}: ") })]
pub struct ParseError {
    /// Where in the object, e.g. `spec.hooks.sync.script`.
    pub path: String,
    pub message: String,
}

/// The kind of a controller object, when it is one of ours.
pub fn of(object: &Value) -> Option<&'static dyn ControllerKind> {
    if object::api_version(object) != crate::api::API_VERSION {
        return None;
    }
    ALL.iter()
        .copied()
        .find(|kind| kind.name().object_kind() == object::kind(object))
}

/// The kind with this short name (`decorator`) or Kubernetes kind (`DecoratorController`).
pub fn named(name: &str) -> Option<&'static dyn ControllerKind> {
    ALL.iter()
        .copied()
        .find(|kind| kind.name().as_str() == name || kind.name().object_kind() == name)
}

/// The hooks of every kind.
pub fn hooks() -> Vec<HookKind> {
    ALL.iter()
        .flat_map(|kind| kind.name().hooks().iter().copied())
        .collect()
}

/// Every kind, as the operator starts them.
pub fn runtime() -> Vec<KindEntry> {
    ALL.iter().map(|kind| kind.runtime()).collect()
}

/// A kind registered through its runtime face, which names its API type and planner.
struct Registered<K>(PhantomData<fn() -> K>);

impl<K: Kind> ControllerKind for Registered<K> {
    fn name(&self) -> KindName {
        <K::Object as ControllerObject>::KIND
    }

    fn crd(&self) -> CustomResourceDefinition {
        <K::Object as kube::CustomResourceExt>::crd()
    }

    fn parse(&self, object: &Value) -> Result<Box<dyn ParsedController>, ParseError> {
        let parsed: K::Object =
            serde_path_to_error::deserialize(object).map_err(|error| ParseError {
                path: error.path().to_string(),
                message: error.inner().to_string(),
            })?;
        Ok(Box::new(Parsed::<K> {
            status: object
                .get("status")
                .and_then(|status| serde_json::from_value(status.clone()).ok()),
            object: parsed,
        }))
    }

    fn runtime(&self) -> KindEntry {
        KindEntry::of::<K>()
    }
}

struct Parsed<K: Kind> {
    object: K::Object,
    status: Option<ControllerStatus>,
}

impl<K: Kind> ParsedController for Parsed<K> {
    fn name(&self) -> String {
        self.object.name()
    }

    fn spec(&self) -> ControllerSpec {
        self.object.spec()
    }

    fn planner(&self, resolver: &dyn ResourceResolver) -> Result<Box<dyn Planner>, ResolveError> {
        Ok(Box::new(K::build(&self.object, resolver)?))
    }

    fn status(&self) -> Option<&ControllerStatus> {
        self.status.as_ref()
    }

    fn to_json(&self) -> Value {
        serde_json::to_value(&self.object).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_distinct_names_and_hooks_of_their_own() {
        let mut names = std::collections::BTreeSet::new();
        for kind in ALL {
            let name = kind.name();
            assert!(names.insert(name.as_str()), "{name} is registered twice");
            assert!(!name.hooks().is_empty(), "{name} has no hooks");
            for hook in name.hooks() {
                assert_eq!(hook.kind(), name, "{hook:?} names another kind");
                assert_eq!(name.hook(hook.as_str()), Some(*hook));
            }
            assert_eq!(kind.crd().spec.names.kind, name.object_kind());
            assert_eq!(kind.crd().spec.names.plural, name.plural());
        }
    }

    /// The operator must watch and write every kind, and admission must check it: a kind the
    /// shipped manifests forget would install and silently never run.
    #[test]
    fn the_shipped_manifests_name_every_kind() {
        let rbac = include_str!("../../deploy/rbac-operator.yaml");
        let webhook = include_str!("../../deploy/webhook.yaml");
        for kind in ALL {
            let plural = kind.name().plural();
            for (file, text, needed) in [
                ("deploy/rbac-operator.yaml", rbac, plural.to_string()),
                (
                    "deploy/rbac-operator.yaml",
                    rbac,
                    format!("{plural}/status"),
                ),
                ("deploy/webhook.yaml", webhook, plural.to_string()),
            ] {
                let listed = text
                    .lines()
                    .filter(|line| line.trim_start().starts_with("resources:"))
                    .any(|line| {
                        line.split(['[', ']', ','])
                            .any(|item| item.trim() == needed)
                    });
                assert!(listed, "{file} does not list {needed}");
            }
        }
    }

    #[test]
    fn a_controller_object_finds_its_kind() {
        let object = serde_json::json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "MapController",
            "metadata": {"name": "m"}
        });
        assert_eq!(of(&object).map(|k| k.name()), Some(map::KIND));
        let foreign = serde_json::json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "MapController"});
        assert!(of(&foreign).is_none());
        assert_eq!(named("decorator").map(|k| k.name()), Some(decorator::KIND));
        assert_eq!(
            named("DecoratorController").map(|k| k.name()),
            Some(decorator::KIND)
        );
    }
}
