//! One test per sandbox escape: each is blocked, with an error that says why.

use super::*;
use serde_json::json;

fn blocked(language: Language, code: &str, expected: &str) {
    let error = run(language, code, json!({}))
        .map(|v| panic!("{language} `{code}` was not blocked, returned {v}"))
        .unwrap_err();
    assert!(
        error.to_string().contains(expected),
        "{language} `{code}`: expected {expected:?} in:\n{error}"
    );
}

#[test]
fn lua_require_is_blocked() {
    blocked(
        Language::Lua,
        "return require('os')",
        "require is not available in the metascript sandbox (no module loading)",
    );
}

#[test]
fn lua_code_loading_is_blocked() {
    for name in ["load", "loadstring"] {
        blocked(
            Language::Lua,
            &format!("return {name}('return 1')"),
            &format!("{name} is not available in the metascript sandbox (no code loading)"),
        );
    }
}

#[test]
fn lua_file_loading_is_blocked() {
    for name in ["dofile", "loadfile"] {
        blocked(
            Language::Lua,
            &format!("return {name}('/etc/passwd')"),
            &format!("{name} is not available in the metascript sandbox (no file system access)"),
        );
    }
}

#[test]
fn lua_io_is_blocked() {
    blocked(
        Language::Lua,
        "return io.open('/etc/passwd')",
        "io.open is not available in the metascript sandbox (no file system access)",
    );
    blocked(Language::Lua, "io.write('x')", "io.write is not available");
}

#[test]
fn lua_os_beyond_time_is_blocked() {
    for name in ["execute", "getenv", "remove", "rename", "exit", "tmpname"] {
        blocked(
            Language::Lua,
            &format!("return os.{name}('x')"),
            &format!(
                "os.{name} is not available in the metascript sandbox (only os.clock, os.time, os.date and os.difftime)"
            ),
        );
    }
    let result = run(
        Language::Lua,
        "return os.clock() >= 0 and os.difftime(2, 1) == 1",
        json!({}),
    );
    assert_eq!(result.unwrap(), json!(true));
}

#[test]
fn lua_environment_tampering_is_blocked() {
    blocked(
        Language::Lua,
        "return getfenv(1)",
        "getfenv is not available",
    );
    blocked(Language::Lua, "setfenv(1, {})", "setfenv is not available");
}

#[test]
fn lua_debug_is_blocked() {
    blocked(
        Language::Lua,
        "return debug.getinfo(1)",
        "debug.getinfo is not available in the metascript sandbox (no debug interface)",
    );
}

#[test]
fn lua_package_is_blocked() {
    blocked(
        Language::Lua,
        "return package.loaded",
        "package.loaded is not available",
    );
}

#[test]
fn lua_collectgarbage_only_counts() {
    blocked(
        Language::Lua,
        "collectgarbage('collect')",
        "collectgarbage is not available",
    );
    let result = run(
        Language::Lua,
        "return collectgarbage('count') > 0",
        json!({}),
    );
    assert_eq!(result.unwrap(), json!(true));
}

#[test]
fn lua_standard_library_is_read_only() {
    blocked(Language::Lua, "string.rep = nil", "readonly");
}

#[test]
fn lua_list_markers_are_protected() {
    blocked(
        Language::Lua,
        "local mt = getmetatable(array())\nmt.__index = function() end",
        "",
    );
    let result = run(Language::Lua, "return getmetatable(array())", json!({}));
    assert_eq!(result.unwrap(), json!("json array"));
}

#[test]
fn lua_print_goes_to_the_log_not_stdout() {
    let sink = LogSink::new();
    run_with(
        Language::Lua,
        "print('hello')",
        json!({}),
        &context().with_logs(sink.clone()),
    )
    .unwrap();
    assert_eq!(sink.lines()[0].message, "hello");
}

#[test]
fn rhai_eval_is_blocked() {
    let error = compile(Language::Rhai, "eval(\"1 + 1\")").unwrap_err();
    assert_eq!(error.kind, ScriptErrorKind::Compile);
    assert!(error.message.contains("'eval' is disabled"), "{error}");
    // Reaching eval through a function pointer fails too.
    blocked(
        Language::Rhai,
        "Fn(\"eval\").call(\"1\")",
        "'eval' is a reserved keyword",
    );
}

#[test]
fn rhai_modules_are_blocked() {
    let error = compile(Language::Rhai, "import \"fs\" as fs;\n1").unwrap_err();
    assert_eq!(error.kind, ScriptErrorKind::Compile);
    assert!(
        error.message.contains("'import' is a reserved keyword"),
        "{error}"
    );
}

#[test]
fn rhai_print_and_debug_go_to_the_log_not_stdout() {
    let sink = LogSink::new();
    run_with(
        Language::Rhai,
        "print(\"hello\"); debug(\"dbg\");",
        json!({}),
        &context().with_logs(sink.clone()),
    )
    .unwrap();
    let lines = sink.lines();
    assert_eq!(
        (lines[0].level, lines[0].message.as_str()),
        (LogLevel::Info, "hello")
    );
    assert_eq!(lines[1].level, LogLevel::Debug);
}

#[test]
fn rhai_has_no_file_process_or_environment_functions() {
    for call in [
        "open_file(\"/etc/passwd\")",
        "system(\"ls\")",
        "env(\"HOME\")",
        "read_file(\"/etc/passwd\")",
    ] {
        blocked(Language::Rhai, call, "no function");
    }
}
