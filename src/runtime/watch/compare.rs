//! What an update changed, told from the texts of its two versions without decoding either.
//!
//! A view keeps each object as the text `serde_json` serializes its `Value` to: keys sorted,
//! one way to write each value. So equal texts are equal values, and a field is compared by
//! its text alone; serde passes over each version once and builds nothing but a list of its
//! fields. (A few equal values have two texts, `-0.0` and `0.0`: such an update is reported,
//! which costs a sync and misses nothing.)

use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Metadata fields that change on every write without saying anything about the object.
const BOOKKEEPING: &[&str] = &["resourceVersion", "managedFields"];

/// Which parts of an object an update changed, bookkeeping (`resourceVersion`,
/// `managedFields`) aside.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parts {
    pub metadata: bool,
    pub status: bool,
    /// Any other top-level field (`spec`, `data`, `apiVersion`, ...).
    pub rest: bool,
}

impl Parts {
    const ALL: Parts = Parts {
        metadata: true,
        status: true,
        rest: true,
    };

    /// What changed from the object serialized as `old` to the one serialized as `new`. Texts
    /// that are not JSON objects are taken as changed throughout.
    pub fn between(old: &str, new: &str) -> Parts {
        if old == new {
            return Parts::default();
        }
        let (Some(old), Some(new)) = (fields(old), fields(new)) else {
            return Parts::ALL;
        };
        let mut parts = Parts::default();
        for (key, old, new) in differing(&old, &new) {
            match key {
                "metadata" => parts.metadata |= metadata_differs(old, new),
                "status" => parts.status = true,
                _ => parts.rest = true,
            }
        }
        parts
    }

    /// Whether controllers need to hear of the update.
    pub fn any(self) -> bool {
        self.metadata || self.status || self.rest
    }

    /// Whether the update changed the status and nothing else.
    pub fn only_status(self) -> bool {
        self.status && !self.metadata && !self.rest
    }
}

/// Whether two texts of `metadata` differ in anything but bookkeeping.
fn metadata_differs(old: Option<&RawValue>, new: Option<&RawValue>) -> bool {
    let (Some(old), Some(new)) = (old.and_then(raw_fields), new.and_then(raw_fields)) else {
        return true;
    };
    differing(&old, &new).any(|(key, _, _)| !BOOKKEEPING.contains(&key))
}

fn raw_fields(raw: &RawValue) -> Option<Fields<'_>> {
    fields(raw.get())
}

/// An object's fields as its text gives them, each value left as its text.
type Fields<'a> = Vec<(Cow<'a, str>, &'a RawValue)>;

fn fields(text: &str) -> Option<Fields<'_>> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    FieldsSeed.deserialize(&mut deserializer).ok()
}

/// The keys whose values differ between two objects' fields (a key on one side only
/// differs), with each side's value.
fn differing<'f, 'a>(
    old: &'f Fields<'a>,
    new: &'f Fields<'a>,
) -> impl Iterator<Item = (&'f str, Option<&'a RawValue>, Option<&'a RawValue>)> {
    let value = |fields: &'f Fields<'a>, key: &str| {
        fields
            .iter()
            .find(|(other, _)| other == key)
            .map(|(_, value)| *value)
    };
    let changed = old.iter().filter_map(move |(key, old_value)| {
        let new_value = value(new, key);
        (new_value.map(RawValue::get) != Some(old_value.get())).then_some((
            key.as_ref(),
            Some(*old_value),
            new_value,
        ))
    });
    let added = new
        .iter()
        .filter(move |(key, _)| value(old, key).is_none())
        .map(|(key, new_value)| (key.as_ref(), None, Some(*new_value)));
    changed.chain(added)
}

struct FieldsSeed;

impl<'de> DeserializeSeed<'de> for FieldsSeed {
    type Value = Fields<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldsSeed {
    type Value = Fields<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            fields.push((key, map.next_value::<&RawValue>()?));
        }
        Ok(fields)
    }
}

