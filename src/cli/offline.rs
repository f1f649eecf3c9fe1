//! An in-memory cluster read from manifests: the controllers, the CRDs that describe custom
//! types, and every other object. `render` syncs over it; `test` finds controllers in it.

use super::manifests::Document;
use crate::api::{DecoratorController, MapController};
use crate::object;
use crate::resources::{ResourceType, StaticResolver};
use serde_json::Value;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[error("{path} (document {index}): invalid {kind} {name:?}: {message}")]
pub struct InvalidController {
    pub path: PathBuf,
    pub index: usize,
    pub kind: String,
    pub name: String,
    pub message: String,
}

#[derive(Clone, Debug, Default)]
pub struct OfflineCluster {
    pub resolver: StaticResolver,
    pub decorators: Vec<DecoratorController>,
    pub maps: Vec<MapController>,
    /// Every other object (ConfigMaps included), namespaced ones defaulted to `default`.
    pub objects: Vec<Value>,
}

impl OfflineCluster {
    pub fn from_documents(documents: Vec<Document>) -> Result<OfflineCluster, InvalidController> {
        let mut cluster = OfflineCluster {
            resolver: StaticResolver::with_builtins(),
            ..OfflineCluster::default()
        };
        for document in &documents {
            if object::kind(&document.value) == "CustomResourceDefinition" {
                cluster.resolver.add_crd(&document.value);
            }
        }
        for document in documents {
            let value = document.value;
            let is_ours = object::api_version(&value).starts_with("metascript.dev/");
            let invalid = |error: serde_json::Error| InvalidController {
                path: document.path.clone(),
                index: document.index,
                kind: object::kind(&value).to_string(),
                name: object::name(&value).to_string(),
                message: error.to_string(),
            };
            match object::kind(&value) {
                "DecoratorController" if is_ours => cluster
                    .decorators
                    .push(serde_json::from_value(value.clone()).map_err(invalid)?),
                "MapController" if is_ours => cluster
                    .maps
                    .push(serde_json::from_value(value.clone()).map_err(invalid)?),
                "CustomResourceDefinition" => {}
                _ => {
                    let mut value = value;
                    default_namespace(&cluster.resolver, &mut value);
                    cluster.objects.push(value);
                }
            }
        }
        Ok(cluster)
    }
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
