//! Rhai: the sandboxed engine, the helper bindings, and the mapping of Rhai errors to
//! [`ScriptError`]s.
//!
//! Rhai's size limits are engine settings, so there is one engine per distinct set of size
//! limits (almost always just the default one); the per-call parts (operation budget, deadline,
//! helper environment) are reached through the active call (`active`).

use super::active::{ActiveGuard, Request, with_active, with_unconverted};
use super::coverage;
use super::definitions::{rhai_comments, rhai_header, rhai_params};
use super::error::{LimitKind, ScriptError, ScriptErrorKind};
use super::helper_env::step;
use super::helpers::{HELPERS, Helper, Run};
use super::limits::{DEFAULT_MAX_ARRAY_SIZE, DEFAULT_MAX_MAP_SIZE, DEFAULT_MAX_STRING_SIZE};
use super::limits::{EffectiveLimits, MAX_CALL_DEPTH, MAX_EXPR_DEPTH, MAX_FUNCTION_EXPR_DEPTH};
use super::log::{LogLevel, LogLine};
use super::rhai_convert::{from_dynamic, request_to_dynamic, to_dynamic};
use super::suggest::{did_you_mean, no_such_field};
use super::{CallSetup, Code, HookRequest, Layout, Part, YAML_COMMENT_HINT, from_yaml};
use crate::api::{HookKind, Language};
use rhai::debugger::DebuggerCommand;
use rhai::{
    AST, ASTNode, Dynamic, Engine, EvalAltResult, FuncRegistration, NativeCallContext, ParseError,
    ParseErrorType, Position, Scope, Stmt,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// The size limits that need an engine of their own.
type SizeKey = (u64, u64, u64);

const DEFAULT_SIZES: SizeKey = (
    DEFAULT_MAX_STRING_SIZE,
    DEFAULT_MAX_ARRAY_SIZE,
    DEFAULT_MAX_MAP_SIZE,
);

/// Engines kept for size limits other than the defaults. Authors choose the limits, so the set
/// is bounded: past it the least recently used engine is dropped (a call running on it keeps it
/// until it returns) and built again when asked for (about 3 ms in a debug build). Each engine
/// holds its own function tables, about 550 KiB.
const MAX_SIZED_ENGINES: usize = 8;

pub(crate) struct RhaiEngines {
    /// Compiles every script (and runs those with default limits): parsing only depends on the
    /// disabled symbols and nesting limits, which all engines share.
    base: Arc<Engine>,
    /// Engines for other size limits, the least recently used first.
    sized: Mutex<Vec<(SizeKey, Arc<Engine>)>>,
    /// Engines report the lines they reach (`coverage`).
    coverage: bool,
}

impl RhaiEngines {
    pub(super) fn new(coverage: bool) -> RhaiEngines {
        RhaiEngines {
            base: Arc::new(build_engine(DEFAULT_SIZES, coverage)),
            sized: Mutex::new(Vec::with_capacity(MAX_SIZED_ENGINES)),
            coverage,
        }
    }

    fn engine_for(&self, limits: &EffectiveLimits) -> Arc<Engine> {
        let key = (
            limits.max_string_size,
            limits.max_array_size,
            limits.max_map_size,
        );
        if key == DEFAULT_SIZES {
            return self.base.clone();
        }
        let lock = || self.sized.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut sized = lock();
            if let Some(at) = sized.iter().position(|(k, _)| *k == key) {
                let entry = sized.remove(at);
                let engine = entry.1.clone();
                sized.push(entry);
                return engine;
            }
        }
        // Built without the lock, so calls with other limits do not wait for it.
        let built = Arc::new(build_engine(key, self.coverage));
        let mut sized = lock();
        if let Some((_, engine)) = sized.iter().find(|(k, _)| *k == key) {
            return engine.clone();
        }
        if sized.len() >= MAX_SIZED_ENGINES {
            sized.remove(0);
        }
        sized.push((key, built.clone()));
        built
    }

    /// Compiles a hook with its libraries: each library alone first (so its errors name it, and
    /// to check it only defines functions), then the whole program as one text.
    pub(super) fn compile(&self, layout: &Layout) -> Result<Code, ScriptError> {
        for library in layout.libraries() {
            let refuse = |message: String, (line, column)| {
                ScriptError::new(
                    ScriptErrorKind::Compile,
                    message,
                    Language::Rhai,
                    library.origin.clone(),
                )
                .at(&library.code, line, column)
            };
            // The end marker is found only if nothing left open (an unterminated `/*`, which
            // Rhai accepts at the end of a text) would run on into the parts after this one.
            let ast = self
                .base
                .compile(format!("{}\nfn {LIBRARY_END}() {{}}", library.code))
                .map_err(|error| compile_error(library, &error, 0))?;
            if let Some(statement) = ast.statements().first() {
                return Err(refuse(
                    "a Rhai library only defines functions (`fn name(...) { ... }`), and this is \
                     a statement; a constant can be a function too: `fn NAME() { value }`"
                        .into(),
                    position(statement.position()),
                ));
            }
            let mut ends = false;
            for function in ast.iter_functions() {
                ends |= function.name == LIBRARY_END;
                // The hook's request is converted trusting that readers are the helpers.
                if HELPERS.iter().any(|helper| helper.name == function.name) {
                    return Err(refuse(
                        format!(
                            "a library may not define `{}`: it would replace the helper of that \
                             name in every hook",
                            function.name
                        ),
                        (None, None),
                    ));
                }
            }
            if !ends {
                let last = library.code.lines().count().max(1) as u32;
                return Err(refuse(
                    "the library never ends: a `/*` comment (or a string) left open runs to the \
                     end of its text, and would swallow the hook"
                        .into(),
                    (Some(last), None),
                ));
            }
        }
        let compiled = if layout.libraries().is_empty() {
            self.base.compile(&*layout.hook().code)
        } else {
            self.base.compile(layout.joined())
        };
        let ast = compiled.map_err(|error| {
            let part = match error.position().line() {
                Some(line) => layout.locate(line as u32).0,
                None => layout.hook(),
            };
            compile_error(part, &error, part.first_line - 1)
        })?;
        refuse_forbidden(&ast, layout)?;
        Ok(Code::Rhai(ast))
    }

    pub(super) fn call(
        &self,
        ast: &AST,
        request: HookRequest,
        setup: &CallSetup,
    ) -> Result<Value, ScriptError> {
        let engine = self.engine_for(&setup.limits);
        let converted = &setup.script.program.request;
        let mut scope = Scope::new();
        let converted_request = request_to_dynamic(request, converted)
            .map_err(|e| setup.request_error(&e.path(), &e.message))?;
        scope.push("request", converted_request);
        let id = scope.get("request").map_or(0, address);
        let result = {
            let _active = ActiveGuard::enter(
                setup.env.clone(),
                setup.budget.clone(),
                Request::partial(id, request, converted),
            );
            engine.eval_ast_with_scope::<Dynamic>(&mut scope, ast)
        };
        // Rhai checks sizes as values are built, except a map grown by `m[key] = v`; checking
        // the response closes that gap for what leaves the script.
        let value = result
            .and_then(|value| engine.check_data_size_of(value))
            .map_err(|error| {
                let mut error = map_error(&error, setup);
                if let Some(message) = missing_property(&error, &scope, request) {
                    error.message = message;
                }
                error
            })?;
        setup.check_memory()?;
        let response = from_dynamic(&value).map_err(|e| {
            setup.error(
                ScriptErrorKind::Conversion,
                format!("response{} is not JSON: {}", e.path(), e.message),
                None,
                None,
            )
        })?;
        if let Err(limit) = setup.budget.check_clock() {
            return Err(setup.limit_error(limit, None));
        }
        Ok(response)
    }
}

