//! Values nested deeper than the conversions take: refused with an error naming where and the
//! limit, in both languages and both ways (responses, requests, helper arguments).

use super::*;
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
