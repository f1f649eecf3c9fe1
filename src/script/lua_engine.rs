//! Luau: compile to bytecode once; run each call in a fresh sandboxed thread of a reused state.
//!
//! Building and sandboxing a state with the helpers costs far more than a small hook call, so
//! states are pooled ([`LuaStates`]) and each call follows the procedure Luau documents for
//! running many scripts in one VM: the state's globals and standard library are made read-only
//! once (`luaL_sandbox`), and every call runs in a new thread whose globals are a fresh table
//! reading through to them (`luaL_sandboxthread`), so whatever a call assigns to a global lives
//! in that table and dies with the call. Library tables, the string metatable and the JSON marker
//! metatables are read-only, so nothing else a script can reach survives it either.
//!
//! Budgets are per call: the interrupt ticks the active call's budget (`active`), and the memory
//! limit is set for each call to the heap in use when it starts plus the call's budget, so
//! garbage left by earlier calls neither counts against a call nor accumulates (a collection runs
//! once it passes [`GARBAGE_SLACK`]). A state whose call failed in any way (budget, error,
//! invalid response) is dropped rather than reused: a failure may have left it mid-way through
//! something, and building a new one is cheap next to a failure.

use super::active::{ActiveGuard, Request, with_active, with_unconverted};
use super::coverage::Recorder;
use super::error::{ScriptError, ScriptErrorKind};
use super::helpers::{HELPERS, Helper, HelperError, Run};
use super::limits::Budget;
use super::log::{LogLevel, LogLine};
use super::lua_convert::{
    ConvertError, Markers, RequestRoot, from_lua, read_at, set_request, to_lua_result,
};
use super::suggest::nearest;
use super::{CallSetup, Code, Program, ScriptOrigin, ScriptSource};
use mlua::chunk::{ChunkMode, Compiler};
use mlua::thread::ThreadStatus;
use mlua::{
    Function, Lua, LuaOptions, MultiValue, StdLib, Table, Thread, Value as LuaValue, VmState, ffi,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The chunk name; Luau prefixes messages with `hook:<line>:`, which is how lines are found.
const CHUNK: &str = "hook";

/// Idle states kept for reuse. The operator runs at most `--workers` (default 8) hook calls at
/// once, so this keeps one state per concurrent call; a burst beyond it builds states that are
/// dropped afterwards.
const MAX_IDLE_STATES: usize = 16;

/// Garbage a state may carry from one call to the next before a full collection. Luau collects
/// incrementally as a call allocates, so this only triggers after calls that built a lot; it
/// bounds how much a call can exceed its memory budget by the collector freeing earlier garbage
/// while it runs.
const GARBAGE_SLACK: usize = 1024 * 1024;

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

/// Compiles a script; with `coverage`, the bytecode counts how often each statement runs.
pub(crate) fn compile(source: &ScriptSource, coverage: bool) -> Result<Code, ScriptError> {
    luau_compiler()
        .set_coverage_level(u8::from(coverage))
        .compile(source.code.as_bytes())
        .map(Code::Lua)
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

/// The pool of sandboxed states of one [`super::ScriptEngine`].
pub(crate) struct LuaStates {
    idle: Mutex<Vec<LuaState>>,
    /// How many states were ever built, for tests that check reuse.
    built: AtomicUsize,
}

impl LuaStates {
    pub fn new() -> LuaStates {
        LuaStates {
            idle: Mutex::new(Vec::new()),
            built: AtomicUsize::new(0),
        }
    }

    #[cfg(test)]
    pub fn built(&self) -> usize {
        self.built.load(Ordering::Relaxed)
    }

    pub fn call(
        &self,
        bytecode: &[u8],
        request: &Value,
        setup: &CallSetup,
    ) -> Result<Value, ScriptError> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut state = match idle {
            Some(state) => state,
            None => {
                self.built.fetch_add(1, Ordering::Relaxed);
                LuaState::new().map_err(|e| {
                    setup.error(
                        ScriptErrorKind::Internal,
                        format!("could not prepare the Lua state: {e}"),
                        None,
                        None,
                    )
                })?
            }
        };
        let response = state.call(bytecode, request, setup)?;
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE_STATES {
            idle.push(state);
        }
        Ok(response)
    }
}

/// A sandboxed state with the helpers installed, and the programs it has loaded.
struct LuaState {
    lua: Lua,
    markers: Markers,
    /// Loaded chunks by program digest; each call runs a clone in its own thread. The weak
    /// reference lets programs dropped by hot reload be forgotten.
    programs: HashMap<String, (Weak<Program>, Function)>,
    /// Heap in use after the last full collection.
    resident: usize,
}

impl LuaState {
    fn new() -> mlua::Result<LuaState> {
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
        )?;
        let markers = Markers::new(&lua)?;
        install_globals(&lua, &markers)?;
        // Freezes the globals and the standard library (`luaL_sandbox`); every call then gets
        // its own globals (see `start_thread`).
        lua.sandbox(true)?;
        lua.gc_collect()?;
        let resident = lua.used_memory();
        Ok(LuaState {
            lua,
            markers,
            programs: HashMap::new(),
            resident,
        })
    }

    fn call(
        &mut self,
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
        let function = self.function(bytecode, setup).map_err(internal)?;
        let (thread, globals) = start_thread(&self.lua, function.clone()).map_err(internal)?;
        let stopped_at = set_interrupt(&self.lua, setup.budget.clone());
        let lua = &self.lua;
        let max_memory = usize::try_from(setup.limits.max_memory_bytes).unwrap_or(usize::MAX);
        let converted = &setup.script.program.request;
        let run = || -> mlua::Result<LuaValue> {
            lua.set_memory_limit(lua.used_memory().saturating_add(max_memory))?;
            let id = set_request(lua, &self.markers, &globals, request, converted)?;
            if let LuaValue::Table(root) = globals.raw_get("request")? {
                lua.set_app_data(RequestRoot(root));
            }
            let _active = ActiveGuard::enter(
                setup.env.clone(),
                setup.budget.clone(),
                Request::partial(id, request, converted),
            );
            let results: MultiValue = thread.resume(())?;
            if thread.status() != ThreadStatus::Finished {
                return Err(mlua::Error::runtime(
                    "the script yielded outside a coroutine (coroutine.yield at the top level)",
                ));
            }
            lua.set_memory_limit(0)?;
            Ok(results.into_iter().next().unwrap_or(LuaValue::Nil))
        };
        let result = run();
        self.lua.remove_app_data::<RequestRoot>();
        if let Some(recorder) = setup.coverage {
            record_coverage(recorder, &setup.script.origin, &function);
        }
        let value = result.map_err(|error| {
            let mut error = map_error(&error, setup);
            if let Some(name) = error
                .line
                .and_then(|line| undefined_callee(lua, &setup.script.code, line, &error.message))
            {
                error.message = name;
            }
            match stopped_at.load(Ordering::Relaxed) {
                0 => error,
                line => error.at(&setup.script.code, Some(line), None),
            }
        })?;
        let response = from_lua(&self.lua, &self.markers, value).map_err(|e| match e.lua {
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
        drop((thread, globals));
        if self.lua.used_memory() > self.resident + GARBAGE_SLACK {
            self.lua.gc_collect().map_err(internal)?;
            self.resident = self.lua.used_memory();
        }
        Ok(response)
    }

    /// The loaded chunk of a program, loading it on first use in this state.
    fn function(&mut self, bytecode: &[u8], setup: &CallSetup) -> mlua::Result<Function> {
        let digest = setup.script.digest();
        if let Some((_, function)) = self.programs.get(digest) {
            return Ok(function.clone());
        }
        self.programs
            .retain(|_, (program, _)| program.strong_count() > 0);
        let function = self
            .lua
            .load(bytecode)
            .set_name(format!("={CHUNK}"))
            .set_mode(ChunkMode::Binary)
            .into_function()?;
        self.programs.insert(
            digest.to_string(),
            (Arc::downgrade(&setup.script.program), function.clone()),
        );
        Ok(function)
    }
}

/// Adds the lines a chunk (and the functions it defines) has run so far to the recorder. The
/// counters live in the loaded chunk, shared by the clone each call runs, and only grow, so
/// reading them after every call is exact.
fn record_coverage(recorder: &Recorder, origin: &ScriptOrigin, function: &Function) {
    let (mut executable, mut hit) = (BTreeSet::new(), BTreeSet::new());
    function.coverage(|info| {
        for (line, count) in info.hits.iter().enumerate() {
            let line = line as u32;
            if *count >= 0 {
                executable.insert(line);
            }
            if *count > 0 {
                hit.insert(line);
            }
        }
    });
    recorder.record(origin, || executable, hit);
}

/// Ticks `budget` from Luau's interrupt, for one call. Installed per call rather than reading
/// the active call, because the interrupt runs on every loop iteration and function call.
/// Returns the cell that receives the line the script was running when the budget ran out (0:
/// none), since the error raised from the interrupt carries no position of its own.
fn set_interrupt(lua: &Lua, budget: Arc<Budget>) -> Arc<AtomicU32> {
    let stopped_at = Arc::new(AtomicU32::new(0));
    let stopped_at_writer = stopped_at.clone();
    lua.set_interrupt(move |lua| {
        let Err(limit) = budget.tick() else {
            return Ok(VmState::Continue);
        };
        if stopped_at_writer.load(Ordering::Relaxed) == 0 {
            let line = (0..8)
                .filter_map(|level| lua.inspect_stack(level, |d| d.current_line()).flatten())
                .find(|line| *line > 0)
                .unwrap_or(0);
            stopped_at_writer.store(u32::try_from(line).unwrap_or(0), Ordering::Relaxed);
        }
        Err(mlua::Error::runtime(budget.describe(limit)))
    });
    stopped_at
}

/// A new thread with fresh globals (`luaL_sandboxthread`) holding a clone of `function` whose
/// environment is those globals, ready to resume; and the globals, to put the request in.
fn start_thread(lua: &Lua, function: Function) -> mlua::Result<(Thread, Table)> {
    // SAFETY: the closure runs protected on the state's current thread with `function` as the
    // only value on its stack, and only uses the Luau C API as documented: `lua_newthread`
    // pushes the new thread, which starts with an empty stack of LUA_MINSTACK slots (ample for
    // the two values moved onto it), `lua_clonefunction` takes a Luau function (a loaded chunk)
    // and gives the clone the thread's globals. It leaves exactly the thread and its globals on
    // the state's stack, which `exec_raw` converts into the two results. No Rust value with a
    // destructor is live across these calls, so a Lua error unwinding through them is sound.
    unsafe {
        lua.exec_raw::<(Thread, Table)>(function, |state| {
            let thread = ffi::lua_newthread(state);
            ffi::luaL_sandboxthread(thread);
            ffi::lua_pushvalue(state, 1);
            ffi::lua_xmove(state, thread, 1);
            ffi::lua_clonefunction(thread, 1);
            ffi::lua_remove(thread, 1);
            ffi::lua_pushvalue(thread, ffi::LUA_GLOBALSINDEX);
            ffi::lua_xmove(thread, state, 1);
            ffi::lua_remove(state, 1);
        })
    }
}

fn install_globals(lua: &Lua, markers: &Markers) -> mlua::Result<()> {
    let globals = lua.globals();
    globals.raw_set("null", LuaValue::NULL)?;
    globals.raw_set("array", marker_function(lua, markers.array.clone())?)?;
    globals.raw_set("map", marker_function(lua, markers.map.clone())?)?;
    for helper in HELPERS {
        globals.raw_set(helper.name, bind_helper(lua, markers, helper)?)?;
    }

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
        with_active(|env, _| {
            env.log(LogLine {
                level: LogLevel::Info,
                message: text,
                fields: serde_json::Map::new(),
            })
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
    globals.raw_set("os", safe_os(lua)?)?;
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
/// result back to Lua. A reader walks its first argument in place instead (`helpers::Run`).
fn bind_helper(lua: &Lua, markers: &Markers, helper: &'static Helper) -> mlua::Result<Function> {
    let markers = markers.clone();
    lua.create_function(move |lua, args: MultiValue| {
        let json = |position: usize, arg: LuaValue| {
            from_lua(lua, &markers, arg).map_err(|e| not_json(helper, position, e))
        };
        let result = match &helper.run {
            Run::Json(_) => {
                let json_args = args
                    .into_iter()
                    .enumerate()
                    .map(|(i, arg)| json(i + 1, arg))
                    .collect::<mlua::Result<Vec<_>>>()?;
                with_active(|env, _| helper.call(env, &json_args))
                    .ok_or_else(|| outside_a_call(helper))?
                    .map_err(helper_error)?
            }
            Run::Read(read) => {
                helper.check_arity(args.len()).map_err(helper_error)?;
                let mut args = args.into_iter();
                let object = args.next().unwrap_or(LuaValue::Nil);
                let rest = args
                    .enumerate()
                    .map(|(i, arg)| json(i + 2, arg))
                    .collect::<mlua::Result<Vec<_>>>()?;
                let path = (read.path)(&rest).map_err(|e| helper_error(helper.error(e)))?;
                let id = match &object {
                    LuaValue::Table(table) => table.to_pointer() as usize,
                    _ => 0,
                };
                let found = with_unconverted(id, |unconverted| match unconverted {
                    Some(unconverted) => unconverted.read(
                        &path,
                        || from_lua(lua, &markers, object.clone()),
                        |path| read_at(lua, &markers, object.clone(), path),
                    ),
                    None => read_at(lua, &markers, object, &path),
                })
                .map_err(|e| not_json(helper, 1, e))?;
                (read.finish)(found, &rest)
            }
        };
        to_lua_result(lua, &markers, &result)
    })
}

fn not_json(helper: &Helper, position: usize, error: ConvertError) -> mlua::Error {
    mlua::Error::runtime(format!(
        "{}: argument {position}{} is not JSON: {}",
        helper.name,
        error.path(),
        error.message
    ))
}

fn helper_error(error: HelperError) -> mlua::Error {
    mlua::Error::runtime(error.0)
}

fn outside_a_call(helper: &Helper) -> mlua::Error {
    mlua::Error::runtime(format!("{}: called outside a hook call", helper.name))
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
fn safe_os(lua: &Lua) -> mlua::Result<Table> {
    let luau_os: Table = lua.globals().get("os")?;
    let luau_time: Function = luau_os.get("time")?;
    let luau_date: Function = luau_os.get("date")?;
    let now = || {
        with_active(|env, _| env.now.as_second() as f64)
            .ok_or_else(|| mlua::Error::runtime("os: called outside a hook call"))
    };
    let os = lua.create_table()?;
    os.set("clock", luau_os.get::<Function>("clock")?)?;
    os.set("difftime", luau_os.get::<Function>("difftime")?)?;
    os.set(
        "time",
        lua.create_function(move |_, date: Option<Table>| match date {
            None => Ok(LuaValue::Number(now()?)),
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
            let time = match time {
                Some(time) => time,
                None => now()?,
            };
            luau_date.call::<LuaValue>((format, time))
        })?,
    )?;
    blocked_library(
        lua,
        "os",
        "only os.clock, os.time, os.date and os.difftime",
        os,
    )
}

/// Luau's `attempt to call a nil value` names no function: find the call on the failing line
/// whose function does not exist (a global, or a member of a library such as `string`) and name
/// it, with the nearest existing name.
fn undefined_callee(lua: &Lua, code: &str, line: u32, message: &str) -> Option<String> {
    if message != "attempt to call a nil value" {
        return None;
    }
    let text = code.lines().nth(line as usize - 1)?;
    // After `sandbox`, the state's globals table is empty and reads through to the frozen one.
    let globals = lua.globals();
    let globals = match globals.metatable() {
        Some(metatable) => metatable.raw_get::<Table>("__index").unwrap_or(globals),
        None => globals,
    };
    let names = |table: &Table| -> Vec<String> {
        table
            .pairs::<LuaValue, LuaValue>()
            .filter_map(Result::ok)
            .filter_map(|(key, value)| match (key, value) {
                (LuaValue::String(key), LuaValue::Function(_) | LuaValue::Table(_)) => {
                    Some(key.to_string_lossy())
                }
                _ => None,
            })
            .collect()
    };
    calls(text).into_iter().find_map(|(qualifier, name)| {
        let (scope, shown) = match qualifier {
            None if defined_in(code, name) => return None,
            None => (globals.clone(), name.to_string()),
            Some(library) => match globals.raw_get::<LuaValue>(library).ok()? {
                LuaValue::Table(table) => (table, format!("{library}.{name}")),
                _ => return None,
            },
        };
        if !matches!(scope.raw_get::<LuaValue>(name), Ok(LuaValue::Nil)) {
            return None;
        }
        let candidates = names(&scope);
        let suggestion = match nearest(name, candidates.iter().map(String::as_str)) {
            Some(near) => match qualifier {
                Some(library) => format!("; did you mean `{library}.{near}`?"),
                None => format!("; did you mean `{near}`?"),
            },
            None => String::new(),
        };
        Some(format!(
            "attempt to call a nil value: `{shown}` is not defined{suggestion}"
        ))
    })
}

/// The calls on a line of Lua: `name(` and `library.name(` (`library:name(` too), in order.
fn calls(text: &str) -> Vec<(Option<&str>, &str)> {
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !word(bytes[i]) || (i > 0 && word(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && word(bytes[i]) {
            i += 1;
        }
        let name = &text[start..i];
        let rest = text[i..].trim_start();
        if !rest.starts_with('(') || name.as_bytes()[0].is_ascii_digit() {
            continue;
        }
        let before = text[..start].trim_end();
        let qualifier = match before.as_bytes().last() {
            Some(b'.' | b':') => {
                let head = &before[..before.len() - 1];
                let from = head.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
                let library = &head[from.map_or(0, |f| f + 1)..];
                // Only a plain name before the dot: `a.b.c(` is not a library call.
                if library.is_empty() || head[..head.len() - library.len()].ends_with('.') {
                    continue;
                }
                Some(library)
            }
            _ if before.ends_with("function") => continue,
            _ => None,
        };
        found.push((qualifier, name));
    }
    found
}

/// Whether the script defines `name` itself (`local name`, `function name`, `name =`), in which
/// case a nil call of it is the script's own logic, not a misspelled global.
fn defined_in(code: &str, name: &str) -> bool {
    code.lines().any(|line| {
        let line = line.trim();
        [
            format!("local {name}"),
            format!("local function {name}"),
            format!("function {name}"),
        ]
        .iter()
        .any(|prefix| line.starts_with(prefix.as_str()))
            || line.strip_prefix(name).is_some_and(|rest| {
                rest.trim_start().starts_with('=') && !rest.trim_start().starts_with("==")
            })
    })
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