/// A key borrowed from the text where it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(key)))
    }

    fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key.to_owned())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn between(old: &Value, new: &Value) -> Parts {
        Parts::between(&old.to_string(), &new.to_string())
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "resourceVersion": "1", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending"}
        })
    }

    #[test]
    fn bookkeeping_alone_is_no_change() {
        let old = pod();
        let mut new = pod();
        new["metadata"]["resourceVersion"] = json!("2");
        new["metadata"]["managedFields"] = json!([{"manager": "someone"}]);
        assert_eq!(between(&old, &new), Parts::default());
        assert!(!between(&old, &new).any());
        assert_eq!(between(&old, &old), Parts::default());
    }

    #[test]
    fn each_part_is_told_apart() {
        let old = pod();
        let mut labelled = pod();
        labelled["metadata"]["labels"]["b"] = json!("2");
        assert_eq!(
            between(&old, &labelled),
            Parts {
                metadata: true,
                ..Parts::default()
            }
        );
        let mut status = pod();
        status["metadata"]["resourceVersion"] = json!("2");
        status["status"]["phase"] = json!("Running");
        assert!(between(&old, &status).only_status());
        let mut spec = status.clone();
        spec["spec"]["containers"][0]["image"] = json!("j");
        let parts = between(&old, &spec);
        assert!(parts.status && parts.rest && !parts.metadata && !parts.only_status());
        let mut removed = pod();
        removed.as_object_mut().unwrap().remove("status");
        assert!(between(&old, &removed).only_status());
        assert!(between(&removed, &old).only_status());
        let mut extra = pod();
        extra["data"] = json!({});
        assert!(between(&old, &extra).rest);
        let mut unlabelled = pod();
        unlabelled["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        assert!(between(&old, &unlabelled).metadata);
    }

    #[test]
    fn keys_with_escapes_and_metadata_that_is_not_an_object_are_compared() {
        let old = json!({"metadata": {"a\"b": 1, "resourceVersion": "1"}});
        let same = json!({"metadata": {"a\"b": 1, "resourceVersion": "2"}});
        let other = json!({"metadata": {"a\"b": 2, "resourceVersion": "2"}});
        assert!(!between(&old, &same).any());
        assert!(between(&old, &other).metadata);
        let null = json!({"metadata": null});
        assert!(between(&old, &null).metadata);
        assert!(!between(&null, &null).any());
        assert_eq!(Parts::between("[]", "{}"), Parts::ALL);
    }

    /// Edits of a Pod: (in its metadata or at its top, which key, which value).
    fn edited(edits: &[(bool, usize, usize)]) -> Value {
        let values = [
            json!(null),
            json!(1),
            json!(1.5),
            json!("x"),
            json!({"k": [1, 2]}),
        ];
        let keys = [
            "apiVersion",
            "spec",
            "status",
            "data",
            "resourceVersion",
            "labels",
            "k",
        ];
        let mut object = pod();
        for &(in_metadata, key, value) in edits {
            let (key, value) = (keys[key % keys.len()], values[value % values.len()].clone());
            match in_metadata {
                true => object["metadata"][key] = value,
                false => object[key] = value,
            }
        }
        object
    }

    /// What the comparison of decoded values this replaces said.
    fn decoded_parts(old: &Value, new: &Value) -> Parts {
        let differs = |old: &Value, new: &Value, key: &String| old.get(key) != new.get(key);
        let keys = |old: &Value, new: &Value| -> Vec<String> {
            let keys = |v: &Value| v.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>());
            [keys(old), keys(new)]
                .into_iter()
                .flatten()
                .flatten()
                .collect()
        };
        let metadata = match (old["metadata"].is_object(), new["metadata"].is_object()) {
            (true, true) => keys(&old["metadata"], &new["metadata"]).iter().any(|key| {
                !BOOKKEEPING.contains(&key.as_str())
                    && differs(&old["metadata"], &new["metadata"], key)
            }),
            _ => old.get("metadata") != new.get("metadata"),
        };
        Parts {
            metadata,
            status: old.get("status") != new.get("status"),
            rest: keys(old, new)
                .iter()
                .any(|key| key != "metadata" && key != "status" && differs(old, new, key)),
        }
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzzing::config(256))]

        /// Against the comparison of decoded values it replaces, on objects edited at random.
        #[test]
        fn fuzz_parts_agree_with_the_decoded_comparison(
            old in proptest::collection::vec((proptest::bool::ANY, 0usize..7, 0usize..5), 0..3),
            new in proptest::collection::vec((proptest::bool::ANY, 0usize..7, 0usize..5), 0..3),
        ) {
            let (old, new) = (edited(&old), edited(&new));
            proptest::prop_assert_eq!(between(&old, &new), decoded_parts(&old, &new));
        }
    }
}
