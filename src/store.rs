//! Where observed objects are read from: the operator's watch caches, `render`'s manifests, a
//! test case's `cluster`. Planning, reads and fingerprints read through this one trait.

use crate::object;
use crate::resources::ResourceType;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Read access to observed objects.
pub trait ObjectStore {
    /// Objects of a type, in one namespace or in all.
    fn list(&self, resource: &ResourceType, namespace: Option<&str>) -> Vec<Arc<Value>>;

    /// One object (`namespace` is ignored for cluster-scoped types). Stores with a key index
    /// override this.
    fn get(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        self.list(resource, resource.scope(namespace))
            .into_iter()
            .find(|o| object::name(o) == name)
    }

    /// Objects of a type without a controller (no owner reference with `controller: true`), in
    /// one namespace or in all: what a parent may adopt. Stores with an index override this.
    fn orphans(&self, resource: &ResourceType, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.list(resource, namespace)
            .into_iter()
            .filter(|object| object::controller_ref(object).is_none())
            .collect()
    }

    /// Objects of a type whose controller is `owner`. Stores with an owner index override this.
    fn controlled_by(&self, resource: &ResourceType, owner: &Value) -> Vec<Arc<Value>> {
        self.list(resource, resource.scope_of(owner))
            .into_iter()
            .filter(|child| object::is_controlled_by(child, owner))
            .collect()
    }
}

/// A plain in-memory store (test cases' `cluster`).
#[derive(Debug, Default)]
pub(crate) struct MemoryStore {
    objects: BTreeMap<(String, String, String, String), Arc<Value>>,
}

impl MemoryStore {
    pub(crate) fn new(objects: impl IntoIterator<Item = Value>) -> MemoryStore {
        MemoryStore {
            objects: objects
                .into_iter()
                .map(|o| {
                    let key = (
                        object::api_version(&o).to_string(),
                        object::kind(&o).to_string(),
                        object::namespace(&o).unwrap_or_default().to_string(),
                        object::name(&o).to_string(),
                    );
                    (key, Arc::new(o))
                })
                .collect(),
        }
    }
}

impl ObjectStore for MemoryStore {
    fn list(&self, resource: &ResourceType, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.objects
            .values()
            .filter(|o| resource.describes(o))
            .filter(|o| namespace.is_none() || resource.scope_of(o) == namespace)
            .cloned()
            .collect()
    }
}
