//! Webhook credentials from Secrets (Metacontroller v4.16's `authorization`, `basicAuth`,
//! `caBundle.secretRef`, `endpointConfigs`) against the real plane: the hook gets the header,
//! wrong credentials fail the sync without touching anything, a rotated Secret is used without
//! a restart, and a controller cannot use a Secret its ServiceAccount may not read.

use crate::support::operator::{
    apply, get, operator, regarding_name, wait_for, wait_for_condition, wait_for_event,
};
use crate::support::{client, test_namespace, unique_name};
use base64::Engine as _;
use k8s_openapi::api::events::v1::Event;
use metascript::testing::{Call, HookServer, Reply};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::sync::Arc;

fn secret(namespace: &str, name: &str, data: &[(&str, &str)]) -> Value {
    let encode = |value: &str| base64::engine::general_purpose::STANDARD.encode(value);
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(key, value)| (key.to_string(), json!(encode(value))))
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": namespace}, "data": data})
}

/// A decorator of the ConfigMaps labelled `creds: <name>`, attaching ConfigMaps.
fn decorator(name: &str, spec: Value) -> Value {
    let mut controller = json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps",
                           "labelSelector": {"matchLabels": {"creds": name}}}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
        }
    });
    for (key, value) in spec.as_object().expect("a spec object") {
        controller["spec"][key] = value.clone();
    }
    controller
}

fn target(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "target", "namespace": namespace, "labels": {"creds": name}}})
}

/// Labels the target with `auth: <tag>` and attaches `target-child`.
fn answer(tag: &str) -> Reply {
    Reply::json(&json!({
        "labels": {"auth": tag},
        "attachments": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target-child"}}]
    }))
}

/// Answers only `Authorization: <expected>`, with the token's tag; 401 otherwise.
fn server_expecting(expected: Arc<Mutex<(String, String)>>) -> HookServer {
    HookServer::start_with_headers(move |call: &Call| {
        let (header, tag) = expected.lock().clone();
        match call.header("Authorization") {
            Some(given) if given == header => answer(&tag),
            _ => Reply::status(401, "unauthorized"),
        }
    })
    .expect("a hook server")
}

async fn event_on(client: &kube::Client, namespace: &str, object: &str, reason: &str) -> Event {
    wait_for_event(client, Some(namespace), reason, |e| {
        regarding_name(e) == Some(object)
    })
    .await
}

#[tokio::test]
async fn a_bearer_token_is_sent_refused_credentials_touch_nothing_and_rotation_needs_no_restart() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "bearer").await;
    let name = unique_name("bearer");
    let expected = Arc::new(Mutex::new((
        "Bearer first-token".to_string(),
        "first".to_string(),
    )));
    let server = server_expecting(expected.clone());
    // A trailing newline, as `kubectl create secret --from-file` leaves, is no part of it.
    apply(
        &client,
        &secret(&namespace, "hook-token", &[("token", "first-token\n")]),
    )
    .await;
    apply(&client, &decorator(&name, json!({"hooks": {"sync": {"webhook": {
        "url": server.url("/sync"),
        "authorization": {"secretRef": {"name": "hook-token", "namespace": namespace, "key": "token"}}
    }}}})))
    .await;
    let mut object = target(&namespace, &name);
    apply(&client, &object).await;
    wait_for(
        &client,
        &object,
        "the hook's answer with the first token",
        |o| o["metadata"]["labels"]["auth"] == "first",
    )
    .await;
    let child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target-child", "namespace": namespace}});
    wait_for(&client, &child, "the attachment", |_| true).await;

    // The hook moves to a new token before the Secret does: it refuses the old one.
    *expected.lock() = ("Bearer second-token".into(), "second".into());
    object["metadata"]["labels"]["touched"] = json!("yes");
    apply(&client, &object).await;
    let failed = event_on(&client, &namespace, "target", "HookFailed").await;
    let note = failed.note.unwrap_or_default();
    assert!(note.contains("HTTP 401"), "{note}");
    assert!(
        !note.contains("first-token"),
        "the token is never printed: {note}"
    );
    let controller = json!({"apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController", "metadata": {"name": name}});
    wait_for(&client, &controller, "the failing target counted", |c| {
        c["status"]["failing"] == 1
    })
    .await;
    let now = get(&client, &object).await.expect("the target");
    assert_eq!(
        now["metadata"]["labels"]["auth"], "first",
        "nothing applied"
    );
    assert!(get(&client, &child).await.is_some(), "nothing deleted");

    // Moved from Metacontroller, it keeps Metacontroller's Event reason for the same failure.
    let hook = json!({"sync": {"webhook": {
        "url": server.url("/sync"),
        "authorization": {"secretRef": {"name": "hook-token", "namespace": namespace, "key": "token"}}
    }}});
    apply(
        &client,
        &decorator(
            &name,
            json!({
                "hooks": hook, "compatibility": {"eventReasons": "Metacontroller"}
            }),
        ),
    )
    .await;
    let failed = event_on(&client, &namespace, "target", "SyncError").await;
    let note = failed.note.unwrap_or_default();
    assert!(
        note.starts_with("HookFailed: ") && note.contains("HTTP 401"),
        "{note}"
    );

    // The Secret catches up: the operator reads it again and syncs, without a restart or any
    // change to the target.
    apply(
        &client,
        &secret(&namespace, "hook-token", &[("token", "second-token")]),
    )
    .await;
    wait_for(
        &client,
        &object,
        "the hook's answer with the rotated token",
        |o| o["metadata"]["labels"]["auth"] == "second",
    )
    .await;
    wait_for(&client, &controller, "nothing failing", |c| {
        c["status"]["failing"] == 0
    })
    .await;
}

