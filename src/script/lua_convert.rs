//! JSON <-> Luau values.
//!
//! Lua has no null distinct from "absent", no list type distinct from tables, and one number
//! type, so the mapping needs conventions (documented in `docs/scripting.md`):
//! - JSON null is the light-userdata sentinel `null` (mlua's `Value::NULL`); `nil` in a table is
//!   simply an absent key.
//! - JSON lists are tables carrying the read-only `array` metatable, so they stay lists even when
//!   empty; `array()` makes one. `map()` marks a table as an object the same way. An unmarked
//!   table is a list when its keys are exactly 1..n (n >= 1), an object when all keys are
//!   strings, and an object when empty.
//! - Numbers are doubles: a number with no fractional part that fits in i64 becomes a JSON
//!   integer, any other finite number a float; NaN and infinities are errors.

use super::rhai_convert::segment;
use mlua::{Lua, Table, Value as LuaValue};
use serde_json::{Map, Value};

/// Lua tables nest without limit and can be cyclic; JSON cannot.
const MAX_DEPTH: usize = 128;

/// The two marker metatables, created once per state.
#[derive(Clone)]
pub(crate) struct Markers {
    pub array: Table,
    pub map: Table,
}

impl Markers {
    pub fn new(lua: &Lua) -> mlua::Result<Markers> {
        let make = |name: &str| -> mlua::Result<Table> {
            let mt = lua.create_table()?;
            // `__metatable` hides and protects the marker: getmetatable returns the name and
            // setmetatable on a marked table fails, so scripts use array()/map() instead.
            mt.set("__metatable", name)?;
            mt.set_readonly(true);
            Ok(mt)
        };
        Ok(Markers {
            array: make("json array")?,
            map: make("json map")?,
        })
    }
}

#[derive(Debug)]
pub(crate) struct ConvertError {
    reversed_path: Vec<String>,
    pub message: String,
    /// A Lua error (out of memory) rather than a shape problem.
    pub lua: Option<mlua::Error>,
}

impl ConvertError {
    fn new(message: impl Into<String>) -> ConvertError {
        ConvertError {
            reversed_path: Vec::new(),
            message: message.into(),
            lua: None,
        }
    }

    fn within(mut self, segment: String) -> ConvertError {
        self.reversed_path.push(segment);
        self
    }

    pub fn path(&self) -> String {
        self.reversed_path.iter().rev().cloned().collect()
    }
}

impl From<mlua::Error> for ConvertError {
    fn from(error: mlua::Error) -> Self {
        ConvertError {
            reversed_path: Vec::new(),
            message: error.to_string(),
            lua: Some(error),
        }
    }
}

pub(crate) fn to_lua(lua: &Lua, markers: &Markers, value: &Value) -> mlua::Result<LuaValue> {
    Ok(match value {
        Value::Null => LuaValue::NULL,
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => LuaValue::Integer(i),
            None => LuaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => LuaValue::String(lua.create_string(s)?),
        Value::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, to_lua(lua, markers, item)?)?;
            }
            table.set_metatable(Some(markers.array.clone()))?;
            LuaValue::Table(table)
        }
        Value::Object(map) => {
            let table = lua.create_table_with_capacity(0, map.len())?;
            for (key, item) in map {
                table.raw_set(key.as_str(), to_lua(lua, markers, item)?)?;
            }
            LuaValue::Table(table)
        }
    })
}

/// Converts a helper's result: a top-level null becomes `nil`, so `if label(obj, "x") then`
/// reads naturally; nulls inside structures stay `null` so they survive a round trip.
pub(crate) fn to_lua_result(lua: &Lua, markers: &Markers, value: &Value) -> mlua::Result<LuaValue> {
    match value {
        Value::Null => Ok(LuaValue::Nil),
        other => to_lua(lua, markers, other),
    }
}

pub(crate) fn from_lua(markers: &Markers, value: LuaValue) -> Result<Value, ConvertError> {
    from_lua_at(markers, value, 0)
}

