//! Property tests over what a webhook or a script answers: any body and any JSON, for every
//! hook and response mode. Nothing panics, what cannot be used is refused with where and why,
//! and reading a body never allocates more than [`parsed_size_bound`] drew for it.

use crate::api::{HookKind, ResponseMode};
use crate::hooks::webhook::{parse_response, parsed_size_bound};
use crate::hooks::{InvalidResponse, check_response_size, check_script_response};
use crate::script::memory::{CallMemory, Exceeded};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// Whether `work` holds at most `limit` bytes at any moment, as the allocator counts them.
pub(crate) fn allocates_within<T>(limit: usize, work: impl FnOnce() -> T) -> bool {
    let call = CallMemory::enter(limit);
    let result = work();
    let within = CallMemory::exceeded() != Some(Exceeded::Call);
    drop(result);
    drop(call);
    within
}

fn hook() -> impl Strategy<Value = HookKind> {
    prop::sample::select(crate::kinds::hooks())
}

fn mode() -> impl Strategy<Value = ResponseMode> {
    prop_oneof![Just(ResponseMode::Loose), Just(ResponseMode::Strict)]
}

/// Numbers as a body may spell them: beyond u64 and f64, with long fractions and exponents.
fn number_text() -> impl Strategy<Value = String> {
    "-?(0|[1-9][0-9]{0,400})(\\.[0-9]{1,60})?([eE][+-]?[0-9]{1,6})?"
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("JSON numbers are finite", |f| {
            Number::from_f64(f).map(Value::Number)
        }),
        ".*".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(".*", inner, 0..8)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A response whose top-level fields are the hook's own and anything else.
fn response() -> impl Strategy<Value = (HookKind, Map<String, Value>)> {
    hook().prop_flat_map(|hook| {
        let names: Vec<&'static str> = hook.response_fields().chain(["x", ""]).collect();
        let field = prop::sample::select(names);
        (
            Just(hook),
            prop::collection::btree_map(field, json(), 0..6).prop_map(|fields| {
                fields
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect()
            }),
        )
    })
}

/// A value nested `depth` levels deep in arrays and objects.
fn nested() -> impl Strategy<Value = (usize, String)> {
    (prop::collection::vec(any::<bool>(), 0..300), number_text()).prop_map(|(levels, leaf)| {
        let mut body = String::new();
        for &array in &levels {
            body.push_str(if array { "[" } else { r#"{"k":"# });
        }
        body.push_str(&leaf);
        for &array in levels.iter().rev() {
            body.push(if array { ']' } else { '}' });
        }
        (levels.len(), body)
    })
}

/// Pieces of JSON in any order: brackets, quotes, escapes, numbers and words.
const JSON_LIKE: &str = concat!(
    r#"([\[\]{}:,"\\ ]|true|null|-?[0-9]{1,30}(\.[0-9]+)?(e[0-9]+)?"#,
    r#"|\\u[0-9a-fA-F]{0,4}|[a-z]{1,3}){0,120}"#
);

/// Reads `body` as `hook`'s response in `mode`, checking it stays within its bound.
fn read(hook: HookKind, mode: ResponseMode, body: &[u8]) -> Result<Value, InvalidResponse> {
    let mut read = None;
    let bound = parsed_size_bound(body);
    assert!(
        allocates_within(bound, || read = Some(parse_response(hook, mode, body))),
        "reading {} bytes took more than their bound of {bound}",
        body.len()
    );
    read.expect("read")
}

/// Equal, but that a float may come back a last digit off: serde_json reads floats fast rather
/// than exactly (its `float_roundtrip` feature is off), e.g. 1.468084509611774e-308 as
/// 1.4680845096117736e-308.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            x == y
                || (x - y).abs() <= f64::EPSILON * 4.0 * x.abs().max(y.abs())
                || (x - y).abs() <= f64::MIN_POSITIVE
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_json(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, a)| y.get(key).is_some_and(|b| same_json(a, b)))
        }
        (a, b) => a == b,
    }
}

