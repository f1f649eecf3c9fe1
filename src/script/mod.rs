//! The script engines: compile a hook script once (cached by content digest), then run it
//! against a request in a sandbox with budgets, in Rhai or in Luau, with one helper library.
//!
//! This file is the facade and the compile cache; each engine lives in its own pair of files
//! (`rhai_engine`/`rhai_convert`, `lua_engine`/`lua_convert`), the helpers in `helpers`, budgets
//! in `limits`, what a call costs in `cost`, what a call runs in in `scope`, what a running call's callbacks read in `active`, which request fields a script
//! reads in `request_use`, errors in `error` and script logging in `log`. The contract scripts
//! see is documented in `docs/scripting.md`.

mod active;
pub(crate) mod ceilings;
mod cost;
mod coverage;
mod definitions;
mod error;
mod events;
mod helper_docs;
mod helper_env;
mod helpers;
mod limits;
mod log;
mod lua_convert;
mod lua_engine;
mod lua_tape;
pub(crate) mod memory;
mod purity;
mod request;
mod request_use;
mod rhai_convert;
mod rhai_engine;
mod scope;
mod stack;
pub use stack::THREAD_STACK;
pub(crate) mod suggest;
mod typos;

pub use cost::CallCost;
pub(crate) use coverage::{ScriptCoverage, lcov};
pub(crate) use definitions::helper_infos;
pub(crate) use error::{LimitKind, ScriptError, ScriptErrorKind};
pub(crate) use events::EventSink;
pub(crate) use limits::{
    DEFAULT_MAX_ARRAY_SIZE, DEFAULT_MAX_MAP_SIZE, DEFAULT_MAX_STRING_SIZE, EffectiveLimits,
};
pub(crate) use log::LogSink;
pub(crate) use purity::Purity;
pub use request::{HookRequest, Json};
pub use scope::{CallContext, CallScope};
pub(crate) use typos::misspelled_helpers;

use crate::api::{HookKind, Language};
use helper_env::HelperEnv;
use limits::Budget;
use sha2::Digest;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

/// Where a script's source came from; named in every error about it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ScriptOrigin {
    /// The `inline` field of a controller's hook.
    Inline { controller: String, hook: HookKind },
    /// A key of a ConfigMap (`configMapRef`).
    ConfigMap {
        namespace: String,
        name: String,
        key: String,
    },
    /// The `inline` field of one of a controller's libraries.
    InlineLibrary { controller: String, library: String },
    /// A file on disk (`metascript test`, examples).
    File { path: PathBuf },
}

impl fmt::Display for ScriptOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScriptOrigin::Inline { controller, hook } => write!(
                f,
                "inline script of {} {controller} hook {hook}",
                hook.kind()
            ),
            ScriptOrigin::ConfigMap {
                namespace,
                name,
                key,
            } => write!(f, "ConfigMap {namespace}/{name} key {key}"),
            ScriptOrigin::InlineLibrary {
                controller,
                library,
            } => write!(f, "inline library {library} of controller {controller}"),
            ScriptOrigin::File { path } => write!(f, "file {}", shown_path(path).display()),
        }
    }
}

/// A path as messages show it: without the `.` steps that joining relative directories leaves
/// (`././sync.rhai` is shown `./sync.rhai`).
pub(crate) fn shown_path(path: &std::path::Path) -> PathBuf {
    path.components().collect()
}

/// A script to compile: its language, its code, where it came from, and the libraries it is
/// compiled with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptSource {
    pub language: Language,
    pub code: Arc<str>,
    pub origin: ScriptOrigin,
    /// Loaded before the script, in this order; in the script's language.
    pub libraries: Vec<LibrarySource>,
}

impl ScriptSource {
    pub fn new(language: Language, code: impl Into<Arc<str>>, origin: ScriptOrigin) -> Self {
        ScriptSource {
            language,
            code: code.into(),
            origin,
            libraries: Vec::new(),
        }
    }

    pub(crate) fn with_libraries(mut self, libraries: Vec<LibrarySource>) -> Self {
        self.libraries = libraries;
        self
    }
}