fn from_lua_at(markers: &Markers, value: LuaValue, depth: usize) -> Result<Value, ConvertError> {
    match value {
        LuaValue::Nil => Ok(Value::Null),
        LuaValue::LightUserData(ud) if ud.0.is_null() => Ok(Value::Null),
        LuaValue::Boolean(b) => Ok(Value::Bool(b)),
        LuaValue::Integer(i) => Ok(Value::from(i)),
        LuaValue::Number(n) => number(n),
        LuaValue::String(s) => s
            .to_str()
            .map(|s| Value::String(s.to_string()))
            .map_err(|_| ConvertError::new("a string that is not UTF-8 text is not JSON")),
        LuaValue::Table(table) => {
            if depth >= MAX_DEPTH {
                return Err(ConvertError::new(format!(
                    "tables nested deeper than {MAX_DEPTH} levels (a table containing itself?)"
                )));
            }
            table_to_json(markers, table, depth)
        }
        other => Err(ConvertError::new(format!(
            "a Lua {} is not JSON",
            other.type_name()
        ))),
    }
}

fn number(n: f64) -> Result<Value, ConvertError> {
    // mlua already turns integral doubles in i64 range into `Integer`; this is the rest.
    serde_json::Number::from_f64(n)
        .map(Value::Number)
        .ok_or_else(|| ConvertError::new(format!("{n} is not a JSON number")))
}

fn table_to_json(markers: &Markers, table: Table, depth: usize) -> Result<Value, ConvertError> {
    let metatable = table.metatable();
    if metatable.as_ref() == Some(&markers.array) {
        // A marked list is its sequence part, like `#t` and `ipairs` see it.
        let len = table.raw_len();
        let mut items = Vec::with_capacity(len);
        for i in 1..=len {
            let item: LuaValue = table.raw_get(i)?;
            items.push(
                from_lua_at(markers, item, depth + 1)
                    .map_err(|e| e.within(format!("[{}]", i - 1)))?,
            );
        }
        return Ok(Value::Array(items));
    }
    let marked_map = metatable.as_ref() == Some(&markers.map);
    // One pass: string keys make an object; integer keys 1..n (an unmarked `{a, b}`) a list.
    let mut map = Map::new();
    let mut items: Vec<(i64, Value)> = Vec::new();
    for pair in table.pairs::<LuaValue, LuaValue>() {
        let (key, item) = pair?;
        match key {
            LuaValue::String(key) => {
                if !items.is_empty() {
                    return Err(mixed(items[0].0));
                }
                let key = key
                    .to_str()
                    .map(|s| s.to_string())
                    .map_err(|_| ConvertError::new("a map key that is not UTF-8 text"))?;
                let value =
                    from_lua_at(markers, item, depth + 1).map_err(|e| e.within(segment(&key)))?;
                map.insert(key, value);
            }
            LuaValue::Integer(i) if !marked_map && map.is_empty() => {
                let value = from_lua_at(markers, item, depth + 1)
                    .map_err(|e| e.within(format!("[{}]", i - 1)))?;
                items.push((i, value));
            }
            LuaValue::Integer(i) => return Err(mixed(i)),
            other => {
                return Err(ConvertError::new(format!(
                    "map keys must be strings, found a {} key",
                    other.type_name()
                )));
            }
        }
    }
    if items.is_empty() {
        return Ok(Value::Object(map));
    }
    // `pairs` order is unspecified; a list needs exactly the keys 1..n.
    items.sort_unstable_by_key(|(i, _)| *i);
    if let Some((_, (key, _))) = items
        .iter()
        .enumerate()
        .find(|(position, (key, _))| *key != *position as i64 + 1)
    {
        return Err(ConvertError::new(format!(
            "a list has a gap or a key outside 1..n (key {key}); use null for missing items"
        )));
    }
    Ok(Value::Array(items.into_iter().map(|(_, v)| v).collect()))
}

fn mixed(key: i64) -> ConvertError {
    ConvertError::new(format!(
        "a table mixes list items and map keys (number key {key}); JSON needs one or the other"
    ))
}
