//! Reading JSON into a `Value` as serde_json does, with two rules its own reader lacks: keys
//! refused when repeated (a webhook's strict responses), and a depth past which an array or map
//! is skipped rather than read (a watched object: one nested too deep must not fail the list or
//! watch event that carries it, and with it every other object of its type).

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::Cell;
use std::fmt;

/// How a document is read, and whether anything in it was skipped for its depth.
pub(crate) struct JsonRules {
    refuse_repeated_keys: bool,
    max_depth: usize,
    too_deep: Cell<bool>,
}

impl JsonRules {
    /// A map repeating a key is an error; depth is left to serde_json (127 levels).
    pub(crate) fn strict() -> JsonRules {
        JsonRules {
            refuse_repeated_keys: true,
            max_depth: usize::MAX,
            too_deep: Cell::new(false),
        }
    }

    /// Arrays and maps `max_depth` levels down are skipped, read as null. serde_json (1.0.154)
    /// skips a value without recursing and without its recursion limit (a byte of its scratch
    /// per level), so a skip cannot fail however deep the value is; reading the levels above
    /// it recurses, so `max_depth` must leave room, under the 127 levels serde_json reads, for
    /// whatever encloses the value (a list and its items, a watch event).
    pub(crate) fn skipping_below(max_depth: usize) -> JsonRules {
        JsonRules {
            refuse_repeated_keys: false,
            max_depth,
            too_deep: Cell::new(false),
        }
    }

    /// Whether something was skipped for its depth.
    pub(crate) fn too_deep(&self) -> bool {
        self.too_deep.get()
    }

    /// Reads a value `depth` levels down.
    pub(crate) fn at(&self, depth: usize) -> JsonReader<'_> {
        JsonReader { rules: self, depth }
    }
}

/// Reads one value (a `DeserializeSeed`), by its [`JsonRules`].
pub(crate) struct JsonReader<'a> {
    rules: &'a JsonRules,
    depth: usize,
}

impl JsonReader<'_> {
    /// Whether the array or map being read is past the depth, noting it if so.
    fn skips(&self) -> bool {
        let skips = self.depth >= self.rules.max_depth;
        if skips {
            self.rules.too_deep.set(true);
        }
        skips
    }
}

impl<'de> DeserializeSeed<'de> for JsonReader<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonReader<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        if self.skips() {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Value::Null);
        }
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.rules.at(self.depth + 1))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        if self.skips() {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Value::Null);
        }
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self.rules.at(self.depth + 1))?;
            if self.rules.refuse_repeated_keys && fields.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate field `{key}` (responseUnMarshallMode is strict)"
                )));
            }
            fields.insert(key, value);
        }
        Ok(Value::Object(fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(rules: &JsonRules, text: &str) -> Result<Value, serde_json::Error> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let value = rules.at(0).deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(value)
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", r#"{"a":["#.repeat(depth), "]}".repeat(depth))
    }

    #[test]
    fn values_read_as_serde_json_reads_them() {
        let text = r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "c": 18446744073709551615}"#;
        let expected: Value = serde_json::from_str(text).unwrap();
        for rules in [JsonRules::strict(), JsonRules::skipping_below(10)] {
            assert_eq!(read(&rules, text).unwrap(), expected);
            assert!(!rules.too_deep());
        }
    }

    #[test]
    fn strict_rules_refuse_a_repeated_key_at_any_depth() {
        let error = read(&JsonRules::strict(), r#"{"a": {"b": 1, "b": 2}}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            "duplicate field `b` (responseUnMarshallMode is strict) at line 1 column 22"
        );
        let last = read(&JsonRules::skipping_below(10), r#"{"b": 1, "b": 2}"#).unwrap();
        assert_eq!(
            last,
            json!({"b": 2}),
            "the last one, as serde_json keeps it"
        );
    }

    #[test]
    fn what_is_past_the_depth_is_skipped_however_deep() {
        let rules = JsonRules::skipping_below(3);
        assert_eq!(
            read(&rules, r#"{"a": [{"b": 1}]}"#).unwrap()["a"][0]["b"],
            1
        );
        assert!(!rules.too_deep());
        let shallow = r#"{"a": [{"b": [1]}], "c": "kept"}"#;
        assert_eq!(
            read(&rules, shallow).unwrap(),
            json!({"a": [{"b": null}], "c": "kept"})
        );
        assert!(rules.too_deep());
        // Far past serde_json's recursion limit, which fails a plain read.
        let deep = format!(r#"{{"deep": {}, "after": 2}}"#, nested(10_000));
        assert!(serde_json::from_str::<Value>(&deep).is_err());
        let rules = JsonRules::skipping_below(100);
        let value = read(&rules, &deep).unwrap();
        assert!(rules.too_deep());
        assert_eq!(value["after"], 2);
        // Skipping still checks the syntax.
        let broken = format!(r#"{{"deep": {}}}"#, &nested(200)[..300]);
        assert!(read(&JsonRules::skipping_below(100), &broken).is_err());
    }
}
