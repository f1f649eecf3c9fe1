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
//!
//! Both directions work on the Lua stack through the C API, in one protected call per value:
//! mlua's typed API would register and release a reference for every table, string and key, and
//! protect every table write, which made the conversions most of a call's cost.

use super::active::RequestUse;
use super::active::with_unconverted;
use super::helper_env::step;
use super::limits::{MAX_DEPTH, too_deep};
use super::lua_tape::{Tape, Token};
use super::rhai_convert::segment;
use super::suggest::no_such_field;
use super::{HookRequest, Json};
use mlua::{Lua, Table, Value as LuaValue, ffi};
use serde_json::{Map, Value};
use std::ffi::c_int;
use std::ptr;

/// The marker metatables, created once per state.
#[derive(Clone)]
pub(crate) struct Markers {
    pub array: Table,
    pub map: Table,
    /// Carried by the request and every object in it: reading a field they lack is an error
    /// (strict reads, `docs/scripting.md`). Tables the script builds, and helper results, are
    /// plain tables, so the script's own data reads as Lua always does.
    pub object: Table,
}

impl Markers {
    pub(super) fn new(lua: &Lua) -> mlua::Result<Markers> {
        let make = |name: &str| -> mlua::Result<Table> {
            let mt = lua.create_table()?;
            // `__metatable` hides and protects the marker: getmetatable returns the name and
            // setmetatable on a marked table fails, so scripts use array()/map() instead.
            mt.set("__metatable", name)?;
            mt.set_readonly(true);
            Ok(mt)
        };
        let object = lua.create_table()?;
        object.raw_set("__index", lua.create_function(missing_field)?)?;
        object.raw_set("__metatable", "request object")?;
        object.set_readonly(true);
        Ok(Markers {
            array: make("json array")?,
            map: make("json map")?,
            object,
        })
    }
}

/// The running call's `request` table (app data of the state during a call), from which
/// [`missing_field`] finds the path of the table a script read.
pub(crate) struct RequestRoot(pub Table);

/// `__index` of the request's objects: a field they lack is an error naming the path as the
/// script would write it and the nearest field that exists. Only string keys are strict: a number
/// key on an object is not a field read, and reads nil as on any table.
fn missing_field(lua: &Lua, (table, key): (Table, LuaValue)) -> mlua::Result<LuaValue> {
    let LuaValue::String(key) = key else {
        return Ok(LuaValue::Nil);
    };
    let key = key.to_string_lossy();
    let mut keys: Vec<String> = table
        .pairs::<LuaValue, LuaValue>()
        .filter_map(|pair| match pair {
            Ok((LuaValue::String(k), _)) => Some(k.to_string_lossy()),
            _ => None,
        })
        .collect();
    // The request holds only the fields the script names (`request_use`): the others exist too.
    with_unconverted(table.to_pointer() as usize, |unconverted| {
        if let Some(unconverted) = unconverted {
            keys.extend(unconverted.fields().map(str::to_string));
        }
    });
    let root = lua.app_data_ref::<RequestRoot>();
    let mut budget = PATH_SEARCH_TABLES;
    let path = match root.and_then(|root| path_to(&root.0, &table, 0, &mut budget)) {
        Some(within) => format!("request{within}{}", segment(&key)),
        // Not reachable from the request any more (the script detached it): the field alone.
        None => key.clone(),
    };
    Err(mlua::Error::runtime(no_such_field(
        &path,
        &key,
        keys.iter().map(String::as_str),
    )))
}

/// How many tables the search for a failed read's path may visit. It runs in a metamethod,
/// where the script's budgets do not reach, and a script can link its tables into a graph
/// with exponentially many paths; past the bound the message names the field alone.
const PATH_SEARCH_TABLES: usize = 10_000;

