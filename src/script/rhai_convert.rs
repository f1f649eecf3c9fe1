//! JSON <-> Rhai values. The mapping is one to one: null is `()`, integers are `INT` (i64),
//! floats are `FLOAT` (f64), lists are arrays and objects are object maps, so a request
//! round-trips exactly (an empty `[]` and an empty `#{}` are different types in Rhai).

use super::active::RequestUse;
use super::limits::{MAX_DEPTH, too_deep};
use super::{HookRequest, Json};
use rhai::{Array, Dynamic, Identifier, ImmutableString, Map};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;

/// Why a Rhai value is not JSON, and where in it (segments innermost first while unwinding).
#[derive(Debug)]
pub(crate) struct ConvertError {
    reversed_path: Vec<String>,
    pub message: String,
}

impl ConvertError {
    fn new(message: String) -> ConvertError {
        ConvertError {
            reversed_path: Vec::new(),
            message,
        }
    }

    fn within(mut self, segment: String) -> ConvertError {
        self.reversed_path.push(segment);
        self
    }

    /// A path like `.attachments[2].metadata`, empty for the value itself.
    pub(super) fn path(&self) -> String {
        self.reversed_path.iter().rev().cloned().collect()
    }
}

/// Converts JSON into a Rhai value; refused when it nests deeper than [`MAX_DEPTH`].
pub(crate) fn to_dynamic(value: &Value) -> Result<Dynamic, ConvertError> {
    to_dynamic_at(Json::Tree(value), 0)
}

/// Converts JSON, a tree or its text, `depth` levels down. One visitor ([`DynamicSeed`])
/// builds both, so a request lent as text reaches the script exactly as its tree would; from
/// text no tree is built. What it refuses is looked at again as a tree, to say where.
fn to_dynamic_at(json: Json, depth: usize) -> Result<Dynamic, ConvertError> {
    let seed = DynamicSeed { depth };
    let built = match json {
        Json::Tree(value) => seed.deserialize(value),
        Json::Text(text) => {
            let mut deserializer = serde_json::Deserializer::from_str(text);
            seed.deserialize(&mut deserializer)
                .and_then(|value| deserializer.end().map(|()| value))
        }
    };
    built.map_err(|error| {
        let tree = match json {
            Json::Tree(value) => Cow::Borrowed(value),
            // Text deeper than serde_json reads (127 levels) is no tree either.
            Json::Text(text) => match serde_json::from_str(text) {
                Ok(tree) => Cow::Owned(tree),
                Err(_) => return ConvertError::new(error.to_string()),
            },
        };
        too_deep_at(&tree, depth).unwrap_or_else(|| ConvertError::new(error.to_string()))
    })
}

/// Where in `value`, `depth` levels down, a list or map nests deeper than [`MAX_DEPTH`]: the
/// first place in the order the conversion reads it.
fn too_deep_at(value: &Value, depth: usize) -> Option<ConvertError> {
    match value {
        Value::Array(_) | Value::Object(_) if depth >= MAX_DEPTH => {
            Some(ConvertError::new(too_deep()))
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| too_deep_at(item, depth + 1).map(|e| e.within(format!("[{i}]")))),
        Value::Object(map) => map
            .iter()
            .find_map(|(key, item)| too_deep_at(item, depth + 1).map(|e| e.within(segment(key)))),
        _ => None,
    }
}

/// Converts the request, only the fields `converted` names (`request_use`).
pub(crate) fn request_to_dynamic(
    request: HookRequest,
    converted: &RequestUse,
) -> Result<Dynamic, ConvertError> {
    let fields = match request.fields() {
        Ok(fields) => fields,
        Err(other) => return to_dynamic(other),
    };
    fields
        .into_iter()
        .filter(|(key, _)| converted.converts(key))
        .map(|(key, item)| {
            to_dynamic_at(item, 1)
                .map(|item| (key.into(), item))
                .map_err(|e| e.within(segment(key)))
        })
        .collect::<Result<Map, _>>()
        .map(Dynamic::from_map)
}

