//! Line coverage: a script with an untested branch reports exactly the lines of that branch, and
//! straight code (table constructors spread over lines included) misses none.

use super::*;
use crate::script::coverage::LineCoverage;
use proptest::prelude::*;
use serde_json::json;

const RHAI: &str = r#"let n = request.n;
let out = #{};
if n > 0 {
    out.sign = "positive";
} else {
    out.sign = "negative";
    out.zero = n == 0;
}
#{ status: out }
"#;

const LUA: &str = r#"local n = request.n
local out = {}
if n > 0 then
    out.sign = "positive"
else
    out.sign = "negative"
    out.zero = n == 0
end
return { status = out }
"#;

fn covered(language: Language, code: &str, requests: &[Value]) -> LineCoverage {
    let engine = ScriptEngine::with_coverage();
    let script = engine
        .compile(&ScriptSource::new(language, code, origin(language)))
        .unwrap();
    for request in requests {
        engine.call(&script, request, &context()).unwrap();
    }
    let report = engine.coverage();
    assert_eq!(report.len(), 1);
    assert_eq!(report[0].origin, origin(language));
    report[0].lines.clone()
}

#[test]
fn an_untested_branch_is_reported_missed_in_both_languages() {
    for (language, code) in [(Language::Rhai, RHAI), (Language::Lua, LUA)] {
        let lines = covered(language, code, &[json!({"n": 1})]);
        assert_eq!(
            lines.missed().collect::<Vec<_>>(),
            vec![6, 7],
            "{language}: {lines:?}"
        );
        let lines = covered(language, code, &[json!({"n": 1}), json!({"n": -1})]);
        assert_eq!(lines.missed().count(), 0, "{language}: {lines:?}");
        assert!(lines.executable.contains(&1) && lines.executable.contains(&9));
    }
}

/// A controller's Rhai and Lua inline flavours share an origin's name; each keeps its own lines,
/// so one that took only one branch is not covered by the other's.
#[test]
fn two_languages_under_one_origin_are_reported_apart() {
    let engine = ScriptEngine::with_coverage();
    let shared = ScriptOrigin::Inline {
        controller: "twin".into(),
        hook: crate::kinds::decorator::SYNC,
    };
    for (language, code, n) in [(Language::Rhai, RHAI, 1), (Language::Lua, LUA, -1)] {
        let script = engine
            .compile(&ScriptSource::new(language, code, shared.clone()))
            .unwrap();
        engine.call(&script, &json!({"n": n}), &context()).unwrap();
    }
    let mut report = engine.coverage();
    report.sort_by_key(|script| script.language.to_string());
    let languages: Vec<Language> = report.iter().map(|script| script.language).collect();
    assert_eq!(languages, [Language::Lua, Language::Rhai]);
    // Lua took the negative branch, Rhai the positive one: neither is fully covered.
    assert_eq!(report[0].lines.missed().collect::<Vec<_>>(), vec![4]);
    assert_eq!(report[1].lines.missed().collect::<Vec<_>>(), vec![6, 7]);
}

#[test]
fn an_engine_without_coverage_reports_nothing() {
    let engine = ScriptEngine::new();
    let script = engine
        .compile(&ScriptSource::new(
            Language::Rhai,
            RHAI,
            origin(Language::Rhai),
        ))
        .unwrap();
    engine.call(&script, &json!({"n": 1}), &context()).unwrap();
    assert!(engine.coverage().is_empty());
}

#[test]
fn lcov_lists_every_executable_line() {
    let lines = covered(Language::Lua, LUA, &[json!({"n": 1})]);
    let text = lcov(
        &[ScriptCoverage {
            origin: origin(Language::Lua),
            language: Language::Lua,
            lines: lines.clone(),
        }],
        |origin| origin.to_string(),
    );
    assert!(text.starts_with("TN:\nSF:file test.lua\n"), "{text}");
    assert!(text.contains("DA:6,0\nDA:7,0\n"), "{text}");
    assert!(text.contains(&format!(
        "LF:{}\nLH:{}\nend_of_record\n",
        lines.executable.len(),
        lines.executable.len() - 2
    )));
}

/// A Lua expression without branches that may span lines: table constructors nested in each
/// other, in calls and in closures called on the spot.
fn straight_lua() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("1".to_string()),
        Just("request.n".to_string()),
        Just("\"text\"".to_string()),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            // Named and positional fields, each on a line of its own.
            prop::collection::vec((inner.clone(), any::<bool>()), 0..4).prop_map(|items| {
                let fields: String = items
                    .iter()
                    .enumerate()
                    .map(|(i, (item, named))| match named {
                        true => format!("  f{i} = {item},\n"),
                        false => format!("  {item},\n"),
                    })
                    .collect();
                format!("{{\n{fields}}}")
            }),
            inner
                .clone()
                .prop_map(|item| format!("tostring(\n  {item}\n)")),
            inner.prop_map(|item| format!("(function()\n  return {item}\nend)()")),
        ]
    })
}

proptest! {
    #![proptest_config(crate::fuzzing::config(64))]

    /// Code without a branch runs every line it has, so none may be reported missed, however
    /// its table constructors are spread over lines.
    #[test]
    fn fuzz_straight_lua_misses_no_line(values in prop::collection::vec(straight_lua(), 1..4)) {
        let mut code = String::new();
        for (i, value) in values.iter().enumerate() {
            code.push_str(&format!("local v{i} = {value}\n"));
        }
        code.push_str("return { status = { done = true } }\n");
        let lines = covered(Language::Lua, &code, &[json!({"n": 1})]);
        prop_assert_eq!(lines.missed().collect::<Vec<_>>(), Vec::<u32>::new(), "{}", code);
    }
}

/// One file reached by two paths (`scriptsDir: .` in one test file, `script:` in another) is
/// one script: what either path's calls reach counts for both.
#[test]
fn one_file_by_two_paths_is_counted_once() {
    let engine = ScriptEngine::with_coverage();
    for (path, n) in [("dir/./test.lua", 1), ("dir/test.lua", -1)] {
        let origin = ScriptOrigin::File { path: path.into() };
        let script = engine
            .compile(&ScriptSource::new(Language::Lua, LUA, origin))
            .unwrap();
        engine.call(&script, &json!({"n": n}), &context()).unwrap();
    }
    let report = engine.coverage();
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(
        report[0].origin,
        ScriptOrigin::File {
            path: "dir/test.lua".into()
        }
    );
    assert_eq!(report[0].lines.missed().count(), 0, "{report:?}");
}
