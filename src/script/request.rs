//! A hook's request as a sync hands it over: its fields as JSON, some of them lent rather than
//! copied in. The object a sync is about, the controller and the related objects are most of
//! its request, and the sync holds them already; copying them into the request and freeing the
//! copies after the call cost about 6% of the operator's CPU at 20,000 Pods (docs/performance.md, "Per-sync CPU of
//! the text cache"). A field may also be lent as the JSON text the cache keeps: a script that
//! reads it gets its value built straight from the text, one that does not costs nothing, and
//! the sync decodes no tree of it. Scripts, readers and webhooks see the same request either way.

use super::helper_env::{step, walk_json};
use serde::de::Visitor;
use serde::de::{Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess};
use serde::ser::{Error as _, Serialize, SerializeMap, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// JSON a request lends: a tree, or its text.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Json<'a> {
    Tree(&'a Value),
    /// Text serialized from a `Value` (as the watch caches keep objects), so it reads back.
    Text(&'a str),
}

impl<'a> Json<'a> {
    /// As a tree: borrowed, or decoded from the text.
    pub fn tree(self) -> Cow<'a, Value> {
        match self {
            Json::Tree(value) => Cow::Borrowed(value),
            Json::Text(text) => Cow::Owned(
                serde_json::from_str(text).expect("JSON text serialized from a Value reads back"),
            ),
        }
    }

    /// What is at `path` in it ([`walk_json`]): from text, only that part is built, the rest
    /// is passed over.
    pub(crate) fn at(self, path: &[String]) -> Option<Value> {
        match self {
            Json::Tree(value) => walk_json(value, path).cloned(),
            Json::Text(text) => {
                let mut deserializer = serde_json::Deserializer::from_str(text);
                At { path }
                    .deserialize(&mut deserializer)
                    .expect("JSON text serialized from a Value reads back")
            }
        }
    }

    /// Whether it may hold a Secret, which [`crate::reads::Secrets`] must note: text is decoded
    /// only when it names the kind.
    pub(crate) fn note_secrets(self, secrets: &crate::reads::Secrets) {
        match self {
            Json::Tree(value) => secrets.note(value),
            Json::Text(text) if text.contains("\"Secret\"") => secrets.note(&self.tree()),
            Json::Text(_) => {}
        }
    }
}

impl Serialize for Json<'_> {
    /// Text goes out as it is (through serde_json, as [`RawValue`]): the same bytes the tree
    /// would serialize to, as it was serialized from one.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Tree(value) => value.serialize(serializer),
            Json::Text(text) => serde_json::from_str::<&RawValue>(text)
                .map_err(S::Error::custom)?
                .serialize(serializer),
        }
    }
}

/// What is at `path` in JSON text, as [`walk_json`] finds it in a tree.
struct At<'p> {
    path: &'p [String],
}

impl<'de> DeserializeSeed<'de> for At<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<Value>, D::Error> {
        match self.path.is_empty() {
            true => Value::deserialize(deserializer).map(Some),
            false => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for At<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let (first, rest) = self
            .path
            .split_first()
            .expect("a path of at least one step");
        let mut found = None;
        while let Some(wanted) = map.next_key_seed(KeyIs(first))? {
            match wanted {
                true => found = map.next_value_seed(At { path: rest })?,
                false => map.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Value>, A::Error> {
        let (first, rest) = self
            .path
            .split_first()
            .expect("a path of at least one step");
        let wanted = step(first, |_| None, Some);
        let mut found = None;
        // Every item is read: serde_json refuses a list left part way.
        for index in 0.. {
            if Some(index) == wanted {
                match seq.next_element_seed(At { path: rest })? {
                    Some(item) => found = item,
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
        }
        Ok(found)
    }

    // A scalar has nothing at a path.
    fn visit_unit<E>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Option<Value>, E> {
        Ok(None)
    }
}

/// Whether a map's key is this one, read without copying it.
struct KeyIs<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct HookRequest<'a> {
    rest: &'a Value,
    lent: &'a [(&'a str, Json<'a>)],
}

impl<'a> HookRequest<'a> {
    /// The fields of `rest` (an object) and those `lent`, which `rest` must not hold.
    pub fn lending(rest: &'a Value, lent: &'a [(&'a str, Json<'a>)]) -> HookRequest<'a> {
        debug_assert!(rest.is_object() && lent.iter().all(|(key, _)| rest.get(key).is_none()));
        HookRequest { rest, lent }
    }

    /// A top-level field.
    pub fn get(&self, field: &str) -> Option<Json<'a>> {
        match self.lent.iter().find(|(key, _)| *key == field) {
            Some((_, value)) => Some(*value),
            None => self.rest.get(field).map(Json::Tree),
        }
    }

    /// Its fields in key order (as serde_json keeps an object's); the request itself when it
    /// is not an object (a request always is, a test may hand over anything).
    pub fn fields(&self) -> Result<Vec<(&'a str, Json<'a>)>, &'a Value> {
        let rest = self.rest.as_object().ok_or(self.rest)?;
        let mut fields: Vec<(&str, Json)> = rest
            .iter()
            .map(|(k, v)| (k.as_str(), Json::Tree(v)))
            .collect();
        fields.extend(self.lent.iter().copied());
        fields.sort_unstable_by_key(|(key, _)| *key);
        Ok(fields)
    }

    pub fn is_object(&self) -> bool {
        self.rest.is_object()
    }

    /// Notes the Secrets it holds ([`Json::note_secrets`]).
    pub(crate) fn note_secrets(&self, secrets: &crate::reads::Secrets) {
        for part in self.parts() {
            part.note_secrets(secrets);
        }
    }

    /// The JSON it is made of: the rest, then what is lent.
    pub fn parts(&self) -> impl Iterator<Item = Json<'a>> {
        std::iter::once(Json::Tree(self.rest)).chain(self.lent.iter().map(|(_, value)| *value))
    }

