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
use super::error::{LimitKind, ScriptError, ScriptErrorKind};
use super::helpers::{HELPERS, Helper, HelperError, Run};
use super::limits::Budget;
use super::log::{LogLevel, LogLine};
use super::lua_convert::{
    ConvertError, Laid, Markers, RequestRoot, from_lua, read_at, set_request, to_lua_result,
};
use super::memory;
use super::suggest::nearest;
use super::{CallSetup, Code, HookRequest, Layout, MAX_LIBRARIES, Part, Program, ScriptOrigin};
use crate::api::Language;
use mlua::chunk::{ChunkMode, Compiler};
use mlua::thread::ThreadStatus;
use mlua::{
    FromLuaMulti, Function, IntoLuaMulti, Lua, LuaOptions, MultiValue, StdLib, Table, Thread,
    Value as LuaValue, Variadic, VmState, ffi,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

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

/// Compiles a hook and each of its libraries; with `coverage`, the bytecode counts how often
/// each statement runs.
pub(crate) fn compile(layout: &Layout, coverage: bool) -> Result<Code, ScriptError> {
    let compile_part = |part: &Part| {
        luau_compiler()
            .set_coverage_level(u8::from(coverage))
            .compile(part.code.as_bytes())
            .map_err(|error| {
                let raw = match &error {
                    mlua::Error::SyntaxError { message, .. } => message.clone(),
                    other => other.to_string(),
                };
                let (line, message) = split_compiler_location(&raw);
                ScriptError::new(
                    ScriptErrorKind::Compile,
                    message,
                    Language::Lua,
                    part.origin.clone(),
                )
                .at(&part.code, line, None)
            })
    };
    let libraries = layout
        .libraries()
        .iter()
        .map(compile_part)
        .collect::<Result<_, _>>()?;
    Ok(Code::Lua {
        hook: compile_part(layout.hook())?,
        libraries,
    })
}

/// The pool of sandboxed states of one [`super::ScriptEngine`].
pub(crate) struct LuaStates {
    idle: Mutex<Vec<LuaState>>,
    /// How many states were ever built, for tests that check reuse.
    built: AtomicUsize,
}

impl LuaStates {
    pub(super) fn new() -> LuaStates {
        LuaStates {
            idle: Mutex::new(Vec::new()),
            built: AtomicUsize::new(0),
        }
    }

    #[cfg(test)]
    pub(super) fn built(&self) -> usize {
        self.built.load(Ordering::Relaxed)
    }

    pub(super) fn call(
        &self,
        request: HookRequest,
        laid: &Laid,
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
        let response = state.call(request, laid, setup)?;
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
    programs: HashMap<String, (Weak<Program>, Chunks)>,
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
        // its own globals (see `sandboxed_thread`).
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
        request: HookRequest,
        laid: &Laid,
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
        let chunks = self.chunks(setup).map_err(internal)?;
        let (thread, globals): (Thread, Table) =
            sandboxed_thread(&self.lua, chunks.hook.clone(), false).map_err(internal)?;
        let libraries = match chunks.libraries.is_empty() {
            true => None,
            // Libraries run in globals of their own: they see the helpers and each other, not
            // `request` or what the hook assigns.
            false => Some(library_thread(&self.lua, &chunks.libraries).map_err(internal)?),
        };
        let stopped_at = set_interrupt(&self.lua, setup.budget.clone());
        let lua = &self.lua;
        // Luau refuses an allocation beyond this (a memory error the script cannot outrun by one
        // huge operation): the call's own limit, or what the shared pool has left if less.
        let own_limit = usize::try_from(setup.limits.max_memory_bytes).unwrap_or(usize::MAX);
        let max_memory = memory::allowance(own_limit);
        let converted = &setup.script.program.request;
        // A request the script cannot be given (nested too deeply) fails the call as such.
        let mut refused = None;
        let mut run = || -> mlua::Result<LuaValue> {
            lua.set_memory_limit(lua.used_memory().saturating_add(max_memory))?;
            let id = match set_request(lua, &self.markers, &globals, laid) {
                Ok(id) => id,
                Err(ConvertError {
                    lua: Some(error), ..
                }) => return Err(error),
                Err(error) => {
                    refused = Some(setup.request_error(&error.path(), &error.message));
                    return Ok(LuaValue::Nil);
                }
            };
            if let LuaValue::Table(root) = globals.raw_get("request")? {
                lua.set_app_data(RequestRoot(root));
            }
            let _active = ActiveGuard::enter(
                setup.env.clone(),
                setup.budget.clone(),
                Request::partial(id, request, converted),
            );
            if let Some((library_globals, clones)) = &libraries {
                for (clone, part) in clones.iter().zip(setup.script.layout.libraries()) {
                    let name = part.library.as_deref().unwrap_or_default();
                    let value: LuaValue = clone.call(())?;
                    if value.is_nil() {
                        return Err(mlua::Error::runtime(format!(
                            "library {name} returned nil; a Lua library ends by returning the \
                             table of what it offers (`return M`)"
                        )));
                    }
                    library_globals.raw_set(name, value.clone())?;
                    globals.raw_set(name, value)?;
                }
            }
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
        if let Some(refused) = refused {
            return Err(refused);
        }
        if let Some(recorder) = setup.coverage {
            let layout = &setup.script.layout;
            record_coverage(recorder, &layout.hook().origin, &chunks.hook);
            for (part, chunk) in layout.libraries().iter().zip(&chunks.libraries) {
                record_coverage(recorder, &part.origin, chunk);
            }
        }
        let value = result.map_err(|error| {
            let (line, mut error) = map_error(&error, setup);
            if max_memory < own_limit
                && matches!(
                    error.kind,
                    ScriptErrorKind::Limit {
                        limit: LimitKind::Memory
                    }
                )
            {
                error = setup.limit_error(LimitKind::ScriptMemory, line);
            }
            let code = line.map(|line| &setup.script.layout.locate(line).0.code);
            if let (Some(code), Some(own)) = (code, error.line)
                && let Some(name) = undefined_callee(lua, code, own, &error.message)
            {
                error.message = name;
            }
            let stopped = stopped_at
                .get()
                .and_then(|(chunk, line)| program_line(&setup.script.layout, chunk, *line));
            match stopped {
                None => error,
                Some(line) => setup.at_line(error, line),
            }
        })?;
        setup.check_memory()?;
        let response = from_lua(&self.lua, &self.markers, value).map_err(|e| match e.lua {
            Some(error) => map_error(&error, setup).1,
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
        drop((thread, globals, libraries));
        if self.lua.used_memory() > self.resident + GARBAGE_SLACK {
            self.lua.gc_collect().map_err(internal)?;
            self.resident = self.lua.used_memory();
        }
        Ok(response)
    }

    /// The loaded chunks of a program, loading them on first use in this state.
    fn chunks(&mut self, setup: &CallSetup) -> mlua::Result<Chunks> {
        let digest = setup.script.digest();
        if let Some((_, chunks)) = self.programs.get(digest) {
            return Ok(chunks.clone());
        }
        let Code::Lua { hook, libraries } = &setup.script.program.code else {
            return Err(mlua::Error::runtime("not a Lua program"));
        };
        self.programs
            .retain(|_, (program, _)| program.strong_count() > 0);
        let layout = &setup.script.layout;
        let load = |bytecode: &[u8], part: &Part| {
            self.lua
                .load(bytecode)
                .set_name(format!("={}", chunk_name(part)))
                .set_mode(ChunkMode::Binary)
                .into_function()
        };
        let chunks = Chunks {
            hook: load(hook, layout.hook())?,
            libraries: libraries
                .iter()
                .zip(layout.libraries())
                .map(|(bytecode, part)| load(bytecode, part))
                .collect::<mlua::Result<_>>()?,
        };
        self.programs.insert(
            digest.to_string(),
            (Arc::downgrade(&setup.script.program), chunks.clone()),
        );
        Ok(chunks)
    }
}

/// A program's chunks as loaded in one state.
#[derive(Clone)]
struct Chunks {
    hook: Function,
    libraries: Vec<Function>,
}

/// The names of the globals every call's sandbox reads through to.
pub(crate) fn sandbox_globals() -> Vec<String> {
    let state = LuaState::new().expect("a Lua state");
    let globals = state.lua.globals();
    let frozen = match globals.metatable() {
        Some(metatable) => metatable.raw_get::<Table>("__index").unwrap_or(globals),
        None => globals,
    };
    frozen
        .pairs::<String, LuaValue>()
        .filter_map(Result::ok)
        .map(|(name, _)| name)
        .collect()
}

/// The name Luau gives a part in messages (`hook:12: ...`, `library util:3: ...`).
fn chunk_name(part: &Part) -> String {
    match &part.library {
        None => CHUNK.to_string(),
        Some(name) => format!("library {name}"),
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
    recorder.record(origin, Language::Lua, || executable, hit);
}

/// Ticks `budget` from Luau's interrupt, for one call. Installed per call rather than reading
/// the active call, because the interrupt runs on every loop iteration and function call.
/// Returns the cell that receives the chunk and line the script was running when the budget ran
/// out, since the error raised from the interrupt carries no position of its own.
fn set_interrupt(lua: &Lua, budget: Arc<Budget>) -> Arc<OnceLock<(String, u32)>> {
    let stopped_at = Arc::new(OnceLock::new());
    let stopped_at_writer = stopped_at.clone();
    lua.set_interrupt(move |lua| {
        let Err(limit) = budget.tick() else {
            return Ok(VmState::Continue);
        };
        if stopped_at_writer.get().is_none() {
            let found = (0..8).find_map(|level| {
                lua.inspect_stack(level, |d| {
                    let line = u32::try_from(d.current_line()?).ok().filter(|l| *l > 0)?;
                    Some((d.source().short_src?.into_owned(), line))
                })
                .flatten()
            });
            if let Some(found) = found {
                let _ = stopped_at_writer.set(found);
            }
        }
        Err(mlua::Error::runtime(budget.describe(limit)))
    });
    stopped_at
}

/// A new thread with fresh globals (`luaL_sandboxthread`) and clones of the Luau functions
/// `functions` whose environment is those globals; the first clone is left on the thread's
/// stack, ready to resume. `R` receives the thread, then (with `return_clones`) the clones, then
/// the globals.
fn sandboxed_thread<R: FromLuaMulti>(
    lua: &Lua,
    functions: impl IntoLuaMulti,
    return_clones: bool,
) -> mlua::Result<R> {
    // SAFETY: the closure runs protected on the state's current thread with the arguments as
    // the only values on its stack, and checks that they are 1 to `MAX_LIBRARIES` Luau
    // functions before touching them (raising a Lua error otherwise). It only uses the Luau C API as documented:
    // `lua_newthread` pushes the new thread, which starts with an empty stack of LUA_MINSTACK
    // (20) slots and never holds more than three values here; the state's stack is grown for
    // the n + 2 values it holds at most beyond the arguments; `lua_clonefunction` gives each
    // clone the thread's globals. It leaves exactly the thread, the n clones (or none) and the
    // globals on the state's stack, which `exec_raw` converts into the results. No Rust value
    // with a destructor is live across these calls, so a Lua error unwinding through them is
    // sound.
    unsafe {
        lua.exec_raw::<R>(functions, |state| {
            let n = ffi::lua_gettop(state);
            let luau_function = |i| {
                ffi::lua_type(state, i) == ffi::LUA_TFUNCTION && ffi::lua_iscfunction(state, i) == 0
            };
            if !(1..=MAX_LIBRARIES as i32).contains(&n) || !(1..=n).all(luau_function) {
                ffi::luaL_error(
                    state,
                    c"sandboxed_thread takes 1 to 16 Luau functions".as_ptr(),
                );
            }
            ffi::luaL_checkstack(state, n + 2, c"cannot grow the stack".as_ptr());
            let thread = ffi::lua_newthread(state);
            ffi::luaL_sandboxthread(thread);
            for i in 1..=n {
                // The thread holds the first clone (after the first round) and this function.
                ffi::lua_pushvalue(state, i);
                ffi::lua_xmove(state, thread, 1);
                ffi::lua_clonefunction(thread, -1);
                ffi::lua_remove(thread, -2);
                if i == 1 {
                    ffi::lua_pushvalue(thread, -1);
                }
                if return_clones {
                    ffi::lua_xmove(thread, state, 1);
                }
                ffi::lua_settop(thread, 1);
            }
            ffi::lua_pushvalue(thread, ffi::LUA_GLOBALSINDEX);
            ffi::lua_xmove(thread, state, 1);
            for _ in 0..n {
                ffi::lua_remove(state, 1);
            }
        })
    }
}

/// The globals and clones of a program's libraries, in a sandboxed thread of their own.
fn library_thread(lua: &Lua, libraries: &[Function]) -> mlua::Result<(Table, Vec<Function>)> {
    let functions = Variadic::from_iter(libraries.iter().cloned());
    let results: MultiValue = sandboxed_thread(lua, functions, true)?;
    let mut results = results.into_iter();
    // The thread itself is not needed: its clones are called, never resumed.
    results.next();
    let mut clones = Vec::with_capacity(libraries.len());
    for value in results.by_ref().take(libraries.len()) {
        match value {
            LuaValue::Function(clone) => clones.push(clone),
            _ => return Err(mlua::Error::runtime("library_thread: no clone")),
        }
    }
    match results.next() {
        Some(LuaValue::Table(globals)) => Ok((globals, clones)),
        _ => Err(mlua::Error::runtime("library_thread: no globals")),
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
            Some("count") => {
                with_active(|env, _| env.taint("collectgarbage(\"count\")"));
                Ok(lua.used_memory() as f64 / 1024.0)
            }
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
    let math: Table = globals.get("math")?;
    math.raw_set("random", impure(lua, math.get("random")?, "math.random")?)?;
    Ok(())
}

/// `function`, noting each call as impure (see [`crate::script::Purity`]).
fn impure(lua: &Lua, function: Function, source: &'static str) -> mlua::Result<Function> {
    lua.create_function(move |_, args: MultiValue| {
        with_active(|env, _| env.taint(source));
        function.call::<MultiValue>(args)
    })
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
        to_lua_result(lua, &markers, &result).map_err(|e| match e.lua {
            Some(error) => error,
            None => mlua::Error::runtime(format!(
                "{}: result{}: {}",
                helper.name,
                e.path(),
                e.message
            )),
        })
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
        with_active(|env, _| env.now("os.time or os.date").as_second() as f64)
            .ok_or_else(|| mlua::Error::runtime("os: called outside a hook call"))
    };
    let os = lua.create_table()?;
    os.set("clock", impure(lua, luau_os.get("clock")?, "os.clock")?)?;
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

/// The plain calls (`name(...)`, not `t.name(...)` or `t:name(...)`) of globals a Luau script
/// does not define, with their 1-based lines and columns; comments and strings are skipped.
pub(crate) fn undefined_calls(code: &str) -> Vec<(String, u32, u32)> {
    let masked = code_only(code);
    let mut found = Vec::new();
    for (index, line) in masked.lines().enumerate() {
        for (qualifier, name) in calls(line) {
            if qualifier.is_some() || defined_in(code, name) {
                continue;
            }
            let column = name.as_ptr() as usize - line.as_ptr() as usize;
            let column = line[..column].chars().count() as u32 + 1;
            found.push((name.to_string(), index as u32 + 1, column));
        }
    }
    found
}

/// The code with what is inside comments and strings blanked (lines and columns kept).
fn code_only(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    // The closing `]=*]` of a long bracket opening at `at`, if one opens there.
    let long_close = |at: usize| -> Option<String> {
        let level = chars[at + 1..].iter().take_while(|c| **c == '=').count();
        (chars.get(at + 1 + level) == Some(&'[')).then(|| format!("]{}]", "=".repeat(level)))
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        let (end, skipped) = if rest == "--" {
            match (chars.get(i + 2) == Some(&'['))
                .then(|| long_close(i + 2))
                .flatten()
            {
                Some(close) => (find_after(&chars, i + 2, &close), true),
                None => (
                    chars[i..]
                        .iter()
                        .position(|c| *c == '\n')
                        .map_or(chars.len(), |p| i + p),
                    true,
                ),
            }
        } else if c == '[' && long_close(i).is_some() {
            let close = long_close(i).unwrap_or_default();
            (find_after(&chars, i, &close), true)
        } else if matches!(c, '"' | '\'' | '`') {
            let mut end = i + 1;
            while end < chars.len() && chars[end] != c && chars[end] != '\n' {
                end += if chars[end] == '\\' { 2 } else { 1 };
            }
            ((end + 1).min(chars.len()), true)
        } else {
            (i + 1, false)
        };
        match skipped {
            true => out.extend(chars[i..end].iter().map(|c| blank(*c))),
            false => out.push(c),
        }
        i = end;
    }
    out
}

/// The index just past the first `close` after `from`, or the end.
fn find_after(chars: &[char], from: usize, close: &str) -> usize {
    let close: Vec<char> = close.chars().collect();
    chars[from..]
        .windows(close.len())
        .position(|w| w == close.as_slice())
        .map_or(chars.len(), |p| from + p + close.len())
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

/// Splits the compiler's `:12: message` (or `12: message`) into the line and the message.
fn split_compiler_location(text: &str) -> (Option<u32>, String) {
    let first_line = text.lines().next().unwrap_or_default();
    let rest = first_line.strip_prefix(':').unwrap_or(first_line);
    match rest.split_once(':') {
        Some((digits, message)) if digits.trim().parse::<u32>().is_ok() => {
            (digits.trim().parse().ok(), message.trim().to_string())
        }
        _ => (None, first_line.trim().to_string()),
    }
}

/// The program line (`Layout`) of a line of the chunk Luau calls `chunk`.
fn program_line(layout: &Layout, chunk: &str, line: u32) -> Option<u32> {
    let parts = layout
        .libraries()
        .iter()
        .chain(std::iter::once(layout.hook()));
    parts
        .into_iter()
        .find(|part| chunk_name(part) == chunk)
        .map(|part| Layout::program_line(part, line))
}

/// Splits `hook:12: message` (`library util:3: message`) into the program line and the message.
fn split_location(text: &str, layout: &Layout) -> (Option<u32>, String) {
    let first_line = text.lines().next().unwrap_or_default();
    let located = first_line.split_once(':').and_then(|(chunk, rest)| {
        let (digits, message) = rest.split_once(':')?;
        let line = program_line(layout, chunk, digits.trim().parse().ok()?)?;
        Some((Some(line), message.trim().to_string()))
    });
    located.unwrap_or_else(|| (None, first_line.trim().to_string()))
}

/// The first `<chunk>:<line>` of a part in a traceback: the script line that called a failing
/// helper, as a program line.
fn traceback_line(traceback: &str, layout: &Layout) -> Option<u32> {
    traceback.lines().find_map(|line| {
        let line = line.trim();
        let (chunk, rest) = line.split_once(':')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        program_line(layout, chunk, digits.parse().ok()?)
    })
}

/// The script error for a Lua error, and the program line it was at.
fn map_error(error: &mlua::Error, setup: &CallSetup) -> (Option<u32>, ScriptError) {
    let layout = &setup.script.layout;
    let (line, message) = match error {
        mlua::Error::CallbackError { traceback, cause } => {
            let (line, message) = split_location(&root_message(cause), layout);
            (line.or_else(|| traceback_line(traceback, layout)), message)
        }
        other => split_location(&root_message(other), layout),
    };
    // The budget knows whether the script was stopped, even if it caught the error with pcall.
    if let Some(limit) = setup.budget.tripped() {
        return (line, setup.limit_error(limit, line));
    }
    if matches!(root(error), mlua::Error::MemoryError(_)) {
        return (line, setup.limit_error(LimitKind::Memory, line));
    }
    (
        line,
        setup.error(ScriptErrorKind::Runtime, message, line, None),
    )
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

/// Every global a Lua hook sees, and each member of the global tables (`string.rep`), for the
/// review of what the sandbox offers (`tests/sandbox.rs`).
#[cfg(test)]
pub(crate) fn global_names() -> std::collections::BTreeSet<String> {
    let state = LuaState::new().expect("a Lua state");
    let mut names = std::collections::BTreeSet::new();
    // A sandboxed state's globals read through to the frozen ones (`__index`).
    let mut globals = state.lua.globals();
    while let Some(LuaValue::Table(inner)) = globals
        .metatable()
        .and_then(|meta| meta.raw_get::<LuaValue>("__index").ok())
    {
        globals = inner;
    }
    for pair in globals.pairs::<String, LuaValue>() {
        let (name, value) = pair.expect("a global");
        if let LuaValue::Table(table) = &value
            && name != "_G"
        {
            for member in table.pairs::<LuaValue, LuaValue>() {
                let (key, _) = member.expect("a member");
                if let LuaValue::String(key) = key {
                    names.insert(format!("{name}.{}", key.to_string_lossy()));
                }
            }
        }
        names.insert(name);
    }
    names
}
