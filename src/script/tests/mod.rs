//! Engine-level tests shared by both languages: contract, helpers, sandbox, limits, errors.

use super::*;
use serde_json::{Value, json};

fn run(language: Language, code: &str, request: Value) -> Result<Value, ScriptError> {
    let engine = ScriptEngine::new();
    let script = engine.compile(&ScriptSource::new(
        language,
        code,
        ScriptOrigin::File {
            path: PathBuf::from(format!("test.{language}")),
        },
    ))?;
    engine.call(&script, &request, &CallContext::new("test", HookKind::Sync))
}

#[test]
fn smoke() {
    assert_eq!(run(Language::Rhai, "request", json!({"a": 1})).unwrap(), json!({"a": 1}));
    assert_eq!(run(Language::Lua, "return request", json!({"a": 1})).unwrap(), json!({"a": 1}));
}
