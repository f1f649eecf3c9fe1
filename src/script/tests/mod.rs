//! Engine-level tests. Most run the same case in both languages, since the contract, the helpers,
//! the sandbox and the limits must be identical in Rhai and Lua.

mod contract;
mod coverage;
mod docs;
mod errors;
mod events;
mod examples;
mod helpers;
mod libraries;
mod limits;
mod messages;
mod nesting;
mod purity;
mod reads;
mod request_fields;
mod reuse;
mod roundtrip;
mod sandbox;
mod strict;

use super::*;
use crate::api::Limits;
use serde_json::Value;

pub(super) fn origin(language: Language) -> ScriptOrigin {
    ScriptOrigin::File {
        path: PathBuf::from(format!("test.{language}")),
    }
}

pub(super) fn compile(language: Language, code: &str) -> Result<Arc<CompiledScript>, ScriptError> {
    ScriptEngine::new().compile(&ScriptSource::new(language, code, origin(language)))
}

pub(super) fn fixed_clock() -> jiff::Timestamp {
    "2024-05-01T12:00:00Z".parse().unwrap()
}

pub(super) fn context() -> CallContext {
    let mut context =
        CallContext::new("test", crate::kinds::decorator::SYNC).with_clock(fixed_clock());
    context.scope.reads = Some(reads::cluster());
    context
}

pub(super) fn run_with(
    language: Language,
    code: &str,
    request: Value,
    call: &CallContext,
) -> Result<Value, ScriptError> {
    let engine = ScriptEngine::new();
    let script = engine.compile(&ScriptSource::new(language, code, origin(language)))?;
    engine.call(&script, &request, call)
}

pub(super) fn run(language: Language, code: &str, request: Value) -> Result<Value, ScriptError> {
    run_with(language, code, request, &context())
}

/// Runs the Rhai and the Lua version of a script and returns both results.
pub(super) fn both(rhai: &str, lua: &str, request: Value) -> [Result<Value, ScriptError>; 2] {
    [
        run(Language::Rhai, rhai, request.clone()),
        run(Language::Lua, lua, request),
    ]
}
