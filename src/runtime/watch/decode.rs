//! Decoding what the API server sends, into no more than the operator keeps: a watched object
//! straight into the JSON hooks see (without `managedFields`), a write's answer into the
//! resourceVersion it produced. Through `DynamicObject` a watched object went via a buffered
//! copy, a typed `ObjectMeta` and a second serialization of that metadata, and a write's answer
//! was decoded whole to be dropped; at 10,000 map pairs that was about a tenth of the operator's
//! CPU.
//!
//! One object the operator cannot use must not stop its type: a list page or watch event is
//! one JSON document, and any error in it fails them all, for every controller watching the
//! type, again at every retry. The API server takes objects nested far deeper than serde_json
//! reads (127 levels; a custom resource's free-form fields may nest as deep as its author
//! likes), so an object's own nesting is cut at [`MAX_OBJECT_DEPTH`]: what lies below is skipped
//! (serde_json skips without recursing) and the object comes out [`Undecodable`], named, for the
//! cache to pass over. Reading without a limit instead (serde_json's `unbounded_depth` with
//! serde_stacker) would hand that depth to everything that recurses over an object after
//! (comparing, hashing, converting for a script, dropping), where a stack overflow aborts the
//! process. The rest of an object cannot fail its read: the API server checks `metadata`
//! against ObjectMeta and sends nothing but well-formed JSON with numbers a float can hold.

use crate::hooks::json::JsonRules;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// An object from a watch or list, as the caches hold it. `object` is the whole object the
/// server sent, but for `metadata.managedFields` and metadata fields sent as `null` (as
/// `ObjectMeta` dropped them). `metadata` holds only the resourceVersion, what kube's watcher
/// reads to resume: `Resource::meta()` says nothing else (no name, no labels), so read those
/// from the JSON.
#[derive(Clone, Debug)]
pub(crate) struct WatchedObject {
    metadata: ObjectMeta,
    object: Map<String, Value>,
    /// Why the object cannot be used, when it cannot: `object` then holds only its metadata.
    undecodable: Option<String>,
}

/// How deep an object's own JSON may nest (the object itself is the first level). serde_json
/// reads 127 levels counted from the top of the document, and a list item starts 3 levels
/// in (the list, its items, the item), a watch event's object 2: this leaves room for both.
pub(crate) const MAX_OBJECT_DEPTH: usize = crate::object::MAX_WATCHED_DEPTH;

/// A watched object the operator cannot use, named as far as its metadata could be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Undecodable {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
    pub reason: String,
}

impl WatchedObject {
    /// The object, with `apiVersion` and `kind` set from `api` where the server left them out
    /// (list items come without them); or why it cannot be used.
    pub(crate) fn decoded(self, api: &ApiResource) -> Result<Value, Undecodable> {
        if let Some(reason) = self.undecodable {
            let metadata = self.object.get("metadata");
            let read = |field: &str| {
                metadata
                    .and_then(|metadata| metadata.get(field))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            return Err(Undecodable {
                namespace: read("namespace"),
                name: read("name"),
                uid: read("uid"),
                reason,
            });
        }
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
        Ok(Value::Object(object))
    }
}

impl<'de> Deserialize<'de> for WatchedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let rules = JsonRules::skipping_below(MAX_OBJECT_DEPTH);
        let mut object = deserializer.deserialize_map(ObjectVisitor {
            skip_managed: false,
            rules: &rules,
            depth: 0,
        })?;
        let undecodable = rules.too_deep().then(|| {
            // Its name is all the cache needs of it.
            object.retain(|field, _| field == "metadata");
            format!(
                "its JSON nests deeper than {MAX_OBJECT_DEPTH} levels, more than the operator \
                 reads"
            )
        });
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
            undecodable,
        })
    }
}

/// Builds a JSON object `depth` levels down, its values by `rules`; at the top level its
/// `metadata` is built by a visitor that skips `managedFields` without building it.
struct ObjectVisitor<'a> {
    skip_managed: bool,
    rules: &'a JsonRules,
    depth: usize,
}

impl<'de> Visitor<'de> for ObjectVisitor<'_> {
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
                Value::Object(access.next_value_seed(Metadata(self.rules))?)
            } else {
                access.next_value_seed(self.rules.at(self.depth + 1))?
            };
            if self.skip_managed && value.is_null() {
                continue;
            }
            object.insert(key, value);
        }
        Ok(object)
    }
}

/// Reads an object's `metadata`, one level down.
struct Metadata<'a>(&'a JsonRules);

impl<'de> DeserializeSeed<'de> for Metadata<'_> {
    type Value = Map<String, Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(ObjectVisitor {
            skip_managed: true,
            rules: self.0,
            depth: 1,
        })
    }
}

/// A written object as far as the operator needs it: metadata holding only `resourceVersion`.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct WrittenVersion {
    #[serde(deserialize_with = "resource_version_only")]
    metadata: ObjectMeta,
}

