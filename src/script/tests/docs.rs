//! The snippets of `docs/scripting.md` that are not covered elsewhere, run in both languages.

use super::*;
use serde_json::json;

fn request() -> Value {
    json!({
        "parent": {
            "spec": {
                "selector": {"matchLabels": {"tier": "db"}},
                "retention": "7d",
                "template": {"b": 2}
            }
        },
        "related": {"PersistentVolumeClaim.v1": {
            "a": {"metadata": {"name": "a", "labels": {"tier": "db"}}},
            "b": {"metadata": {"name": "b", "labels": {"tier": "web"}}}
        }},
        "output": {"metadata": {"creationTimestamp": "2024-04-20T12:00:00Z"}}
    })
}

#[test]
fn selector_merge_and_ttl_snippets() {
    let rhai = r#"
        let defaults = #{ a: 1 };
        let output = request.output;
        let selector = request.parent.spec.selector;
        let chosen = request.related["PersistentVolumeClaim.v1"].values()
            .filter(|pvc| selector_matches(selector, labels(pvc)));
        let spec = deep_merge(defaults, request.parent.spec.template);
        let created = parse_time(output.metadata.creationTimestamp);
        let ttl = parse_duration(request.parent.spec.retention);
        let expired = parse_time(now()) >= created + ttl;
        let expires_at = to_rfc3339(created + ttl);
        #{ chosen: chosen.map(|pvc| name(pvc)), spec: spec, expired: expired, expires_at: expires_at }
    "#;
    let lua = r#"
        local defaults = { a = 1 }
        local output = request.output
        local selector = request.parent.spec.selector
        local chosen = array()
        for _, pvc in pairs(request.related["PersistentVolumeClaim.v1"]) do
          if selector_matches(selector, labels(pvc)) then table.insert(chosen, name(pvc)) end
        end
        local spec = deep_merge(defaults, request.parent.spec.template)
        local created = parse_time(output.metadata.creationTimestamp)
        local ttl = parse_duration(request.parent.spec.retention)
        local expired = parse_time(now()) >= created + ttl
        local expires_at = to_rfc3339(created + ttl)
        return { chosen = chosen, spec = spec, expired = expired, expires_at = expires_at }
    "#;
    let expected = json!({
        "chosen": ["a"],
        "spec": {"a": 1, "b": 2},
        "expired": true,
        "expires_at": "2024-04-27T12:00:00Z"
    });
    for result in both(rhai, lua, request()) {
        assert_eq!(result.unwrap_or_else(|e| panic!("{e}")), expected);
    }
}

#[test]
fn reader_snippets() {
    let request = json!({"object": {"metadata": {"name": "web", "labels": {}}, "spec": {}}});
    let rhai = r#"
        let sts = request.object;
        let owner = label(sts, "team");
        if owner == () { owner = "platform"; }
        #{ svc: `${name(sts)}-0`, owner: owner, replicas: get_path(sts, "spec.replicas", 1),
           floor: 41 / 2 }
    "#;
    let lua = r#"
        local sts = request.object
        local owner = label(sts, "team") or "platform"
        return { svc = name(sts) .. "-0", owner = owner,
                 replicas = get_path(sts, "spec.replicas", 1), floor = 41 // 2 }
    "#;
    let expected = json!({"svc": "web-0", "owner": "platform", "replicas": 1, "floor": 20});
    for result in both(rhai, lua, request.clone()) {
        assert_eq!(result.unwrap_or_else(|e| panic!("{e}")), expected);
    }
}