/// A library (`spec.libraries`): Rhai functions callable by name, or a Lua chunk whose returned
/// value is bound to the global `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibrarySource {
    pub name: String,
    pub code: Arc<str>,
    pub origin: ScriptOrigin,
}

/// The most libraries a script may be compiled with (a controller may list): each one runs
/// before every call of its hooks.
pub(crate) const MAX_LIBRARIES: usize = 16;

/// Names a library may not take: the Lua globals a hook relies on (keywords, the standard
/// library, the sandbox's own) and the helpers, which a Lua library bound to the same name would
/// hide. Rhai binds no name, but one rule for both languages lets a library be ported.
const RESERVED_NAMES: &[&str] = &[
    "and",
    "break",
    "do",
    "else",
    "elseif",
    "end",
    "false",
    "for",
    "function",
    "if",
    "in",
    "local",
    "nil",
    "not",
    "or",
    "repeat",
    "return",
    "then",
    "true",
    "until",
    "while",
    "continue",
    "export",
    "type",
    "typeof",
    "_G",
    "_VERSION",
    "assert",
    "error",
    "getmetatable",
    "ipairs",
    "next",
    "pairs",
    "pcall",
    "print",
    "rawequal",
    "rawget",
    "rawlen",
    "rawset",
    "select",
    "setmetatable",
    "tonumber",
    "tostring",
    "unpack",
    "xpcall",
    "string",
    "table",
    "math",
    "utf8",
    "bit32",
    "os",
    "coroutine",
    "buffer",
    "vector",
    "require",
    "load",
    "loadstring",
    "dofile",
    "loadfile",
    "getfenv",
    "setfenv",
    "gcinfo",
    "newproxy",
    "io",
    "debug",
    "package",
    "collectgarbage",
    "null",
    "array",
    "map",
    "request",
    "let",
    "const",
    "fn",
    "this",
    "global",
];

/// Whether `names` can name a list of libraries: at most [`MAX_LIBRARIES`], none twice, each
/// a plain identifier that hides nothing a script uses. The error names the library and why.
pub(crate) fn check_library_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<(), (String, String)> {
    let mut seen = BTreeSet::new();
    for (index, name) in names.into_iter().enumerate() {
        let refuse = |reason: String| Err((name.to_string(), reason));
        if index == MAX_LIBRARIES {
            return refuse(format!("at most {MAX_LIBRARIES} libraries may be listed"));
        }
        if !seen.insert(name) {
            return refuse("the name is listed twice".into());
        }
        check_library_name(name).or_else(refuse)?;
    }
    Ok(())
}

/// Whether `name` can name a library: a plain identifier that hides nothing a script uses.
fn check_library_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let identifier = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier {
        return Err(format!(
            "the name {name:?} is not an identifier (letters, digits and _, not starting with a digit)"
        ));
    }
    if RESERVED_NAMES.contains(&name) || helpers::HELPERS.iter().any(|h| h.name == name) {
        return Err(format!(
            "the name {name:?} would hide the keyword, global or helper of that name"
        ));
    }
    Ok(())
}

/// One piece of a program: a library, or the hook itself (always last).
pub(crate) struct Part {
    /// The library's name; `None` for the hook.
    pub library: Option<String>,
    pub origin: Arc<ScriptOrigin>,
    pub code: Arc<str>,
    /// The program line on which this part's first line falls.
    pub first_line: u32,
}

/// A hook and its libraries as one program. Rhai compiles them as one text, libraries first,
/// each starting on a new line; Luau runs each as a chunk of its own. Either way, program lines
/// are numbered through the parts in that order, and every position an engine reports is a
/// program line, which [`Layout::locate`] maps back to the part and its own line.
pub(crate) struct Layout {
    parts: Vec<Part>,
}

