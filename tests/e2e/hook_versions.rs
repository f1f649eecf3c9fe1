//! Hook `version: v2` (Metacontroller's uniform object keys) against the real plane: a script
//! and a webhook each see their attachments keyed `namespace/name`, where `v1` keys them by name.

use crate::support::operator::{apply, operator, wait_for};
use crate::support::{client, eventually, test_namespace, unique_name};
use metascript::testing::{HookServer, Reply};
use serde_json::{Value, json};

fn decorator(name: &str, sync: Value) -> Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps",
                           "labelSelector": {"matchLabels": {"versions": name}}}],
            "attachments": [{"apiVersion": "v1", "resource": "secrets"}],
            "hooks": {"sync": sync}
        }
    })
}

fn target(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "target", "namespace": namespace, "labels": {"versions": name}}})
}

/// Attaches one Secret, and labels the target with the keys its attachments came under (`/`
/// as `.`, which a label value may hold).
const KEYS_LUA: &str = r#"
local keys = {}
for key, _ in pairs(request.attachments["Secret.v1"]) do
  table.insert(keys, (string.gsub(key, "/", ".")))
end
table.sort(keys)
return {
  labels = { keys = table.concat(keys, "_") },
  attachments = { { apiVersion = "v1", kind = "Secret", metadata = { name = "child" } } },
}
"#;

#[tokio::test]
async fn a_v2_script_sees_its_attachments_keyed_by_namespace_and_name() {
    let client = client().await;
    operator().await;
    for (version, expected) in [("v1", "child"), ("v2", "{ns}.child")] {
        let namespace = test_namespace(&client, &format!("versions-{version}")).await;
        let name = unique_name(&format!("versions-{version}"));
        let sync = json!({"version": version, "script": {"language": "lua", "inline": KEYS_LUA}});
        apply(&client, &decorator(&name, sync)).await;
        let target = target(&namespace, &name);
        apply(&client, &target).await;
        let expected = expected.replace("{ns}", &namespace);
        wait_for(&client, &target, "the attachment's key as a label", |o| {
            o["metadata"]["labels"]["keys"] == expected.as_str()
        })
        .await;
    }
}

#[tokio::test]
async fn a_v2_webhook_gets_v2_requests() {
    let client = client().await;
    operator().await;
    let server = HookServer::start(|_, _| {
        Reply::json(&json!({"attachments": [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "child"}}
        ]}))
    })
    .expect("a hook server");
    let namespace = test_namespace(&client, "versions-webhook").await;
    let name = unique_name("versions-webhook");
    let sync = json!({"version": "v2", "webhook": {"url": server.url("/sync")}});
    apply(&client, &decorator(&name, sync)).await;
    apply(&client, &target(&namespace, &name)).await;
    let key = format!("{namespace}/child");
    let request = eventually("a request showing the attachment", || async {
        server.requests("/sync").into_iter().find(|request| {
            request["attachments"]["Secret.v1"]
                .as_object()
                .is_some_and(|attached| !attached.is_empty())
        })
    })
    .await;
    let attachments = &request["attachments"]["Secret.v1"];
    assert!(attachments[&key].is_object(), "keyed {key}: {attachments}");
}
