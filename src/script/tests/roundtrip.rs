//! Property tests: any JSON handed to a script that returns `request` unchanged comes back equal.

use super::*;
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

/// What Lua's single number type makes of a JSON value: integral floats that fit in i64 come
/// back as integers (the documented rule); everything else is unchanged.
fn as_lua_sees_it(value: &Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap();
            let integral = f.fract() == 0.0
                && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f)
                && !(f == 0.0 && f.is_sign_negative());
            if integral {
                Value::from(f as i64)
            } else {
                value.clone()
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(as_lua_sees_it).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), as_lua_sees_it(v)))
                .collect(),
        ),
        other => other.clone(),
    }
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
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn rhai_returns_any_request_unchanged(request in json_with(any::<i64>().boxed())) {
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
    fn lua_returns_any_request_unchanged(
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
    fn integers_and_fractional_floats_keep_their_type_in_both(
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
