//! Property tests of the conversions between JSON and the engines' values, both ways: any JSON
//! handed to a script that returns `request` comes back equal (or, nested deeper than the
//! engines take, is refused naming where), and any value a script builds becomes the JSON it
//! stands for or a conversion error, never a panic.

use super::*;
use crate::script::limits::MAX_DEPTH;
use proptest::prelude::*;
use serde_json::{Map, Number};

/// 2^53: beyond it a double no longer holds every integer, so Lua cannot round-trip them.
const LUA_EXACT_INT: i64 = 1 << 53;

fn json_with(ints: BoxedStrategy<i64>) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        ints.prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(|f| Value::Number(Number::from_f64(f).unwrap())),
        ".*".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".*", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// What Lua's single number type makes of a JSON value: every number is a double, and
/// integral ones that fit in i64 come back as integers (the documented rule); everything else is
/// unchanged.
fn as_lua_sees_it(value: &Value) -> Value {
    numbers_as(value, &|n| {
        let f = n.as_f64().unwrap();
        let integral = f.fract() == 0.0
            && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f)
            && !(f == 0.0 && f.is_sign_negative());
        if integral {
            Value::from(f as i64)
        } else {
            Value::Number(Number::from_f64(f).unwrap())
        }
    })
}

/// What Rhai makes of a JSON value: an integer beyond i64 becomes the nearest float.
fn as_rhai_sees_it(value: &Value) -> Value {
    numbers_as(value, &|n| match n.as_i64() {
        Some(_) => Value::Number(n.clone()),
        None => Value::Number(Number::from_f64(n.as_f64().unwrap()).unwrap()),
    })
}

fn numbers_as(value: &Value, number: &dyn Fn(&Number) -> Value) -> Value {
    match value {
        Value::Number(n) => number(n),
        Value::Array(items) => Value::Array(items.iter().map(|v| numbers_as(v, number)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), numbers_as(v, number)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Levels of lists and maps: 0 for a scalar, 1 for `[]`.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// `value` inside `levels` more lists and single-key maps (a `true` is a list).
fn wrapped(value: Value, levels: &[bool]) -> Value {
    levels.iter().fold(value, |inner, list| match list {
        true => Value::Array(vec![inner]),
        false => serde_json::json!({ "a": inner }),
    })
}

/// Any JSON, nested up to 300 levels deep, with integers of every size (u64 beyond i64 too).
fn deep_json() -> impl Strategy<Value = Value> {
    let ints = prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
    ];
    (
        json_with(any::<i64>().boxed()),
        ints,
        prop::collection::vec(any::<bool>(), 0..300),
    )
        .prop_map(|(inner, big, levels)| wrapped(Value::Array(vec![inner, big]), &levels))
}

/// A request nested deeper than the engines take is refused as a conversion error that names
/// the limit and where it was reached; any other comes back as the engine's numbers see it.
fn returns_the_request_or_refuses_it(
    language: Language,
    code: &str,
    request: &Value,
    expected: Value,
) -> Result<(), TestCaseError> {
    let engine = ScriptEngine::new();
    let script = engine
        .compile(&ScriptSource::new(language, code, origin(language)))
        .unwrap();
    let result = engine.call(&script, request, &context());
    if depth(request) <= MAX_DEPTH {
        let response = result.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&response, &expected);
        prop_assert!(is_exact_type(&response, &expected));
    } else {
        let error = result.expect_err("too deep");
        prop_assert_eq!(error.kind, ScriptErrorKind::Conversion);
        prop_assert!(
            error.message.starts_with("request[0]") || error.message.starts_with("request.a"),
            "{}",
            error.message
        );
        prop_assert!(
            error.message.ends_with(
                "cannot be given to the script: lists and maps nested deeper than 128 levels"
            ),
            "{}",
            error.message
        );
    }
    Ok(())
}

fn is_exact_type(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x.is_i64() == y.is_i64() && x.is_f64() == y.is_f64()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| is_exact_type(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, a), (kb, b))| ka == kb && is_exact_type(a, b))
        }
        (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
    }
}

