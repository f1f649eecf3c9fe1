//! A script is given only the fields of `request` it names (`request_use`); readers still see
//! all of it, and what the script changed.

use super::*;
use crate::script::active::RequestUse;
use serde_json::json;

fn request() -> Value {
    json!({
        "object": {"metadata": {"name": "web"}},
        "attachments": {"Service.v1": {"web-0": {"metadata": {"name": "web-0"}}}},
        "related": {},
        "finalizing": false
    })
}

#[test]
fn readers_see_the_fields_a_script_was_not_given_and_its_changes() {
    let rhai = r#"
        request.object.metadata.name = "changed";
        #{
            object: name(request.object),
            through_request: get_path(request, "object.metadata.name"),
            child: get_path(request, ["attachments", "Service.v1", "web-0", "metadata", "name"]),
            whole: get_path(request, ""),
            missing: get_path(request, "nothing.here", "none"),
            empty: get_path(request, "related"),
        }
    "#;
    let lua = r#"
        request.object.metadata.name = "changed"
        return {
            object = name(request.object),
            through_request = get_path(request, "object.metadata.name"),
            child = get_path(request, {"attachments", "Service.v1", "web-0", "metadata", "name"}),
            whole = get_path(request, ""),
            missing = get_path(request, "nothing.here", "none"),
            empty = get_path(request, "related"),
        }
    "#;
    let mut whole = request();
    whole["object"]["metadata"]["name"] = json!("changed");
    let expected = json!({
        "object": "changed",
        "through_request": "changed",
        "child": "web-0",
        "whole": whole,
        "missing": "none",
        "empty": {},
    });
    let engine = ScriptEngine::new();
    for (language, code) in [(Language::Rhai, rhai), (Language::Lua, lua)] {
        let script = engine
            .compile(&ScriptSource::new(language, code, origin(language)))
            .unwrap();
        // Only `object` is converted, so the readers above go through the JSON.
        assert_eq!(
            script.program.request,
            RequestUse::Fields(["object".to_string()].into()),
            "{language}"
        );
        let response = engine.call(&script, &request(), &context());
        assert_eq!(
            response.unwrap_or_else(|e| panic!("{e}")),
            expected,
            "{language}"
        );
        // The same with the fields lent, the object and the unconverted attachments as text.
        let mut rest = request();
        let (object, attachments) = (rest["object"].take(), rest["attachments"].take());
        let fields = rest.as_object_mut().unwrap();
        fields.remove("object");
        fields.remove("attachments");
        let texts = [object.to_string(), attachments.to_string()];
        let lent = [
            ("object", Json::Text(&texts[0])),
            ("attachments", Json::Text(&texts[1])),
        ];
        let response = engine.call(&script, HookRequest::lending(&rest, &lent), &context());
        assert_eq!(
            response.unwrap_or_else(|e| panic!("{e}")),
            expected,
            "{language}, lent as text"
        );
    }
}

/// The same script, once given the whole request (a use the analysis does not follow), answers
/// the same.
#[test]
fn a_whole_request_gives_the_same_answers() {
    let path = "{'attachments', 'Service.v1', 'web-0'}";
    let partial = format!("return {{ get_path(request, {path}), name(request.object) }}");
    let whole = format!("local r = request\nreturn {{ get_path(r, {path}), name(r.object) }}");
    let engine = ScriptEngine::new();
    let results: Vec<_> = [partial, whole]
        .into_iter()
        .map(|code| {
            let script = engine
                .compile(&ScriptSource::new(
                    Language::Lua,
                    code.as_str(),
                    origin(Language::Lua),
                ))
                .unwrap();
            (
                script.program.request.clone(),
                engine.call(&script, &request(), &context()).unwrap(),
            )
        })
        .collect();
    assert_ne!(results[0].0, RequestUse::All);
    assert_eq!(results[1].0, RequestUse::All);
    assert_eq!(results[0].1, results[1].1);
    assert_eq!(
        results[0].1,
        json!([{"metadata": {"name": "web-0"}}, "web"])
    );
}

/// A Lua call's memory is the same whether its object is lent as text or as a tree: the text
/// is decoded before the call's memory is counted, as a sync's own decode is not counted.
#[test]
fn a_lua_calls_memory_does_not_depend_on_how_its_object_was_lent() {
    let items: Vec<Value> = (0..2000)
        .map(|i| json!({"name": format!("item-{i}"), "n": i}))
        .collect();
    let object = json!({ "items": items });
    let text = object.to_string();
    let rest = json!({"finalizing": false});
    let engine = ScriptEngine::new();
    let code = "return #request.object.items";
    let script = engine
        .compile(&ScriptSource::new(
            Language::Lua,
            code,
            origin(Language::Lua),
        ))
        .unwrap();
    let peak = |lent: &[(&str, Json)]| {
        let request = HookRequest::lending(&rest, lent);
        let (result, cost) = engine.call_measured(&script, request, &context());
        assert_eq!(result.unwrap(), json!(2000));
        cost.peak_memory
    };
    let from_tree = peak(&[("object", Json::Tree(&object))]);
    let from_text = peak(&[("object", Json::Text(&text))]);
    assert!(
        from_text < from_tree + 64 * 1024,
        "{from_text} bytes from text against {from_tree} from the tree"
    );
}