trait CheckSize {
    fn check_data_size_of(&self, value: Dynamic) -> Result<Dynamic, Box<EvalAltResult>>;
}

impl CheckSize for Engine {
    fn check_data_size_of(&self, value: Dynamic) -> Result<Dynamic, Box<EvalAltResult>> {
        self.ensure_data_size_within_limits(&value)?;
        Ok(value)
    }
}

fn build_engine((max_string, max_array, max_map): SizeKey, coverage: bool) -> Engine {
    let mut engine = Engine::new();
    if coverage {
        // Step through every statement and expression, noting the line of each.
        #[allow(deprecated)] // volatile, not deprecated: Rhai marks all debugger APIs so
        engine.register_debugger(
            |_, debugger| debugger,
            |_, _, _, _, position| {
                if let Some(line) = position.line() {
                    coverage::hit(line as u32);
                }
                Ok(DebuggerCommand::StepInto)
            },
        );
    }
    // `eval` would run code the compile cache and error positions know nothing about.
    engine.disable_symbol("eval");
    engine.set_max_call_levels(MAX_CALL_DEPTH);
    // Rhai's default nesting limits differ between debug and release builds; fixing them keeps
    // `metascript test` (often a debug build) accepting exactly what the operator accepts.
    engine.set_max_expr_depths(MAX_EXPR_DEPTH, MAX_FUNCTION_EXPR_DEPTH);
    // The operation budget is enforced by `Budget` in `on_progress` (per call, not per engine).
    engine.set_max_operations(0);
    // No string interning: Rhai interns the short strings (up to 32 bytes, once its small filter
    // of strings seen before has filled) a running script builds or binds, in one cache the
    // engine's callers share under a write lock, and once its 256 places are taken each new
    // string scans all of them to evict one. Hooks see different names and values in
    // every call, so it only costs: a call building three such strings took 6.9 µs with it and
    // 1.5 µs without. It also kept one call's strings alive into the next.
    engine.set_max_strings_interned(0);
    engine.set_max_string_size(to_usize(max_string));
    engine.set_max_array_size(to_usize(max_array));
    engine.set_max_map_size(to_usize(max_map));
    // Strict reads: a field a map lacks is an error, not a silent `()` (`docs/scripting.md`).
    engine.set_fail_on_invalid_map_property(true);
    engine.on_progress(|ops| {
        with_active(|_, budget| budget.progress(ops).err())
            .flatten()
            .map(|limit| Dynamic::from(limit.as_str()))
    });
    // No stdout from a controller: print and debug become log lines.
    engine.on_print(|text| {
        with_active(|env, _| env.log(line(LogLevel::Info, text)));
    });
    engine.on_debug(|text, _, _| {
        with_active(|env, _| env.log(line(LogLevel::Debug, text)));
    });
    for helper in HELPERS {
        register_helper(&mut engine, helper);
    }
    for (name, why) in BLOCKED {
        let refuse = move || -> Result<(), Box<EvalAltResult>> {
            Err(format!("`{name}` is not available to hooks: {why}").into())
        };
        engine.register_fn(*name, move |_: rhai::INT| refuse());
        engine.register_fn(*name, move |_: rhai::FLOAT| refuse());
    }
    // Rhai's own clock (its time package): shadowed so a call that reads it is noted impure.
    engine.register_fn("timestamp", || {
        with_active(|env, _| env.taint("timestamp()"));
        std::time::Instant::now()
    });
    engine
}

