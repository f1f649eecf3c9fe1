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

/// `webhook.etag`: the hook answers with an ETag, is asked the next time with `If-None-Match`,
/// and its `304 Not Modified` reuses the answer it gave.
#[tokio::test]
async fn an_etag_webhook_answering_not_modified_keeps_its_last_answer() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let client = client().await;
    operator().await;
    let (answers, not_modified) = (
        std::sync::Arc::new(AtomicUsize::new(0)),
        std::sync::Arc::new(AtomicUsize::new(0)),
    );
    let counts = (answers.clone(), not_modified.clone());
    let server = metascript::testing::HookServer::start_with_headers(move |call| {
        if call.header("If-None-Match") == Some("\"first\"") {
            counts.1.fetch_add(1, Ordering::SeqCst);
            return Reply::status(304, "");
        }
        // Each full answer differs: only a remembered answer repeats the first.
        let answer = match counts.0.fetch_add(1, Ordering::SeqCst) {
            0 => "first",
            _ => "later",
        };
        Reply::json(&json!({"labels": {"answered": answer}})).with_header("ETag", "\"first\"")
    })
    .expect("a hook server");
    let namespace = test_namespace(&client, "etag").await;
    let name = unique_name("etag");
    let sync = json!({"webhook": {"url": server.url("/sync"), "etag": {"enabled": true}}});
    apply(&client, &decorator(&name, sync)).await;
    let mut object = target(&namespace, &name);
    apply(&client, &object).await;
    wait_for(&client, &object, "the first answer", |o| {
        o["metadata"]["labels"]["answered"] == "first"
    })
    .await;
    // A user removes the label: the target is synced again, the hook says its answer still
    // holds, and the operator applies that answer (`first`) again.
    object["metadata"]["labels"]["answered"] = json!("removed");
    apply(&client, &object).await;
    wait_for(
        &client,
        &object,
        "the remembered answer applied again",
        |o| o["metadata"]["labels"]["answered"] == "first",
    )
    .await;
    assert!(
        not_modified.load(Ordering::SeqCst) >= 1,
        "asked with If-None-Match"
    );
    assert_eq!(answers.load(Ordering::SeqCst), 1, "one full answer only");
}
