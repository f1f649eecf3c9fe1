//! Which calls count as pure: the same request (and reads) always gives the same answer, so a
//! resync may skip them. The clock and randomness are the only ways out of the request.

use super::*;
use serde_json::json;

/// Runs `code` and says what made it impure, if anything.
fn impurity(language: Language, code: &str) -> Option<&'static str> {
    let purity = Purity::new();
    let mut call = context();
    call.scope.purity = purity.clone();
    run_with(
        language,
        code,
        json!({"object": {"metadata": {"name": "x"}}}),
        &call,
    )
    .unwrap_or_else(|e| panic!("{language}: {code}: {e}"));
    purity.impurity()
}

#[test]
fn a_script_reading_only_its_request_and_cluster_is_pure() {
    let rhai = r#"
        let name = name(request.object);
        let seen = get("v1", "Namespace", (), "shop");
        let t = parse_time("2024-05-01T12:00:00Z");
        #{ labels: #{ n: name, h: sha256(name), t: to_rfc3339(t + 60) } }
    "#;
    let lua = r#"
        local name = name(request.object)
        local seen = get("v1", "Namespace", nil, "shop")
        local fixed = os.time({year = 2024, month = 5, day = 1, hour = 12})
        return { labels = { n = name, h = sha256(name), t = os.date("%Y", fixed) } }
    "#;
    assert_eq!(impurity(Language::Rhai, rhai), None);
    assert_eq!(impurity(Language::Lua, lua), None);
}

#[test]
fn the_clock_makes_a_call_impure_in_both_languages() {
    assert_eq!(
        impurity(Language::Rhai, "#{ labels: #{ at: now() } }"),
        Some("now()")
    );
    assert_eq!(
        impurity(Language::Lua, "return { labels = { at = now() } }"),
        Some("now()")
    );
    for code in [
        "local t = os.time() return {}",
        "local d = os.date(\"%Y\") return {}",
    ] {
        assert_eq!(
            impurity(Language::Lua, code),
            Some("os.time or os.date"),
            "{code}"
        );
    }
    assert_eq!(
        impurity(Language::Lua, "local c = os.clock() return {}"),
        Some("os.clock")
    );
    // Rhai's own time package: shadowed, still working.
    assert_eq!(
        impurity(
            Language::Rhai,
            "let t = timestamp(); let e = t.elapsed; if e < 0.0 { throw \"no\" } #{}"
        ),
        Some("timestamp()")
    );
}

#[test]
fn randomness_and_memory_use_make_a_lua_call_impure() {
    assert_eq!(
        impurity(Language::Lua, "local r = math.random(1, 6) return {}"),
        Some("math.random")
    );
    // Fetched into a local first, as Luau code often does: the same function.
    assert_eq!(
        impurity(
            Language::Lua,
            "local random = math.random local r = random() return {}"
        ),
        Some("math.random")
    );
    assert_eq!(
        impurity(
            Language::Lua,
            "local k = collectgarbage(\"count\") return {}"
        ),
        Some("collectgarbage(\"count\")")
    );
}