proptest! {
    #![proptest_config(crate::fuzzing::config(128))]

    #[test]
    fn fuzz_rhai_returns_any_request_unchanged(request in json_with(any::<i64>().boxed())) {
        let engine = ScriptEngine::new();
        let script = engine
            .compile(&ScriptSource::new(Language::Rhai, "request", origin(Language::Rhai)))
            .unwrap();
        let response = engine.call(&script, &request, &context()).unwrap();
        prop_assert_eq!(&response, &request);
        // serde_json compares 1 and 1.0 as different already; this also pins i64 vs u64.
        prop_assert!(is_exact_type(&response, &request));
    }

    #[test]
    fn fuzz_lua_returns_any_request_unchanged(
        request in json_with((-LUA_EXACT_INT..=LUA_EXACT_INT).boxed())
    ) {
        let engine = ScriptEngine::new();
        let script = engine
            .compile(&ScriptSource::new(Language::Lua, "return request", origin(Language::Lua)))
            .unwrap();
        let response = engine.call(&script, &request, &context()).unwrap();
        let expected = as_lua_sees_it(&request);
        prop_assert_eq!(&response, &expected);
        prop_assert!(is_exact_type(&response, &expected));
    }

    #[test]
    fn fuzz_rhai_returns_any_deep_request_or_refuses_it(request in deep_json()) {
        let expected = as_rhai_sees_it(&request);
        returns_the_request_or_refuses_it(Language::Rhai, "request", &request, expected)?;
    }

    #[test]
    fn fuzz_lua_returns_any_deep_request_or_refuses_it(request in deep_json()) {
        let expected = as_lua_sees_it(&request);
        returns_the_request_or_refuses_it(Language::Lua, "return request", &request, expected)?;
    }

    #[test]
    fn fuzz_integers_and_fractional_floats_keep_their_type_in_both(
        i in -LUA_EXACT_INT..=LUA_EXACT_INT,
        f in any::<f64>().prop_filter("fractional", |f| f.is_finite() && f.fract() != 0.0),
    ) {
        let request = serde_json::json!({"i": i, "f": f});
        for response in both("[request.i, request.f]", "return {request.i, request.f}", request) {
            let response = response.unwrap();
            prop_assert!(response[0].is_i64());
            prop_assert_eq!(response[0].as_i64(), Some(i));
            prop_assert!(response[1].is_f64());
            prop_assert_eq!(response[1].as_f64(), Some(f));
        }
    }
}

/// A field lent as text reads as strictly as a tree: a missing field of a nested object is the
/// same error, naming the same path, in Lua (whose tables carry the object marker) and Rhai.
#[test]
fn a_field_lent_as_text_reads_as_strictly_as_the_tree() {
    let engine = ScriptEngine::new();
    let value = serde_json::json!({"metadata": {"name": "a", "labels": {"x": "1"}}});
    let text = value.to_string();
    let rest = serde_json::json!({"finalizing": false});
    for (language, code) in [
        (Language::Lua, "return request.object.metadata.labels.y"),
        (Language::Rhai, "request.object.metadata.labels.y"),
    ] {
        let script = engine
            .compile(&ScriptSource::new(language, code, origin(language)))
            .unwrap();
        let as_text = [("object", Json::Text(&text))];
        let as_tree = [("object", Json::Tree(&value))];
        let call = |lent| engine.call(&script, HookRequest::lending(&rest, lent), &context());
        let from_text = call(&as_text).expect_err("a missing field is an error");
        let from_tree = call(&as_tree).expect_err("a missing field is an error");
        assert_eq!(from_text.kind, from_tree.kind, "{language}");
        assert_eq!(from_text.message, from_tree.message, "{language}");
        assert!(
            from_text.message.contains('y'),
            "{language}: {}",
            from_text.message
        );
    }
}

/// A field lent as JSON text (as a sync lends its object) reaches the script as the same value,
/// of the same types, as when lent as a tree.
fn lent_as_text_is_lent_as_the_tree(
    language: Language,
    code: &str,
    value: &Value,
) -> Result<(), TestCaseError> {
    let engine = ScriptEngine::new();
    let script = engine
        .compile(&ScriptSource::new(language, code, origin(language)))
        .unwrap();
    let text = value.to_string();
    let rest = serde_json::json!({"finalizing": false});
    let as_text = [("object", Json::Text(&text))];
    let as_tree = [("object", Json::Tree(value))];
    let from_text = engine.call(&script, HookRequest::lending(&rest, &as_text), &context());
    let from_tree = engine.call(&script, HookRequest::lending(&rest, &as_tree), &context());
    let (from_text, from_tree) = (from_text.unwrap(), from_tree.unwrap());
    prop_assert_eq!(&from_text, &from_tree);
    prop_assert!(is_exact_type(&from_text, &from_tree));
    Ok(())
}

proptest! {
    #![proptest_config(crate::fuzzing::config(128))]

    #[test]
    fn fuzz_a_field_lent_as_text_is_the_tree_in_both_languages(
        value in json_with(prop_oneof![any::<i64>(), (-LUA_EXACT_INT..=LUA_EXACT_INT)].boxed()),
        big in any::<u64>(),
    ) {
        let value = serde_json::json!({"value": value, "big": big});
        lent_as_text_is_lent_as_the_tree(Language::Rhai, "request.object", &value)?;
        lent_as_text_is_lent_as_the_tree(Language::Lua, "return request.object", &value)?;
    }
}

/// A value written as a Rhai and as a Lua expression, and the JSON it stands for (`None`: it
/// has a part that is not JSON).
#[derive(Clone, Debug)]
struct Built {
    rhai: String,
    lua: String,
    json: Option<Value>,
}

impl Built {
    fn leaf(rhai: impl Into<String>, lua: impl Into<String>, json: Option<Value>) -> Built {
        Built {
            rhai: rhai.into(),
            lua: lua.into(),
            json,
        }
    }
}

