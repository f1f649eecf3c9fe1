//! Luau: compile to bytecode once, and run each call in a fresh, sandboxed state.
//!
//! A state per call is the simple way to guarantee nothing leaks between calls (globals, changed
//! metatables, memory). Creating one with the helpers installed costs about 90 µs, a fifth of a
//! typical 10-object sync call, most of which is converting tables through the C API (measured in
//! `benches/hook_call.rs`, figures in `docs/scripting.md`). A pool of states would need a reset
//! that provably clears everything a script can touch; not worth it at this cost.

use super::error::{ScriptError, ScriptErrorKind};
use super::helpers::{HELPERS, Helper};
use super::log::{LogLevel, LogLine};
use super::lua_convert::{Markers, from_lua, to_lua, to_lua_result};
use super::{CallSetup, Program, ScriptSource};
use mlua::chunk::{ChunkMode, Compiler};
use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value as LuaValue, VmState};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The chunk name; Luau prefixes messages with `hook:<line>:`, which is how lines are found.
const CHUNK: &str = "hook";

/// Globals a Luau state has that a hook must not: code loading, module loading, environment
/// tampering and introspection.
const BLOCKED_FUNCTIONS: &[(&str, &str)] = &[
    ("require", "no module loading"),
    ("load", "no code loading"),
    ("loadstring", "no code loading"),
    ("dofile", "no file system access"),
    ("loadfile", "no file system access"),
    ("getfenv", "no access to function environments"),
    ("setfenv", "no access to function environments"),
    ("gcinfo", "no garbage collector control"),
    ("newproxy", "no raw userdata"),
];

/// Library tables replaced by a table whose every field raises a clear error.
const BLOCKED_LIBRARIES: &[(&str, &str)] = &[
    ("io", "no file system access"),
    ("debug", "no debug interface"),
    ("package", "no module loading"),
];

fn luau_compiler() -> Compiler {
    // Level 1 keeps line numbers exact; level 2 inlining can blur them in error messages.
    Compiler::new().set_optimization_level(1).set_debug_level(1)
}

pub(crate) fn compile(source: &ScriptSource) -> Result<Program, ScriptError> {
    luau_compiler()
        .compile(source.code.as_bytes())
        .map(Program::Lua)
        .map_err(|error| {
            let raw = match &error {
                mlua::Error::SyntaxError { message, .. } => message.clone(),
                other => other.to_string(),
            };
            let (line, message) = split_location(&raw);
            ScriptError::new(
                ScriptErrorKind::Compile,
                message,
                source.language,
                Arc::new(source.origin.clone()),
            )
            .at(&source.code, line, None)
        })
}

pub(crate) fn call(
    bytecode: &[u8],
    request: &Value,
    setup: &CallSetup,
) -> Result<Value, ScriptError> {
    let internal = |e: mlua::Error| {
        setup.error(
            ScriptErrorKind::Internal,
            format!("could not prepare the Lua state: {e}"),
            None,
            None,
        )
    };
    let lua = Lua::new_with(
        StdLib::STRING
            | StdLib::TABLE
            | StdLib::MATH
            | StdLib::UTF8
            | StdLib::BIT
            | StdLib::OS
            | StdLib::COROUTINE
            | StdLib::BUFFER,
        LuaOptions::new(),
    )
    .map_err(internal)?;
    let markers = Markers::new(&lua).map_err(internal)?;
    install_globals(&lua, &markers, setup).map_err(internal)?;
    let budget = setup.budget.clone();
    let limits = setup.limits;
    // The line the script was running when a budget ran out; the error raised from the interrupt
    // carries no position of its own.
    let stopped_at = Arc::new(AtomicU32::new(0));
    let stopped_at_writer = stopped_at.clone();
    lua.set_interrupt(move |lua| match budget.tick() {
        Ok(()) => Ok(VmState::Continue),
        Err(limit) => {
            if stopped_at_writer.load(Ordering::Relaxed) == 0 {
                let line = (0..8)
                    .filter_map(|level| lua.inspect_stack(level, |d| d.current_line()).flatten())
                    .find(|line| *line > 0)
                    .unwrap_or(0);
                stopped_at_writer.store(u32::try_from(line).unwrap_or(0), Ordering::Relaxed);
            }
            Err(mlua::Error::runtime(limits.describe(limit)))
        }
    });
    // Freezes the standard library and globals; the script's own globals go to a per-thread
    // table, so even within the call it cannot modify what helpers rely on.
    lua.sandbox(true).map_err(internal)?;
    lua.set_memory_limit(usize::try_from(setup.limits.max_memory_bytes).unwrap_or(usize::MAX))
        .map_err(internal)?;

    let run = || -> mlua::Result<LuaValue> {
        let request = to_lua(&lua, &markers, request)?;
        lua.globals().raw_set("request", request)?;
        let chunk = lua
            .load(bytecode)
            .set_name(format!("={CHUNK}"))
            .set_mode(ChunkMode::Binary)
            .into_function()?;
        let results: MultiValue = chunk.call(())?;
        Ok(results.into_iter().next().unwrap_or(LuaValue::Nil))
    };
    let value = run().map_err(|error| {
        let error = map_error(&error, setup);
        match stopped_at.load(Ordering::Relaxed) {
            0 => error,
            line => error.at(&setup.script.code, Some(line), None),
        }
    })?;
    let response = from_lua(&markers, value).map_err(|e| match e.lua {
        Some(error) => map_error(&error, setup),
        None => setup.error(
            ScriptErrorKind::Conversion,
            format!("response{} is not JSON: {}", e.path(), e.message),
            None,
            None,
        ),
    })?;
    if let Err(limit) = setup.budget.check_clock() {
        return Err(setup.limit_error(limit, None));
    }
    Ok(response)
}

