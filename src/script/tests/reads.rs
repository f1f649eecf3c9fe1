//! `get` and `list` in both languages: the same results, errors and recorded dependencies.

use super::*;
use crate::reads::{ReadAccess, describe};
use crate::store::MemoryStore;
use serde_json::json;

/// Two Services and a Namespace; Namespaces and Services may be read.
pub(super) fn cluster() -> ReadAccess {
    let resolver = crate::resources::StaticResolver::with_builtins();
    let service = |namespace: &str, name: &str, app: &str| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"namespace": namespace, "name": name, "labels": {"app": app}}})
    };
    let store = MemoryStore::new([
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "shop", "labels": {"team": "a"}}}),
        service("shop", "web", "web"),
        service("shop", "db", "db"),
        service("other", "web", "web"),
    ]);
    ReadAccess::new(
        Arc::new(store),
        vec![
            resolver.find_kind("v1", "Namespace").unwrap(),
            resolver.find_kind("v1", "Service").unwrap(),
        ],
    )
}

#[test]
fn reads_are_recorded_the_same_in_both_languages() {
    let rhai = r#"
        let ns = get("v1", "Namespace", (), request.ns);
        let services = list("v1", "Service", #{ namespace: "shop", labelSelector: #{ matchLabels: #{ app: "db" } } });
        #{ team: label(ns, "team"), services: services.len() }
    "#;
    let lua = r#"
        local ns = get("v1", "Namespace", nil, request.ns)
        local services = list("v1", "Service", { namespace = "shop", labelSelector = { matchLabels = { app = "db" } } })
        return { team = label(ns, "team"), services = #services }
    "#;
    for (language, code) in [(Language::Rhai, rhai), (Language::Lua, lua)] {
        let mut call = context();
        let reads = cluster();
        call.scope.reads = Some(reads.clone());
        let result = run_with(language, code, json!({"ns": "shop"}), &call).unwrap();
        assert_eq!(result, json!({"team": "a", "services": 1}), "{language}");
        assert_eq!(
            describe(&reads.dependencies()),
            [
                "get Namespace.v1 shop",
                "list Service.v1 namespace=shop labels=app=db"
            ],
            "{language}"
        );
    }
}

#[test]
fn an_undeclared_type_is_an_error_naming_it_and_spec_reads() {
    for (language, code) in [
        (Language::Rhai, r#"get("v1", "Secret", "shop", "db")"#),
        (Language::Lua, r#"return get("v1", "Secret", "shop", "db")"#),
    ] {
        let error = run(language, code, json!({})).unwrap_err().to_string();
        assert!(
            error.contains("get: v1 Secret is not declared in spec.reads"),
            "{language}: {error}"
        );
    }
}

#[test]
fn without_a_store_reads_fail_clearly() {
    let call = CallContext::new("test", crate::kinds::decorator::SYNC);
    for (language, code) in [
        (Language::Rhai, r#"list("v1", "Service")"#),
        (Language::Lua, r#"return list("v1", "Service")"#),
    ] {
        let error = run_with(language, code, json!({}), &call)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("list: reads are not available"),
            "{language}: {error}"
        );
    }
}

/// A `list()` larger than what the call may still allocate is refused before it is copied, as
/// the memory limit a script allocating it would meet, even when the script catches the error.
#[test]
fn a_list_larger_than_the_call_may_hold_is_stopped_by_its_memory_limit() {
    let resolver = crate::resources::StaticResolver::with_builtins();
    let annotation = "x".repeat(16 * 1024);
    let store = MemoryStore::new((0..200).map(|i| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"namespace": "shop", "name": format!("s{i}"),
                            "annotations": {"note": annotation}}})
    }));
    let reads = ReadAccess::new(
        Arc::new(store),
        vec![resolver.find_kind("v1", "Service").unwrap()],
    );
    let limits = Limits {
        max_memory_bytes: Some(1024 * 1024),
        ..Limits::default()
    };
    for (language, code) in [
        (Language::Rhai, r#"list("v1", "Service").len()"#),
        (Language::Lua, r#"return #list("v1", "Service")"#),
        (
            Language::Rhai,
            r#"try { list("v1", "Service") } catch (e) { print(e) } 0"#,
        ),
        (
            Language::Lua,
            r#"local ok, e = pcall(list, "v1", "Service") print(e) return 0"#,
        ),
    ] {
        let mut call = context().with_limits(limits.clone());
        call.scope.reads = Some(reads.clone());
        let logs = crate::script::LogSink::new();
        call.scope.logs = Some(logs.clone());
        let error = run_with(language, code, json!({}), &call).unwrap_err();
        assert_eq!(
            error.limit(),
            Some(LimitKind::Memory),
            "{language}: {error}"
        );
        assert_eq!(
            error.message, "memory limit of 1 MiB exceeded",
            "{language}"
        );
        // A script that catches the helper's error is stopped before it can go on: the
        // budget is spent, so nothing after the catch runs (its `print` logs nothing).
        assert!(logs.lines().is_empty(), "{language}: {code}");
    }
}