#[tokio::test]
async fn basic_auth_sends_the_username_and_password_as_metacontroller_does() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "basic").await;
    let name = unique_name("basic");
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let headers = seen.clone();
    let server = HookServer::start_with_headers(move |call: &Call| {
        headers
            .lock()
            .push(call.header("Authorization").unwrap_or_default().to_string());
        answer("basic")
    })
    .expect("a hook server");
    apply(
        &client,
        &secret(
            &namespace,
            "hook-basic",
            &[("user", "hooks"), ("password", "pa:ss word")],
        ),
    )
    .await;
    apply(&client, &decorator(&name, json!({"hooks": {"sync": {"webhook": {
        "url": server.url("/sync"),
        "basicAuth": {"secretRef": {"name": "hook-basic", "namespace": namespace}, "usernameKey": "user"}
    }}}})))
    .await;
    let object = target(&namespace, &name);
    apply(&client, &object).await;
    wait_for(&client, &object, "the hook's answer", |o| {
        o["metadata"]["labels"]["auth"] == "basic"
    })
    .await;
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("hooks:pa:ss word")
    );
    assert!(
        seen.lock().iter().all(|header| *header == expected),
        "{:?}",
        seen.lock()
    );
}

/// Metacontroller's `examples/webhook-auth` shape: one `endpointConfigs` entry for the hook's
/// host gives the CA (from a Secret) and the token, and the hook itself names neither.
#[tokio::test]
async fn an_endpoint_config_gives_a_tls_hook_its_ca_from_a_secret_and_its_token() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "endpoint").await;
    let name = unique_name("endpoint");
    let server =
        HookServer::start_tls_with_headers(|call: &Call| match call.header("Authorization") {
            Some("Token endpoint-token") => answer("endpoint"),
            _ => Reply::status(401, "unauthorized"),
        })
        .expect("a hook server");
    let ca = server.ca_pem().expect("a TLS server's CA");
    apply(&client, &secret(&namespace, "hook-ca", &[("ca.crt", ca)])).await;
    apply(
        &client,
        &secret(&namespace, "hook-token", &[("token", "endpoint-token")]),
    )
    .await;
    let url = server.url("/sync");
    let host = url
        .trim_start_matches("https://")
        .trim_end_matches("/sync")
        .to_string();
    apply(&client, &decorator(&name, json!({
        "endpointConfigs": [{
            "host": host,
            "caBundle": {"secretRef": {"name": "hook-ca", "namespace": namespace}},
            "authorization": {"type": "Token", "secretRef": {"name": "hook-token", "namespace": namespace, "key": "token"}}
        }],
        "hooks": {"sync": {"webhook": {"url": url}}}
    })))
    .await;
    let object = target(&namespace, &name);
    apply(&client, &object).await;
    wait_for(&client, &object, "the TLS hook's answer", |o| {
        o["metadata"]["labels"]["auth"] == "endpoint"
    })
    .await;
}

/// Credentials are read as the controller's ServiceAccount: a Secret it may not read is a load
/// error naming it (though the operator could read it), and granting the read fixes it without
/// any change to the controller.
#[tokio::test]
async fn a_controller_cannot_use_a_secret_its_account_may_not_read() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "secret-rbac").await;
    let name = unique_name("secret-rbac");
    let server = HookServer::start_with_headers(|call: &Call| match call.header("Authorization") {
        Some("Bearer account-token") => answer("account"),
        _ => Reply::status(401, "unauthorized"),
    })
    .expect("a hook server");
    apply(&client, &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "hooks", "namespace": namespace}})).await;
    // What a decorator of ConfigMaps needs, and no Secret.
    apply(&client, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "configmaps", "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["configmaps/finalizers"], "verbs": ["update"]}
        ]
    }))
    .await;
    let binding = |role: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "hooks", "namespace": namespace}]
        })
    };
    apply(&client, &binding("configmaps")).await;
    apply(
        &client,
        &secret(&namespace, "hook-token", &[("token", "account-token")]),
    )
    .await;
    apply(&client, &decorator(&name, json!({
        "serviceAccountName": "hooks",
        "serviceAccountNamespace": namespace,
        "hooks": {"sync": {"webhook": {
            "url": server.url("/sync"),
            "authorization": {"secretRef": {"name": "hook-token", "namespace": namespace, "key": "token"}}
        }}}
    })))
    .await;
    let object = target(&namespace, &name);
    apply(&client, &object).await;
    let controller = json!({"apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController", "metadata": {"name": name}});
    let ready = wait_for_condition(&client, &controller, "Ready", "False").await;
    assert_eq!(ready["reason"], "ScriptError", "{ready}");
    let message = ready["message"].as_str().unwrap_or_default();
    let secret_name = format!("Secret {namespace}/hook-token");
    for part in ["webhook.authorization.secretRef", secret_name.as_str()] {
        assert!(message.contains(part), "names {part:?}: {message}");
    }
    assert!(
        server.requests("/sync").is_empty(),
        "no call without the credentials"
    );

    apply(&client, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "hook-token", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hook-token"], "verbs": ["get"]}]
    }))
    .await;
    apply(&client, &binding("hook-token")).await;
    wait_for(
        &client,
        &object,
        "the hook's answer once the account may read the Secret",
        |o| o["metadata"]["labels"]["auth"] == "account",
    )
    .await;
}
