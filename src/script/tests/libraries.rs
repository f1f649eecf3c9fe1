//! Libraries (`spec.libraries`): loaded before the hook in both languages, isolated per call, and
//! named, with their own lines, in every error that happens inside them.

use super::*;
use serde_json::json;

fn library_origin(name: &str) -> ScriptOrigin {
    ScriptOrigin::InlineLibrary {
        controller: "test".into(),
        library: name.into(),
    }
}

fn library(name: &str, code: &str) -> LibrarySource {
    LibrarySource {
        name: name.into(),
        code: code.into(),
        origin: library_origin(name),
    }
}

fn source(language: Language, code: &str, libraries: Vec<LibrarySource>) -> ScriptSource {
    ScriptSource::new(language, code, origin(language)).with_libraries(libraries)
}

fn run_with_libraries(
    language: Language,
    code: &str,
    libraries: Vec<LibrarySource>,
    request: Value,
) -> Result<Value, ScriptError> {
    let engine = ScriptEngine::new();
    let script = engine.compile(&source(language, code, libraries))?;
    engine.call(&script, &request, &context())
}

const RHAI_UTIL: &str =
    "// helpers\nfn double(x) {\n    x * 2\n}\n\nfn fail(why) {\n    throw why;\n}\n";
const LUA_UTIL: &str = "-- helpers\nlocal M = {}\nfunction M.double(x)\n  return x * 2\nend\nfunction M.fail(why)\n  error(why)\nend\nreturn M\n";

/// Rhai calls a library's functions by name; Lua reaches them through the library's name.
#[test]
fn a_hook_calls_its_library() {
    for (language, hook, code) in [
        (Language::Rhai, "#{ doubled: double(request.n) }", RHAI_UTIL),
        (
            Language::Lua,
            "return { doubled = util.double(request.n) }",
            LUA_UTIL,
        ),
    ] {
        let response = run_with_libraries(
            language,
            hook,
            vec![library("util", code)],
            json!({"n": 21}),
        );
        assert_eq!(response.unwrap(), json!({"doubled": 42}), "{language}");
    }
}

#[test]
fn a_lua_library_sees_the_libraries_before_it() {
    let response = run_with_libraries(
        Language::Lua,
        "return { y = second.y }",
        vec![
            library("first", "return { x = 1 }"),
            library("second", "return { y = first.x + 1 }"),
        ],
        json!({}),
    )
    .unwrap();
    assert_eq!(response, json!({"y": 2}));
}

#[test]
fn an_error_inside_a_library_names_the_library_and_its_own_line() {
    for (language, library_code, hook) in [
        (
            Language::Rhai,
            RHAI_UTIL,
            "let x = 1;\nfail(\"no way\");\n#{}",
        ),
        (
            Language::Lua,
            LUA_UTIL,
            "local x = 1\nutil.fail(\"no way\")\nreturn {}",
        ),
    ] {
        let error = run_with_libraries(
            language,
            hook,
            vec![library("util", library_code)],
            json!({}),
        )
        .unwrap_err();
        assert_eq!(*error.origin, library_origin("util"), "{language}: {error}");
        assert_eq!(error.line, Some(7), "{language}: {error}");
        assert!(error.message.contains("no way"), "{language}: {error}");
        assert!(
            error.source_line.as_deref().unwrap().contains("why"),
            "{language}: {error}"
        );
        assert!(error.to_string().contains("library util"), "{error}");
    }
}

#[test]
fn an_error_in_the_hook_keeps_the_hook_s_lines_after_libraries() {
    for (language, library_code, hook) in [
        (
            Language::Rhai,
            RHAI_UTIL,
            "let x = 1;\nlet y = x.nope.deeper;\n#{}",
        ),
        (
            Language::Lua,
            LUA_UTIL,
            "local x = 1\nlocal y = x.nope.deeper\nreturn {}",
        ),
    ] {
        let error = run_with_libraries(
            language,
            hook,
            vec![library("util", library_code)],
            json!({}),
        )
        .unwrap_err();
        assert_eq!(*error.origin, origin(language), "{language}: {error}");
        assert_eq!(error.line, Some(2), "{language}: {error}");
        assert!(
            error.source_line.as_deref().unwrap().contains("nope"),
            "{language}: {error}"
        );
    }
}

