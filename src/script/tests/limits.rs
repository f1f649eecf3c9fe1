//! One test per limit in each language: each is enforced, fails fast, and is reported as a
//! limit error naming the controller, hook, language and the limit with its value.

use super::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn limited(language: Language, code: &str, limits: Limits) -> (ScriptError, Duration) {
    let call = context().with_limits(limits);
    let started = Instant::now();
    let error = run_with(language, code, json!({}), &call)
        .map(|v| panic!("{language} `{code}` was not stopped, returned {v}"))
        .unwrap_err();
    (error, started.elapsed())
}

fn assert_limit(error: &ScriptError, limit: LimitKind, text: &str) {
    assert_eq!(error.limit(), Some(limit), "{error}");
    let shown = error.to_string();
    for part in ["hook sync", "controller test", text] {
        assert!(shown.contains(part), "{part:?} missing from:\n{shown}");
    }
}

#[test]
fn a_runaway_loop_stops_within_a_second_with_default_limits() {
    for (language, code) in [
        (Language::Rhai, "loop {}"),
        (Language::Lua, "while true do end"),
    ] {
        let (error, elapsed) = limited(language, code, Limits::default());
        assert!(error.limit().is_some(), "{error}");
        assert!(
            elapsed < Duration::from_secs(1),
            "{language} took {elapsed:?}"
        );
        assert!(
            error.to_string().contains(&format!("({language}, ")),
            "{error}"
        );
    }
}

#[test]
fn operation_budget_is_enforced() {
    let limits = Limits {
        max_operations: Some(1000),
        ..Limits::default()
    };
    for (language, code) in [
        (Language::Rhai, "let n = 0;\nwhile true { n += 1; }"),
        (Language::Lua, "local n = 0\nwhile true do n = n + 1 end"),
    ] {
        let (error, _) = limited(language, code, limits.clone());
        assert_limit(
            &error,
            LimitKind::Operations,
            "operation budget of 1000 exhausted",
        );
        assert_eq!(error.line, Some(2), "{error}");
    }
}

#[test]
fn per_hook_limits_override_the_defaults() {
    let code_rhai = "let n = 0; for i in 0..2000 { n += i; } n";
    let code_lua = "local n = 0 for i = 0, 1999 do n = n + i end return n";
    for (language, code) in [(Language::Rhai, code_rhai), (Language::Lua, code_lua)] {
        assert_eq!(run(language, code, json!({})).unwrap(), json!(1999000));
        let (error, _) = limited(
            language,
            code,
            Limits {
                max_operations: Some(100),
                ..Limits::default()
            },
        );
        assert_eq!(error.limit(), Some(LimitKind::Operations));
    }
}

#[test]
fn timeout_is_enforced() {
    let limits = Limits {
        max_operations: Some(u64::MAX),
        timeout_millis: Some(50),
        ..Limits::default()
    };
    for (language, code) in [
        (Language::Rhai, "loop {}"),
        (Language::Lua, "while true do end"),
    ] {
        let (error, elapsed) = limited(language, code, limits.clone());
        assert_limit(&error, LimitKind::Timeout, "timed out after 50 ms");
        assert!(
            elapsed < Duration::from_millis(500),
            "{language} took {elapsed:?}"
        );
    }
}

#[test]
fn lua_pcall_cannot_swallow_a_limit() {
    let code = "while true do pcall(function() while true do end end) end";
    let (error, _) = limited(
        Language::Lua,
        code,
        Limits {
            max_operations: Some(10_000),
            ..Limits::default()
        },
    );
    assert_eq!(error.limit(), Some(LimitKind::Operations), "{error}");
}

#[test]
fn lua_memory_limit_stops_string_doubling() {
    let (error, elapsed) = limited(
        Language::Lua,
        "local s = 'x'\nwhile true do s = s .. s end",
        Limits {
            max_memory_bytes: Some(8 * 1024 * 1024),
            ..Limits::default()
        },
    );
    assert_limit(&error, LimitKind::Memory, "memory limit of 8 MiB exceeded");
    assert!(error.to_string().contains("(lua, "), "{error}");
    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");
}

#[test]
fn lua_memory_limit_stops_table_growth_with_defaults() {
    // Only the memory budget is the default here: on a loaded machine, filling 64 MiB can take
    // longer than the default 500 ms, and the timeout must not win the race.
    let (error, _) = limited(
        Language::Lua,
        "local t = {}\nlocal i = 0\nwhile true do i = i + 1; t[i] = { i } end",
        Limits {
            max_operations: Some(u64::MAX),
            timeout_millis: Some(60_000),
            ..Limits::default()
        },
    );
    assert_limit(&error, LimitKind::Memory, "memory limit of 64 MiB exceeded");
}