/// The lines on which a statement of the script (or of one of its functions) starts: what
/// coverage counts as executable.
pub(crate) fn statement_lines(ast: &AST) -> BTreeSet<u32> {
    let mut lines = BTreeSet::new();
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Stmt(statement)) = path.last()
            && !matches!(statement, Stmt::Noop(..) | Stmt::Block(..))
            && let Some(line) = statement.position().line()
        {
            lines.insert(line as u32);
        }
        true
    });
    lines
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn line(level: LogLevel, text: &str) -> LogLine {
    LogLine {
        level,
        message: text.to_string(),
        fields: serde_json::Map::new(),
    }
}

/// Binds one helper under its name for every arity it accepts; the arguments arrive as Dynamic
/// and are converted to JSON, so the helper itself knows nothing about Rhai. The first argument
/// is taken by reference, which spares Rhai a copy of it (usually a whole object) per call.
/// Parameter names, types and docs go with each binding, for editor definitions.
fn register_helper(engine: &mut Engine, helper: &'static Helper) {
    for arity in helper.min_args..=helper.max_args {
        let registration = FuncRegistration::new(helper.name)
            .with_params_info(rhai_params(helper, arity))
            .with_comments(rhai_comments(helper));
        match arity {
            0 => {
                registration.register_into_engine(engine, move |ctx: NativeCallContext| {
                    run_helper(&ctx, helper, None, &[])
                });
            }
            1 => {
                registration.register_into_engine(
                    engine,
                    move |ctx: NativeCallContext, a: &mut Dynamic| {
                        run_helper(&ctx, helper, Some(a), &[])
                    },
                );
            }
            2 => {
                registration.register_into_engine(
                    engine,
                    move |ctx: NativeCallContext, a: &mut Dynamic, b: Dynamic| {
                        run_helper(&ctx, helper, Some(a), &[b])
                    },
                );
            }
            3 => {
                registration.register_into_engine(
                    engine,
                    move |ctx: NativeCallContext, a: &mut Dynamic, b: Dynamic, c: Dynamic| {
                        run_helper(&ctx, helper, Some(a), &[b, c])
                    },
                );
            }
            4 => {
                engine.register_fn(
                    helper.name,
                    move |ctx: NativeCallContext,
                          a: &mut Dynamic,
                          b: Dynamic,
                          c: Dynamic,
                          d: Dynamic| {
                        run_helper(&ctx, helper, Some(a), &[b, c, d])
                    },
                );
            }
            _ => unreachable!("helpers take at most four arguments"),
        }
    }
}

/// The Rhai definitions file (`.d.rhai`): the helpers as the operator's engine binds them, and
/// `request`, with a header on what `request` holds and what each hook returns.
pub(crate) fn definitions(hooks: &[HookKind]) -> String {
    let engine = build_engine(DEFAULT_SIZES, false);
    let mut scope = Scope::new();
    scope.push("request", rhai::Map::new());
    let definitions = engine
        .definitions_with_scope(&scope)
        .include_standard_packages(false);
    format!(
        "{}module static;\n\n{}\n\n{}\n",
        rhai_header(hooks),
        definitions.static_module(),
        definitions.scope_items()
    )
}

