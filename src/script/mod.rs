//! The script engines: compile a hook script once (cached by content digest), then run it
//! against a request in a sandbox with budgets, in Rhai or in Luau, with one helper library.
//!
//! This file is the facade and the compile cache; each engine lives in its own pair of files
//! (`rhai_engine`/`rhai_convert`, `lua_engine`/`lua_convert`), the helpers in `helpers`, budgets
//! in `limits`, what a running call's callbacks read in `active`, which request fields a script
//! reads in `request_use`, errors in `error` and script logging in `log`. The contract scripts
//! see is documented in `docs/scripting.md`.

mod active;
mod coverage;
mod definitions;
mod error;
mod events;
mod helper_docs;
mod helpers;
mod limits;
mod log;
mod lua_convert;
mod lua_engine;
mod request_use;
mod rhai_convert;
mod rhai_engine;
pub(crate) mod suggest;

pub use coverage::{LineCoverage, ScriptCoverage, lcov};
pub use error::{LimitKind, ScriptError, ScriptErrorKind};
pub use events::{EventSink, EventType, MAX_EVENTS_PER_SYNC, ScriptEvent};
pub use limits::{
    DEFAULT_MAX_ARRAY_SIZE, DEFAULT_MAX_MAP_SIZE, DEFAULT_MAX_MEMORY_BYTES, DEFAULT_MAX_OPERATIONS,
    DEFAULT_MAX_STRING_SIZE, DEFAULT_TIMEOUT_MILLIS, EffectiveLimits, MAX_CALL_DEPTH,
};
pub use log::{LogLevel, LogLine, LogSink};

use crate::api::{HookKind, Language, Limits};
use helpers::HelperEnv;
use limits::Budget;
use sha2::Digest;
use std::collections::HashMap;
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
    /// A file on disk (`metascript test`, examples).
    File { path: PathBuf },
}

impl fmt::Display for ScriptOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScriptOrigin::Inline { controller, hook } => {
                // The hook names the kind: only MapControllers have map/tombstone hooks.
                let kind = match hook {
                    HookKind::Map | HookKind::Tombstone => "MapController",
                    HookKind::Sync | HookKind::Finalize | HookKind::Customize => {
                        "DecoratorController"
                    }
                };
                write!(f, "inline script of {kind} {controller} hook {hook}")
            }
            ScriptOrigin::ConfigMap {
                namespace,
                name,
                key,
            } => write!(f, "ConfigMap {namespace}/{name} key {key}"),
            ScriptOrigin::File { path } => write!(f, "file {}", path.display()),
        }
    }
}

/// A script to compile: its language, its code and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptSource {
    pub language: Language,
    pub code: Arc<str>,
    pub origin: ScriptOrigin,
}

impl ScriptSource {
    pub fn new(language: Language, code: impl Into<Arc<str>>, origin: ScriptOrigin) -> Self {
        ScriptSource {
            language,
            code: code.into(),
            origin,
        }
    }
}

/// The compiled form of a script, shared by every handle with the same language and code.
pub(crate) struct Program {
    code: Code,
    /// The fields of `request` the script reads as script values; only those are converted.
    request: request_use::RequestUse,
}

pub(crate) enum Code {
    Rhai(::rhai::AST),
    /// Luau bytecode; loaded once into each pooled state that runs it.
    Lua(Vec<u8>),
}

/// A compiled script as one origin sees it: the shared program plus the origin and source used
/// for error messages.
pub struct CompiledScript {
    digest: String,
    language: Language,
    origin: Arc<ScriptOrigin>,
    code: Arc<str>,
    program: Arc<Program>,
}

impl CompiledScript {
    /// SHA-256 (hex) of the language and the code: the cache key, and what the operator compares
    /// to notice that a hook's script changed.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    pub fn language(&self) -> Language {
        self.language
    }

    pub fn origin(&self) -> &ScriptOrigin {
        &self.origin
    }

    pub fn code(&self) -> &str {
        &self.code
    }

    /// Why this script may have returned nothing (null) where a map was expected: a Rhai script
    /// that came out of YAML may have lost its final map literal `#{...}` to a YAML comment.
    pub fn empty_response_hint(&self) -> Option<&'static str> {
        (self.language == Language::Rhai && from_yaml(&self.origin)).then_some(YAML_COMMENT_HINT)
    }

    fn error(&self, kind: ScriptErrorKind, message: impl Into<String>) -> ScriptError {
        ScriptError::new(kind, message, self.language, self.origin.clone())
    }
}

impl fmt::Debug for CompiledScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledScript")
            .field("digest", &self.digest)
            .field("language", &self.language)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// Everything a call needs besides the script and the request.
#[derive(Clone, Debug)]
pub struct CallContext {
    pub controller: String,
    pub hook: HookKind,
    /// The hook's limits; unset fields take the defaults (`DEFAULT_*`).
    pub limits: Limits,
    /// A fixed `now()` (tests); the wall clock at the start of the call when `None`.
    pub clock: Option<jiff::Timestamp>,
    /// Collects the script's log lines (test harness); they always go to tracing as well.
    pub logs: Option<LogSink>,
    /// What `get` and `list` read (and record reads in); `None`: they fail.
    pub reads: Option<crate::reads::ReadAccess>,
    /// Collects the Events the script asks for (`event`); `None`: they are only validated.
    pub events: Option<EventSink>,
}

impl CallContext {
    pub fn new(controller: impl Into<String>, hook: HookKind) -> CallContext {
        CallContext {
            controller: controller.into(),
            hook,
            limits: Limits::default(),
            clock: None,
            logs: None,
            reads: None,
            events: None,
        }
    }

