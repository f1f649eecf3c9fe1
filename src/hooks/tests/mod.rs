//! Loading a controller's hooks with its libraries; property tests of answers in `fuzz`.

pub(crate) mod fuzz;

use super::*;
use crate::api::ConfigMapKeyRef;
use crate::script::{CallScope, MAX_LIBRARIES};
use serde_json::json;

fn inline_library(name: &str, language: Language, code: &str) -> Library {
    Library {
        name: name.into(),
        language: Some(language),
        inline: Some(code.into()),
        config_map_ref: None,
    }
}

fn load(hooks: &[(HookKind, &Hook)], libraries: &[Library]) -> Result<ControllerHooks, HookError> {
    ControllerHooks::load(
        &ScriptEngine::new(),
        "ctl",
        hooks.iter().copied(),
        libraries,
        &[],
        &NoConfigMaps,
    )
}

#[test]
fn each_hook_loads_the_libraries_of_its_language() {
    let sync = Hook::inline(Language::Rhai, "#{ labels: #{ from: greeting() } }");
    let finalize = Hook::inline(
        Language::Lua,
        "return { finalized = true, labels = { from = lualib.greeting() } }",
    );
    let libraries = [
        inline_library("rhailib", Language::Rhai, "fn greeting() { \"rhai\" }"),
        inline_library(
            "lualib",
            Language::Lua,
            "return { greeting = function() return \"lua\" end }",
        ),
    ];
    let hooks = load(
        &[
            (crate::kinds::decorator::SYNC, &sync),
            (crate::kinds::decorator::FINALIZE, &finalize),
        ],
        &libraries,
    )
    .unwrap();
    let engine = ScriptEngine::new();
    let request = json!({"object": {}, "attachments": {}});
    for (kind, library, from) in [
        (crate::kinds::decorator::SYNC, "rhailib", "rhai"),
        (crate::kinds::decorator::FINALIZE, "lualib", "lua"),
    ] {
        let HookCode::Script { script, .. } = &hooks.get(kind).unwrap().code else {
            panic!("{kind} is a script");
        };
        let names: Vec<String> = script.libraries().map(|l| l.name).collect();
        assert_eq!(names, [library]);
        let response = hooks
            .call(&engine, kind, &request, &CallScope::default())
            .unwrap();
        assert_eq!(response["labels"]["from"], from);
    }
}

#[test]
fn a_library_no_hook_can_load_is_reported_but_not_refused() {
    let sync = Hook::inline(Language::Rhai, "#{}");
    let libraries = [inline_library("lualib", Language::Lua, "return {}")];
    assert!(load(&[(crate::kinds::decorator::SYNC, &sync)], &libraries).is_ok());
    // Not even read: its ConfigMap's absence does not stop the hooks that do not load it.
    let absent = [Library {
        name: "lualib".into(),
        language: None,
        inline: None,
        config_map_ref: Some(ConfigMapKeyRef {
            namespace: "ns".into(),
            name: "missing".into(),
            key: "lualib.lua".into(),
        }),
    }];
    assert!(load(&[(crate::kinds::decorator::SYNC, &sync)], &absent).is_ok());
    let unused = unused_libraries("ctl", &[(crate::kinds::decorator::SYNC, &sync)], &libraries);
    assert_eq!(unused.len(), 1);
    assert_eq!(unused[0].0, 0);
    assert!(
        unused[0].1.contains("library lualib is written in lua"),
        "{}",
        unused[0].1
    );
}

#[test]
fn library_problems_name_the_library() {
    let sync = Hook::inline(Language::Rhai, "#{}");
    let missing = Library {
        name: "shared".into(),
        language: None,
        inline: None,
        config_map_ref: Some(ConfigMapKeyRef {
            namespace: "ns".into(),
            name: "libs".into(),
            key: "shared.rhai".into(),
        }),
    };
    let twice = [
        inline_library("util", Language::Rhai, "fn a() { 1 }"),
        inline_library("util", Language::Rhai, "fn b() { 1 }"),
    ];
    let reserved = [inline_library("string", Language::Lua, "return {}")];
    let too_many: Vec<Library> = (0..=MAX_LIBRARIES)
        .map(|i| inline_library(&format!("l{i}"), Language::Rhai, "fn f() { 1 }"))
        .collect();
    for (libraries, expected) in [
        (
            vec![missing],
            "library shared of ctl: ConfigMap ns/libs not found",
        ),
        (
            twice.to_vec(),
            "library util of ctl: the name is listed twice",
        ),
        (
            reserved.to_vec(),
            "library string of ctl: the name \"string\" would hide",
        ),
        (too_many, "at most 16 libraries"),
    ] {
        let error = load(&[(crate::kinds::decorator::SYNC, &sync)], &libraries).unwrap_err();
        assert!(error.to_string().contains(expected), "{error}");
    }
}