fn run_helper(
    ctx: &NativeCallContext,
    helper: &Helper,
    first: Option<&Dynamic>,
    rest: &[Dynamic],
) -> Result<Dynamic, Box<EvalAltResult>> {
    let fail = |message: String| -> Box<EvalAltResult> {
        EvalAltResult::ErrorRuntime(message.into(), ctx.call_position()).into()
    };
    let json = |position: usize, arg: &Dynamic| {
        from_dynamic(arg).map_err(|e| {
            fail(format!(
                "{}: argument {position}{} is not JSON: {}",
                helper.name,
                e.path(),
                e.message
            ))
        })
    };
    let rest_json = rest
        .iter()
        .enumerate()
        .map(|(i, arg)| json(i + 2, arg))
        .collect::<Result<Vec<_>, _>>()?;
    let result = match (&helper.run, first) {
        (Run::Read(read), Some(object)) => {
            let path = (read.path)(&rest_json).map_err(|e| fail(helper.error(e).0))?;
            let read_path = |path: &[String]| {
                walk(object, path, &mut |found| {
                    found.map(|v| json(1, v)).transpose()
                })
            };
            let found = with_unconverted(address(object), |unconverted| match unconverted {
                Some(unconverted) => unconverted.read(&path, || json(1, object), read_path),
                None => read_path(&path),
            })?;
            (read.finish)(found, &rest_json)
        }
        _ => {
            let mut args = Vec::with_capacity(rest.len() + 1);
            if let Some(first) = first {
                args.push(json(1, first)?);
            }
            args.extend(rest_json);
            with_active(|env, _| helper.call(env, &args))
                .ok_or_else(|| fail(format!("{}: called outside a hook call", helper.name)))?
                .map_err(|e| fail(e.0))?
        }
    };
    to_dynamic(&result).map_err(|e| {
        fail(format!(
            "{}: result{}: {}",
            helper.name,
            e.path(),
            e.message
        ))
    })
}

/// The address of the map a value holds, by which readers recognise the script's `request`.
fn address(value: &Dynamic) -> usize {
    value
        .read_lock::<rhai::Map>()
        .map_or(0, |map| &*map as *const rhai::Map as usize)
}

/// Follows a reader's path through a Rhai value (`helper_env::step`) and hands what is there to
/// `found`; values are borrowed, not copied, along the way.
fn walk<R>(value: &Dynamic, path: &[String], found: &mut dyn FnMut(Option<&Dynamic>) -> R) -> R {
    let Some((segment, rest)) = path.split_first() else {
        return found(Some(value));
    };
    let map = value.read_lock::<rhai::Map>();
    let items = value.read_lock::<rhai::Array>();
    match step(
        segment,
        |key| map.as_deref()?.get(key),
        |index| items.as_deref()?.get(index),
    ) {
        Some(child) => walk(child, rest, found),
        None => found(None),
    }
}

/// The message for a failed read of a field a map lacks (Rhai's `Property not found: x`): the
/// read as the script wrote it, taken from the source line, and the nearest field the map has,
/// found by following that read from the request or a top-level variable.
fn missing_property(error: &ScriptError, scope: &Scope, request: HookRequest) -> Option<String> {
    let field = error.message.strip_prefix("Property not found: ")?;
    let (Some(text), Some(column)) = (&error.source_line, error.column) else {
        return Some(no_such_field(field, field, []));
    };
    let chars: Vec<char> = text.chars().collect();
    let (start, end) = read_span(&chars, column as usize - 1);
    let path: String = chars[start..end].iter().collect();
    let path = path.trim_start_matches(['.', '?']);
    let keys = match read_segments(path).split_last() {
        Some((_, parents)) => match parents.split_first() {
            Some((Segment::Field(root), within)) if *root == "request" => {
                // Read as a reader reads the request: fields lent as text only along the path.
                let path = segment_names(within);
                match path.split_first() {
                    None => request
                        .fields()
                        .ok()
                        .map(|fields| fields.iter().map(|(key, _)| key.to_string()).collect()),
                    Some((first, rest)) => request
                        .get(first)
                        .and_then(|field| field.at(rest))
                        .and_then(|value| {
                            value.as_object().map(|map| map.keys().cloned().collect())
                        }),
                }
            }
            Some((Segment::Field(root), within)) => scope.get(root).and_then(|value| {
                walk(value, &segment_names(within), &mut |found| {
                    found
                        .and_then(|v| v.read_lock::<rhai::Map>())
                        .map(|map| map.keys().map(|k| k.to_string()).collect::<Vec<_>>())
                })
            }),
            _ => None,
        },
        None => None,
    };
    let keys: Vec<String> = keys.unwrap_or_default();
    Some(no_such_field(path, field, keys.iter().map(String::as_str)))
}

/// One step of a read as written: `.name`, `["name"]` or `[3]`.
#[derive(Debug, PartialEq)]
enum Segment<'a> {
    Field(&'a str),
    Item(usize),
}

fn segment_names(segments: &[Segment]) -> Vec<String> {
    segments
        .iter()
        .map(|s| match s {
            Segment::Field(key) => key.to_string(),
            Segment::Item(index) => index.to_string(),
        })
        .collect()
}

/// The span of the read chain (`request.object["x"]`) whose last step starts at `at`: forward to
/// the end of that step, back over names, dots and brackets.
fn read_span(chars: &[char], at: usize) -> (usize, usize) {
    let name = |c: char| c.is_alphanumeric() || c == '_';
    let at = at.min(chars.len());
    let mut end = at;
    if chars.get(at) == Some(&'"') {
        // An index `["key"]`: through the closing quote and bracket.
        end = chars[at + 1..]
            .iter()
            .position(|c| *c == '"')
            .map_or(chars.len(), |p| at + p + 2);
        if chars.get(end) == Some(&']') {
            end += 1;
        }
    } else {
        while end < chars.len() && name(chars[end]) {
            end += 1;
        }
    }
    let mut start = at;
    while start > 0 {
        let c = chars[start - 1];
        if name(c) || c == '.' || c == '?' || c == '[' {
            start -= 1;
        } else if c == ']' {
            match chars[..start - 1].iter().rposition(|c| *c == '[') {
                Some(open) => start = open,
                None => break,
            }
        } else {
            break;
        }
    }
    (start, end.min(chars.len()))
}