#[test]
fn a_syntax_error_in_a_library_names_the_library() {
    for (language, broken) in [
        (Language::Rhai, "fn ok() { 1 }\n\nfn broken( {\n}\n"),
        (
            Language::Lua,
            "local M = {}\n\nfunction M.broken(\nreturn M\n",
        ),
    ] {
        let error = ScriptEngine::new()
            .compile(&source(language, "return 1", vec![library("util", broken)]))
            .unwrap_err();
        assert_eq!(error.kind, ScriptErrorKind::Compile, "{language}: {error}");
        assert_eq!(*error.origin, library_origin("util"), "{language}: {error}");
        assert!(
            error.line.is_some_and(|l| (3..=4).contains(&l)),
            "{language}: {error}"
        );
    }
}

#[test]
fn a_rhai_library_may_only_define_functions() {
    let error = ScriptEngine::new()
        .compile(&source(
            Language::Rhai,
            "#{}",
            vec![library("util", "fn ok() { 1 }\nconst LIMIT = 3;\n")],
        ))
        .unwrap_err();
    assert_eq!(*error.origin, library_origin("util"));
    assert_eq!(error.line, Some(2));
    assert!(error.message.contains("only defines functions"), "{error}");
}

#[test]
fn a_rhai_hook_may_not_redefine_a_library_function() {
    let error = ScriptEngine::new()
        .compile(&source(
            Language::Rhai,
            "fn double(x) { x }\n#{}",
            vec![library("util", RHAI_UTIL)],
        ))
        .unwrap_err();
    assert_eq!(error.kind, ScriptErrorKind::Compile);
    assert_eq!(*error.origin, origin(Language::Rhai), "{error}");
    assert_eq!(error.line, Some(1), "{error}");
}

/// A Lua library runs again for each call in globals of its own: what one call changes in it,
/// or in the globals, is gone by the next, and it cannot see the request.
#[test]
fn a_lua_library_is_fresh_in_every_call_and_cannot_see_the_request() {
    let engine = ScriptEngine::new();
    let script = engine
        .compile(&source(
            Language::Lua,
            "leaked_to_hook = true\nreturn { calls = counter.bump(), saw_request = counter.saw_request, library_global = stray }",
            vec![library(
                "counter",
                "stray = 1\nlocal M = { calls = 0, saw_request = request ~= nil }\nfunction M.bump()\n  M.calls = M.calls + 1\n  return M.calls\nend\nreturn M",
            )],
        ))
        .unwrap();
    for _ in 0..3 {
        let response = engine
            .call(&script, &json!({"secret": 1}), &context())
            .unwrap();
        assert_eq!(response, json!({"calls": 1, "saw_request": false}));
    }
}

#[test]
fn a_lua_library_that_returns_nothing_is_an_error_naming_it() {
    let error = run_with_libraries(
        Language::Lua,
        "return {}",
        vec![library("util", "local M = {}\n")],
        json!({}),
    )
    .unwrap_err();
    assert!(
        error.message.contains("library util returned nil"),
        "{error}"
    );
}

/// Lua points at the library line that was running; Rhai, which stops a script between
/// operations, at the hook's call into the library.
#[test]
fn a_budget_spent_inside_a_library_is_located() {
    for (language, library_code, hook) in [
        (
            Language::Rhai,
            "fn spin() {\n    loop {\n        let x = 1;\n    }\n}\n",
            "spin();\n#{}",
        ),
        (
            Language::Lua,
            "local M = {}\nfunction M.spin()\n  while true do\n    local x = 1\n  end\nend\nreturn M\n",
            "util.spin()\nreturn {}",
        ),
    ] {
        let engine = ScriptEngine::new();
        let script = engine
            .compile(&source(language, hook, vec![library("util", library_code)]))
            .unwrap();
        let call = context().with_limits(Limits {
            max_operations: Some(1000),
            ..Limits::default()
        });
        let error = engine.call(&script, &json!({}), &call).unwrap_err();
        assert!(error.limit().is_some(), "{language}: {error}");
        match language {
            Language::Lua => {
                assert_eq!(*error.origin, library_origin("util"), "{error}");
                assert!(error.line.is_some_and(|l| (2..=5).contains(&l)), "{error}");
            }
            Language::Rhai => {
                assert_eq!(*error.origin, origin(language), "{error}");
                assert_eq!(error.line, Some(1), "{error}");
            }
        }
    }
}