/// A store with a Secret in `kube-system`, read by an account that may read only `team`.
fn limited_reads() -> crate::reads::ReadAccess {
    use crate::reads::{AllowList, ReadAccess, ReadScope, ReadVerb};
    let resolver = crate::resources::StaticResolver::with_builtins();
    let secret = resolver.find_kind("v1", "Secret").unwrap();
    let store = crate::store::MemoryStore::new([json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"namespace": "kube-system", "name": "top-secret"},
        "data": {"password": "aHVudGVyMg=="}})]);
    ReadAccess::new(std::sync::Arc::new(store), vec![secret.clone()]).with_policy(Some(
        std::sync::Arc::new(AllowList {
            account: "ServiceAccount team/app".into(),
            allowed: vec![ReadScope::new(ReadVerb::Get, &secret, Some("team"))],
        }),
    ))
}

#[test]
fn a_refused_read_fails_the_call_even_when_the_script_catches_it() {
    let engine = ScriptEngine::new();
    let rhai = r#"
        let secret = ();
        try { secret = get("v1", "Secret", "kube-system", "top-secret"); } catch (e) { }
        #{ labels: #{ got: `${secret}` } }
    "#;
    let lua = r#"
        local ok, secret = pcall(get, "v1", "Secret", "kube-system", "top-secret")
        return { labels = { got = tostring(secret) } }
    "#;
    for (language, code) in [(Language::Rhai, rhai), (Language::Lua, lua)] {
        let hook = Hook::inline(language, code);
        let hooks = load(&[(crate::kinds::decorator::SYNC, &hook)], &[]).unwrap();
        let scope = CallScope::reading(limited_reads());
        let runner = crate::hooks::HookRunner {
            engine: &engine,
            hooks: &hooks,
            webhooks: crate::hooks::WebhookClient::unrestricted(),
            observer: None,
            scope: &scope,
        };
        let error = runner
            .call(crate::kinds::decorator::SYNC, &json!({}))
            .unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, HookError::Refused { .. }),
            "{language}: {message}"
        );
        assert!(
            message.contains("may not get secrets (core) in namespace kube-system"),
            "{language}: {message}"
        );
    }
}

#[test]
fn secret_values_are_scrubbed_from_script_logs() {
    let engine = ScriptEngine::new();
    let hook = Hook::inline(
        Language::Rhai,
        r#"let p = request.secret.data.password; log("info", `password ${p} ${base64_decode(p)}`); #{}"#,
    );
    let hooks = load(&[(crate::kinds::decorator::SYNC, &hook)], &[]).unwrap();
    let logs = crate::script::LogSink::new();
    let scope = CallScope {
        logs: Some(logs.clone()),
        ..CallScope::default()
    };
    let request = json!({"secret": {"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db"}, "data": {"password": "aHVudGVyMg=="}}});
    hooks
        .call(&engine, crate::kinds::decorator::SYNC, &request, &scope)
        .unwrap();
    let lines = logs.lines();
    assert_eq!(lines.len(), 1);
    assert!(
        !lines[0].message.contains("hunter2"),
        "{}",
        lines[0].message
    );
    assert!(
        !lines[0].message.contains("aHVudGVyMg=="),
        "{}",
        lines[0].message
    );
}

/// The password of the Secret the scrubbing tests hand their hooks, and its base64.
const PASSWORD: &str = "hunter2";
const PASSWORD_BASE64: &str = "aHVudGVyMg==";

/// A request handing the hook the Secret `db` as a related object.
fn secret_request() -> Value {
    json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team"}},
        "related": {"Secret.v1": {"db": {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "team"}, "data": {"password": PASSWORD_BASE64}}}}})
}

/// A scope whose `get` and `list` may read the Secret `team/token`, whose value is `s3cr3t-token`.
fn secret_reads() -> CallScope {
    use crate::reads::{AllowList, ReadAccess, ReadScope, ReadVerb};
    let resolver = crate::resources::StaticResolver::with_builtins();
    let secret = resolver.find_kind("v1", "Secret").unwrap();
    let store = crate::store::MemoryStore::new([json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"namespace": "team", "name": "token"},
        "stringData": {"token": "s3cr3t-token"}})]);
    CallScope::reading(
        ReadAccess::new(std::sync::Arc::new(store), vec![secret.clone()]).with_policy(Some(
            std::sync::Arc::new(AllowList {
                account: "ServiceAccount team/app".into(),
                allowed: vec![ReadScope::new(ReadVerb::Get, &secret, Some("team"))],
            }),
        )),
    )
}