impl Layout {
    fn of(source: &ScriptSource) -> Layout {
        let mut first_line = 1;
        let mut parts = Vec::with_capacity(source.libraries.len() + 1);
        let pieces = source
            .libraries
            .iter()
            .map(|l| (Some(l.name.clone()), &l.origin, &l.code))
            .chain(std::iter::once((None, &source.origin, &source.code)));
        for (library, origin, code) in pieces {
            parts.push(Part {
                library,
                origin: Arc::new(origin.clone()),
                code: code.clone(),
                first_line,
            });
            // The next part starts on the line after this one's last.
            first_line += code.matches('\n').count() as u32 + 1;
        }
        Layout { parts }
    }

    /// The hook's part.
    pub(crate) fn hook(&self) -> &Part {
        self.parts.last().expect("a layout always holds the hook")
    }

    pub(crate) fn libraries(&self) -> &[Part] {
        &self.parts[..self.parts.len() - 1]
    }

    /// The part a program line falls in, and the line within it.
    pub(crate) fn locate(&self, line: u32) -> (&Part, u32) {
        let part = self
            .parts
            .iter()
            .rev()
            .find(|part| part.first_line <= line)
            .unwrap_or_else(|| self.hook());
        (part, line.saturating_sub(part.first_line) + 1)
    }

    /// The program line of a line of a part.
    pub(crate) fn program_line(part: &Part, line: u32) -> u32 {
        part.first_line + line.saturating_sub(1)
    }

    /// The Rhai text of the whole program: each library, then the hook, each on new lines.
    fn joined(&self) -> String {
        let codes: Vec<&str> = self.parts.iter().map(|part| &*part.code).collect();
        codes.join("\n")
    }

    /// Splits program lines into each part's own lines.
    pub(crate) fn split(&self, lines: &BTreeSet<u32>) -> Vec<(&Part, BTreeSet<u32>)> {
        let mut split: Vec<(&Part, BTreeSet<u32>)> =
            self.parts.iter().map(|p| (p, BTreeSet::new())).collect();
        for line in lines {
            let (part, own) = self.locate(*line);
            if let Some((_, set)) = split.iter_mut().find(|(p, _)| std::ptr::eq(*p, part)) {
                set.insert(own);
            }
        }
        split
    }
}

/// The compiled form of a script, shared by every handle with the same language and code.
pub(crate) struct Program {
    code: Code,
    /// The fields of `request` the script reads as script values; only those are converted.
    request: active::RequestUse,
}

pub(crate) enum Code {
    /// The libraries and the hook, compiled as one text.
    Rhai(::rhai::AST),
    /// Luau bytecode of the hook and of each library (in order); loaded once into each pooled
    /// state that runs it.
    Lua {
        hook: Vec<u8>,
        libraries: Vec<Vec<u8>>,
    },
}

/// A compiled script as one origin sees it: the shared program plus the origin and source used
/// for error messages.
pub struct CompiledScript {
    digest: String,
    language: Language,
    /// The hook and its libraries, with their origins.
    layout: Layout,
    program: Arc<Program>,
}

impl CompiledScript {
    /// SHA-256 (hex) of the language, the code and the libraries': the cache key, and what the
    /// operator compares to notice that a hook's script (or a library it uses) changed.
    pub(crate) fn digest(&self) -> &str {
        &self.digest
    }

    pub(crate) fn language(&self) -> Language {
        self.language
    }

    pub(crate) fn origin(&self) -> &ScriptOrigin {
        &self.layout.hook().origin
    }

    pub(crate) fn code(&self) -> &str {
        &self.layout.hook().code
    }

    /// The libraries compiled with the script, in load order.
    pub(crate) fn libraries(&self) -> impl Iterator<Item = LibrarySource> + '_ {
        self.layout.libraries().iter().map(|part| LibrarySource {
            name: part.library.clone().unwrap_or_default(),
            code: part.code.clone(),
            origin: (*part.origin).clone(),
        })
    }

    /// Why this script may have returned nothing (null) where a map was expected: a Rhai script
    /// that came out of YAML may have lost its final map literal `#{...}` to a YAML comment.
    pub(crate) fn empty_response_hint(&self) -> Option<&'static str> {
        (self.language == Language::Rhai && from_yaml(self.origin())).then_some(YAML_COMMENT_HINT)
    }
}