impl WrittenVersion {
    pub(crate) fn resource_version(&self) -> Option<&str> {
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
            watched.decoded(&configmaps()).unwrap(),
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
            watched.decoded(&configmaps()).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a"}, "spec": {"x": null}})
        );
        let watched: WatchedObject = serde_json::from_str(r#"{"data":{}}"#).unwrap();
        assert_eq!(
            watched.decoded(&configmaps()).unwrap()["metadata"],
            json!({})
        );
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
            .map(|item| item.decoded(&configmaps()).unwrap()["metadata"]["name"].clone())
            .collect();
        assert_eq!(names, [json!("a"), json!("b")]);
    }

    #[test]
    fn list_items_get_their_type() {
        let item = r#"{"metadata":{"name":"a","namespace":"ns"},"data":{"k":"v"}}"#;
        let watched: WatchedObject = serde_json::from_str(item).unwrap();
        assert_eq!(watched.metadata.resource_version, None);
        assert_eq!(
            watched.decoded(&configmaps()).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}})
        );
    }

    /// An object `depth` levels deep: the object, its `spec`, then maps and arrays in turn.
    fn nested(name: &str, depth: usize) -> String {
        let levels = depth.saturating_sub(1);
        let open: String = (0..levels)
            .map(|l| if l % 2 == 0 { r#"{"a":"# } else { "[" })
            .collect();
        let close: String = (0..levels)
            .rev()
            .map(|l| if l % 2 == 0 { '}' } else { ']' })
            .collect();
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"7"}},"spec":{open}1{close}}}"#
        )
    }

    fn page(items: &[String]) -> String {
        format!(
            r#"{{"kind":"WidgetList","apiVersion":"v1","metadata":{{"resourceVersion":"9"}},"items":[{}]}}"#,
            items.join(",")
        )
    }

    fn read_page(page: &str) -> Vec<Result<Value, Undecodable>> {
        let list: kube::core::ObjectList<WatchedObject> = serde_json::from_str(page).unwrap();
        list.items
            .into_iter()
            .map(|item| item.decoded(&configmaps()))
            .collect()
    }

    #[test]
    fn an_object_nested_too_deep_is_named_undecodable_and_the_rest_of_its_list_reads() {
        let items = [nested("a", 3), nested("deep", 10_000), nested("c", 3)];
        let read = read_page(&page(&items));
        assert_eq!(read[0].as_ref().unwrap()["spec"], json!({"a": [1]}));
        assert_eq!(
            read[1],
            Err(Undecodable {
                namespace: Some("ns".into()),
                name: Some("deep".into()),
                uid: None,
                reason: "its JSON nests deeper than 100 levels, more than the operator reads"
                    .into(),
            })
        );
        assert_eq!(read[2].as_ref().unwrap()["metadata"]["name"], "c");
        // In a watch event, it keeps its resourceVersion, where kube's watcher resumes from.
        let event = format!(r#"{{"type":"MODIFIED","object":{}}}"#, items[1]);
        let kube::core::WatchEvent::Modified(watched) =
            serde_json::from_str::<kube::core::WatchEvent<WatchedObject>>(&event).unwrap()
        else {
            panic!("a MODIFIED event");
        };
        assert_eq!(watched.metadata.resource_version.as_deref(), Some("7"));
        assert!(watched.decoded(&configmaps()).is_err());
    }

    #[test]
    fn an_object_as_deep_as_the_limit_reads_in_a_list_and_in_a_watch_event() {
        let deepest = nested("deepest", MAX_OBJECT_DEPTH);
        let read = read_page(&page(std::slice::from_ref(&deepest)));
        assert!(read[0].is_ok(), "{:?}", read[0]);
        let event = format!(r#"{{"type":"ADDED","object":{deepest}}}"#);
        let kube::core::WatchEvent::Added(watched) =
            serde_json::from_str::<kube::core::WatchEvent<WatchedObject>>(&event).unwrap()
        else {
            panic!("an ADDED event");
        };
        assert!(watched.decoded(&configmaps()).is_ok());
        let read = read_page(&page(&[nested("over", MAX_OBJECT_DEPTH + 1)]));
        assert!(read[0].is_err());
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzzing::config(64))]

        /// Whatever the depth of each item, the list reads, and an item is undecodable exactly
        /// when it nests deeper than the limit.
        #[test]
        fn fuzz_a_list_reads_whatever_its_items_depths(depths in proptest::collection::vec(1usize..400, 1..6)) {
            let items: Vec<String> = depths
                .iter()
                .enumerate()
                .map(|(index, &depth)| nested(&format!("item-{index}"), depth))
                .collect();
            for (read, depth) in read_page(&page(&items)).into_iter().zip(depths) {
                proptest::prop_assert_eq!(read.is_err(), depth > MAX_OBJECT_DEPTH, "{}", depth);
            }
        }
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
