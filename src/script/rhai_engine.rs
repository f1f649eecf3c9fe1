//! Rhai: the sandboxed engine, the helper bindings, and the mapping of Rhai errors to
//! [`ScriptError`]s.
//!
//! Rhai's size limits are engine settings, so there is one engine per distinct set of size
//! limits (almost always just the default one); the per-call parts (operation budget, deadline,
//! helper environment) are reached through the active call (`active`).

use super::active::{ActiveGuard, Request, with_active, with_unconverted};
use super::error::{LimitKind, ScriptError, ScriptErrorKind};
use super::helpers::{HELPERS, Helper, Run, step};
use super::limits::{DEFAULT_MAX_ARRAY_SIZE, DEFAULT_MAX_MAP_SIZE, DEFAULT_MAX_STRING_SIZE};
use super::limits::{EffectiveLimits, MAX_CALL_DEPTH, MAX_EXPR_DEPTH, MAX_FUNCTION_EXPR_DEPTH};
use super::log::{LogLevel, LogLine};
use super::rhai_convert::{from_dynamic, request_to_dynamic, to_dynamic};
use super::{CallSetup, Code, ScriptSource};
use rhai::{AST, Dynamic, Engine, EvalAltResult, NativeCallContext, Position, Scope};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The size limits that need an engine of their own.
type SizeKey = (u64, u64, u64);

pub(crate) struct RhaiEngines {
    /// Compiles every script (and runs those with default limits): parsing only depends on the
    /// disabled symbols and nesting limits, which all engines share.
    base: Arc<Engine>,
    by_size: Mutex<HashMap<SizeKey, Arc<Engine>>>,
}

impl RhaiEngines {
    pub fn new() -> RhaiEngines {
        let default_key = (
            DEFAULT_MAX_STRING_SIZE,
            DEFAULT_MAX_ARRAY_SIZE,
            DEFAULT_MAX_MAP_SIZE,
        );
        let base = Arc::new(build_engine(default_key));
        let mut by_size = HashMap::new();
        by_size.insert(default_key, base.clone());
        RhaiEngines {
            base,
            by_size: Mutex::new(by_size),
        }
    }

    fn engine_for(&self, limits: &EffectiveLimits) -> Arc<Engine> {
        let key = (
            limits.max_string_size,
            limits.max_array_size,
            limits.max_map_size,
        );
        self.by_size
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_insert_with(|| Arc::new(build_engine(key)))
            .clone()
    }

    pub fn compile(&self, source: &ScriptSource) -> Result<Code, ScriptError> {
        self.base
            .compile(&*source.code)
            .map(Code::Rhai)
            .map_err(|error| {
                let (line, column) = position(error.position());
                ScriptError::new(
                    ScriptErrorKind::Compile,
                    error.err_type().to_string(),
                    source.language,
                    Arc::new(source.origin.clone()),
                )
                .at(&source.code, line, column)
            })
    }

    pub fn call(
        &self,
        ast: &AST,
        request: &Value,
        setup: &CallSetup,
    ) -> Result<Value, ScriptError> {
        let engine = self.engine_for(&setup.limits);
        let converted = &setup.script.program.request;
        let mut scope = Scope::new();
        scope.push("request", request_to_dynamic(request, converted));
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
            .map_err(|error| map_error(&error, setup))?;
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

fn build_engine((max_string, max_array, max_map): SizeKey) -> Engine {
    let mut engine = Engine::new();
    // `eval` would run code the compile cache and error positions know nothing about.
    engine.disable_symbol("eval");
    engine.set_max_call_levels(MAX_CALL_DEPTH);
    // Rhai's default nesting limits differ between debug and release builds; fixing them keeps
    // `metascript test` (often a debug build) accepting exactly what the operator accepts.
    engine.set_max_expr_depths(MAX_EXPR_DEPTH, MAX_FUNCTION_EXPR_DEPTH);
    // The operation budget is enforced by `Budget` in `on_progress` (per call, not per engine).
    engine.set_max_operations(0);
    engine.set_max_string_size(to_usize(max_string));
    engine.set_max_array_size(to_usize(max_array));
    engine.set_max_map_size(to_usize(max_map));
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
    engine
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
fn register_helper(engine: &mut Engine, helper: &'static Helper) {
    for arity in helper.min_args..=helper.max_args {
        match arity {
            0 => {
                engine.register_fn(helper.name, move |ctx: NativeCallContext| {
                    run_helper(&ctx, helper, None, &[])
                });
            }
            1 => {
                engine.register_fn(
                    helper.name,
                    move |ctx: NativeCallContext, a: &mut Dynamic| {
                        run_helper(&ctx, helper, Some(a), &[])
                    },
                );
            }
            2 => {
                engine.register_fn(
                    helper.name,
                    move |ctx: NativeCallContext, a: &mut Dynamic, b: Dynamic| {
                        run_helper(&ctx, helper, Some(a), &[b])
                    },
                );
            }
            3 => {
                engine.register_fn(
                    helper.name,
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
    Ok(to_dynamic(&result))
}

/// The address of the map a value holds, by which readers recognise the script's `request`.
fn address(value: &Dynamic) -> usize {
    value
        .read_lock::<rhai::Map>()
        .map_or(0, |map| &*map as *const rhai::Map as usize)
}

/// Follows a reader's path through a Rhai value (`helpers::step`) and hands what is there to
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
    let limit = match inner {
        // The budget knows which of its limits stopped the script.
        EvalAltResult::ErrorTerminated(..) => {
            Some(setup.budget.tripped().unwrap_or(LimitKind::Operations))
        }
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
    };
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
            match text.rfind(" (line ") {
                Some(at) if text.ends_with(')') => text[..at].to_string(),
                _ => text,
            }
        }
    };
    setup.error(ScriptErrorKind::Runtime, message, line, column)
}