fn install_globals(lua: &Lua, markers: &Markers, setup: &CallSetup) -> mlua::Result<()> {
    let globals = lua.globals();
    globals.raw_set("null", LuaValue::NULL)?;
    globals.raw_set("array", marker_function(lua, markers.array.clone())?)?;
    globals.raw_set("map", marker_function(lua, markers.map.clone())?)?;
    for helper in HELPERS {
        globals.raw_set(helper.name, bind_helper(lua, markers, setup, helper)?)?;
    }

    let env = setup.env.clone();
    let print = lua.create_function(move |_, args: MultiValue| {
        let text = args
            .iter()
            .map(|v| match v {
                LuaValue::String(s) => s.to_string_lossy(),
                other => other
                    .to_string()
                    .unwrap_or_else(|_| other.type_name().into()),
            })
            .collect::<Vec<_>>()
            .join("\t");
        env.log(LogLine {
            level: LogLevel::Info,
            message: text,
            fields: serde_json::Map::new(),
        });
        Ok(())
    })?;
    globals.raw_set("print", print)?;

    let collectgarbage = lua.create_function(|lua, option: Option<String>| {
        match option.as_deref() {
            Some("count") => Ok(lua.used_memory() as f64 / 1024.0),
            _ => Err(mlua::Error::runtime(
                "collectgarbage is not available in the metascript sandbox (only collectgarbage(\"count\"))",
            )),
        }
    })?;
    globals.raw_set("collectgarbage", collectgarbage)?;

    for (name, why) in BLOCKED_FUNCTIONS {
        globals.raw_set(*name, blocked_function(lua, name, why)?)?;
    }
    for (name, why) in BLOCKED_LIBRARIES {
        globals.raw_set(*name, blocked_library(lua, name, why, lua.create_table()?)?)?;
    }
    globals.raw_set("os", safe_os(lua, setup)?)?;
    Ok(())
}

/// `array([t])` / `map([t])`: marks `t` (or a new empty table) as a JSON list / object.
fn marker_function(lua: &Lua, marker: Table) -> mlua::Result<Function> {
    lua.create_function(move |lua, table: Option<Table>| {
        let table = match table {
            Some(table) => table,
            None => lua.create_table()?,
        };
        table.set_metatable(Some(marker.clone()))?;
        Ok(table)
    })
}

/// A helper as a Lua function: arguments to JSON (nil is null), the shared implementation, the
/// result back to Lua.
fn bind_helper(
    lua: &Lua,
    markers: &Markers,
    setup: &CallSetup,
    helper: &'static Helper,
) -> mlua::Result<Function> {
    let markers = markers.clone();
    let env = setup.env.clone();
    lua.create_function(move |lua, args: MultiValue| {
        let json_args = args
            .into_iter()
            .enumerate()
            .map(|(i, arg)| {
                from_lua(&markers, arg).map_err(|e| {
                    mlua::Error::runtime(format!(
                        "{}: argument {}{} is not JSON: {}",
                        helper.name,
                        i + 1,
                        e.path(),
                        e.message
                    ))
                })
            })
            .collect::<mlua::Result<Vec<_>>>()?;
        let result = helper
            .call(&env, &json_args)
            .map_err(|e| mlua::Error::runtime(e.0))?;
        to_lua_result(lua, &markers, &result)
    })
}

fn blocked_function(lua: &Lua, name: &'static str, why: &'static str) -> mlua::Result<Function> {
    lua.create_function(move |_, _: MultiValue| -> mlua::Result<()> {
        Err(mlua::Error::runtime(format!(
            "{name} is not available in the metascript sandbox ({why})"
        )))
    })
}