/// Asserts `text` holds none of the values of the Secrets above, and says where one was.
fn assert_scrubbed(what: &str, text: &str) {
    for secret in [PASSWORD, PASSWORD_BASE64, "s3cr3t-token"] {
        assert!(!text.contains(secret), "{what}: {secret} in {text}");
    }
    assert!(text.contains(crate::reads::REDACTED), "{what}: {text}");
}

#[test]
fn secret_values_are_scrubbed_from_the_notes_of_script_events() {
    let engine = ScriptEngine::new();
    for (language, code) in [
        (
            Language::Rhai,
            r#"let p = request.related["Secret.v1"].db.data.password;
               let t = get("v1", "Secret", "team", "token").stringData.token;
               event("Normal", "Leak", `${p} ${base64_decode(p)} ${t}`);
               #{}"#,
        ),
        (
            Language::Lua,
            r#"local p = request.related["Secret.v1"].db.data.password
               local t = get("v1", "Secret", "team", "token").stringData.token
               event("Normal", "Leak", p .. " " .. base64_decode(p) .. " " .. t)
               return {}"#,
        ),
    ] {
        let hooks = load(
            &[(crate::kinds::decorator::SYNC, &Hook::inline(language, code))],
            &[],
        )
        .unwrap();
        let scope = secret_reads();
        hooks
            .call(
                &engine,
                crate::kinds::decorator::SYNC,
                &secret_request(),
                &scope,
            )
            .unwrap();
        let events = scope.events.events();
        assert_eq!(events.len(), 1, "{language}");
        assert_eq!(events[0].reason, "Leak");
        assert_scrubbed(&format!("{language} event"), &events[0].message);
    }
}

/// What a work item that ran `code` (which fails) ends with: its failure, as the operator turns
/// it into the Warning Event, the log line and the controller's status.
fn failure_of(language: Language, code: &str) -> crate::runtime::report::problem::Problem {
    let engine = ScriptEngine::new();
    let hooks = load(
        &[(crate::kinds::decorator::SYNC, &Hook::inline(language, code))],
        &[],
    )
    .unwrap();
    let scope = secret_reads();
    let runner = crate::hooks::HookRunner {
        engine: &engine,
        hooks: &hooks,
        observer: None,
        scope: &scope,
        webhooks: crate::hooks::WebhookClient::unrestricted(),
    };
    let error = runner
        .call(crate::kinds::decorator::SYNC, &secret_request())
        .unwrap_err();
    crate::runtime::report::problem::Problem::from(crate::plan::SyncError::from(error))
        .scrubbed(&scope.secrets)
}

#[test]
fn secret_values_are_scrubbed_from_the_failure_of_a_hook_that_throws() {
    for (language, code) in [
        (
            Language::Rhai,
            r#"let p = request.related["Secret.v1"].db.data.password;
               let t = get("v1", "Secret", "team", "token").stringData.token;
               throw `cannot use ${p} (${base64_decode(p)}) or ${t}`;"#,
        ),
        (
            Language::Lua,
            r#"local p = request.related["Secret.v1"].db.data.password
               local t = get("v1", "Secret", "team", "token").stringData.token
               error("cannot use " .. p .. " (" .. base64_decode(p) .. ") or " .. t)"#,
        ),
        // A runtime error quoting a value the script made of one.
        (
            Language::Rhai,
            r#"let p = base64_decode(request.related["Secret.v1"].db.data.password);
               let n = parse_int(p);"#,
        ),
        (
            Language::Lua,
            r#"local p = base64_decode(request.related["Secret.v1"].db.data.password)
               local missing = nil
               return missing[p]"#,
        ),
    ] {
        let failure = failure_of(language, code);
        assert_eq!(failure.reason, crate::reasons::HOOK_FAILED, "{language}");
        assert_scrubbed(&format!("{language}: {code}"), &failure.message);
    }
}

#[test]
fn secret_values_are_scrubbed_from_the_failure_of_a_rejected_response() {
    for (language, code) in [
        (
            Language::Rhai,
            r#"let response = #{};
               response[base64_decode(request.related["Secret.v1"].db.data.password)] = 1;
               response"#,
        ),
        (
            Language::Lua,
            r#"return { [base64_decode(request.related["Secret.v1"].db.data.password)] = 1 }"#,
        ),
    ] {
        let failure = failure_of(language, code);
        assert_eq!(
            failure.reason,
            crate::reasons::INVALID_RESPONSE,
            "{language}"
        );
        assert_scrubbed(&language.to_string(), &failure.message);
    }
}