/// The fields of the request a script reads are converted into its heap, and count.
#[test]
fn lua_memory_limit_counts_the_request() {
    let big = json!({"data": "x".repeat(2 * 1024 * 1024)});
    let call = context().with_limits(Limits {
        max_memory_bytes: Some(1024 * 1024),
        ..Limits::default()
    });
    let error = run_with(Language::Lua, "return #request.data", big, &call).unwrap_err();
    assert_eq!(error.limit(), Some(LimitKind::Memory), "{error}");
}

#[test]
fn rhai_string_size_is_enforced() {
    let (error, elapsed) = limited(
        Language::Rhai,
        "let s = \"x\";\nloop { s += s; }",
        Limits {
            max_string_size: Some(1024),
            ..Limits::default()
        },
    );
    assert_limit(
        &error,
        LimitKind::StringSize,
        "string size limit of 1 KiB exceeded",
    );
    assert_eq!(error.line, Some(2));
    assert!(elapsed < Duration::from_secs(1));
}

#[test]
fn rhai_string_doubling_stops_with_defaults() {
    let (error, elapsed) = limited(
        Language::Rhai,
        "let s = \"x\"; loop { s += s; }",
        Limits::default(),
    );
    assert_limit(
        &error,
        LimitKind::StringSize,
        "string size limit of 16 MiB exceeded",
    );
    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");
}

#[test]
fn rhai_array_size_is_enforced() {
    let (error, _) = limited(
        Language::Rhai,
        "let a = [];\nloop { a.push(1); }",
        Limits {
            max_array_size: Some(100),
            ..Limits::default()
        },
    );
    assert_limit(
        &error,
        LimitKind::ArraySize,
        "array size limit of 100 items exceeded",
    );
}

#[test]
fn rhai_map_size_is_enforced() {
    let limits = Limits {
        max_map_size: Some(100),
        ..Limits::default()
    };
    // Built by a literal or `+`, checked on the spot.
    let (error, _) = limited(
        Language::Rhai,
        "let m = #{ x: 1 };\nloop { m = #{ a: m, b: m }; }",
        limits.clone(),
    );
    assert_limit(
        &error,
        LimitKind::MapSize,
        "map size limit of 100 entries exceeded",
    );
    // Grown by `m[key] = v` (which Rhai does not check), caught when it is returned.
    let (error, _) = limited(
        Language::Rhai,
        "let m = #{};\nfor i in 0..200 { m[`k${i}`] = #{}; }\nm",
        limits,
    );
    assert_limit(
        &error,
        LimitKind::MapSize,
        "map size limit of 100 entries exceeded",
    );
}

#[test]
fn rhai_call_depth_is_enforced() {
    let (error, _) = limited(
        Language::Rhai,
        "fn f(n) { f(n + 1) }\nf(0)",
        Limits::default(),
    );
    assert_limit(
        &error,
        LimitKind::CallDepth,
        "call depth limit of 64 exceeded",
    );
}

#[test]
fn lua_runaway_recursion_fails_cleanly() {
    let (error, elapsed) = limited(
        Language::Lua,
        "local function f(n) return 1 + f(n + 1) end\nreturn f(0)",
        Limits::default(),
    );
    assert!(error.message.contains("stack overflow"), "{error}");
    assert!(elapsed < Duration::from_secs(1));
}

#[test]
fn a_fresh_call_after_a_limit_has_a_fresh_budget() {
    let engine = ScriptEngine::new();
    let script = engine
        .compile(&ScriptSource::new(
            Language::Lua,
            "local n = 0 for i = 1, request.n do n = n + 1 end return n",
            origin(Language::Lua),
        ))
        .unwrap();
    let call = context().with_limits(Limits {
        max_operations: Some(500),
        ..Limits::default()
    });
    assert!(engine.call(&script, &json!({"n": 10_000}), &call).is_err());
    assert_eq!(
        engine.call(&script, &json!({"n": 10}), &call).unwrap(),
        json!(10)
    );
}

/// Expression nesting is fixed, so a debug build (`metascript test`) accepts exactly what a
/// release operator does. Each parenthesis costs two levels of the 64: 30 compile (Rhai's own
/// debug-build default of 32 would reject them), 40 do not.
#[test]
fn rhai_expression_depth_is_the_same_in_every_build() {
    let nested = |depth: usize| format!("{}1{}", "(".repeat(depth), ")".repeat(depth));
    let ok = run_with(Language::Rhai, &nested(30), json!({}), &context()).unwrap();
    assert_eq!(ok, json!(1));
    let error = run_with(Language::Rhai, &nested(40), json!({}), &context()).unwrap_err();
    assert!(error.to_string().contains("complex"), "{error}");
}