impl fmt::Debug for CompiledScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledScript")
            .field("digest", &self.digest)
            .field("language", &self.language)
            .field("origin", self.origin())
            .finish_non_exhaustive()
    }
}

/// What an engine needs to run one call: the helper environment, the limits and the budget.
pub(crate) struct CallSetup<'a> {
    pub script: &'a CompiledScript,
    pub env: HelperEnv,
    pub limits: EffectiveLimits,
    pub budget: Arc<Budget>,
    /// Where the call's line coverage goes, on an engine built with coverage on.
    pub coverage: Option<&'a coverage::Recorder>,
}

impl CallSetup<'_> {
    /// An error of this call at a program line (`Layout`): it names the part (the hook or a
    /// library) the line falls in, and its own line there.
    pub(crate) fn error(
        &self,
        kind: ScriptErrorKind,
        message: impl Into<String>,
        line: Option<u32>,
        column: Option<u32>,
    ) -> ScriptError {
        let layout = &self.script.layout;
        let (part, line) = match line {
            Some(line) => {
                let (part, own) = layout.locate(line);
                (part, Some(own))
            }
            None => (layout.hook(), None),
        };
        ScriptError::new(kind, message, self.script.language, part.origin.clone())
            .in_call(&self.env.controller, self.env.hook)
            .at(&part.code, line, column)
    }

    /// Moves an error to a program line: the part it falls in, and its own line there.
    pub(crate) fn at_line(&self, mut error: ScriptError, line: u32) -> ScriptError {
        let (part, own) = self.script.layout.locate(line);
        error.origin = part.origin.clone();
        error.at(&part.code, Some(own), None)
    }

    /// The error of a request the script cannot be given (a part nested too deeply); `path` is
    /// where in the request.
    pub(crate) fn request_error(&self, path: &str, message: &str) -> ScriptError {
        self.error(
            ScriptErrorKind::Conversion,
            format!("request{path} cannot be given to the script: {message}"),
            None,
            None,
        )
    }

    pub(crate) fn limit_error(&self, limit: LimitKind, line: Option<u32>) -> ScriptError {
        self.error(
            ScriptErrorKind::Limit { limit },
            self.limits.describe(limit),
            line,
            None,
        )
    }

    /// Fails the call when it went over a memory budget. Checked once the script has returned,
    /// before its response is converted (which no progress check watches, and which copies
    /// the response once more), and again after.
    pub(crate) fn check_memory(&self) -> Result<(), ScriptError> {
        match memory::CallMemory::exceeded() {
            None => Ok(()),
            Some(exceeded) => {
                let limit = limits::memory_limit(exceeded);
                self.budget.trip(limit);
                Err(self.limit_error(limit, None))
            }
        }
    }
}

/// Compiles and runs hook scripts. Cheap to clone; clones share the compile cache.
#[derive(Clone)]
pub struct ScriptEngine {
    inner: Arc<Inner>,
    /// The most objects one response may return in a list (`metascript run --max-children`).
    max_children: usize,
    /// The most any call may have, whatever its hook's `limits` ask (the admission webhook's
    /// test runs); `None`: a hook's limits as they are.
    ceiling: Option<EffectiveLimits>,
    /// The most a hook's `limits` may ask for; a hook asking more does not load. `None`
    /// offline, where the author's machine is the only one at stake.
    allowed: Option<ceilings::LimitCeilings>,
    /// Calls hold only their own limit, never the shared script memory pool
    /// ([`memory::CallMemory::enter_apart`]).
    apart_from_pool: bool,
}

/// How many objects one response may return in a list by default: more than a controller
/// should own per object, and far fewer than would strain the API server.
pub(crate) const DEFAULT_MAX_CHILDREN: usize = 1000;

struct Inner {
    /// Weak entries: a program lives as long as some hook holds it, so scripts replaced by hot
    /// reload are freed instead of accumulating; dead entries are pruned on insert.
    cache: Mutex<HashMap<String, Weak<Program>>>,
    rhai: rhai_engine::RhaiEngines,
    lua: lua_engine::LuaStates,
    /// Set on an engine that gathers line coverage (`with_coverage`).
    coverage: Option<coverage::Recorder>,
}

