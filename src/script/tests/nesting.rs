//! Values nested deeper than the conversions take: refused with an error naming where and the
//! limit, in both languages and both ways (responses, requests, helper arguments).

use super::*;
use crate::script::limits::MAX_DEPTH;
use serde_json::json;

/// The deepest value is `levels` lists, one inside the other, around `1`.
fn chain(language: Language, levels: usize, then: &str) -> String {
    match language {
        Language::Rhai => format!("let x = 1; for i in 0..{levels} {{ x = [x]; }} {then}"),
        Language::Lua => format!("local x = 1 for i = 1, {levels} do x = {{x}} end {then}"),
    }
}

fn returned(language: Language) -> &'static str {
    match language {
        Language::Rhai => "x",
        Language::Lua => "return x",
    }
}

#[test]
fn values_as_deep_as_the_limit_cross_both_ways() {
    let deepest = (0..MAX_DEPTH).fold(json!(1), |inner, _| json!([inner]));
    for language in [Language::Rhai, Language::Lua] {
        let built = run(
            language,
            &chain(language, MAX_DEPTH, returned(language)),
            json!({}),
        );
        assert_eq!(built.unwrap(), deepest, "{language}");
        let code = returned(language).replace('x', "request");
        let back = run(language, &code, deepest.clone());
        assert_eq!(back.unwrap(), deepest, "{language}");
    }
}

#[test]
fn a_response_or_helper_argument_nested_too_deep_is_refused_naming_where() {
    let path = "[0]".repeat(MAX_DEPTH);
    for (language, why) in [
        (
            Language::Rhai,
            "lists and maps nested deeper than 128 levels",
        ),
        (
            Language::Lua,
            "lists and maps nested deeper than 128 levels (a table containing itself?)",
        ),
    ] {
        let response = chain(language, MAX_DEPTH + 1, returned(language));
        let error = run(language, &response, json!({})).unwrap_err();
        assert_eq!(
            error.kind,
            ScriptErrorKind::Conversion,
            "{language}: {error}"
        );
        assert_eq!(error.message, format!("response{path} is not JSON: {why}"));
        let then = match language {
            Language::Rhai => "json_encode(x)",
            Language::Lua => "return json_encode(x)",
        };
        let argument = chain(language, MAX_DEPTH + 1, then);
        let error = run(language, &argument, json!({})).unwrap_err();
        assert_eq!(error.kind, ScriptErrorKind::Runtime, "{language}: {error}");
        assert_eq!(
            error.message,
            format!("json_encode: argument 1{path} is not JSON: {why}")
        );
    }
}

#[test]
fn a_request_nested_too_deep_is_refused_before_the_script_runs() {
    let deeper = (0..=MAX_DEPTH).fold(json!(1), |inner, _| json!({ "a": inner }));
    for language in [Language::Rhai, Language::Lua] {
        let code = returned(language).replace('x', "request");
        let error = run(language, &code, json!({ "object": deeper.clone() })).unwrap_err();
        assert_eq!(
            error.kind,
            ScriptErrorKind::Conversion,
            "{language}: {error}"
        );
        assert_eq!(
            error.message,
            format!(
                "request.object{} cannot be given to the script: lists and maps nested deeper \
                 than 128 levels",
                ".a".repeat(MAX_DEPTH - 1)
            ),
            "{language}"
        );
    }
}

/// A closure that captures variables may be given straight to a function that calls it; kept
/// anywhere else it could carry values out of reach of Rhai's size checks (or leak, kept in
/// what it captures), so it is refused when the script compiles, as is `curry`.
#[test]
fn closures_that_capture_are_only_given_straight_to_calls() {
    let request = json!({"items": [1, 2, 3], "other": [4, 5, 6]});
    for (code, expected) in [
        ("let y = 1; request.items.filter(|x| x > y)", json!([2, 3])),
        ("let y = 1; filter(request.items, |x| x > y)", json!([2, 3])),
        (
            "let y = 1; request.items.reduce(|sum, x| sum + x + y, 0)",
            json!(9),
        ),
        (
            "let y = 1; request.items.zip(request.other, |a, b| a + b + y)",
            json!([6, 8, 10]),
        ),
        (
            "let y = 1; request.items.map(|x| [x, y].map(|z| z + y))",
            json!([[2, 2], [3, 2], [4, 2]]),
        ),
        // Without captures, a closure carries nothing and goes anywhere.
        ("let f = |x| x + 1; [f.call(1), f]", Value::Null),
    ] {
        let result = run(Language::Rhai, code, request.clone());
        match expected {
            Value::Null => assert!(result.is_err_and(|e| e.kind == ScriptErrorKind::Conversion)),
            expected => assert_eq!(result.unwrap(), expected, "{code}"),
        }
    }
    for (code, column) in [
        ("let y = 1;\nlet f = |x| x > y;", 9),
        ("let y = 1;\n[|| y]", 2),
        ("let y = 1;\n#{ f: || y }", 7),
        ("let y = 1;\nrequest.items.map(|x| || y)", 23),
        ("let y = 1;\nrequest.items.reduce(|s, x| s, || y)", 32),
        ("let y = 1;\n(|| y).call()", 2),
        (
            "fn filter(a, f) { [f] }\nlet y = 1;\nfilter(request.items, || y)",
            23,
        ),
    ] {
        let error = run(Language::Rhai, code, request.clone()).unwrap_err();
        assert_eq!(error.kind, ScriptErrorKind::Compile, "{code}: {error}");
        assert!(
            error.message.starts_with(
                "a closure that captures variables can only be given straight to all, dedup,"
            ),
            "{code}: {}",
            error.message
        );
        assert_eq!(
            (error.line, error.column),
            (Some(code.lines().count() as u32), Some(column)),
            "{code}"
        );
    }
    for code in [
        "let f = Fn(\"abs\");\ncurry(f, 1)",
        "let f = Fn(\"abs\");\nf.curry(1)",
    ] {
        let error = run(Language::Rhai, code, request.clone()).unwrap_err();
        assert_eq!(error.kind, ScriptErrorKind::Compile, "{code}: {error}");
        assert!(
            error
                .message
                .starts_with("`curry` is not available to hooks: Rhai's size checks"),
            "{code}: {}",
            error.message
        );
        assert_eq!(error.line, Some(2), "{code}");
    }
}