/// A read-only table whose missing fields raise "`lib.field` is not available" instead of the
/// puzzling "attempt to call a nil value".
fn blocked_library(
    lua: &Lua,
    library: &'static str,
    why: &'static str,
    table: Table,
) -> mlua::Result<Table> {
    let metatable = lua.create_table()?;
    metatable.set(
        "__index",
        lua.create_function(
            move |_, (_, key): (LuaValue, LuaValue)| -> mlua::Result<()> {
                let key = key.to_string().unwrap_or_default();
                Err(mlua::Error::runtime(format!(
                    "{library}.{key} is not available in the metascript sandbox ({why})"
                )))
            },
        )?,
    )?;
    metatable.set("__metatable", library)?;
    table.set_metatable(Some(metatable))?;
    Ok(table)
}

/// `os` with only the time functions, pinned to the call's clock and to UTC so a hook gives the
/// same answer in a test as in the cluster.
fn safe_os(lua: &Lua, setup: &CallSetup) -> mlua::Result<Table> {
    let luau_os: Table = lua.globals().get("os")?;
    let luau_time: Function = luau_os.get("time")?;
    let luau_date: Function = luau_os.get("date")?;
    let now = setup.env.now.as_second();
    let os = lua.create_table()?;
    os.set("clock", luau_os.get::<Function>("clock")?)?;
    os.set("difftime", luau_os.get::<Function>("difftime")?)?;
    os.set(
        "time",
        lua.create_function(move |_, date: Option<Table>| match date {
            None => Ok(LuaValue::Number(now as f64)),
            Some(date) => luau_time.call::<LuaValue>(date),
        })?,
    )?;
    os.set(
        "date",
        lua.create_function(move |_, (format, time): (Option<String>, Option<f64>)| {
            let format = format.unwrap_or_else(|| "%c".to_string());
            // `!` selects UTC; the host's time zone must not change a hook's output.
            let format = if format.starts_with('!') {
                format
            } else {
                format!("!{format}")
            };
            luau_date.call::<LuaValue>((format, time.unwrap_or(now as f64)))
        })?,
    )?;
    blocked_library(
        lua,
        "os",
        "only os.clock, os.time, os.date and os.difftime",
        os,
    )
}

/// Splits `hook:12: message` (or `:12: message` from the compiler) into the line and the message.
fn split_location(text: &str) -> (Option<u32>, String) {
    let first_line = text.lines().next().unwrap_or_default();
    // The compiler reports `<line>: message`, the VM `hook:<line>: message`.
    for prefix in [format!("{CHUNK}:"), ":".into(), String::new()] {
        if let Some(rest) = first_line.strip_prefix(prefix.as_str())
            && let Some((digits, message)) = rest.split_once(':')
            && let Ok(line) = digits.trim().parse::<u32>()
        {
            return (Some(line), message.trim().to_string());
        }
    }
    (None, first_line.trim().to_string())
}

/// The first `hook:<line>` in a traceback: the script line that called a failing helper.
fn traceback_line(traceback: &str) -> Option<u32> {
    let marker = format!("{CHUNK}:");
    traceback.lines().find_map(|line| {
        let start = line.find(&marker)? + marker.len();
        let digits: String = line[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

fn map_error(error: &mlua::Error, setup: &CallSetup) -> ScriptError {
    let (line, message) = match error {
        mlua::Error::CallbackError { traceback, cause } => {
            let (line, message) = split_location(&root_message(cause));
            (line.or_else(|| traceback_line(traceback)), message)
        }
        other => split_location(&root_message(other)),
    };
    // The budget knows whether the script was stopped, even if it caught the error with pcall.
    if let Some(limit) = setup.budget.tripped() {
        return setup.limit_error(limit, line);
    }
    if matches!(root(error), mlua::Error::MemoryError(_)) {
        return setup.limit_error(super::error::LimitKind::Memory, line);
    }
    setup.error(ScriptErrorKind::Runtime, message, line, None)
}

fn root(error: &mlua::Error) -> &mlua::Error {
    match error {
        mlua::Error::CallbackError { cause, .. } => root(cause),
        mlua::Error::WithContext { cause, .. } => root(cause),
        other => other,
    }
}

/// The innermost message, without mlua's `runtime error: ` prefix or a traceback.
fn root_message(error: &mlua::Error) -> String {
    let text = match root(error) {
        mlua::Error::RuntimeError(message) | mlua::Error::MemoryError(message) => message.clone(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => other.to_string(),
    };
    match text.split_once("\nstack traceback:") {
        Some((message, _)) => message.to_string(),
        None => text,
    }
}
