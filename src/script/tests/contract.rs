//! The hook contract: `request` in, the script's value out, with nulls, empty lists and empty
//! maps, integers and floats surviving; compile caching; async calls; logs and clock.

use super::*;
use crate::script::log::LogLevel;
use serde_json::json;

fn ok(result: &Result<Value, ScriptError>) -> &Value {
    match result {
        Ok(value) => value,
        Err(error) => panic!("script failed:\n{error}"),
    }
}

#[test]
fn explicit_null_empty_list_and_empty_map_survive() {
    let expected = json!({"labels": {"remove-me": null}, "attachments": [], "status": {}});
    for result in both(
        r#"#{ labels: #{ "remove-me": () }, attachments: [], status: #{} }"#,
        r#"return { labels = { ["remove-me"] = null }, attachments = array(), status = map() }"#,
        json!({}),
    ) {
        assert_eq!(ok(&result), &expected);
    }
}

#[test]
fn lua_unmarked_tables_follow_their_keys() {
    let result = run(
        Language::Lua,
        "return { list = {1, 2}, obj = {a = 1}, empty = {} }",
        json!({}),
    );
    assert_eq!(
        ok(&result),
        &json!({"list": [1, 2], "obj": {"a": 1}, "empty": {}})
    );
}

#[test]
fn lua_array_marks_an_existing_table_and_request_lists_stay_lists() {
    let code = r#"
        local items = request.items
        table.insert(items, 3)
        local cleared = request.cleared
        table.remove(cleared)
        return { items = items, cleared = cleared, marked = array({}), explicit = map({}) }
    "#;
    let result = run(
        Language::Lua,
        code,
        json!({"items": [1, 2], "cleared": ["x"]}),
    );
    assert_eq!(
        ok(&result),
        &json!({"items": [1, 2, 3], "cleared": [], "marked": [], "explicit": {}})
    );
}

#[test]
fn null_in_the_request_is_the_null_sentinel() {
    let request = json!({"labels": {"gone": null}});
    for result in both(
        r#"request.labels.gone == ()"#,
        r#"return request.labels.gone == null"#,
        request,
    ) {
        assert_eq!(ok(&result), &json!(true));
    }
}

#[test]
fn integers_stay_integers_and_floats_stay_floats() {
    let request = json!({"n": 41, "f": 1.5});
    for result in both(
        "#{ n: request.n + 1, f: request.f * 2.5, ratio: request.n / 2 }",
        "return { n = request.n + 1, f = request.f * 2.5, ratio = request.n / 2 }",
        request,
    ) {
        let value = ok(&result);
        assert!(value["n"].is_i64(), "{value}");
        assert_eq!(value["n"], json!(42));
        assert!(value["f"].is_f64(), "{value}");
        assert_eq!(value["f"], json!(3.75));
    }
}

#[test]
fn integer_division_differs_and_is_documented() {
    // Rhai divides integers as integers; Lua has only floats, and 41 / 2 is 20.5.
    let [rhai, lua] = both("request.n / 2", "return request.n / 2", json!({"n": 41}));
    assert_eq!(ok(&rhai), &json!(20));
    assert_eq!(ok(&lua), &json!(20.5));
}

#[test]
fn lua_integral_numbers_come_back_as_integers() {
    let result = run(
        Language::Lua,
        "return { a = 3.0, b = 2^40, c = -0.5 }",
        json!({}),
    );
    assert_eq!(
        ok(&result),
        &json!({"a": 3, "b": 1099511627776i64, "c": -0.5})
    );
}

#[test]
fn an_empty_script_returns_null() {
    for result in both("let x = 1;", "local x = 1", json!({})) {
        assert_eq!(ok(&result), &Value::Null);
    }
}

#[test]
fn rhai_return_and_last_expression_are_both_the_response() {
    let result = run(
        Language::Rhai,
        "if request.a { return 1; } 2",
        json!({"a": true}),
    );
    assert_eq!(ok(&result), &json!(1));
}

#[test]
fn same_code_compiles_once_and_keeps_each_origin() {
    let engine = ScriptEngine::new();
    let code = "request.x";
    let inline = ScriptSource::new(
        Language::Rhai,
        code,
        ScriptOrigin::Inline {
            controller: "a".into(),
            hook: crate::kinds::decorator::SYNC,
        },
    );
    let config_map = ScriptSource::new(
        Language::Rhai,
        code,
        ScriptOrigin::ConfigMap {
            namespace: "default".into(),
            name: "hooks".into(),
            key: "sync.rhai".into(),
        },
    );
    let first = engine.compile(&inline).unwrap();
    let second = engine.compile(&config_map).unwrap();
    assert!(Arc::ptr_eq(&first.program, &second.program));
    assert_eq!(engine.cached_programs(), 1);
    assert_eq!(first.digest(), second.digest());
    assert_eq!(first.origin(), &inline.origin);
    assert_eq!(second.origin(), &config_map.origin);

    // The same text in the other language is a different program.
    let lua = engine
        .compile(&ScriptSource::new(
            Language::Lua,
            code,
            origin(Language::Lua),
        ))
        .unwrap_err();
    assert_eq!(lua.kind, ScriptErrorKind::Compile);

    // Programs no hook holds any more are dropped from the cache.
    drop((first, second));
    assert_eq!(engine.cached_programs(), 0);
}