impl Default for ScriptEngine {
    fn default() -> Self {
        ScriptEngine::new()
    }
}

impl fmt::Debug for ScriptEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptEngine").finish_non_exhaustive()
    }
}

impl ScriptEngine {
    pub fn new() -> ScriptEngine {
        ScriptEngine::build(false)
    }

    /// An engine that also gathers the line coverage of every script it runs (`coverage`), for
    /// `metascript test --coverage`. Rhai scripts run under a stepping debugger and Luau scripts
    /// are compiled with coverage counters, so this is slower than [`ScriptEngine::new`]; the
    /// results are the same.
    pub(crate) fn with_coverage() -> ScriptEngine {
        ScriptEngine::build(true)
    }

    fn build(coverage: bool) -> ScriptEngine {
        ScriptEngine {
            inner: Arc::new(Inner {
                cache: Mutex::new(HashMap::new()),
                rhai: rhai_engine::RhaiEngines::new(coverage),
                lua: lua_engine::LuaStates::new(),
                coverage: coverage.then(coverage::Recorder::default),
            }),
            max_children: DEFAULT_MAX_CHILDREN,
            ceiling: None,
            allowed: None,
            apart_from_pool: false,
        }
    }

    /// Caps every call's limits at `ceiling`, whatever its hook asks.
    pub(crate) fn with_ceiling(mut self, ceiling: EffectiveLimits) -> ScriptEngine {
        self.ceiling = Some(ceiling);
        self
    }

    /// Runs every call on its own limit alone, apart from the shared pool: for calls whose
    /// number and limits are bounded by other means (the admission webhook's test runs).
    pub(crate) fn apart_from_pool(mut self) -> ScriptEngine {
        self.apart_from_pool = true;
        self
    }

    /// Refuses hooks whose `limits` ask for more than `allowed` ([`ScriptEngine::admits`]).
    pub(crate) fn with_limit_ceilings(mut self, allowed: ceilings::LimitCeilings) -> ScriptEngine {
        self.allowed = Some(allowed);
        self
    }

    /// Whether a hook may ask for `limits` on this engine.
    pub(crate) fn admits(&self, limits: &crate::api::Limits) -> Result<(), ceilings::AboveCeiling> {
        self.allowed.map_or(Ok(()), |allowed| allowed.check(limits))
    }

    /// Sets how many objects one response may return in a list.
    pub(crate) fn with_max_children(mut self, max_children: usize) -> ScriptEngine {
        self.max_children = max_children;
        self
    }

    pub(crate) fn max_children(&self) -> usize {
        self.max_children
    }

    /// The line coverage gathered so far, by script origin; empty unless built
    /// [`ScriptEngine::with_coverage`].
    pub(crate) fn coverage(&self) -> Vec<ScriptCoverage> {
        self.inner
            .coverage
            .as_ref()
            .map_or_else(Vec::new, coverage::Recorder::report)
    }