/// Where `target` is inside `table` (`.spec.containers[1]`, Lua's 1-based positions), found by
/// identity; only run when a read fails, so a search is cheaper than tracking every table's path.
fn path_to(table: &Table, target: &Table, depth: usize, budget: &mut usize) -> Option<String> {
    if table == target {
        return Some(String::new());
    }
    if depth >= MAX_DEPTH || *budget == 0 {
        return None;
    }
    *budget -= 1;
    table
        .pairs::<LuaValue, LuaValue>()
        .filter_map(Result::ok)
        .find_map(|(key, value)| {
            let LuaValue::Table(child) = value else {
                return None;
            };
            let step = match key {
                LuaValue::String(k) => segment(&k.to_string_lossy()),
                LuaValue::Integer(i) => format!("[{i}]"),
                LuaValue::Number(n) => format!("[{n}]"),
                _ => return None,
            };
            path_to(&child, target, depth + 1, budget).map(|rest| format!("{step}{rest}"))
        })
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

    pub(super) fn path(&self) -> String {
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

/// Stack slots of the marker metatables while converting (they are the first arguments of the
/// protected call).
const ARRAY_MARKER: c_int = 1;
const MAP_MARKER: c_int = 2;
/// The request's object metatable, only while converting the request (`set_request`).
const OBJECT_MARKER: c_int = 3;
/// No object metatable: objects become plain tables.
const PLAIN: c_int = 0;

pub(crate) fn to_lua(
    lua: &Lua,
    markers: &Markers,
    value: &Value,
) -> Result<LuaValue, ConvertError> {
    let mut pushed = Ok(());
    // SAFETY: runs protected with the array marker at `ARRAY_MARKER`; `push_json` checks the
    // stack's size at every level and holds only borrowed Rust values, so a Lua error (out of
    // memory) unwinding through it leaks nothing. It leaves the value alone on the stack as the
    // one result, or nil when the value nests too deeply.
    let value = unsafe {
        lua.exec_raw(&markers.array, |state| {
            pushed = push_json(state, value, PLAIN, 0);
            match pushed {
                Ok(()) => ffi::lua_remove(state, ARRAY_MARKER),
                Err(_) => {
                    ffi::lua_settop(state, 0);
                    ffi::lua_pushnil(state);
                }
            }
        })
    }?;
    pushed.map(|()| value)
}

/// Converts the request, as [`lay_out`] laid it, into `globals.request`. Returns the address
/// of its table, by which readers recognise it.
pub(crate) fn set_request(
    lua: &Lua,
    markers: &Markers,
    globals: &Table,
    laid: &Laid,
) -> Result<usize, ConvertError> {
    let mut pushed = Ok(0);
    // SAFETY: as in `to_lua`, with `globals` at 2 and the object marker at `OBJECT_MARKER`; the
    // fields are pushed the same way, and the table is stored in `globals` with
    // `lua_rawsetfield` (or nothing is, when the request nests too deeply).
    unsafe {
        lua.exec_raw::<()>((&markers.array, globals, &markers.object), |state| {
            pushed = push_request(state, laid).map(|()| {
                let id = ffi::lua_topointer(state, -1) as usize;
                ffi::lua_rawsetfield(state, 2, c"request".as_ptr());
                id
            });
            ffi::lua_settop(state, 0);
        })
    }?;
    pushed
}

/// What of the request a script is given, ready to push: the fields `converted` names
/// (`request_use`), by name, when it is an object; the request itself when it is not.
pub(crate) type Laid<'a> = Result<Vec<(&'a str, Field<'a>)>, &'a Value>;

/// A field as it is pushed.
pub(crate) enum Field<'a> {
    Tree(&'a Value),
    /// Lent as text, laid out flat ([`super::lua_tape`]).
    Tape(Tape<'a>),
}

/// Lays out what of the request the script is given. It runs before the call's memory is
/// counted, as a sync's decode of its object is not counted either, so a call's peak does not
/// depend on whether the cache held the object decoded; and before the protected call, where
/// nothing the call's Rust frames own may be live when a Lua error unwinds them.
pub(crate) fn lay_out<'a>(request: &HookRequest<'a>, converted: &RequestUse) -> Laid<'a> {
    request.fields().map(|fields| {
        fields
            .into_iter()
            .filter(|(key, _)| converted.converts(key))
            .map(|(key, json)| match json {
                Json::Tree(tree) => (key, Field::Tree(tree)),
                Json::Text(text) => (key, Field::Tape(Tape::of(text))),
            })
            .collect()
    })
}

/// Pushes what [`lay_out`] laid, as `set_request` stores it.
unsafe fn push_request(state: *mut ffi::lua_State, laid: &Laid) -> Result<(), ConvertError> {
    unsafe {
        let fields = match laid {
            Ok(fields) => fields,
            Err(other) => return push_json(state, other, OBJECT_MARKER, 0),
        };
        ffi::lua_createtable(state, 0, length(fields.len()));
        for (key, field) in fields {
            push_str(state, key);
            let pushed = match field {
                Field::Tree(tree) => push_json(state, tree, OBJECT_MARKER, 1),
                Field::Tape(tape) => push_tape(state, &mut tape.tokens(), OBJECT_MARKER, 1),
            };
            pushed.map_err(|e| e.within(segment(key)))?;
            ffi::lua_rawset(state, -3);
        }
        ffi::lua_pushvalue(state, OBJECT_MARKER);
        ffi::lua_setmetatable(state, -2);
        Ok(())
    }
}

/// Converts a helper's result: a top-level null becomes `nil`, so `if label(obj, "x") then`
/// reads naturally; nulls inside structures stay `null` so they survive a round trip.
pub(crate) fn to_lua_result(
    lua: &Lua,
    markers: &Markers,
    value: &Value,
) -> Result<LuaValue, ConvertError> {
    match value {
        Value::Null => Ok(LuaValue::Nil),
        other => to_lua(lua, markers, other),
    }
}

/// Pushes `value`, `depth` levels down; the array marker must be at `ARRAY_MARKER`, and objects
/// get the metatable at `object_marker` unless it is `PLAIN`. A value nested deeper than
/// [`MAX_DEPTH`] is refused before it is walked, leaving what was pushed on the stack.
unsafe fn push_json(
    state: *mut ffi::lua_State,
    value: &Value,
    object_marker: c_int,
    depth: usize,
) -> Result<(), ConvertError> {
    unsafe {
        // A table, a key and a value per level of nesting.
        ffi::luaL_checkstack(state, 3, ptr::null());
        match value {
            Value::Null => ffi::lua_pushlightuserdata(state, ptr::null_mut()),
            Value::Bool(b) => ffi::lua_pushboolean(state, c_int::from(*b)),
            Value::Number(n) => ffi::lua_pushnumber(state, n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => push_str(state, s),
            Value::Array(_) | Value::Object(_) if depth >= MAX_DEPTH => {
                return Err(ConvertError::new(too_deep()));
            }
            Value::Array(items) => {
                ffi::lua_createtable(state, length(items.len()), 0);
                for (i, item) in items.iter().enumerate() {
                    push_json(state, item, object_marker, depth + 1)
                        .map_err(|e| e.within(format!("[{i}]")))?;
                    ffi::lua_rawseti_(state, -2, length(i + 1));
                }
                ffi::lua_pushvalue(state, ARRAY_MARKER);
                ffi::lua_setmetatable(state, -2);
            }
            Value::Object(map) => {
                ffi::lua_createtable(state, 0, length(map.len()));
                for (key, item) in map {
                    push_str(state, key);
                    push_json(state, item, object_marker, depth + 1)
                        .map_err(|e| e.within(segment(key)))?;
                    ffi::lua_rawset(state, -3);
                }
                if object_marker != PLAIN {
                    ffi::lua_pushvalue(state, object_marker);
                    ffi::lua_setmetatable(state, -2);
                }
            }
        }
        Ok(())
    }
}

/// Pushes the value at the head of `tokens` as [`push_json`] pushes a tree. Two walks, not
/// one: while Lua may raise an error (out of memory) neither may own anything, so a tree is
/// walked by recursion over borrowed iterators and a tape consumed in place; one walk over a
/// tree's tokens would keep a heap stack of them live across every Lua call.
unsafe fn push_tape(
    state: *mut ffi::lua_State,
    tokens: &mut std::slice::Iter<Token>,
    object_marker: c_int,
    depth: usize,
) -> Result<(), ConvertError> {
    let ended = || ConvertError::new("a laid-out value ended early");
    unsafe {
        ffi::luaL_checkstack(state, 3, ptr::null());
        match tokens.next().ok_or_else(ended)? {
            Token::Null => ffi::lua_pushlightuserdata(state, ptr::null_mut()),
            Token::Bool(b) => ffi::lua_pushboolean(state, c_int::from(*b)),
            Token::Number(n) => ffi::lua_pushnumber(state, *n),
            Token::Str(s) => push_str(state, s),
            Token::Array(_) | Token::Object(_) if depth >= MAX_DEPTH => {
                return Err(ConvertError::new(too_deep()));
            }
            Token::Array(items) => {
                ffi::lua_createtable(state, length(*items), 0);
                for i in 0..*items {
                    push_tape(state, tokens, object_marker, depth + 1)
                        .map_err(|e| e.within(format!("[{i}]")))?;
                    ffi::lua_rawseti_(state, -2, length(i + 1));
                }
                ffi::lua_pushvalue(state, ARRAY_MARKER);
                ffi::lua_setmetatable(state, -2);
            }
            Token::Object(entries) => {
                ffi::lua_createtable(state, 0, length(*entries));
                for _ in 0..*entries {
                    let Some(Token::Str(key)) = tokens.next() else {
                        return Err(ended());
                    };
                    push_str(state, key);
                    push_tape(state, tokens, object_marker, depth + 1)
                        .map_err(|e| e.within(segment(key)))?;
                    ffi::lua_rawset(state, -3);
                }
                if object_marker != PLAIN {
                    ffi::lua_pushvalue(state, object_marker);
                    ffi::lua_setmetatable(state, -2);
                }
            }
        }
        Ok(())
    }
}

unsafe fn push_str(state: *mut ffi::lua_State, s: &str) {
    unsafe { ffi::lua_pushlstring_(state, s.as_ptr().cast(), s.len()) }
}

/// A size hint for `lua_createtable`; a table too large for it simply grows.
fn length(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

pub(crate) fn from_lua(
    lua: &Lua,
    markers: &Markers,
    value: LuaValue,
) -> Result<Value, ConvertError> {
    let mut result = None;
    // SAFETY: runs protected with the markers at `ARRAY_MARKER` and `MAP_MARKER` and the value
    // at 3. `read_json` only reads (type checks come before `lua_tolstring`, so nothing is
    // converted in place or allocated) and checks the stack before growing it, so no Lua error
    // can interrupt it.
    unsafe {
        lua.exec_raw::<()>((&markers.array, &markers.map, value), |state| {
            result = Some(read_json(state, 3, 0));
            ffi::lua_settop(state, 0);
        })
    }?;
    result.unwrap_or_else(|| Err(ConvertError::new("the value could not be read")))
}

/// Reads what is at `path` in `value` (`helper_env::step`), converting only that; `None` when a
/// step is missing. Tables are read raw, as the conversion reads them.
pub(crate) fn read_at(
    lua: &Lua,
    markers: &Markers,
    value: LuaValue,
    path: &[String],
) -> Result<Option<Value>, ConvertError> {
    let mut result = None;
    // SAFETY: runs protected with the markers and `value` at 1 to 3, like `from_lua`. Walking
    // pushes the path's strings (which may raise a memory error) before any Rust value is
    // owned; `read_json` then only reads.
    unsafe {
        lua.exec_raw::<()>((&markers.array, &markers.map, value), |state| {
            let mut index = 3;
            for segment in path {
                if ffi::lua_type(state, index) != ffi::LUA_TTABLE {
                    result = Some(Ok(None));
                    break;
                }
                ffi::luaL_checkstack(state, 2, ptr::null());
                let present = |state, lua_type| {
                    if lua_type == ffi::LUA_TNIL {
                        ffi::lua_pop(state, 1);
                        None
                    } else {
                        Some(ffi::lua_gettop(state))
                    }
                };
                let child = step(
                    segment,
                    |key| {
                        push_str(state, key);
                        present(state, ffi::lua_rawget(state, index))
                    },
                    |item| present(state, ffi::lua_rawgeti_(state, index, length(item + 1))),
                );
                match child {
                    Some(child) => index = child,
                    None => {
                        result = Some(Ok(None));
                        break;
                    }
                }
            }
            if result.is_none() {
                result = Some(read_json(state, index, 0).map(Some));
            }
            ffi::lua_settop(state, 0);
        })
    }?;
    result.unwrap_or_else(|| Err(ConvertError::new("the value could not be read")))
}

/// Reads the value at absolute stack index `index`.
unsafe fn read_json(
    state: *mut ffi::lua_State,
    index: c_int,
    depth: usize,
) -> Result<Value, ConvertError> {
    unsafe {
        match ffi::lua_type(state, index) {
            ffi::LUA_TNIL => Ok(Value::Null),
            ffi::LUA_TLIGHTUSERDATA if ffi::lua_touserdata(state, index).is_null() => {
                Ok(Value::Null)
            }
            ffi::LUA_TBOOLEAN => Ok(Value::Bool(ffi::lua_toboolean(state, index) != 0)),
            ffi::LUA_TNUMBER => number(ffi::lua_tonumber(state, index)),
            ffi::LUA_TINTEGER => Ok(Value::from(ffi::lua_tointeger64(
                state,
                index,
                ptr::null_mut(),
            ))),
            ffi::LUA_TSTRING => read_str(state, index)
                .map(str::to_string)
                .map(Value::String)
                .ok_or_else(|| ConvertError::new("a string that is not UTF-8 text is not JSON")),
            ffi::LUA_TTABLE => {
                if depth >= MAX_DEPTH {
                    return Err(ConvertError::new(format!(
                        "{} (a table containing itself?)",
                        too_deep()
                    )));
                }
                read_table(state, index, depth)
            }
            other => Err(ConvertError::new(format!(
                "a Lua {} is not JSON",
                type_name(other)
            ))),
        }
    }
}

/// The string at `index`, which must be a string (not a number: `lua_tolstring` would convert
/// it in place).
unsafe fn read_str<'a>(state: *mut ffi::lua_State, index: c_int) -> Option<&'a str> {
    unsafe {
        let mut len = 0;
        let data = ffi::lua_tolstring(state, index, &mut len);
        std::str::from_utf8(std::slice::from_raw_parts(data.cast::<u8>(), len)).ok()
    }
}

/// Names as mlua spells them, which error messages have always used.
fn type_name(lua_type: c_int) -> &'static str {
    match lua_type {
        ffi::LUA_TNIL => "nil",
        ffi::LUA_TBOOLEAN => "boolean",
        ffi::LUA_TLIGHTUSERDATA => "lightuserdata",
        ffi::LUA_TNUMBER | ffi::LUA_TINTEGER => "number",
        ffi::LUA_TVECTOR => "vector",
        ffi::LUA_TSTRING => "string",
        ffi::LUA_TTABLE => "table",
        ffi::LUA_TFUNCTION => "function",
        ffi::LUA_TUSERDATA => "userdata",
        ffi::LUA_TTHREAD => "thread",
        ffi::LUA_TBUFFER => "buffer",
        _ => "value",
    }
}

fn number(n: f64) -> Result<Value, ConvertError> {
    // Integral doubles in i64 range are JSON integers (not -0.0, whose sign an integer loses).
    let i = n as i64;
    if n.to_bits() == (i as f64).to_bits() && n != i64::MAX as f64 {
        return Ok(Value::from(i));
    }
    serde_json::Number::from_f64(n)
        .map(Value::Number)
        .ok_or_else(|| ConvertError::new(format!("{n} is not a JSON number")))
}

/// A number key that is a whole number, as list positions are.
fn integer_key(n: f64) -> Option<i64> {
    let i = n as i64;
    (n.to_bits() == (i as f64).to_bits() && n != i64::MAX as f64).then_some(i)
}

/// Which marker metatable the table at `index` carries.
unsafe fn marker(state: *mut ffi::lua_State, index: c_int) -> Option<c_int> {
    unsafe {
        if ffi::lua_getmetatable(state, index) == 0 {
            return None;
        }
        let marker = [ARRAY_MARKER, MAP_MARKER]
            .into_iter()
            .find(|m| ffi::lua_rawequal(state, -1, *m) != 0);
        ffi::lua_pop(state, 1);
        marker
    }
}

unsafe fn read_table(
    state: *mut ffi::lua_State,
    index: c_int,
    depth: usize,
) -> Result<Value, ConvertError> {
    unsafe {
        if ffi::lua_checkstack(state, 3) == 0 {
            return Err(ConvertError::new("tables nested too deeply"));
        }
        let marker = marker(state, index);
        if marker == Some(ARRAY_MARKER) {
            // A marked list is its sequence part, like `#t` and `ipairs` see it.
            let len = ffi::lua_objlen(state, index);
            let mut items = Vec::with_capacity(len);
            for i in 1..=len {
                ffi::lua_rawgeti_(state, index, length(i));
                let item = read_json(state, ffi::lua_gettop(state), depth + 1)
                    .map_err(|e| e.within(format!("[{}]", i - 1)))?;
                ffi::lua_pop(state, 1);
                items.push(item);
            }
            return Ok(Value::Array(items));
        }
        let marked_map = marker == Some(MAP_MARKER);
        // One pass: string keys make an object; integer keys 1..n (an unmarked `{a, b}`) a list.
        let mut map = Map::new();
        let mut items: Vec<(i64, Value)> = Vec::new();
        // `lua_rawiter` walks the table's slots by position, where `lua_next` looks every key up
        // again to find the next one.
        let mut iter = 0;
        loop {
            iter = ffi::lua_rawiter(state, index, iter);
            if iter < 0 {
                break;
            }
            let (key, item) = (ffi::lua_gettop(state) - 1, ffi::lua_gettop(state));
            match ffi::lua_type(state, key) {
                ffi::LUA_TSTRING => {
                    if let Some((first, _)) = items.first() {
                        return Err(mixed(*first));
                    }
                    let key = read_str(state, key)
                        .ok_or_else(|| ConvertError::new("a map key that is not UTF-8 text"))?;
                    let value =
                        read_json(state, item, depth + 1).map_err(|e| e.within(segment(key)))?;
                    map.insert(key.to_string(), value);
                }
                ffi::LUA_TNUMBER => match integer_key(ffi::lua_tonumber(state, key)) {
                    Some(i) if !marked_map && map.is_empty() => {
                        let value = read_json(state, item, depth + 1)
                            .map_err(|e| e.within(format!("[{}]", i - 1)))?;
                        items.push((i, value));
                    }
                    Some(i) => return Err(mixed(i)),
                    None => {
                        return Err(ConvertError::new(
                            "map keys must be strings, found a number key",
                        ));
                    }
                },
                other => {
                    return Err(ConvertError::new(format!(
                        "map keys must be strings, found a {} key",
                        type_name(other)
                    )));
                }
            }
            ffi::lua_pop(state, 2);
        }
        if items.is_empty() {
            return Ok(Value::Object(map));
        }
        // `next` order is unspecified; a list needs exactly the keys 1..n.
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
}

fn mixed(key: i64) -> ConvertError {
    ConvertError::new(format!(
        "a table mixes list items and map keys (number key {key}); JSON needs one or the other"
    ))
}