    pub fn with_limits(mut self, limits: Limits) -> CallContext {
        self.limits = limits;
        self
    }

    pub fn with_clock(mut self, clock: jiff::Timestamp) -> CallContext {
        self.clock = Some(clock);
        self
    }

    pub fn with_logs(mut self, logs: LogSink) -> CallContext {
        self.logs = Some(logs);
        self
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
    /// An error of this call at a position of the script.
    pub fn error(
        &self,
        kind: ScriptErrorKind,
        message: impl Into<String>,
        line: Option<u32>,
        column: Option<u32>,
    ) -> ScriptError {
        self.script
            .error(kind, message)
            .in_call(&self.env.controller, self.env.hook)
            .at(self.script.code(), line, column)
    }

    pub fn limit_error(&self, limit: LimitKind, line: Option<u32>) -> ScriptError {
        self.error(
            ScriptErrorKind::Limit { limit },
            self.limits.describe(limit),
            line,
            None,
        )
    }
}

/// Compiles and runs hook scripts. Cheap to clone; clones share the compile cache.
#[derive(Clone)]
pub struct ScriptEngine {
    inner: Arc<Inner>,
}

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
    pub fn with_coverage() -> ScriptEngine {
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
        }
    }

    /// The line coverage gathered so far, by script origin; empty unless built
    /// [`ScriptEngine::with_coverage`].
    pub fn coverage(&self) -> Vec<ScriptCoverage> {
        self.inner
            .coverage
            .as_ref()
            .map_or_else(Vec::new, coverage::Recorder::report)
    }

    /// Compiles a script, or reuses the program already compiled from the same language and code
    /// (whatever its origin). The returned handle carries `source.origin` for error messages.
    pub fn compile(&self, source: &ScriptSource) -> Result<Arc<CompiledScript>, ScriptError> {
        let digest = digest(source.language, &source.code);
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
                let program = Arc::new(match source.language {
                    Language::Rhai => Program {
                        code: self.inner.rhai.compile(source)?,
                        request: request_use::rhai(&source.code),
                    },
                    Language::Lua => Program {
                        code: lua_engine::compile(source, self.inner.coverage.is_some())?,
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
            origin: Arc::new(source.origin.clone()),
            code: source.code.clone(),
            program,
        }))
    }

    /// How many distinct programs are cached and alive (for tests and metrics).
    pub fn cached_programs(&self) -> usize {
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

    /// Runs a script on the calling thread. Blocks for up to the call's timeout: from async code
    /// use [`ScriptEngine::call_async`].
    pub fn call(
        &self,
        script: &CompiledScript,
        request: &serde_json::Value,
        call: &CallContext,
    ) -> Result<serde_json::Value, ScriptError> {
        let started = Instant::now();
        let limits = EffectiveLimits::from(&call.limits);
        let setup = CallSetup {
            script,
            env: HelperEnv {
                controller: call.controller.clone(),
                hook: call.hook,
                language: script.language,
                now: call.clock.unwrap_or_else(jiff::Timestamp::now),
                logs: call.logs.clone(),
                reads: call.reads.clone(),
                events: call.events.clone(),
            },
            budget: Arc::new(Budget::start(&limits)),
            limits,
            coverage: self.inner.coverage.as_ref(),
        };
        let result = match &script.program.code {
            Code::Rhai(ast) => match setup.coverage {
                None => self.inner.rhai.call(ast, request, &setup),
                Some(recorder) => {
                    let (result, hits) =
                        coverage::gather(|| self.inner.rhai.call(ast, request, &setup));
                    recorder.record(&script.origin, || rhai_engine::statement_lines(ast), hits);
                    result
                }
            },
            Code::Lua(bytecode) => self.inner.lua.call(bytecode, request, &setup),
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
                %error,
                "hook script failed"
            ),
        }
        result
    }

    /// Runs a script on tokio's blocking pool, so a slow script never stalls the runtime's
    /// worker threads.
    pub async fn call_async(
        &self,
        script: Arc<CompiledScript>,
        request: Arc<serde_json::Value>,
        call: CallContext,
    ) -> Result<serde_json::Value, ScriptError> {
        let engine = self.clone();
        let origin = script.origin.clone();
        let language = script.language;
        let (controller, hook) = (call.controller.clone(), call.hook);
        tokio::task::spawn_blocking(move || engine.call(&script, &request, &call))
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

/// Advice for a Rhai script in YAML that lost a line starting with `#` (a map literal `#{`).
const YAML_COMMENT_HINT: &str = "in YAML, a line starting with `#` (such as a Rhai map literal \
    `#{`) is a comment unless it is inside a block scalar (`inline: |`) and indented at least as \
    far as the block's first line: if the script's map literal became a YAML comment, indent it";

/// Whether a script's text came out of a YAML document (a controller or a ConfigMap) rather than
/// a file of its own.
fn from_yaml(origin: &ScriptOrigin) -> bool {
    !matches!(origin, ScriptOrigin::File { .. })
}

/// Editor definitions of the hook environment (`request`, responses, helpers) for a language:
/// a LuaLS `---@meta` file or a Rhai `.d.rhai` file (`docs/scripting.md`).
pub fn definitions(language: Language) -> String {
    match language {
        Language::Lua => definitions::lua(),
        Language::Rhai => rhai_engine::definitions(),
    }
}

fn digest(language: Language, code: &str) -> String {
    let mut hasher = sha2::Sha256::new();
    hasher.update(language.as_str().as_bytes());
    // The separator keeps `rhai` + `x` distinct from `rha` + `ix`.
    hasher.update([0u8]);
    hasher.update(code.as_bytes());
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests;