    /// The whole request as one JSON value: a copy, for the few readers that need one.
    pub fn to_value(&self) -> Value {
        match self.fields() {
            Ok(fields) => Value::Object(
                fields
                    .into_iter()
                    .map(|(key, value)| (key.to_owned(), value.tree().into_owned()))
                    .collect(),
            ),
            Err(other) => other.clone(),
        }
    }
}

impl<'a> From<&'a Value> for HookRequest<'a> {
    fn from(request: &'a Value) -> HookRequest<'a> {
        HookRequest {
            rest: request,
            lent: &[],
        }
    }
}

/// As the JSON of [`HookRequest::to_value`], byte for byte.
impl Serialize for HookRequest<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = match self.fields() {
            Ok(fields) => fields,
            Err(other) => return other.serialize(serializer),
        };
        let mut map = serializer.serialize_map(Some(fields.len()))?;
        for (key, value) in fields {
            map.serialize_entry(key, &value)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lent_field_reads_and_serializes_as_if_it_were_in_the_request() {
        let object = json!({"metadata": {"name": "a"}, "spec": {"x": [1, 2.5, null, "\u{e9}\"q"]}});
        let text = object.to_string();
        let controller = json!({"k": 1});
        let rest = json!({"attachments": {}, "related": {}, "finalizing": false});
        let parts = [
            ("object", Json::Text(&text)),
            ("controller", Json::Tree(&controller)),
        ];
        let lent = HookRequest::lending(&rest, &parts);
        let mut whole = rest.clone();
        whole["object"] = object.clone();
        whole["controller"] = controller.clone();

        assert_eq!(lent.to_value(), whole);
        assert_eq!(
            serde_json::to_string(&lent).unwrap(),
            serde_json::to_string(&whole).unwrap()
        );
        assert_eq!(lent.get("object"), Some(Json::Text(&text)));
        assert_eq!(lent.get("object").unwrap().tree().as_ref(), &object);
        assert_eq!(lent.get("controller"), Some(Json::Tree(&controller)));
        assert_eq!(lent.get("finalizing"), Some(Json::Tree(&json!(false))));
        assert_eq!(lent.get("missing"), None);
        let names: Vec<&str> = lent.fields().unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            names,
            [
                "attachments",
                "controller",
                "finalizing",
                "object",
                "related"
            ]
        );
    }

    #[test]
    fn a_path_into_text_finds_what_it_finds_in_the_tree() {
        let value = json!({
            "a": {"b": 1, "c": [10, {"d": "x\"y"}, []]}, "e": null, "s": "str", "a.b": 2,
            "q\"k": {"\u{e9}": [{"m": 1}, {"m": [2, {"n": 3}]}]}
        });
        let text = value.to_string();
        for path in [
            "",
            "a",
            "a.b",
            "a.c",
            "a.c.1",
            "a.c.1.d",
            "a.c.2",
            "a.c.3",
            "a.c.x",
            "a.b.z",
            "e",
            "e.f",
            "s.0",
            "missing",
            "a.missing.b",
            "0",
            "q\"k",
            "q\"k.\u{e9}.1.m.1.n",
            "q\"k.\u{e9}.0.m",
            "q\"k.\u{e9}.m",
        ] {
            let path: Vec<String> = path
                .split('.')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            assert_eq!(
                Json::Text(&text).at(&path),
                Json::Tree(&value).at(&path),
                "{path:?}"
            );
        }
        let key_with_dot = ["a.b".to_string()];
        assert_eq!(Json::Text(&text).at(&key_with_dot), Some(json!(2)));
        let deep = ["q\"k", "\u{e9}", "1", "m", "1", "n"].map(String::from);
        assert_eq!(Json::Text(&text).at(&deep), Some(json!(3)));
    }

    #[test]
    fn a_secret_lent_as_text_is_noted_and_other_text_is_not_decoded() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "hunter2"}});
        let text = secret.to_string();
        let secrets = crate::reads::Secrets::default();
        Json::Text(r#"{"kind":"Pod","metadata":{"name":"p"}}"#).note_secrets(&secrets);
        assert_eq!(secrets.scrub("hunter2"), "hunter2");
        Json::Text(&text).note_secrets(&secrets);
        assert_ne!(secrets.scrub("hunter2"), "hunter2");
    }

    #[test]
    fn a_request_that_is_not_an_object_is_itself() {
        let request = json!([1, 2]);
        let whole = HookRequest::from(&request);
        assert_eq!(whole.fields(), Err(&request));
        assert!(!whole.is_object());
        assert_eq!(whole.to_value(), request);
        assert_eq!(serde_json::to_string(&whole).unwrap(), "[1,2]");
    }
}