    /// Compiles a script, or reuses the program already compiled from the same language and code
    /// (whatever its origin). The returned handle carries `source.origin` for error messages.
    pub fn compile(&self, source: &ScriptSource) -> Result<Arc<CompiledScript>, ScriptError> {
        if source.libraries.len() > MAX_LIBRARIES {
            return Err(ScriptError::new(
                ScriptErrorKind::Compile,
                format!("at most {MAX_LIBRARIES} libraries"),
                source.language,
                Arc::new(source.origin.clone()),
            ));
        }
        let digest = digest(source);
        let layout = Layout::of(source);
        let cached = self
            .inner
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&digest)
            .and_then(Weak::upgrade);
        let program = match cached {
            Some(program) => program,
            None => {
                let started = Instant::now();
                // Libraries cannot see `request` (Rhai functions see only their arguments; a Lua
                // library runs in globals of its own), so only the hook's reads count.
                let program = Arc::new(match source.language {
                    Language::Rhai => Program {
                        code: self.inner.rhai.compile(&layout)?,
                        request: request_use::rhai(&source.code),
                    },
                    Language::Lua => Program {
                        code: lua_engine::compile(&layout, self.inner.coverage.is_some())?,
                        request: request_use::lua(&source.code),
                    },
                });
                tracing::debug!(
                    language = %source.language,
                    origin = %source.origin,
                    digest = %digest,
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "compiled script"
                );
                let mut cache = self.inner.cache.lock().unwrap_or_else(|e| e.into_inner());
                cache.retain(|_, program| program.strong_count() > 0);
                cache.insert(digest.clone(), Arc::downgrade(&program));
                program
            }
        };
        Ok(Arc::new(CompiledScript {
            digest,
            language: source.language,
            layout,
            program,
        }))
    }

    #[cfg(test)]
    /// How many distinct programs are cached and alive (for tests and metrics).
    pub(crate) fn cached_programs(&self) -> usize {
        self.inner
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|p| p.strong_count() > 0)
            .count()
    }

    /// How many Lua states this engine has built (each reused until a call fails).
    #[cfg(test)]
    pub(crate) fn lua_states_built(&self) -> usize {
        self.inner.lua.built()
    }

    /// Runs a script on the calling thread, for tests that need only its answer.
    #[cfg(test)]
    pub fn call<'a>(
        &self,
        script: &CompiledScript,
        request: impl Into<HookRequest<'a>>,
        call: &CallContext,
    ) -> Result<serde_json::Value, ScriptError> {
        self.call_measured(script, request, call).0
    }

    /// Runs a script on the calling thread, and says what the call cost. Blocks for up to the
    /// call's timeout: async code runs it on the blocking pool.
    pub fn call_measured<'a>(
        &self,
        script: &CompiledScript,
        request: impl Into<HookRequest<'a>>,
        call: &CallContext,
    ) -> (Result<serde_json::Value, ScriptError>, CallCost) {
        let request = request.into();
        let started = Instant::now();
        let cpu_before = cost::thread_cpu();
        let limits = EffectiveLimits::from(&call.limits);
        let limits = match &self.ceiling {
            Some(ceiling) => limits.at_most(ceiling),
            None => limits,
        };
        // Lua is given its request laid out before the call, fields lent as text laid flat
        // (`lua_tape`); fields it is not given stay text: readers take paths from it.
        let laid = match &script.program.code {
            Code::Lua { .. } => lua_convert::lay_out(&request, &script.program.request),
            // Rhai builds its values from the request as it is.
            Code::Rhai(_) => Ok(Vec::new()),
        };
        // Whatever the call produces besides its response is scrubbed of these.
        request.note_secrets(&call.scope.secrets);
        let setup = CallSetup {
            script,
            env: HelperEnv {
                controller: call.controller.clone(),
                hook: call.hook,
                language: script.language,
                now: call.scope.clock.unwrap_or_else(jiff::Timestamp::now),
                scope: call.scope.clone(),
            },
            budget: Arc::new(Budget::start(&limits)),
            limits,
            coverage: self.inner.coverage.as_ref(),
        };
        // Counted from before the request is converted until the response has been.
        let limit = usize::try_from(setup.limits.max_memory_bytes).unwrap_or(usize::MAX);
        let memory = if self.apart_from_pool {
            memory::CallMemory::enter_apart(limit)
        } else {
            memory::CallMemory::enter(limit)
        };
        let result = match &script.program.code {
            // Rhai recurses over values; Luau's own stack and the conversions' depth limit
            // keep a Lua call within any thread's.
            Code::Rhai(ast) => stack::run(|| match setup.coverage {
                None => self.inner.rhai.call(ast, request, &setup),
                Some(recorder) => {
                    let (result, hits) =
                        coverage::gather(|| self.inner.rhai.call(ast, request, &setup));
                    // A script's executable lines are only computed the first time it is seen.
                    let executable = |index: usize| {
                        let lines = rhai_engine::statement_lines(ast);
                        script.layout.split(&lines).swap_remove(index).1
                    };
                    for (index, (part, hits)) in script.layout.split(&hits).into_iter().enumerate()
                    {
                        recorder.record(&part.origin, script.language, || executable(index), hits);
                    }
                    result
                }
            }),
            Code::Lua { .. } => self.inner.lua.call(request, &laid, &setup),
        };
        // The response's conversion runs after the script's last progress check.
        let result = result.and_then(|response| setup.check_memory().map(|()| response));
        let peak_memory = memory::CallMemory::peak() as u64;
        drop(memory);
        let cost = CallCost {
            cpu: cost::thread_cpu().saturating_sub(cpu_before),
            operations: setup.budget.operations(),
            peak_memory,
        };
        let elapsed_us = started.elapsed().as_micros() as u64;
        match &result {
            Ok(_) => tracing::debug!(
                controller = %call.controller,
                hook = %call.hook,
                language = %script.language,
                digest = %script.digest,
                operations = setup.budget.operations(),
                elapsed_us,
                "hook script returned"
            ),
            Err(error) => tracing::debug!(
                controller = %call.controller,
                hook = %call.hook,
                language = %script.language,
                digest = %script.digest,
                elapsed_us,
                error = %call.scope.secrets.scrub(&error.to_string()),
                "hook script failed"
            ),
        }
        (result, cost)
    }

    #[cfg(test)]
    /// Runs a script on tokio's blocking pool, so a slow script never stalls the runtime's
    /// worker threads.
    pub(crate) async fn call_async(
        &self,
        script: Arc<CompiledScript>,
        request: Arc<serde_json::Value>,
        call: CallContext,
    ) -> Result<serde_json::Value, ScriptError> {
        let engine = self.clone();
        let origin = script.layout.hook().origin.clone();
        let language = script.language;
        let (controller, hook) = (call.controller.clone(), call.hook);
        tokio::task::spawn_blocking(move || engine.call(&script, request.as_ref(), &call))
            .await
            .unwrap_or_else(|join_error| {
                Err(ScriptError::new(
                    ScriptErrorKind::Internal,
                    format!("the script worker failed: {join_error}"),
                    language,
                    origin,
                )
                .in_call(&controller, hook))
            })
    }
}