/// The steps of a read chain (`a.b?.c["d"][0]`); stops at anything it does not understand (a
/// computed index), so the steps it returns are only ever a prefix of the real ones.
fn read_segments(path: &str) -> Vec<Segment<'_>> {
    let mut segments = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        rest = rest.trim_start_matches('?');
        if let Some(after) = rest.strip_prefix("[\"") {
            let Some((key, tail)) = after.split_once("\"]") else {
                break;
            };
            segments.push(Segment::Field(key));
            rest = tail;
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some((index, tail)) = after.split_once(']') else {
                break;
            };
            let Ok(index) = index.parse() else { break };
            segments.push(Segment::Item(index));
            rest = tail;
        } else {
            let body = rest.strip_prefix('.').unwrap_or(rest);
            let len = body
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(body.len());
            if len == 0 {
                break;
            }
            segments.push(Segment::Field(&body[..len]));
            rest = &body[len..];
        }
    }
    segments
}

/// Built-in functions a hook may not call, and why: they block the worker the call runs on
/// (which every controller shares) beyond the reach of the budgets. Refused at compile time, and
/// replaced by ones that fail for calls the compiler cannot see (`Fn("sleep").call(1)`).
const BLOCKED: &[(&str, &str)] = &[(
    "sleep",
    "it would hold one of the workers every controller shares, and time budgets cannot \
     interrupt it; a hook returns at once, and asks to run again later with \
     `resyncAfterSeconds`",
)];

/// Functions that only call the function given to them, and which of their arguments that is
/// (after the list a method is called on): the only places a closure that captures variables
/// may go (see [`kept_closure`]).
const CALLING: &[(&str, usize)] = &[
    ("all", 0),
    ("dedup", 0),
    ("drain", 0),
    ("filter", 0),
    ("find", 0),
    ("find_map", 0),
    ("for_each", 0),
    ("index_of", 0),
    ("map", 0),
    ("order", 0),
    ("order_by", 0),
    ("reduce", 0),
    ("reduce_rev", 0),
    ("retain", 0),
    ("some", 0),
    ("sort", 0),
    ("sort_by", 0),
    ("zip", 1),
];

/// Why values could nest out of reach of Rhai's size checks through a function value.
const HIDES: &str = "Rhai's size checks do not look inside function values, so values kept in \
    one could nest without bound (and a closure kept in what it captures is never freed)";

/// Refuses what a hook may not do, at its line: calls of [`BLOCKED`] functions, `curry`, and a
/// closure that captures variables anywhere but as the function given to one of [`CALLING`].
fn refuse_forbidden(ast: &AST, layout: &Layout) -> Result<(), ScriptError> {
    let defined: BTreeSet<&str> = ast.iter_functions().map(|f| f.name).collect();
    let mut found = None;
    ast.walk(&mut |path: &[ASTNode]| {
        found = blocked_call(path)
            .or_else(|| explicit_curry(path))
            .or_else(|| kept_closure(path, &defined));
        found.is_none()
    });
    let Some((message, pos)) = found else {
        return Ok(());
    };
    let (line, column) = position(pos);
    let (part, line) = match line {
        Some(line) => {
            let (part, own) = layout.locate(line);
            (part, Some(own))
        }
        None => (layout.hook(), None),
    };
    Err(ScriptError::new(
        ScriptErrorKind::Compile,
        message,
        Language::Rhai,
        part.origin.clone(),
    )
    .at(&part.code, line, column))
}

/// The call `path` ends at, if it ends at one.
fn call_at<'a>(path: &'a [ASTNode<'a>]) -> Option<(&'a rhai::FnCallExpr, Position)> {
    match path.last()? {
        ASTNode::Stmt(Stmt::FnCall(call, pos)) => Some((call, *pos)),
        ASTNode::Expr(rhai::Expr::FnCall(call, pos) | rhai::Expr::MethodCall(call, pos)) => {
            Some((call, *pos))
        }
        _ => None,
    }
}

fn blocked_call(path: &[ASTNode]) -> Option<(String, Position)> {
    let (call, pos) = call_at(path)?;
    let (name, why) = BLOCKED.iter().find(|(name, _)| call.name == *name)?;
    Some((format!("`{name}` is not available to hooks: {why}"), pos))
}

/// A `curry` the script wrote: Rhai makes one of its own for each closure that captures
/// variables (right after sharing them, [`is_closure`]), and those are checked as closures.
fn explicit_curry(path: &[ASTNode]) -> Option<(String, Position)> {
    let (call, pos) = call_at(path)?;
    if call.name != "curry" {
        return None;
    }
    let made_for_a_closure = matches!(
        path.iter().rev().nth(1),
        Some(ASTNode::Expr(block)) if is_closure(block)
    );
    (!made_for_a_closure).then(|| {
        (
            format!(
                "`curry` is not available to hooks: {HIDES}; pass what the function needs as \
                 its arguments"
            ),
            pos,
        )
    })
}

