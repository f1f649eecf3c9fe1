//! Where observed objects are read from: the operator's watch caches, `render`'s manifests, a
//! test case's `cluster`. Planning, reads and fingerprints read through this one trait.

use crate::object;
use crate::resources::ResourceType;
use crate::selector::LabelSelector;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Read access to observed objects.
pub trait ObjectStore {
    /// Objects of a type, in one namespace or in all.
    fn list(&self, resource: &ResourceType, namespace: Option<&str>) -> Listed;

    /// One object (`namespace` is ignored for cluster-scoped types). Stores with a key index
    /// override this.
    fn get(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        self.list(resource, resource.scope(namespace))
            .find(|o| object::name(o) == name)
    }

    /// Objects of a type without a controller (no owner reference with `controller: true`)
    /// whose labels `selector` matches, in one namespace or in all: what a parent with that
    /// selector may adopt. Stores with an index override this.
    fn orphans(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        selector: &LabelSelector,
    ) -> Vec<Arc<Value>> {
        self.list(resource, namespace)
            .filter(|object| {
                object::controller_ref(object).is_none() && selector.matches_labels_of(object)
            })
            .collect()
    }

    /// Objects of a type whose controller is `owner`. Stores with an owner index override this.
    fn controlled_by(&self, resource: &ResourceType, owner: &Value) -> Vec<Arc<Value>> {
        self.list(resource, resource.scope_of(owner))
            .filter(|child| object::is_controlled_by(child, owner))
            .collect()
    }
}

/// Objects listed from a store, decoded one at a time as they are taken: a cache that keeps its
/// objects as JSON text hands over a list of every object of a type without holding them all
/// decoded at once (about ten times their text each).
#[derive(Debug, Default)]
pub struct Listed {
    kept: std::vec::IntoIter<Kept>,
}

/// An object as a store keeps it.
#[derive(Clone, Debug)]
pub enum Kept {
    Decoded(Arc<Value>),
    /// JSON text serialized from a `Value`.
    Json(Arc<str>),
}

/// An object's head and status: what a planner that plans from the head reads, and what
/// routing a change reads.
pub const HEAD_AND_STATUS: &[&str] = &["apiVersion", "kind", "metadata", "status"];

impl Kept {
    /// The object. JSON text comes from serializing a `Value` no deeper than a watch reads
    /// (`object::MAX_WATCHED_DEPTH`), so it reads back as that very value (floats bit for
    /// bit too: serde_json's `float_roundtrip`).
    pub fn decoded(self) -> Arc<Value> {
        match self {
            Kept::Decoded(value) => value,
            Kept::Json(json) => Arc::new(
                serde_json::from_str(&json)
                    .expect("JSON serialized from a Value within the depth limit reads back"),
            ),
        }
    }

    /// Its `apiVersion`, `kind` and `metadata` (an object decoded already is handed over
    /// whole). From text the rest is passed over without being built.
    pub fn head(self) -> Arc<Value> {
        self.only(&["apiVersion", "kind", "metadata"])
    }

    /// Only the object's top-level `fields` (an object decoded already is handed over whole).
    /// From text the others are passed over without being built.
    pub fn only(self, fields: &[&str]) -> Arc<Value> {
        match self {
            Kept::Decoded(value) => value,
            Kept::Json(json) => {
                let mut deserializer = serde_json::Deserializer::from_str(&json);
                let only = Fields(fields)
                    .deserialize(&mut deserializer)
                    .expect("JSON serialized from a Value within the depth limit reads back");
                Arc::new(Value::Object(only))
            }
        }
    }
}

/// Some of an object's top-level fields, the others passed over.
struct Fields<'a>(&'a [&'a str]);

impl<'de> DeserializeSeed<'de> for Fields<'_> {
    type Value = Map<String, Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Fields<'_> {
    type Value = Map<String, Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut kept = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if self.0.contains(&key.as_str()) {
                let value = map.next_value()?;
                kept.insert(key, value);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(kept)
    }
}

impl Listed {
    pub fn new(kept: Vec<Kept>) -> Listed {
        Listed {
            kept: kept.into_iter(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.kept.len() == 0
    }
}

impl From<Vec<Arc<Value>>> for Listed {
    fn from(objects: Vec<Arc<Value>>) -> Listed {
        Listed::new(objects.into_iter().map(Kept::Decoded).collect())
    }
}

impl FromIterator<Arc<Value>> for Listed {
    fn from_iter<I: IntoIterator<Item = Arc<Value>>>(objects: I) -> Listed {
        Listed::new(objects.into_iter().map(Kept::Decoded).collect())
    }
}

impl Iterator for Listed {
    type Item = Arc<Value>;

    fn next(&mut self) -> Option<Arc<Value>> {
        self.kept.next().map(Kept::decoded)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.kept.size_hint()
    }
}

impl ExactSizeIterator for Listed {}

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
    fn list(&self, resource: &ResourceType, namespace: Option<&str>) -> Listed {
        self.objects
            .values()
            .filter(|o| resource.describes(o))
            .filter(|o| namespace.is_none() || resource.scope_of(o) == namespace)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "n", "labels": {"app": "x"}, "resourceVersion": "7"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}
        })
    }

    #[test]
    fn a_head_from_text_is_the_object_without_its_body() {
        let text: Arc<str> = pod().to_string().into();
        let head = Kept::Json(text).head();
        let mut expected = pod();
        let fields = expected.as_object_mut().unwrap();
        fields.remove("spec");
        fields.remove("status");
        assert_eq!(*head, expected);
    }

    #[test]
    fn a_head_of_a_decoded_object_is_the_whole_object() {
        let decoded = Arc::new(pod());
        assert!(Arc::ptr_eq(
            &Kept::Decoded(decoded.clone()).head(),
            &decoded
        ));
    }
}