/// Builds one JSON value, `depth` levels down: null is `()`, integers that fit are `INT`, other
/// numbers `FLOAT`, lists arrays and objects maps.
#[derive(Clone, Copy)]
struct DynamicSeed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for DynamicSeed {
    type Value = Dynamic;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Dynamic, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl DynamicSeed {
    /// The seed of what a list or map at this depth holds, if it may hold anything.
    fn within<E: de::Error>(&self) -> Result<DynamicSeed, E> {
        match self.depth >= MAX_DEPTH {
            true => Err(E::custom(too_deep())),
            false => Ok(DynamicSeed {
                depth: self.depth + 1,
            }),
        }
    }
}

impl<'de> Visitor<'de> for DynamicSeed {
    type Value = Dynamic;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_unit<E>(self) -> Result<Dynamic, E> {
        Ok(Dynamic::UNIT)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Dynamic, E> {
        Ok(Dynamic::from_bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Dynamic, E> {
        Ok(Dynamic::from_int(i))
    }

    fn visit_u64<E>(self, u: u64) -> Result<Dynamic, E> {
        Ok(match i64::try_from(u) {
            Ok(i) => Dynamic::from_int(i),
            Err(_) => Dynamic::from_float(u as f64),
        })
    }

    fn visit_f64<E>(self, f: f64) -> Result<Dynamic, E> {
        Ok(Dynamic::from_float(f))
    }

    fn visit_str<E>(self, s: &str) -> Result<Dynamic, E> {
        Ok(Dynamic::from(ImmutableString::from(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Dynamic, A::Error> {
        let within = self.within()?;
        let mut items = Array::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(within)? {
            items.push(item);
        }
        Ok(Dynamic::from_array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Dynamic, A::Error> {
        let within = self.within()?;
        let mut entries = Map::new();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            entries.insert(key, map.next_value_seed(within)?);
        }
        Ok(Dynamic::from_map(entries))
    }
}

/// A map's key as Rhai keeps it, without a `String` in between.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Identifier;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Identifier, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = Identifier;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E>(self, s: &str) -> Result<Identifier, E> {
        Ok(s.into())
    }
}

/// Reads a Rhai value as JSON, by reference: helpers get their arguments this way without
/// copying them first.
/// Refused when it nests deeper than [`MAX_DEPTH`], before the walk goes deeper.
pub(crate) fn from_dynamic(value: &Dynamic) -> Result<Value, ConvertError> {
    from_dynamic_at(value, 0)
}

fn from_dynamic_at(value: &Dynamic, depth: usize) -> Result<Value, ConvertError> {
    // Values captured by closures are shared; read a copy taken through the lock.
    if value.is_shared() {
        return from_dynamic_at(&value.flatten_clone(), depth);
    }
    let nested = value.is_map() || value.is_array() || value.is_blob();
    if nested && depth >= MAX_DEPTH {
        return Err(ConvertError::new(too_deep()));
    }
    // Most likely first: a Kubernetes object is mostly maps and strings.
    if let Some(map) = value.read_lock::<Map>() {
        let mut object = serde_json::Map::new();
        for (key, item) in map.iter() {
            let item = from_dynamic_at(item, depth + 1).map_err(|e| e.within(segment(key)))?;
            object.insert(key.to_string(), item);
        }
        return Ok(Value::Object(object));
    }
    if let Some(s) = value.read_lock::<ImmutableString>() {
        return Ok(Value::String(s.to_string()));
    }
    if let Some(items) = value.read_lock::<Array>() {
        return items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                from_dynamic_at(item, depth + 1).map_err(|e| e.within(format!("[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    if let Ok(i) = value.as_int() {
        return Ok(Value::from(i));
    }
    if value.is_unit() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Ok(f) = value.as_float() {
        return serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| ConvertError::new(format!("{f} is not a JSON number")));
    }
    if let Ok(c) = value.as_char() {
        return Ok(Value::String(c.to_string()));
    }
    if let Some(bytes) = value.read_lock::<rhai::Blob>() {
        return Ok(Value::Array(
            bytes.iter().copied().map(Value::from).collect(),
        ));
    }
    Err(ConvertError::new(format!(
        "a value of type {} is not JSON",
        value.type_name()
    )))
}

/// `.name` for plain keys, `["app.kubernetes.io/name"]` for the rest.
pub(crate) fn segment(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        format!(".{key}")
    } else {
        format!("[{key:?}]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_round_trips_through_dynamic() {
        let value = json!({
            "null": null, "t": true, "int": -3, "big": 9007199254740993i64, "float": 2.0,
            "list": [[], {}, [1, [2]]], "empty_map": {}, "empty_list": [], "s": "ü \u{1F600}"
        });
        assert_eq!(from_dynamic(&to_dynamic(&value).unwrap()).unwrap(), value);
    }

    /// `levels` lists, one inside the other.
    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!([inner]))
    }

    #[test]
    fn values_nested_deeper_than_the_limit_are_refused_both_ways_naming_where() {
        let deepest = to_dynamic(&nested(MAX_DEPTH)).unwrap();
        assert_eq!(from_dynamic(&deepest).unwrap(), nested(MAX_DEPTH));
        let err = to_dynamic(&nested(MAX_DEPTH + 1)).unwrap_err();
        assert_eq!(err.path(), "[0]".repeat(MAX_DEPTH));
        assert_eq!(err.message, "lists and maps nested deeper than 128 levels");
        let deeper = Dynamic::from_array(vec![deepest]);
        let err = from_dynamic(&deeper).unwrap_err();
        assert_eq!(err.path(), "[0]".repeat(MAX_DEPTH));
        assert_eq!(err.message, "lists and maps nested deeper than 128 levels");
    }

    #[test]
    fn text_builds_what_its_tree_converts_to_and_is_refused_where_the_tree_is() {
        let value = json!({
            "null": null, "t": true, "int": -3, "big": u64::MAX, "float": 2.0,
            "list": [[], {}, [1, [2]]], "s": "\u{e9} \\ \"q\" \u{1F600}", "a.b": {"": 1}
        });
        let from_text = to_dynamic_at(Json::Text(&value.to_string()), 0).unwrap();
        let from_tree = to_dynamic(&value).unwrap();
        assert_eq!(from_text.to_string(), from_tree.to_string());
        assert_eq!(
            from_dynamic(&from_text).unwrap(),
            from_dynamic(&from_tree).unwrap()
        );
        assert!(from_text.as_map_ref().unwrap()["big"].is_float());

        let deep = nested(10);
        let at = MAX_DEPTH - 5;
        let from_text = to_dynamic_at(Json::Text(&deep.to_string()), at).unwrap_err();
        let from_tree = to_dynamic_at(Json::Tree(&deep), at).unwrap_err();
        assert_eq!(from_text.path(), from_tree.path());
        assert_eq!(from_text.message, from_tree.message);
    }

    #[test]
    fn non_json_values_name_their_path() {
        let mut map = Map::new();
        map.insert(
            "a.b".into(),
            Dynamic::from_array(vec![Dynamic::from_float(f64::NAN)]),
        );
        let err = from_dynamic(&Dynamic::from_map(map)).unwrap_err();
        assert_eq!(err.path(), "[\"a.b\"][0]");
        assert!(err.message.contains("NaN"), "{}", err.message);
    }
}