/// Any value a script can build: JSON's scalars (floats written as parsed text, so each is
/// exact), things that are not JSON (functions, NaN, infinities), lists, maps, and either
/// wrapped by a loop in up to 300 more levels.
fn built() -> impl Strategy<Value = Built> {
    let float = any::<f64>()
        .prop_filter("finite", |f| f.is_finite())
        .prop_map(|f| {
            Built::leaf(
                format!("parse_float(\"{f:?}\")"),
                format!("tonumber(\"{f:?}\")"),
                Some(Value::Number(Number::from_f64(f).unwrap())),
            )
        });
    let leaf = prop_oneof![
        Just(Built::leaf("()", "null", Some(Value::Null))),
        any::<bool>().prop_map(|b| Built::leaf(b.to_string(), b.to_string(), Some(b.into()))),
        (-LUA_EXACT_INT..=LUA_EXACT_INT).prop_map(|i| Built::leaf(
            i.to_string(),
            i.to_string(),
            Some(i.into())
        )),
        float,
        "[a-z äü😀]{0,6}".prop_map(|s| Built::leaf(
            format!("\"{s}\""),
            format!("\"{s}\""),
            Some(s.into())
        )),
        "[a-z]".prop_map(|c| Built::leaf(format!("'{c}'"), format!("\"{c}\""), Some(c.into()))),
        Just(Built::leaf("Fn(\"f\")", "print", None)),
        Just(Built::leaf("parse_float(\"NaN\")", "0/0", None)),
        Just(Built::leaf("parse_float(\"inf\")", "-math.huge", None)),
    ];
    let nested = leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|items| {
                let rhai = items.iter().map(|b| b.rhai.as_str()).collect::<Vec<_>>();
                let lua = items.iter().map(|b| b.lua.as_str()).collect::<Vec<_>>();
                Built {
                    rhai: format!("[{}]", rhai.join(", ")),
                    lua: match lua.is_empty() {
                        true => "array()".into(),
                        false => format!("{{{}}}", lua.join(", ")),
                    },
                    json: items
                        .into_iter()
                        .map(|b| b.json)
                        .collect::<Option<Vec<_>>>()
                        .map(Value::Array),
                }
            }),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4).prop_map(|entries| {
                let rhai = entries.iter().map(|(k, b)| format!("\"{k}\": {}", b.rhai));
                let lua = entries
                    .iter()
                    .map(|(k, b)| format!("[\"{k}\"] = {}", b.lua));
                Built {
                    rhai: format!("#{{{}}}", rhai.collect::<Vec<_>>().join(", ")),
                    lua: format!("{{{}}}", lua.collect::<Vec<_>>().join(", ")),
                    json: entries
                        .into_iter()
                        .map(|(k, b)| b.json.map(|v| (k, v)))
                        .collect::<Option<Map<_, _>>>()
                        .map(Value::Object),
                }
            }),
        ]
    });
    (nested, 0..300usize, any::<bool>()).prop_map(|(inner, levels, list)| {
        if levels == 0 {
            return inner;
        }
        let (rhai_wrap, lua_wrap) = match list {
            true => ("[x]", "{x}"),
            false => ("#{a: x}", "{a = x}"),
        };
        Built {
            rhai: format!("{{ let x = {}; for i in 0..{levels} {{ x = {rhai_wrap}; }} x }}", inner.rhai),
            lua: format!(
                "(function() local x = {} for i = 1, {levels} do x = {lua_wrap} end return x end)()",
                inner.lua
            ),
            json: inner.json.map(|v| wrapped(v, &vec![list; levels])),
        }
    })
}

/// What a script returns is the JSON its value stands for, or a conversion error naming where
/// it stops being JSON: deeper than the engines take, or a part that is not JSON at all.
fn returns_what_it_built(
    language: Language,
    code: &str,
    expected: Option<Value>,
) -> Result<(), TestCaseError> {
    let result = run(language, code, Value::Null);
    match expected.filter(|v| depth(v) <= MAX_DEPTH) {
        Some(expected) => {
            let response = result.map_err(|e| TestCaseError::fail(format!("{code}: {e}")))?;
            prop_assert_eq!(&response, &expected, "{}", code);
            prop_assert!(is_exact_type(&response, &expected), "{}", code);
        }
        None => {
            let error = result.expect_err("not JSON");
            prop_assert_eq!(
                error.kind,
                ScriptErrorKind::Conversion,
                "{}: {}",
                code,
                error
            );
            prop_assert!(
                error.message.starts_with("response") && error.message.contains("is not JSON: "),
                "{}",
                error.message
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::fuzzing::config(128))]

    #[test]
    fn fuzz_any_value_a_script_builds_becomes_its_json_or_a_conversion_error(value in built()) {
        returns_what_it_built(Language::Rhai, &value.rhai, value.json.clone())?;
        returns_what_it_built(
            Language::Lua,
            &format!("return {}", value.lua),
            value.json.as_ref().map(as_lua_sees_it),
        )?;
    }
}