/// A closure that captures variables, as Rhai compiles one: a block sharing them, then making
/// the function value that carries them.
fn is_closure(expr: &rhai::Expr) -> bool {
    matches!(expr, rhai::Expr::Stmt(block)
        if matches!(block.statements().first(), Some(Stmt::Share(..))))
}

/// A closure that captures variables anywhere but as the function given to one of [`CALLING`]
/// (not redefined by the script): kept in a variable, a list, a map or a result, it would carry
/// values out of reach of the size checks ([`HIDES`]). Given straight to such a call, it is
/// called and dropped.
fn kept_closure(path: &[ASTNode], defined: &BTreeSet<&str>) -> Option<(String, Position)> {
    let [.., parent, ASTNode::Stmt(Stmt::Share(..))] = path else {
        return None;
    };
    // Not an expression: the body of a function (a closure returning the closure).
    let ASTNode::Expr(closure) = parent else {
        return Some((kept_message(), parent.position()));
    };
    let given = match path.iter().rev().nth(2) {
        Some(ASTNode::Expr(rhai::Expr::MethodCall(call, _))) => given_to(call, closure, 0, defined),
        Some(ASTNode::Expr(rhai::Expr::FnCall(call, _)) | ASTNode::Stmt(Stmt::FnCall(call, _))) => {
            given_to(call, closure, 1, defined)
        }
        _ => false,
    };
    (!given).then(|| (kept_message(), closure.position()))
}

/// Whether `closure` is the function argument of `call`, one of [`CALLING`]; `before` is how
/// many arguments come before the ones a method call has (the list, called as a function).
fn given_to(
    call: &rhai::FnCallExpr,
    closure: &rhai::Expr,
    before: usize,
    defined: &BTreeSet<&str>,
) -> bool {
    CALLING.iter().any(|(name, at)| {
        call.name == *name
            && !defined.contains(name)
            && call
                .args
                .get(before + at)
                .is_some_and(|arg| std::ptr::eq(arg, closure))
    })
}

fn kept_message() -> String {
    let calls: Vec<&str> = CALLING.iter().map(|(name, _)| *name).collect();
    format!(
        "a closure that captures variables can only be given straight to {} (as the function \
         they call): {HIDES}; call it there, or pass what it needs as its arguments",
        calls.join(", ")
    )
}

/// A function appended to each library when it is checked alone; no script can define it.
const LIBRARY_END: &str = "__metascript_library_end__";

/// A compile error in one part of a program, whose lines start `offset` program lines down.
fn compile_error(part: &Part, error: &ParseError, offset: u32) -> ScriptError {
    let (line, column) = position(error.position());
    let line = line.map(|line| line.saturating_sub(offset));
    let mut message = error.err_type().to_string();
    message.push_str(&compile_hint(error.err_type(), part, line, column));
    ScriptError::new(
        ScriptErrorKind::Compile,
        message,
        Language::Rhai,
        part.origin.clone(),
    )
    .at(&part.code, line, column)
}

/// What a compile error most likely means, when Rhai's message points somewhere else.
fn compile_hint(
    error: &ParseErrorType,
    source: &Part,
    line: Option<u32>,
    column: Option<u32>,
) -> String {
    match error {
        // Rhai notices a missing `;` at the start of the next statement, on the next line.
        ParseErrorType::MissingToken(token, _) if token == ";" => {
            let (Some(line), Some(column)) = (line, column) else {
                return String::new();
            };
            let lines: Vec<&str> = source.code.lines().collect();
            let Some(text) = lines.get(line as usize - 1) else {
                return String::new();
            };
            let starts_line = text
                .chars()
                .take(column as usize - 1)
                .all(char::is_whitespace);
            let previous = lines[..line as usize - 1]
                .iter()
                .rposition(|l| !l.trim().is_empty());
            match previous {
                Some(index) if starts_line => {
                    format!(" (is the `;` missing at the end of line {}?)", index + 1)
                }
                _ => String::new(),
            }
        }
        // A bracket left open is what makes most scripts end early; say which one.
        ParseErrorType::UnexpectedEOF | ParseErrorType::MissingToken(..)
            if ends_at(&source.code, line, column)
                && let Some((bracket, opened)) = unclosed(&source.code) =>
        {
            format!(" (the script ends early: the `{bracket}` on line {opened} is never closed)")
        }
        // A script from YAML that stops mid-expression with its brackets balanced: a line
        // starting with `#{` outside a block scalar, or less indented than it, is a YAML comment
        // and never reached the engine.
        ParseErrorType::UnexpectedEOF | ParseErrorType::MissingToken(..)
            if from_yaml(&source.origin) && ends_at(&source.code, line, column) =>
        {
            format!(" (the script ends early; {YAML_COMMENT_HINT})")
        }
        _ => String::new(),
    }
}

