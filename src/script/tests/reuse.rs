//! Lua states are reused across calls: nothing a call does is seen by the next call on the same
//! state, whichever controller it belongs to, and a state whose call failed is not reused.

use super::*;
use serde_json::json;

fn lua(engine: &ScriptEngine, code: &str) -> Arc<CompiledScript> {
    engine
        .compile(&ScriptSource::new(
            Language::Lua,
            code,
            origin(Language::Lua),
        ))
        .unwrap()
}

fn call_as(
    engine: &ScriptEngine,
    script: &CompiledScript,
    controller: &str,
) -> Result<Value, ScriptError> {
    let call =
        CallContext::new(controller, crate::kinds::decorator::SYNC).with_clock(fixed_clock());
    engine.call(script, &json!({}), &call)
}

#[test]
fn a_global_written_by_one_call_is_not_seen_by_the_next() {
    let engine = ScriptEngine::new();
    let counter = lua(&engine, "counter = (counter or 0) + 1\nreturn counter");
    for _ in 0..3 {
        assert_eq!(call_as(&engine, &counter, "a").unwrap(), json!(1));
    }
    // The calls shared one state: the isolation above is the thread's, not a new state's.
    assert_eq!(engine.lua_states_built(), 1);
}

#[test]
fn library_changes_are_refused_and_globals_do_not_reach_another_controller() {
    let engine = ScriptEngine::new();
    let writer = lua(
        &engine,
        r#"
        local attempts = {
          (pcall(function() string.leak = 1 end)),
          (pcall(function() rawset(string, "leak", 1) end)),
          (pcall(setmetatable, string, {})),
          (pcall(function() getmetatable("").__index.leak = 1 end)),
          (pcall(function() _G.leak = 1 end)),
          (pcall(function() table.insert = nil end)),
          (pcall(function() getmetatable(array()).__index = {} end)),
        }
        leak = "from controller a"
        name = function() return "hijacked" end
        return attempts
        "#,
    );
    let reader = lua(
        &engine,
        r#"
        return {
          leak = leak == nil,
          string_leak = string.leak == nil,
          string_metatable = getmetatable("").__index.leak == nil,
          table_insert = table.insert ~= nil,
          name = name({metadata = {name = "x"}}),
        }
        "#,
    );
    assert_eq!(
        call_as(&engine, &writer, "a").unwrap(),
        json!([false, false, false, false, false, false, false])
    );
    assert_eq!(
        call_as(&engine, &reader, "b").unwrap(),
        json!({"leak": true, "string_leak": true, "string_metatable": true,
               "table_insert": true, "name": "x"})
    );
    assert_eq!(engine.lua_states_built(), 1);
}

#[test]
fn a_state_whose_call_failed_is_replaced() {
    let engine = ScriptEngine::new();
    let ok = lua(&engine, "return 1");
    let fails = lua(&engine, "error('boom')");
    let runaway = lua(&engine, "while true do end");
    assert_eq!(call_as(&engine, &ok, "a").unwrap(), json!(1));
    assert!(call_as(&engine, &fails, "a").is_err());
    assert_eq!(call_as(&engine, &ok, "a").unwrap(), json!(1));
    assert_eq!(engine.lua_states_built(), 2);
    let limited = CallContext::new("a", crate::kinds::decorator::SYNC).with_limits(Limits {
        max_operations: Some(1000),
        ..Limits::default()
    });
    let error = engine.call(&runaway, &json!({}), &limited).unwrap_err();
    assert_eq!(error.limit(), Some(LimitKind::Operations), "{error}");
    assert_eq!(call_as(&engine, &ok, "a").unwrap(), json!(1));
    assert_eq!(engine.lua_states_built(), 3);
}

/// The memory budget is what one call adds: the garbage earlier calls left behind in the shared
/// state does not count against it, however many calls came before.
#[test]
fn each_call_gets_its_whole_memory_budget() {
    let engine = ScriptEngine::new();
    // About 5 MiB of tables, garbage once the call returns.
    let allocates = lua(
        &engine,
        "local t = {}\nfor i = 1, 60000 do t[i] = { i, i } end\nreturn #t",
    );
    // The memory budget is what this is about: time is left generous for loaded test machines.
    let call = context().with_limits(Limits {
        max_memory_bytes: Some(8 * 1024 * 1024),
        timeout_millis: Some(10_000),
        ..Limits::default()
    });
    for _ in 0..5 {
        assert_eq!(
            engine.call(&allocates, &json!({}), &call).unwrap(),
            json!(60000)
        );
    }
    assert_eq!(engine.lua_states_built(), 1);
}

/// A top-level `coroutine.yield` would otherwise end the call early with a partial answer.
#[test]
fn a_script_cannot_yield_its_call() {
    let error = run(Language::Lua, "coroutine.yield(1)\nreturn 2", json!({})).unwrap_err();
    assert!(error.message.contains("yield"), "{error}");
}

/// Calls running at the same time each take a state of their own from the pool.
#[test]
fn concurrent_calls_get_a_state_each() {
    let engine = ScriptEngine::new();
    let script = lua(
        &engine,
        "seen = request.n\nlocal spin = 0\nfor i = 1, 2000 do spin = spin + i end\nreturn seen",
    );
    std::thread::scope(|scope| {
        for n in 0..4 {
            let (engine, script) = (&engine, &script);
            scope.spawn(move || {
                for _ in 0..10 {
                    let call = CallContext::new("a", crate::kinds::decorator::SYNC);
                    let result = engine.call(script, &json!({"n": n}), &call).unwrap();
                    assert_eq!(result, json!(n));
                }
            });
        }
    });
    assert!(
        (1..=4).contains(&engine.lua_states_built()),
        "{} states",
        engine.lua_states_built()
    );
}