fn refused_with_a_reason(error: &InvalidResponse) -> Result<(), TestCaseError> {
    prop_assert!(!error.path.is_empty(), "{error}");
    prop_assert!(!error.reason.is_empty(), "{error}");
    Ok(())
}

proptest! {
    #![proptest_config(crate::fuzzing::config(256))]

    #[test]
    fn fuzz_any_bytes_are_read_or_refused_with_a_reason(
        body in prop::collection::vec(any::<u8>(), 0..600),
        hook in hook(),
        mode in mode(),
    ) {
        if let Err(error) = read(hook, mode, &body) {
            refused_with_a_reason(&error)?;
        }
    }

    /// Bytes that look like JSON, cut and spliced: brackets, quotes, escapes and numbers.
    #[test]
    fn fuzz_json_like_text_is_read_or_refused_with_a_reason(
        body in JSON_LIKE,
        hook in hook(),
        mode in mode(),
    ) {
        if let Err(error) = read(hook, mode, body.as_bytes()) {
            refused_with_a_reason(&error)?;
        }
    }

    /// Any JSON reads as itself in loose mode; in strict mode, unless a top-level field is
    /// not the hook's, which is then named.
    #[test]
    fn fuzz_any_json_reads_as_itself_within_its_bound(
        (hook, fields) in response(),
        pretty in any::<bool>(),
    ) {
        let value = Value::Object(fields);
        let body = match pretty {
            true => serde_json::to_vec_pretty(&value),
            false => serde_json::to_vec(&value),
        }
        .expect("serializes");
        let loose = read(hook, ResponseMode::Loose, &body).expect("loose");
        prop_assert!(same_json(&loose, &value), "{loose} read from {value}");
        let known = |key: &&String| hook.response_fields().any(|field| field == *key);
        let unknown = value.as_object().and_then(|fields| fields.keys().find(|key| !known(key)));
        match (read(hook, ResponseMode::Strict, &body), unknown) {
            (Ok(read), None) => prop_assert!(same_json(&read, &value), "{read} from {value}"),
            (Err(error), Some(field)) => {
                prop_assert_eq!(error.path.trim_matches('"'), field);
                prop_assert!(error.reason.contains("unknown field"), "{}", error);
            }
            (read, unknown) => prop_assert!(false, "{read:?} with unknown field {unknown:?}"),
        }
    }

    /// Deep nesting and numbers of any size: read, or refused naming the depth or the number.
    #[test]
    fn fuzz_deep_bodies_and_huge_numbers_are_refused_with_a_reason(
        (depth, body) in nested(),
        hook in hook(),
        mode in mode(),
    ) {
        match read(hook, mode, body.as_bytes()) {
            Ok(_) => prop_assert!(depth < 128, "{depth} levels read"),
            Err(error) => {
                refused_with_a_reason(&error)?;
                let deep = error.reason.contains("nests deeper than a response may");
                let number = error.reason.contains("a number beyond what a 64-bit float can");
                // Strict mode names the unknown field `k` of an object at the top.
                let strict = mode == ResponseMode::Strict && error.path == "k";
                prop_assert!(deep == (depth >= 128) && (deep || number || strict), "{error}");
            }
        }
    }

    /// What every response is held to takes any JSON without panicking, and names the field.
    #[test]
    fn fuzz_any_response_is_checked_without_panicking(
        (hook, fields) in response(),
        max_children in 0usize..4,
    ) {
        let value = Value::Object(fields);
        for checked in [
            check_script_response(hook, &value, Some("hint")),
            check_response_size(hook, &value, max_children),
        ] {
            if let Err(error) = checked {
                refused_with_a_reason(&error)?;
            }
        }
    }

    #[test]
    fn fuzz_any_value_is_checked_as_a_script_response_without_panicking(
        value in json(),
        hook in hook(),
    ) {
        if let Err(error) = check_script_response(hook, &value, None) {
            refused_with_a_reason(&error)?;
        }
        prop_assert!(check_response_size(hook, &value, 1000).is_ok() || value.is_object());
    }
}