/// The innermost bracket a script leaves open, and its line: strings, characters and comments
/// skipped as Rhai reads them (well enough for a hint).
fn unclosed(code: &str) -> Option<(char, usize)> {
    let mut open: Vec<(char, usize)> = Vec::new();
    let mut chars = code.chars().peekable();
    let mut line = 1;
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            '"' | '`' | '\'' => {
                while let Some(inner) = chars.next() {
                    match inner {
                        '\\' => {
                            chars.next();
                        }
                        '\n' => line += 1,
                        _ if inner == c => break,
                        _ => {}
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for inner in chars.by_ref() {
                    if inner == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut previous = ' ';
                for inner in chars.by_ref() {
                    if inner == '\n' {
                        line += 1;
                    }
                    if previous == '*' && inner == '/' {
                        break;
                    }
                    previous = inner;
                }
            }
            '{' | '(' | '[' => open.push((c, line)),
            '}' | ')' | ']' => {
                open.pop();
            }
            _ => {}
        }
    }
    open.pop()
}

/// Whether a position is at the end of the code (past its last non-blank text).
fn ends_at(code: &str, line: Option<u32>, column: Option<u32>) -> bool {
    let last = code.trim_end();
    let last_line = last.lines().count().max(1) as u32;
    let last_column = last.lines().last().map_or(0, |l| l.chars().count()) as u32;
    match (line, column) {
        (None, _) => true,
        (Some(line), column) => {
            line > last_line || (line == last_line && column.is_none_or(|c| c > last_column))
        }
    }
}

/// The plain calls (`name(...)`, not methods or operators) of functions a Rhai script does
/// not define, with their 1-based lines and columns; none when it does not parse.
pub(crate) fn undefined_calls(code: &str) -> Vec<(String, u32, u32)> {
    let mut engine = Engine::new_raw();
    // Folding constants could drop a call the author wrote.
    engine.set_optimization_level(rhai::OptimizationLevel::None);
    let Ok(ast) = engine.compile(code) else {
        return Vec::new();
    };
    let defined: BTreeSet<String> = ast.iter_functions().map(|f| f.name.to_string()).collect();
    let mut calls = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Expr(rhai::Expr::FnCall(call, at))) = path.last()
            && !call.is_operator_call()
            && !defined.contains(call.name.as_str())
            && let (Some(line), Some(column)) = (at.line(), at.position())
        {
            calls.push((call.name.to_string(), line as u32, column as u32));
        }
        true
    });
    calls
}

/// Every function a script can call by name: the helpers, Rhai's packages, and the functions
/// Rhai's parser handles itself.
pub(crate) fn known_functions() -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &[
        "print",
        "debug",
        "type_of",
        "Fn",
        "call",
        "curry",
        "is_shared",
        "is_def_fn",
        "is_def_var",
        "eval",
    ];
    build_engine(DEFAULT_SIZES, false)
        .gen_fn_signatures(true)
        .iter()
        .filter_map(|signature| {
            let signature = signature.strip_prefix("fn ").unwrap_or(signature);
            signature.split('(').next().map(str::to_string)
        })
        .chain(KEYWORDS.iter().map(|k| k.to_string()))
        .collect()
}

/// Rhai's runtime messages in the terms of a script: Rust type names become script types, and an
/// unknown function names the nearest helper or, for a helper, how many arguments it takes.
fn script_message(message: &str) -> String {
    let Some(rest) = message.strip_prefix("Function not found: ") else {
        return script_types(message);
    };
    let (name, signature) = rest.split_once(' ').unwrap_or((rest, "()"));
    let signature = script_types(signature);
    let arguments = signature
        .trim_matches(['(', ')'])
        .split(", ")
        .filter(|a| !a.is_empty())
        .count();
    match HELPERS.iter().find(|h| h.name == name) {
        Some(helper) => format!(
            "{}, got {arguments}: `{name}{signature}`",
            helper.arity_text()
        ),
        None => format!(
            "no function `{name}{signature}`{}",
            did_you_mean(name, HELPERS.iter().map(|h| h.name))
        ),
    }
}

/// Rust type names in Rhai messages, in script terms.
fn script_types(text: &str) -> String {
    const NAMES: &[(&str, &str)] = &[
        ("&str | ImmutableString | String", "string"),
        ("ImmutableString", "string"),
        ("rhai::Map", "map"),
        ("rhai::Array", "array"),
        ("rhai::Blob", "blob"),
        ("rhai::FnPtr", "function"),
        ("rhai::INT", "integer"),
        ("rhai::FLOAT", "float"),
        ("i64", "integer"),
        ("f64", "float"),
        ("bool", "boolean"),
        ("char", "character"),
        ("Fn", "function"),
    ];
    let mut text = text.to_string();
    for (rust, script) in NAMES {
        text = replace_word(&text, rust, script);
    }
    text
}

