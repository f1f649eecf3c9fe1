//! Webhook credentials from Secrets (Metacontroller v4.16's `authorization`, `basicAuth`,
//! `caBundle.secretRef`, `endpointConfigs`) against the real plane: the hook gets the header,
//! wrong credentials fail the sync without touching anything, a rotated Secret is used without
//! a restart (also by both revisions of a staged rollout), and a controller cannot use a
//! Secret its ServiceAccount may not read.

use crate::support::operator::{
    apply, get, operator, regarding_name, wait_for, wait_for_condition, wait_for_event,
};
use crate::support::{client, eventually, test_namespace, unique_name};
use base64::Engine as _;
use k8s_openapi::api::events::v1::Event;
use metascript::testing::{Call, HookServer, Reply};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::BTreeMap;
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

/// Each target's `rev` and `auth` labels.
async fn labels_of(
    client: &kube::Client,
    namespace: &str,
    names: &[&str],
) -> Vec<(String, String)> {
    let mut labels = Vec::new();
    for name in names {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": name, "namespace": namespace}});
        let now = get(client, &object).await.unwrap_or_default();
        let label = |key: &str| {
            now["metadata"]["labels"][key]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        labels.push((label("rev"), label("auth")));
    }
    labels
}

/// How often an Event of `reason` about the object `name` was published (a repeat is counted
/// in its Event's series).
async fn occurrences(client: &kube::Client, reason: &str, name: &str) -> i32 {
    let events: kube::Api<Event> = kube::Api::all(client.clone());
    events
        .list(&Default::default())
        .await
        .expect("listing Events")
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason) && regarding_name(e) == Some(name))
        .map(|e| e.series.as_ref().map_or(1, |series| series.count))
        .sum()
}

/// A staged rollout whose two revisions call webhooks with tokens from Secrets: one Secret
/// for both (`shared`), or one each, and the Secrets of the revisions in `rotated` rotate.
/// The new token reaches every revision that reads it, the others keep theirs, and the
/// candidate stays where it was: its share, its step, no new rollout.
async fn rotation_in_a_staged_rollout(shared: bool, rotated: &[&str]) {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "rotate-staged").await;
    let name = unique_name("rotate-staged");
    // The header each revision (the URL's path) must send.
    let headers = Arc::new(Mutex::new(BTreeMap::from([
        ("v1".to_string(), "Bearer first".to_string()),
        ("v2".to_string(), "Bearer first".to_string()),
    ])));
    let expected = headers.clone();
    // Answers with the revision and the token it was called with.
    let server = HookServer::start_with_headers(move |call: &Call| {
        let revision = call.path.trim_start_matches('/');
        let header = expected.lock().get(revision).cloned().unwrap_or_default();
        if call.header("Authorization") != Some(header.as_str()) {
            return Reply::status(401, "unauthorized");
        }
        Reply::json(&json!({"labels": {
            "rev": revision,
            "auth": header.trim_start_matches("Bearer "),
        }}))
    })
    .expect("a hook server");
    let secret_of = |revision: &str| match (shared, revision) {
        (false, "v2") => "hook-token-v2",
        _ => "hook-token",
    };
    for revision in ["v1", "v2"] {
        apply(
            &client,
            &secret(&namespace, secret_of(revision), &[("token", "first")]),
        )
        .await;
    }
    let revision = |revision: &str| {
        decorator(
            &name,
            json!({
                "hooks": {"sync": {"webhook": {
                    "url": server.url(&format!("/{revision}")),
                    "authorization": {"secretRef": {"name": secret_of(revision), "namespace": namespace, "key": "token"}}
                }}},
                // Failures while the hook server is ahead of the Secret are not the candidate's.
                "rollout": {"strategy": "Canary", "maxErrors": 10,
                            "steps": [{"count": 2, "intervalSeconds": 3600}]},
            }),
        )
    };
    let names = ["t-0", "t-1", "t-2", "t-3"];
    let mut targets: Vec<Value> = names
        .iter()
        .map(|target_name| {
            let mut object = target(&namespace, &name);
            object["metadata"]["name"] = json!(target_name);
            object
        })
        .collect();
    apply(&client, &revision("v1")).await;
    for object in &targets {
        apply(&client, object).await;
    }
    eventually("every target at v1", || async {
        let labels = labels_of(&client, &namespace, &names).await;
        labels
            .iter()
            .all(|(rev, auth)| rev == "v1" && auth == "first")
            .then_some(())
    })
    .await;
    apply(&client, &revision("v2")).await;
    let revs = eventually("the canary's two targets at v2", || async {
        let labels = labels_of(&client, &namespace, &names).await;
        let at_v2 = labels.iter().filter(|(rev, _)| rev == "v2").count();
        (at_v2 == 2 && labels.iter().all(|(_, auth)| auth == "first"))
            .then(|| labels.into_iter().map(|(rev, _)| rev).collect::<Vec<_>>())
    })
    .await;
    let controller = json!({"apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController", "metadata": {"name": name}});
    let staged = wait_for(&client, &controller, "the candidate in status", |c| {
        c["status"]["rollout"]["candidate"].is_string()
    })
    .await;
    let rollout = staged["status"]["rollout"].clone();
    assert_eq!(occurrences(&client, "RolloutStarted", &name).await, 1);

    // The hook moves to the new token first: the next sync of every target whose revision
    // reads the rotated Secret fails.
    for revision in rotated {
        headers
            .lock()
            .insert(revision.to_string(), "Bearer second".into());
    }
    for object in &mut targets {
        object["metadata"]["labels"]["touched"] = json!("yes");
        apply(&client, object).await;
    }
    for (target_name, rev) in names.iter().zip(&revs) {
        if rotated.contains(&rev.as_str()) {
            event_on(&client, &namespace, target_name, "HookFailed").await;
        }
    }

    // The Secrets catch up: the revisions reading them read them again and sync what failed.
    for revision in rotated {
        let rotated = secret(&namespace, secret_of(revision), &[("token", "second")]);
        apply(&client, &rotated).await;
    }
    let want = |rev: &str| {
        if rotated.contains(&rev) {
            "second"
        } else {
            "first"
        }
    };
    let labels = eventually("every target synced with its revision's token", || async {
        let labels = labels_of(&client, &namespace, &names).await;
        labels
            .iter()
            .all(|(rev, auth)| auth == want(rev))
            .then_some(labels)
    })
    .await;
    let after: Vec<String> = labels.into_iter().map(|(rev, _)| rev).collect();
    assert_eq!(after, revs, "each target stays with its revision");
    let now = get(&client, &controller).await.expect("the controller");
    for field in ["serving", "candidate", "step", "stepStartedAt"] {
        assert_eq!(
            now["status"]["rollout"][field], rollout[field],
            "the rollout's {field} is as it was: {}",
            now["status"]["rollout"]
        );
    }
    assert_eq!(
        occurrences(&client, "RolloutStarted", &name).await,
        1,
        "the candidate went on, it did not start again"
    );
}

#[tokio::test]
async fn a_rotated_secret_reaches_both_revisions_of_a_staged_rollout() {
    rotation_in_a_staged_rollout(true, &["v1", "v2"]).await;
}

#[tokio::test]
async fn a_serving_revision_reading_a_secret_of_its_own_gets_it_rotated() {
    rotation_in_a_staged_rollout(false, &["v1"]).await;
}

#[tokio::test]
async fn a_candidate_reading_a_secret_of_its_own_gets_it_rotated() {
    rotation_in_a_staged_rollout(false, &["v2"]).await;
}
