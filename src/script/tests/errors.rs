//! What users read when a hook fails: snapshots of the full messages, and the fields behind them.

use super::*;
use serde_json::json;

fn inline(language: Language, code: &str) -> ScriptSource {
    ScriptSource::new(
        language,
        code,
        ScriptOrigin::Inline {
            controller: "service-per-pod".into(),
            hook: crate::kinds::decorator::SYNC,
        },
    )
}

fn config_map(language: Language, code: &str) -> ScriptSource {
    ScriptSource::new(
        language,
        code,
        ScriptOrigin::ConfigMap {
            namespace: "default".into(),
            name: "hooks".into(),
            key: format!("sync.{language}"),
        },
    )
}

fn call_error(source: ScriptSource, limits: Limits) -> ScriptError {
    let engine = ScriptEngine::new();
    let script = engine.compile(&source).unwrap();
    let call = CallContext::new("service-per-pod", crate::kinds::decorator::SYNC)
        .with_clock(fixed_clock())
        .with_limits(limits);
    engine.call(&script, &json!({}), &call).unwrap_err()
}

#[test]
fn rhai_syntax_error() {
    let error = ScriptEngine::new()
        .compile(&inline(Language::Rhai, "let a = 1;\nlet b = (a +;\nb"))
        .unwrap_err();
    assert_eq!((error.line, error.column), (Some(2), Some(13)));
    assert_eq!(error.controller.as_deref(), Some("service-per-pod"));
    insta::assert_snapshot!(error.to_string());
}

#[test]
fn lua_syntax_error() {
    let error = ScriptEngine::new()
        .compile(&config_map(
            Language::Lua,
            "local a = 1\nlocal b = (a +\nreturn b",
        ))
        .unwrap_err();
    assert_eq!(error.kind, ScriptErrorKind::Compile);
    assert_eq!(error.line, Some(3));
    // A ConfigMap script can serve several controllers: compile errors name only the source.
    assert_eq!(error.controller, None);
    insta::assert_snapshot!(error.to_string());
}

#[test]
fn file_syntax_error_names_the_file() {
    let error = ScriptEngine::new()
        .compile(&ScriptSource::new(
            Language::Rhai,
            "let x = ;",
            ScriptOrigin::File {
                path: "scripts/x/sync.rhai".into(),
            },
        ))
        .unwrap_err();
    insta::assert_snapshot!(error.to_string());
}

#[test]
fn rhai_runtime_error() {
    let error = call_error(
        inline(Language::Rhai, "let pods = 3;\nlet x = foo + 1;\nx"),
        Limits::default(),
    );
    assert_eq!(error.kind, ScriptErrorKind::Runtime);
    insta::assert_snapshot!(error.to_string());
}

#[test]
fn lua_runtime_error() {
    let error = call_error(
        config_map(
            Language::Lua,
            "local obj = rawget(request, \"object\")\nreturn { name = obj.metadata.name }",
        ),
        Limits::default(),
    );
    assert_eq!(
        (error.kind, error.line),
        (ScriptErrorKind::Runtime, Some(2))
    );
    // The call names the controller even though the source is a ConfigMap.
    assert_eq!(error.controller.as_deref(), Some("service-per-pod"));
    insta::assert_snapshot!(error.to_string());
}

#[test]
fn rhai_limit_error() {
    let error = call_error(
        inline(Language::Rhai, "let n = 0;\nloop { n += 1; }"),
        Limits {
            max_operations: Some(1000),
            ..Limits::default()
        },
    );
    insta::assert_snapshot!(error.to_string());
}

#[test]
fn lua_limit_error() {
    let error = call_error(
        inline(
            Language::Lua,
            "local s = 'x'\nwhile true do\n  s = s .. s\nend",
        ),
        Limits {
            max_memory_bytes: Some(4 * 1024 * 1024),
            ..Limits::default()
        },
    );
    insta::assert_snapshot!(error.to_string());
}

#[test]
fn conversion_error_names_the_path() {
    let error = call_error(
        inline(
            Language::Lua,
            "return { attachments = { { metadata = { [1] = 'a', x = 'b' } } } }",
        ),
        Limits::default(),
    );
    assert_eq!(error.kind, ScriptErrorKind::Conversion);
    insta::assert_snapshot!(error.to_string());
}

#[test]
fn caret_follows_tabs() {
    let error = ScriptEngine::new()
        .compile(&inline(Language::Rhai, "\tlet x = ;"))
        .unwrap_err();
    let shown = error.to_string();
    let caret_line = shown.lines().last().unwrap();
    assert_eq!(caret_line, "   | \t        ^", "{shown}");
}