#[test]
fn the_digest_covers_the_libraries_and_is_unchanged_without_them() {
    let engine = ScriptEngine::new();
    let plain = engine
        .compile(&ScriptSource::new(
            Language::Lua,
            "return 1",
            origin(Language::Lua),
        ))
        .unwrap();
    assert_eq!(
        plain.digest(),
        compile(Language::Lua, "return 1").unwrap().digest()
    );
    let digest = |code: &str| {
        engine
            .compile(&source(
                Language::Lua,
                "return 1",
                vec![library("util", code)],
            ))
            .unwrap()
            .digest()
            .to_string()
    };
    let first = digest("return {}");
    assert_ne!(first, plain.digest());
    assert_ne!(first, digest("return { x = 1 }"));
    assert_eq!(first, digest("return {}"));
}

#[test]
fn library_names_must_be_identifiers_that_hide_nothing() {
    for good in ["util", "snapshots", "_private", "lib2"] {
        assert!(check_library_name(good).is_ok(), "{good}");
    }
    for bad in [
        "", "2lib", "my-lib", "a.b", "string", "request", "get", "label", "end",
    ] {
        assert!(check_library_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn sixteen_lua_libraries_load_in_order() {
    let libraries = (0..16)
        .map(|i| library(&format!("l{i}"), &format!("return {{ v = {i} }}")))
        .collect();
    let hook = (0..16)
        .map(|i| format!("l{i}.v"))
        .collect::<Vec<_>>()
        .join(" + ");
    let response = run_with_libraries(
        Language::Lua,
        &format!("return {{ sum = {hook} }}"),
        libraries,
        json!({}),
    )
    .unwrap();
    assert_eq!(response, json!({"sum": 120}));
}

/// A Lua library bound to the name of a global would be ignored by hooks (a frozen global is
/// resolved once, against the shared sandbox): every global of the sandbox is a refused name.
#[test]
fn every_sandbox_global_is_a_refused_library_name() {
    let globals = lua_engine::sandbox_globals();
    assert!(globals.iter().any(|g| g == "string"), "{globals:?}");
    for global in globals {
        assert!(
            check_library_names([global.as_str()]).is_err(),
            "{global} is accepted"
        );
    }
}

#[test]
fn a_rhai_library_may_not_replace_a_helper() {
    let error = ScriptEngine::new()
        .compile(&source(
            Language::Rhai,
            "#{ app: label(request, \"app\") }",
            vec![library(
                "util",
                "fn label(object, key) { object.metadata.labels[key] }",
            )],
        ))
        .unwrap_err();
    assert_eq!(*error.origin, library_origin("util"));
    assert!(error.message.contains("may not define `label`"), "{error}");
}

#[test]
fn a_rhai_library_left_inside_a_comment_is_refused() {
    for open in [
        "fn ok() { 1 }\n/* never closed\n",
        "fn ok() { 1 }\n/* /* nested */\n",
    ] {
        let error = ScriptEngine::new()
            .compile(&source(
                Language::Rhai,
                "#{ v: ok() }",
                vec![library("util", open)],
            ))
            .unwrap_err();
        assert_eq!(*error.origin, library_origin("util"), "{error}");
        assert!(error.message.contains("never ends"), "{error}");
    }
}

#[test]
fn a_syntax_error_at_the_end_of_a_rhai_hook_keeps_its_line_after_libraries() {
    let hook = "let x = 1;\nlet y = (x";
    let alone = compile(Language::Rhai, hook).unwrap_err();
    let with_library = ScriptEngine::new()
        .compile(&source(
            Language::Rhai,
            hook,
            vec![library("util", RHAI_UTIL)],
        ))
        .unwrap_err();
    assert_eq!(*with_library.origin, origin(Language::Rhai));
    assert_eq!(with_library.line, alone.line, "{with_library} / {alone}");
    assert_eq!(
        with_library.column, alone.column,
        "{with_library} / {alone}"
    );
}
