//! Decoding what the API server sends, into no more than the operator keeps: a watched object
//! straight into the JSON hooks see (without `managedFields`), a write's answer into the
//! resourceVersion it produced. Through `DynamicObject` a watched object went via a buffered
//! copy, a typed `ObjectMeta` and a second serialization of that metadata, and a write's answer
//! was decoded whole to be dropped; at 10,000 map pairs that was about a tenth of the operator's
//! CPU.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// An object from a watch or list, as the caches hold it. `object` is the whole object the
/// server sent, but for `metadata.managedFields` and metadata fields sent as `null` (as
/// `ObjectMeta` dropped them). `metadata` holds only the resourceVersion, what kube's watcher
/// reads to resume: `Resource::meta()` says nothing else (no name, no labels), so read those
/// from the JSON.
#[derive(Clone, Debug)]
pub struct WatchedObject {
    metadata: ObjectMeta,
    object: Map<String, Value>,
}

impl WatchedObject {
    /// The object, with `apiVersion` and `kind` set from `api` where the server left them out
    /// (list items come without them).
    pub fn into_value(self, api: &ApiResource) -> Value {
        let mut object = self.object;
        object
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        for (field, value) in [("apiVersion", &api.api_version), ("kind", &api.kind)] {
            let present = object
                .get(field)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
            if !present {
                object.insert(field.into(), value.as_str().into());
            }
        }
        Value::Object(object)
    }
}

impl<'de> Deserialize<'de> for WatchedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let object = deserializer.deserialize_map(ObjectVisitor {
            skip_managed: false,
        })?;
        let resource_version = object
            .get("metadata")
            .and_then(|metadata| metadata.get("resourceVersion"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(WatchedObject {
            metadata: ObjectMeta {
                resource_version,
                ..ObjectMeta::default()
            },
            object,
        })
    }
}

/// Builds a JSON object; at the top level its `metadata` is built by a visitor that skips
/// `managedFields` without building it.
struct ObjectVisitor {
    skip_managed: bool,
}

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Map<String, Value>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if self.skip_managed && key == "managedFields" {
                access.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = if !self.skip_managed && key == "metadata" {
                Value::Object(access.next_value::<Metadata>()?.0)
            } else {
                access.next_value::<Value>()?
            };
            if self.skip_managed && value.is_null() {
                continue;
            }
            object.insert(key, value);
        }
        Ok(object)
    }
}

struct Metadata(Map<String, Value>);

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_map(ObjectVisitor { skip_managed: true })
            .map(Metadata)
    }
}

/// A written object as far as the operator needs it: metadata holding only `resourceVersion`.
#[derive(Clone, Debug, Deserialize)]
pub struct WrittenVersion {
    #[serde(deserialize_with = "resource_version_only")]
    metadata: ObjectMeta,
}

impl WrittenVersion {
    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

fn resource_version_only<'de, D: Deserializer<'de>>(metadata: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    struct VersionOnly {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    let VersionOnly { resource_version } = VersionOnly::deserialize(metadata)?;
    Ok(ObjectMeta {
        resource_version,
        ..ObjectMeta::default()
    })
}

/// Both are addressed like a `DynamicObject`: by the `ApiResource` of their type.
macro_rules! addressed_like_dynamic_objects {
    ($($answer:ty),*) => {$(
        impl Resource for $answer {
            type DynamicType = ApiResource;
            type Scope = DynamicResourceScope;

            fn kind(resource: &ApiResource) -> std::borrow::Cow<'_, str> {
                resource.kind.as_str().into()
            }

            fn group(resource: &ApiResource) -> std::borrow::Cow<'_, str> {
                resource.group.as_str().into()
            }

            fn version(resource: &ApiResource) -> std::borrow::Cow<'_, str> {
                resource.version.as_str().into()
            }

            fn api_version(resource: &ApiResource) -> std::borrow::Cow<'_, str> {
                resource.api_version.as_str().into()
            }

            fn plural(resource: &ApiResource) -> std::borrow::Cow<'_, str> {
                resource.plural.as_str().into()
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    )*};
}

addressed_like_dynamic_objects!(WatchedObject, WrittenVersion);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ANSWER: &str = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a",
        "namespace":"n","uid":"u","resourceVersion":"42","labels":{"x":"y"},
        "managedFields":[{"manager":"m","operation":"Apply","fieldsV1":{"f:data":{}}}]},
        "data":{"k":"v","managedFields":"data keeps its own"}}"#;

    fn configmaps() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        }
    }

    #[test]
    fn a_watched_object_keeps_all_but_managed_fields() {
        let watched: WatchedObject = serde_json::from_str(ANSWER).unwrap();
        assert_eq!(watched.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            watched.into_value(&configmaps()),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a", "namespace": "n", "uid": "u",
                                "resourceVersion": "42", "labels": {"x": "y"}},
                   "data": {"k": "v", "managedFields": "data keeps its own"}})
        );
    }

    #[test]
    fn metadata_fields_sent_as_null_are_left_out_and_missing_metadata_is_empty() {
        let item = r#"{"metadata":{"name":"a","labels":null,"creationTimestamp":null},
            "spec":{"x":null}}"#;
        let watched: WatchedObject = serde_json::from_str(item).unwrap();
        assert_eq!(
            watched.into_value(&configmaps()),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a"}, "spec": {"x": null}})
        );
        let watched: WatchedObject = serde_json::from_str(r#"{"data":{}}"#).unwrap();
        assert_eq!(watched.into_value(&configmaps())["metadata"], json!({}));
    }

    #[test]
    fn watch_events_and_list_pages_decode_as_kube_reads_them() {
        let event = format!(r#"{{"type":"MODIFIED","object":{ANSWER}}}"#);
        let kube::core::WatchEvent::Modified(watched) =
            serde_json::from_str::<kube::core::WatchEvent<WatchedObject>>(&event).unwrap()
        else {
            panic!("a MODIFIED event");
        };
        assert_eq!(watched.metadata.resource_version.as_deref(), Some("42"));
        let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1",
            "metadata":{"resourceVersion":"43"}}}"#;
        assert!(matches!(
            serde_json::from_str::<kube::core::WatchEvent<WatchedObject>>(bookmark).unwrap(),
            kube::core::WatchEvent::Bookmark(b) if b.metadata.resource_version == "43"
        ));
        let page = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"44"},
            "items":[{"metadata":{"name":"a","resourceVersion":"40"}},{"metadata":{"name":"b"}}]}"#;
        let list: kube::core::ObjectList<WatchedObject> = serde_json::from_str(page).unwrap();
        let names: Vec<Value> = list
            .items
            .into_iter()
            .map(|item| item.into_value(&configmaps())["metadata"]["name"].clone())
            .collect();
        assert_eq!(names, [json!("a"), json!("b")]);
    }

    #[test]
    fn list_items_get_their_type() {
        let item = r#"{"metadata":{"name":"a","namespace":"ns"},"data":{"k":"v"}}"#;
        let watched: WatchedObject = serde_json::from_str(item).unwrap();
        assert_eq!(watched.metadata.resource_version, None);
        assert_eq!(
            watched.into_value(&configmaps()),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}})
        );
    }

    #[test]
    fn a_written_version_keeps_only_the_resource_version() {
        let written: WrittenVersion = serde_json::from_str(ANSWER).unwrap();
        assert_eq!(written.resource_version(), Some("42"));
        assert_eq!(written.metadata.name, None);
        assert!(written.metadata.managed_fields.is_none());
        let written: WrittenVersion = serde_json::from_str(r#"{"metadata":{}}"#).unwrap();
        assert_eq!(written.resource_version(), None);
    }
}