/// Scripts that nest a value one level per loop until a budget stops them. Rhai size-checks a
/// value whole each time it grows, so they reach a few thousand levels before the timeout (and
/// the value is dropped on the stack each Rhai call gets); Lua's tables are not recursive in
/// Rust, only the conversion is, and it stops at its depth limit. The last two nested function
/// values a level per operation, past the size checks (a process-killing 277,000 levels in the
/// default budget, release build): they are refused when the script compiles.
const BOMBS: &[(Language, &str, &[&str])] = &[
    (
        Language::Rhai,
        "let x = #{}; loop { x = #{a: x}; }",
        &["timed out after 200 ms"],
    ),
    (
        Language::Rhai,
        "let x = []; loop { x = [x]; }",
        &["timed out after 200 ms"],
    ),
    (
        Language::Rhai,
        "let x = []; loop { let y = []; y.push(x.take()); x = y; }",
        &["timed out after 200 ms"],
    ),
    (
        Language::Rhai,
        "let x = #{}; loop { let y = #{}; y.a = x.take(); x = y; }",
        &["timed out after 200 ms"],
    ),
    (
        Language::Lua,
        "local x = {} while true do x = {a = x} end",
        LUA_STOPS,
    ),
    (
        Language::Lua,
        "local x = array() while true do x = {x} end",
        LUA_STOPS,
    ),
    (
        Language::Rhai,
        "let f = || 0; loop { let g = f; f = || g; }",
        &["a closure that captures variables can only be given straight to"],
    ),
    (
        Language::Rhai,
        "let x = (); loop { x = Fn(\"f\").curry(x.take()); }",
        &["`curry` is not available to hooks"],
    ),
];

/// A growing Lua table meets the timeout or the memory limit first, depending on the build.
const LUA_STOPS: &[&str] = &["timed out after 200 ms", "memory limit of 64 MiB exceeded"];

fn short_timeout() -> Limits {
    Limits {
        timeout_millis: Some(200),
        ..Limits::default()
    }
}

#[test]
fn nesting_bombs_fail_with_a_clear_error_in_a_hook_call() {
    let call = context().with_limits(short_timeout());
    for (language, code, errors) in BOMBS {
        let failed = run_with(*language, code, json!({}), &call).unwrap_err();
        assert!(
            errors.iter().any(|error| failed.message.contains(error)),
            "{language} `{code}`: {failed}"
        );
    }
}

/// The same scripts as `metascript test` runs them, each from a test file of its own: the
/// case fails with that error (or, for a script that does not compile, the file is reported
/// unusable with it), and the run goes on.
#[test]
fn nesting_bombs_fail_their_cases_in_metascript_test() {
    use crate::lsp::CaseRunner as _;
    let dir = tempfile::tempdir().unwrap();
    for (i, (language, code, errors)) in BOMBS.iter().enumerate() {
        let script = format!("bomb{i}.{language}");
        std::fs::write(dir.path().join(&script), code).unwrap();
        let test = dir.path().join(format!("bomb{i}.test.yaml"));
        std::fs::write(
            &test,
            format!(
                "script: {script}\nlimits: {{timeoutMillis: 200}}\ncases:\n- name: bomb\n  \
                 request: {{}}\n  expect: {{}}\n"
            ),
        )
        .unwrap();
        let failure = match crate::cli::harness::LensRunner.run(&test) {
            Ok(outcomes) => outcomes
                .into_iter()
                .map(|outcome| outcome.failure.expect("a bomb fails its case"))
                .collect(),
            Err(unusable) => unusable,
        };
        assert!(
            errors.iter().any(|error| failure.contains(error)),
            "`{code}`: {failure}"
        );
    }
}

/// Printing or comparing a list walks it through the engine, a frame of about 1.7 KiB per
/// level: a value a few thousand levels deep stops the call at its stack limit.
#[test]
fn printing_or_comparing_a_deeply_nested_value_stops_at_the_stack_limit() {
    let call = context().with_limits(Limits {
        timeout_millis: Some(30_000),
        ..Limits::default()
    });
    for finish in ["x == x", "x.to_string()"] {
        let code = format!("let x = [];\nfor i in 0..3000 {{ x = [x]; }}\n{finish}");
        let error = run_with(Language::Rhai, &code, json!({}), &call).unwrap_err();
        assert_eq!(error.limit(), Some(LimitKind::Stack), "`{finish}`: {error}");
        assert_eq!(
            error.message,
            "stack limit of 4 MiB exceeded: a value nested too deeply to print, compare or copy"
        );
    }
}