/// The operator's async runtime. Its threads, the blocking pool's among them (where hook
/// scripts run), have the stack a Rhai call needs ([`stack::THREAD_STACK`]), so calls run on
/// them as they are rather than on a stack made for each.
pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(stack::THREAD_STACK)
        .build()
}

/// Advice for a Rhai script in YAML that lost a line starting with `#` (a map literal `#{`).
pub(crate) const YAML_COMMENT_HINT: &str = "in YAML, a line starting with `#` (such as a Rhai map literal \
    `#{`) is a comment unless it is inside a block scalar (`inline: |`) and indented at least as \
    far as the block's first line: if the script's map literal became a YAML comment, indent it";

/// Whether a script's text came out of a YAML document (a controller or a ConfigMap) rather than
/// a file of its own.
fn from_yaml(origin: &ScriptOrigin) -> bool {
    !matches!(origin, ScriptOrigin::File { .. })
}

/// Editor definitions of the hook environment (`request`, responses, helpers) for a language:
/// a LuaLS `---@meta` file or a Rhai `.d.rhai` file (`docs/scripting.md`).
/// `hooks` are the hooks of every kind.
pub(crate) fn definitions(language: Language, hooks: &[HookKind]) -> String {
    match language {
        Language::Lua => definitions::lua(hooks),
        Language::Rhai => rhai_engine::definitions(hooks),
    }
}

fn digest(source: &ScriptSource) -> String {
    let mut hasher = sha2::Sha256::new();
    hasher.update(source.language.as_str().as_bytes());
    // The separator keeps `rhai` + `x` distinct from `rha` + `ix`.
    hasher.update([0u8]);
    hasher.update(source.code.as_bytes());
    // A script without libraries keeps the digest it always had.
    for library in &source.libraries {
        hasher.update([0u8]);
        hasher.update(library.name.as_bytes());
        hasher.update([0u8]);
        hasher.update(library.code.len().to_le_bytes());
        hasher.update(library.code.as_bytes());
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests;