/// Replaces `word` where it is not part of a longer name.
fn replace_word(text: &str, word: &str, with: &str) -> String {
    let name = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(name) || after.is_some_and(name) {
            out.push_str(word);
        } else {
            out.push_str(with);
        }
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

fn position(pos: Position) -> (Option<u32>, Option<u32>) {
    (
        pos.line().map(|l| l as u32),
        pos.position().map(|c| c as u32),
    )
}

/// The innermost position: errors inside script functions point into the function body.
fn innermost_position(error: &EvalAltResult) -> Position {
    match error {
        EvalAltResult::ErrorInFunctionCall(_, _, inner, pos) => {
            let inner_pos = innermost_position(inner);
            if inner_pos.is_none() { *pos } else { inner_pos }
        }
        other => other.position(),
    }
}

fn map_error(error: &EvalAltResult, setup: &CallSetup) -> ScriptError {
    let (line, column) = position(innermost_position(error));
    let inner = error.unwrap_inner();
    // The budget knows which of its limits stopped the script, whatever error the script got
    // then (a helper refusing a read too large for the call's memory).
    let limit = setup.budget.tripped().or(match inner {
        EvalAltResult::ErrorTerminated(..) => Some(LimitKind::Operations),
        EvalAltResult::ErrorTooManyOperations(..) => Some(LimitKind::Operations),
        EvalAltResult::ErrorStackOverflow(..) => Some(LimitKind::CallDepth),
        EvalAltResult::ErrorDataTooLarge(what, ..) => Some(if what.contains("array") {
            LimitKind::ArraySize
        } else if what.contains("map") {
            LimitKind::MapSize
        } else {
            LimitKind::StringSize
        }),
        _ => None,
    });
    if let Some(limit) = limit {
        return setup.error(
            ScriptErrorKind::Limit { limit },
            setup.limits.describe(limit),
            line,
            column,
        );
    }
    let message = match inner {
        // Helper failures and `throw "..."`: the message alone, without Rhai's prefix.
        EvalAltResult::ErrorRuntime(value, _) if value.is_string() => value.to_string(),
        // Rhai appends ` (line l, position c)`; the position is shown separately.
        other => {
            let text = other.to_string();
            script_message(match text.rfind(" (line ") {
                Some(at) if text.ends_with(')') => &text[..at],
                _ => &text,
            })
        }
    };
    setup.error(ScriptErrorKind::Runtime, message, line, column)
}

/// Every function a Rhai hook can call (built-ins and helpers), by name, for the review of what
/// the sandbox offers (`tests/sandbox.rs`).
#[cfg(test)]
pub(crate) fn function_names() -> BTreeSet<String> {
    let engine = build_engine(DEFAULT_SIZES, false);
    engine
        .gen_fn_signatures(true)
        .into_iter()
        .filter_map(|signature| {
            let name = signature.split('(').next()?;
            let name = name.rsplit(' ').next()?.trim();
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Limits;

    fn sized(n: u64) -> EffectiveLimits {
        EffectiveLimits::from(&Limits {
            max_array_size: Some(n),
            ..Limits::default()
        })
    }

    #[test]
    fn engines_for_other_size_limits_are_bounded_and_the_least_recently_used_goes() {
        let engines = RhaiEngines::new(false);
        let default = EffectiveLimits::from(&Limits::default());
        assert!(Arc::ptr_eq(&engines.engine_for(&default), &engines.base));
        let first = engines.engine_for(&sized(1));
        for n in 2..=MAX_SIZED_ENGINES as u64 {
            engines.engine_for(&sized(n));
        }
        // Used again: the most recent now, so the next new one evicts `sized(2)` instead.
        assert!(Arc::ptr_eq(&engines.engine_for(&sized(1)), &first));
        engines.engine_for(&sized(99));
        let cached = |n: u64| {
            let sized = engines.sized.lock().unwrap();
            sized.iter().any(|((_, array, _), _)| *array == n)
        };
        assert!(
            cached(1) && !cached(2),
            "the least recently used goes, not the oldest"
        );
        for n in 100..120 {
            engines.engine_for(&sized(n));
            assert!(engines.sized.lock().unwrap().len() <= MAX_SIZED_ENGINES);
        }
        let kept: Vec<u64> = engines
            .sized
            .lock()
            .unwrap()
            .iter()
            .map(|((_, array, _), _)| *array)
            .collect();
        assert_eq!(kept, (112..120).collect::<Vec<_>>());
        // An evicted engine is built again; the default one was never among them.
        assert!(!Arc::ptr_eq(&engines.engine_for(&sized(1)), &first));
        assert!(Arc::ptr_eq(&engines.engine_for(&default), &engines.base));
    }

    /// The figures by `MAX_SIZED_ENGINES`.
    #[test]
    #[ignore = "a measurement: cargo test --release --lib engine_cost -- --ignored --nocapture"]
    fn engine_cost() {
        let started = std::time::Instant::now();
        let memory = super::super::memory::CallMemory::enter(usize::MAX);
        let engine = build_engine((1, 2, 3), false);
        let held = super::super::memory::CallMemory::peak();
        drop(memory);
        println!("one engine: {:?}, {} KiB", started.elapsed(), held / 1024);
        drop(engine);
    }
}
