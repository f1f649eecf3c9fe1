//! Strict reads: a field the request lacks is an error naming the path and the nearest field;
//! the optional forms read null/nil.

use super::*;
use serde_json::json;

fn request() -> Value {
    json!({
        "controller": {"metadata": {"name": "c"}},
        "object": {"metadata": {"name": "web", "namespace": "ns"}, "spec": {"ports": [{"port": 80}]}},
        "attachments": {},
        "related": {},
        "finalizing": false,
    })
}

fn message(result: Result<Value, ScriptError>) -> String {
    result.unwrap_err().message
}

#[test]
fn a_misspelled_request_field_names_the_path_and_the_fix() {
    let [rhai, lua] = both(
        "let o = request.objet; #{}",
        "local o = request.objet\nreturn {}",
        request(),
    );
    for result in [rhai, lua] {
        assert_eq!(
            message(result),
            "`request.objet`: no such field; did you mean `object`? \
             (use get_path for a field that may be absent)"
        );
    }
}

#[test]
fn nested_misses_name_the_whole_path() {
    let [rhai, lua] = both(
        "let n = request.object.metdata.name; #{}",
        "local n = request.object.metdata.name\nreturn {}",
        request(),
    );
    for result in [rhai, lua] {
        let message = message(result);
        assert!(
            message
                .starts_with("`request.object.metdata`: no such field; did you mean `metadata`?"),
            "{message}"
        );
    }
    let [rhai, lua] = both(
        "let o = request.object;\nlet p = o.spec.ports[0].prot; #{}",
        "local o = request.object\nlocal p = o.spec.ports[1].prot\nreturn {}",
        request(),
    );
    assert!(
        message(rhai).starts_with("`o.spec.ports[0].prot`: no such field; did you mean `port`?")
    );
    // Lua names the path from the request, wherever the script keeps the table.
    assert!(
        message(lua).starts_with(
            "`request.object.spec.ports[1].prot`: no such field; did you mean `port`?"
        )
    );
}

#[test]
fn the_error_points_at_the_line() {
    let [rhai, lua] = both(
        "let a = 1;\nlet b = request.object.metadata.labels;\n#{}",
        "local a = 1\nlocal b = request.object.metadata.labels\nreturn {}",
        request(),
    );
    for result in [rhai, lua] {
        let error = result.unwrap_err();
        assert_eq!(error.kind, ScriptErrorKind::Runtime);
        assert_eq!(error.line, Some(2));
        assert!(
            error
                .message
                .starts_with("`request.object.metadata.labels`: no such field")
        );
    }
}

#[test]
fn optional_reads_of_missing_fields_give_null() {
    let [rhai, lua] = both(
        r#"#{
            path: get_path(request, "object.metadata.labels"),
            fallback: get_path(request.object, "metadata.labels.app", "none"),
            label: label(request.object, "app"),
            labels: labels(request.object),
            has: "labels" in request.object.metadata,
            get: request.object.metadata.get("labels"),
            elvis: get_path(request.object, "status")?.phase,
        }"#,
        r#"return {
            path = get_path(request, "object.metadata.labels"),
            fallback = get_path(request.object, "metadata.labels.app", "none"),
            label = label(request.object, "app"),
            labels = labels(request.object),
            has = rawget(request.object.metadata, "labels") ~= nil,
        }"#,
        request(),
    );
    assert_eq!(
        rhai.unwrap(),
        json!({"path": null, "fallback": "none", "label": null, "labels": {}, "has": false,
               "get": null, "elvis": null})
    );
    assert_eq!(
        lua.unwrap(),
        json!({"fallback": "none", "labels": {}, "has": false})
    );
}

#[test]
fn present_fields_and_writes_are_unaffected() {
    let [rhai, lua] = both(
        r#"let o = request.object; o.metadata.labels = #{}; o.metadata.labels.app = "x";
           #{status: #{name: o.metadata.name, app: o.metadata.labels.app, f: request.finalizing}}"#,
        r#"local o = request.object; o.metadata.labels = {}; o.metadata.labels.app = "x"
           return {status = {name = o.metadata.name, app = o.metadata.labels.app, f = request.finalizing}}"#,
        request(),
    );
    let expected = json!({"status": {"name": "web", "app": "x", "f": false}});
    assert_eq!(rhai.unwrap(), expected);
    assert_eq!(lua.unwrap(), expected);
}

#[test]
fn lua_tables_the_script_builds_are_not_strict() {
    let result = run(
        Language::Lua,
        "local t = {}\nlocal m = labels(request.object)\nreturn {a = t.missing == nil, b = m.app == nil}",
        request(),
    );
    assert_eq!(result.unwrap(), json!({"a": true, "b": true}));
}

#[test]
fn null_fields_are_present() {
    let [rhai, lua] = both(
        "#{status: #{n: request.object.spec.x == ()}}",
        "return {status = {n = request.object.spec.x == null}}",
        json!({"object": {"spec": {"x": null}}}),
    );
    assert_eq!(rhai.unwrap(), json!({"status": {"n": true}}));
    assert_eq!(lua.unwrap(), json!({"status": {"n": true}}));
}

#[test]
fn a_lua_object_detached_from_the_request_names_the_field() {
    let result = run(
        Language::Lua,
        "local o = request.object\nrequest.object = nil\nreturn { status = { n = o.spce } }",
        request(),
    );
    assert!(message(result).starts_with("`spce`: no such field; did you mean `spec`?"),);
}