#[test]
fn runtime_errors_name_the_handle_origin() {
    let engine = ScriptEngine::new();
    let source = |key: &str| {
        ScriptSource::new(
            Language::Lua,
            "error('no')",
            ScriptOrigin::ConfigMap {
                namespace: "ns".into(),
                name: "cm".into(),
                key: key.into(),
            },
        )
    };
    let a = engine.compile(&source("a.lua")).unwrap();
    let b = engine.compile(&source("b.lua")).unwrap();
    let error = engine.call(&b, &json!({}), &context()).unwrap_err();
    assert!(
        error.to_string().contains("ConfigMap ns/cm key b.lua"),
        "{error}"
    );
    let error = engine.call(&a, &json!({}), &context()).unwrap_err();
    assert!(
        error.to_string().contains("ConfigMap ns/cm key a.lua"),
        "{error}"
    );
}

#[test]
fn origins_display_where_the_script_lives() {
    let inline = ScriptOrigin::Inline {
        controller: "service-per-pod".into(),
        hook: crate::kinds::decorator::SYNC,
    };
    assert_eq!(
        inline.to_string(),
        "inline script of DecoratorController service-per-pod hook sync"
    );
    let map = ScriptOrigin::Inline {
        controller: "snapshots".into(),
        hook: crate::kinds::map::TOMBSTONE,
    };
    assert_eq!(
        map.to_string(),
        "inline script of MapController snapshots hook tombstone"
    );
    let file = ScriptOrigin::File {
        path: "scripts/x/sync.rhai".into(),
    };
    assert_eq!(file.to_string(), "file scripts/x/sync.rhai");
}

#[tokio::test(flavor = "current_thread")]
async fn call_async_runs_off_the_runtime_thread() {
    let engine = ScriptEngine::new();
    let script = engine
        .compile(&ScriptSource::new(
            Language::Lua,
            "return request.n * 2",
            origin(Language::Lua),
        ))
        .unwrap();
    // On a current-thread runtime a blocking call would stall this timer; spawn_blocking does not.
    let ticker = tokio::spawn(async {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        true
    });
    let value = engine
        .call_async(script, Arc::new(json!({"n": 21})), context())
        .await
        .unwrap();
    assert_eq!(value, json!(42));
    assert!(ticker.await.unwrap());
}

#[test]
fn logs_reach_the_sink_in_both_languages() {
    for (language, code) in [
        (
            Language::Rhai,
            r#"print("printed"); debug("debugged"); log("warn", "careful", #{ n: 1 }); 0"#,
        ),
        (
            Language::Lua,
            r#"print("printed", 2); log("warn", "careful", { n = 1 }); return 0"#,
        ),
    ] {
        let sink = LogSink::new();
        run_with(
            language,
            code,
            json!({}),
            &context().with_logs(sink.clone()),
        )
        .unwrap();
        let lines = sink.lines();
        assert_eq!(lines[0].level, LogLevel::Info, "{language}");
        assert!(lines[0].message.starts_with("printed"), "{language}");
        let warn = lines.iter().find(|l| l.level == LogLevel::Warn).unwrap();
        assert_eq!(warn.message, "careful");
        assert_eq!(warn.fields["n"], json!(1));
    }
}

#[test]
fn the_clock_is_fixed_by_the_call_context() {
    for result in both("now()", "return now()", json!({})) {
        assert_eq!(ok(&result), &json!("2024-05-01T12:00:00Z"));
    }
    let [lua_time] = [run(Language::Lua, "return os.time()", json!({}))];
    assert_eq!(ok(&lua_time), &json!(fixed_clock().as_second()));
    let date = run(
        Language::Lua,
        "return os.date('%Y-%m-%dT%H:%M:%S')",
        json!({}),
    );
    assert_eq!(ok(&date), &json!("2024-05-01T12:00:00"));
}

#[test]
fn lua_globals_do_not_leak_between_calls() {
    let engine = ScriptEngine::new();
    let script = engine
        .compile(&ScriptSource::new(
            Language::Lua,
            "local before = leaked\nleaked = 'set'\nreturn before",
            origin(Language::Lua),
        ))
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            engine.call(&script, &json!({}), &context()).unwrap(),
            Value::Null
        );
    }
}
