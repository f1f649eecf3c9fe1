//! Messages that say the fix: misspelled helpers, Rust type names, a missing `;`, and a Rhai map
//! literal lost to a YAML comment.

use super::*;
use serde_json::json;

fn message(language: Language, code: &str) -> String {
    run(language, code, json!({"a": 1})).unwrap_err().message
}

fn inline(code: &str) -> ScriptSource {
    ScriptSource::new(
        Language::Rhai,
        code,
        ScriptOrigin::Inline {
            controller: "web".into(),
            hook: crate::kinds::decorator::SYNC,
        },
    )
}

#[test]
fn a_misspelled_helper_names_the_nearest_one() {
    assert_eq!(
        message(Language::Rhai, r#"get_pth(request, "a")"#),
        "no function `get_pth(map, string)`; did you mean `get_path`?"
    );
    assert_eq!(
        message(Language::Lua, "local x = 1\nreturn get_pth(request, \"a\")"),
        "attempt to call a nil value: `get_pth` is not defined; did you mean `get_path`?"
    );
    assert_eq!(
        message(Language::Lua, "return string.fromat('%d', 1)"),
        "attempt to call a nil value: `string.fromat` is not defined; did you mean `string.format`?"
    );
    // A function the script defines itself is not a misspelled global.
    assert_eq!(
        message(Language::Lua, "local f = nil\nreturn f()"),
        "attempt to call a nil value"
    );
}

#[test]
fn a_helper_with_the_wrong_arguments_says_how_many_it_takes() {
    assert_eq!(
        message(Language::Rhai, "label(request)"),
        "label: expected 2 argument(s), got 1: `label(map)`"
    );
}

#[test]
fn rust_type_names_read_as_script_types() {
    assert_eq!(
        message(Language::Rhai, r#"let x = [1]; x["a"]"#),
        "Data type incorrect: string (expecting integer)"
    );
    assert_eq!(
        message(Language::Rhai, r#"let s = "a"; s.nope(1, 2.5, true)"#),
        "no function `nope(string, integer, float, boolean)`"
    );
}

#[test]
fn a_missing_semicolon_names_the_previous_line() {
    let error = compile(Language::Rhai, "let a = 1\n\nlet b = 2;\n#{}").unwrap_err();
    assert_eq!(error.line, Some(3));
    assert_eq!(
        error.message,
        "Expecting ';' to terminate this statement (is the `;` missing at the end of line 1?)"
    );
}

#[test]
fn a_yaml_script_that_ends_early_says_indent_it() {
    // What YAML leaves of `let labels =` followed by a `#{ ... }` line read as a comment.
    let code = "let labels =\n";
    let error = ScriptEngine::new().compile(&inline(code)).unwrap_err();
    assert!(
        error
            .message
            .starts_with("Script is incomplete (the script ends early; in YAML"),
        "{}",
        error.message
    );
    assert!(error.message.ends_with("indent it)"), "{}", error.message);
    // A file is not YAML: no such advice.
    let error = compile(Language::Rhai, code).unwrap_err();
    assert_eq!(error.message, "Script is incomplete");
}

#[test]
fn a_script_that_ends_with_a_bracket_open_names_it_and_its_line() {
    let code = "let out = #{ labels: #{} };\nif request.object.x == \"}\" {\n  out.labels.a = \"b\";\n// }\n";
    for error in [
        ScriptEngine::new().compile(&inline(code)).unwrap_err(),
        compile(Language::Rhai, code).unwrap_err(),
    ] {
        assert!(
            error
                .message
                .ends_with("(the script ends early: the `{` on line 2 is never closed)"),
            "{}",
            error.message
        );
        assert!(!error.message.contains("YAML"), "{}", error.message);
    }
}

#[test]
fn only_rhai_scripts_from_yaml_get_the_empty_response_hint() {
    let engine = ScriptEngine::new();
    let inline_rhai = engine.compile(&inline("let x = 1;")).unwrap();
    assert!(
        inline_rhai
            .empty_response_hint()
            .unwrap()
            .contains("indent it")
    );
    let file = compile(Language::Rhai, "let x = 1;").unwrap();
    assert_eq!(file.empty_response_hint(), None);
}

/// A relative scripts directory joined to a relative file leaves `.` steps: messages show the
/// path without them, once.
#[test]
fn a_script_file_is_named_without_repeated_dot_steps() {
    let origin = ScriptOrigin::File {
        path: std::path::Path::new(".").join("./").join("./sync.rhai"),
    };
    assert_eq!(origin.to_string(), "file ./sync.rhai");
    let source = ScriptSource::new(Language::Rhai, "let x = ;", origin);
    let error = ScriptEngine::new()
        .compile(&source)
        .unwrap_err()
        .to_string();
    assert!(error.contains("file ./sync.rhai"), "{error}");
    assert!(!error.contains("././"), "{error}");
}
