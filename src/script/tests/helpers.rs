//! Every helper called from both languages, with the same arguments and the same result.

use super::*;
use serde_json::json;

fn request() -> Value {
    json!({
        "object": {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": "web",
                "namespace": "prod",
                "creationTimestamp": "2024-05-01T10:00:00Z",
                "labels": {"app": "web", "tier": "front"},
                "annotations": {"note": "hi"}
            },
            "spec": {"ports": [{"port": 80}]}
        },
        "bare": {"kind": "Thing"}
    })
}

/// (description, Rhai expression, Lua expression, expected value)
const CASES: &[(&str, &str, &str, &str)] = &[
    (
        "get",
        r#"labels(get("v1", "Namespace", (), "shop"))"#,
        r#"labels(get("v1", "Namespace", nil, "shop"))"#,
        r#"{"team": "a"}"#,
    ),
    (
        "get absent",
        r#"get("v1", "Namespace", (), "nope")"#,
        r#"get("v1", "Namespace", nil, "nope")"#,
        "null",
    ),
    (
        "list",
        r#"list("v1", "Service", #{ labelSelector: "app=web" }).map(|s| `${namespace(s)}/${name(s)}`)"#,
        r#"(function() local names = array() for _, s in ipairs(list("v1", "Service", { labelSelector = "app=web" })) do table.insert(names, namespace(s) .. "/" .. name(s)) end return names end)()"#,
        r#"["other/web", "shop/web"]"#,
    ),
    (
        "event",
        r#"event("Normal", "Configured", "ok")"#,
        r#"event("Normal", "Configured", "ok")"#,
        "null",
    ),
    (
        "json_encode",
        r#"json_encode(#{ a: [1, ()] })"#,
        r#"json_encode({ a = array({1, null}) })"#,
        r#""{\"a\":[1,null]}""#,
    ),
    (
        "json_encode pretty",
        r#"json_encode([1], true)"#,
        r#"json_encode(array({1}), true)"#,
        r#""[\n  1\n]""#,
    ),
    (
        "json_decode",
        r#"json_decode("{\"a\": [1, 2.5, null]}")"#,
        r#"json_decode('{"a": [1, 2.5, null]}')"#,
        r#"{"a": [1, 2.5, null]}"#,
    ),
    (
        "json_decode keeps empty list",
        r#"json_decode("[]")"#,
        r#"json_decode("[]")"#,
        "[]",
    ),
    (
        "yaml_encode",
        r#"yaml_encode(#{ a: 1 })"#,
        r#"yaml_encode({ a = 1 })"#,
        r#""a: 1\n""#,
    ),
    (
        "yaml_decode",
        "yaml_decode(\"a: [1, x]\\nb: null\")",
        "yaml_decode('a: [1, x]\\nb: null')",
        r#"{"a": [1, "x"], "b": null}"#,
    ),
    (
        "base64_encode",
        r#"base64_encode("hello")"#,
        r#"base64_encode("hello")"#,
        r#""aGVsbG8=""#,
    ),
    (
        "base64_decode",
        r#"base64_decode("aGVsbG8=")"#,
        r#"base64_decode("aGVsbG8=")"#,
        r#""hello""#,
    ),
    (
        "sha256",
        r#"sha256("abc")"#,
        r#"sha256("abc")"#,
        r#""ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad""#,
    ),
    (
        "log returns null",
        r#"log("info", "x")"#,
        r#"log("info", "x")"#,
        "null",
    ),
    ("now", "now()", "now()", r#""2024-05-01T12:00:00Z""#),
    (
        "parse_time",
        r#"parse_time(request.object.metadata.creationTimestamp)"#,
        r#"parse_time(request.object.metadata.creationTimestamp)"#,
        "1714557600",
    ),
    (
        "to_rfc3339",
        "to_rfc3339(1714557600 + 3600)",
        "to_rfc3339(1714557600 + 3600)",
        r#""2024-05-01T11:00:00Z""#,
    ),
    (
        "ttl arithmetic",
        r#"parse_time(now()) - parse_time(request.object.metadata.creationTimestamp) > parse_duration("1h")"#,
        r#"parse_time(now()) - parse_time(request.object.metadata.creationTimestamp) > parse_duration("1h")"#,
        "true",
    ),
    (
        "parse_duration",
        r#"parse_duration("1h30m")"#,
        r#"parse_duration("1h30m")"#,
        "5400",
    ),
    (
        "selector_matches",
        r#"selector_matches(#{ matchLabels: #{ app: "web" } }, labels(request.object))"#,
        r#"selector_matches({ matchLabels = { app = "web" } }, labels(request.object))"#,
        "true",
    ),
    (
        "selector_matches expressions",
        r#"selector_matches(#{ matchExpressions: [#{ key: "tier", operator: "In", values: ["back"] }] }, labels(request.object))"#,
        r#"selector_matches({ matchExpressions = { { key = "tier", operator = "In", values = { "back" } } } }, labels(request.object))"#,
        "false",
    ),
    (
        "deep_merge",
        r#"deep_merge(#{ a: #{ x: 1, y: 2 }, z: 1 }, #{ a: #{ y: 3 }, z: () })"#,
        r#"deep_merge({ a = { x = 1, y = 2 }, z = 1 }, { a = { y = 3 }, z = null })"#,
        r#"{"a": {"x": 1, "y": 3}}"#,
    ),
    (
        "get_path",
        r#"get_path(request.object, "spec.ports.0.port")"#,
        r#"get_path(request.object, "spec.ports.0.port")"#,
        "80",
    ),
    (
        "get_path default",
        r#"get_path(request.object, ["metadata", "labels", "a.b/c"], "none")"#,
        r#"get_path(request.object, {"metadata", "labels", "a.b/c"}, "none")"#,
        r#""none""#,
    ),
    (
        "name",
        "name(request.object)",
        "name(request.object)",
        r#""web""#,
    ),
    (
        "name absent",
        "name(request.bare)",
        "name(request.bare)",
        r#""""#,
    ),
    (
        "namespace",
        "namespace(request.object)",
        "namespace(request.object)",
        r#""prod""#,
    ),
    (
        "labels",
        "labels(request.object)",
        "labels(request.object)",
        r#"{"app": "web", "tier": "front"}"#,
    ),
    (
        "labels absent",
        "labels(request.bare)",
        "labels(request.bare)",
        "{}",
    ),
    (
        "annotations",
        "annotations(request.object)",
        "annotations(request.object)",
        r#"{"note": "hi"}"#,
    ),
    (
        "annotations absent",
        "annotations(())",
        "annotations(nil)",
        "{}",
    ),
    (
        "label",
        r#"label(request.object, "app")"#,
        r#"label(request.object, "app")"#,
        r#""web""#,
    ),
    (
        "label absent",
        r#"label(request.bare, "app")"#,
        r#"label(request.bare, "app")"#,
        "null",
    ),
    (
        "annotation",
        r#"annotation(request.object, "note")"#,
        r#"annotation(request.object, "note")"#,
        r#""hi""#,
    ),
];

#[test]
fn every_helper_behaves_the_same_in_both_languages() {
    for (what, rhai, lua, expected) in CASES {
        let expected: Value = serde_json::from_str(expected).unwrap();
        let [rhai_result, lua_result] = both(rhai, &format!("return {lua}"), request());
        match rhai_result {
            Ok(value) => assert_eq!(value, expected, "rhai {what}"),
            Err(error) => panic!("rhai {what}:\n{error}"),
        }
        match lua_result {
            Ok(value) => assert_eq!(value, expected, "lua {what}"),
            Err(error) => panic!("lua {what}:\n{error}"),
        }
    }
}

#[test]
fn every_helper_has_a_case() {
    for helper in crate::script::helpers::HELPERS {
        assert!(
            CASES
                .iter()
                .any(|(what, ..)| what.split(' ').next() == Some(helper.name)),
            "no case for helper {}",
            helper.name
        );
    }
}

#[test]
fn absent_values_are_nil_in_lua_so_they_test_false() {
    let result = run(
        Language::Lua,
        r#"if label(request.object, "nope") then return "set" else return "unset" end"#,
        request(),
    );
    assert_eq!(result.unwrap(), json!("unset"));
}

#[test]
fn helper_errors_are_runtime_errors_at_the_calling_line() {
    for [rhai, lua] in [
        [
            "let x = 1;\njson_decode(\"{\")",
            "local x = 1\nreturn json_decode('{')",
        ],
        ["let x = 1;\nsha256()", "local x = 1\nreturn sha256()"],
        [
            "let x = 1;\nlog(\"loud\", \"x\")",
            "local x = 1\nreturn log('loud', 'x')",
        ],
    ] {
        for (language, code) in [(Language::Rhai, rhai), (Language::Lua, lua)] {
            let error = run(language, code, json!({})).unwrap_err();
            assert_eq!(error.kind, ScriptErrorKind::Runtime, "{error}");
            assert_eq!(error.line, Some(2), "{error}");
        }
    }
}

#[test]
fn helper_messages_are_identical_across_languages() {
    let [rhai, lua] = both(
        r#"base64_decode("!!")"#,
        r#"return base64_decode("!!")"#,
        json!({}),
    );
    assert_eq!(rhai.unwrap_err().message, lua.unwrap_err().message);
}

#[test]
fn non_json_arguments_are_rejected_with_their_position() {
    let error = run(
        Language::Lua,
        "return json_encode({ f = function() end })",
        json!({}),
    )
    .unwrap_err();
    assert_eq!(
        error.message,
        "json_encode: argument 1.f is not JSON: a Lua function is not JSON"
    );
}
