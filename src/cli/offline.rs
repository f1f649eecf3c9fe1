//! An in-memory cluster read from manifests: the controllers, the CRDs that describe custom
//! types, and every other object. `render` syncs over it; `test` finds controllers in it.

use super::manifests::Document;
use crate::kinds::{self, ControllerKind, ParsedController};
use crate::object;
use crate::resources::{ResourceType, StaticResolver};
use crate::schema::Schemas;
use crate::store::ObjectStore;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
#[error("{path} (document {index}): invalid {kind} {name:?}: {message}")]
pub(super) struct InvalidController {
    pub path: PathBuf,
    pub index: usize,
    pub kind: String,
    pub name: String,
    pub message: String,
}

/// A controller read from a manifest, with its kind.
pub(super) struct OfflineController {
    pub kind: &'static dyn ControllerKind,
    pub controller: Box<dyn ParsedController>,
    /// The controller object as read (its metadata, for `explain`).
    pub object: Value,
}

impl OfflineController {
    /// `DecoratorController/<name>`, as output names it.
    pub(super) fn label(&self) -> String {
        format!(
            "{}/{}",
            self.kind.name().object_kind(),
            self.controller.name()
        )
    }

    /// What to warn about before running it: child types left to `OnDelete` by default, whose
    /// children a changed hook output never reaches.
    pub(super) fn warnings(&self) -> Vec<String> {
        self.controller
            .spec()
            .on_delete_by_default
            .into_iter()
            .map(|path| {
                format!(
                    "{}: {path}: {}",
                    self.label(),
                    crate::validate::ON_DELETE_BY_DEFAULT
                )
            })
            .collect()
    }
}

#[derive(Default)]
pub(super) struct OfflineCluster {
    pub resolver: StaticResolver,
    /// The built-in types' schemas and those of the CRDs given: what outputs are checked
    /// against.
    pub schemas: Schemas,
    /// The controllers, in the order given.
    pub controllers: Vec<OfflineController>,
    /// Every other object (ConfigMaps included), namespaced ones defaulted to `default`.
    pub objects: Vec<Value>,
}

impl OfflineCluster {
    pub(super) fn from_documents(
        documents: Vec<Document>,
    ) -> Result<OfflineCluster, InvalidController> {
        let (resolver, schemas) = given_types(&documents);
        let mut cluster = OfflineCluster {
            resolver,
            schemas,
            ..OfflineCluster::default()
        };
        for document in documents {
            let mut value = document.value;
            if let Some(kind) = kinds::of(&value) {
                let controller = kind.parse(&value).map_err(|error| InvalidController {
                    path: document.path.clone(),
                    index: document.index,
                    kind: object::kind(&value).to_string(),
                    name: object::name(&value).to_string(),
                    message: error.to_string(),
                })?;
                cluster.controllers.push(OfflineController {
                    kind,
                    controller,
                    object: value,
                });
            } else if object::kind(&value) != "CustomResourceDefinition" {
                default_namespace(&cluster.resolver, &mut value);
                cluster.objects.push(value);
            }
        }
        // Kind by kind, as `render` prints them; each kind's in the order given.
        cluster.controllers.sort_by_key(|c| {
            kinds::ALL
                .iter()
                .position(|kind| kind.name() == c.kind.name())
        });
        Ok(cluster)
    }

    /// The controllers whose name is `name` (every one when `None`).
    pub(super) fn named<'a>(
        &'a self,
        name: Option<&'a str>,
    ) -> impl Iterator<Item = &'a OfflineController> {
        self.controllers
            .iter()
            .filter(move |c| name.is_none_or(|wanted| c.controller.name() == wanted))
    }
}

/// The manifests' objects, as hooks and planners see them.
impl ObjectStore for OfflineCluster {
    fn list(&self, resource: &ResourceType, namespace: Option<&str>) -> crate::store::Listed {
        self.objects
            .iter()
            .filter(|o| resource.describes(o))
            .filter(|o| namespace.is_none() || object::namespace(o) == namespace)
            .map(|o| Arc::new(o.clone()))
            .collect()
    }
}

/// The built-in types and those of the CRDs among `documents`: what they resolve to, and the
/// schemas outputs of them are checked against.
pub(super) fn given_types(documents: &[Document]) -> (StaticResolver, Schemas) {
    let mut resolver = StaticResolver::with_builtins();
    let schemas = Schemas::with_builtins();
    for document in documents {
        if object::kind(&document.value) == "CustomResourceDefinition" {
            resolver.add_crd(&document.value);
            schemas.add_crd(&document.value);
        }
    }
    (resolver, schemas)
}

/// Like `kubectl apply`, a namespaced object without a namespace lands in `default`.
fn default_namespace(resolver: &StaticResolver, value: &mut Value) {
    if object::namespace(value).is_some() {
        return;
    }
    let namespaced = find_type(resolver, value).is_some_and(|resource| resource.namespaced);
    if namespaced && let Some(metadata) = object::metadata_mut(value) {
        metadata.insert("namespace".into(), "default".into());
    }
}

/// The resolved type of an object, found by kind among the types the resolver knows.
fn find_type(resolver: &StaticResolver, value: &Value) -> Option<ResourceType> {
    resolver.find_kind(object::api_version(value), object::kind(value))
}
