//! Least privilege for reads: a controller with a ServiceAccount is handed, by the operator's
//! caches, only objects its account may read itself, whatever its hooks ask for (customize
//! answers) or its rules select (targets across namespaces), scripts and webhooks alike; a
//! refusal is reported on the controller, and RBAC granted later takes effect without a
//! restart.

use crate::support::operator::{apply, get, operator, regarding_name, wait_for, wait_for_event};
use crate::support::{client, eventually, test_namespace, unique_name};
use k8s_openapi::api::events::v1::Event;
use metascript::runtime::ControllerId;
use metascript::testing::{HookServer, Reply};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A ServiceAccount in `namespace` that may read and write ConfigMaps there, and nothing else.
async fn config_map_account(client: &kube::Client, namespace: &str, account: &str) {
    apply(client, &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}})).await;
    apply(client, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": account, "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["configmaps/finalizers"], "verbs": ["update"]}
        ]
    }))
    .await;
    bind(client, namespace, account, namespace, account).await;
}

/// Binds Role `role` in `namespace` to the account.
async fn bind(
    client: &kube::Client,
    namespace: &str,
    role: &str,
    account_namespace: &str,
    account: &str,
) {
    apply(client, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("{role}-{account}"), "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}]
    }))
    .await;
}

fn decorator(name: &str) -> Value {
    json!({"apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController", "metadata": {"name": name}})
}

fn condition<'a>(controller: &'a Value, kind: &str) -> Option<&'a Value> {
    controller["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Waits for the controller's `ReadsAllowed` condition to have `status`, returning it.
async fn reads_allowed(client: &kube::Client, name: &str, status: &str) -> Value {
    let controller = wait_for(
        client,
        &decorator(name),
        &format!("{name}: ReadsAllowed={status}"),
        |c| condition(c, "ReadsAllowed").is_some_and(|c| c["status"] == status),
    )
    .await;
    condition(&controller, "ReadsAllowed").cloned().unwrap()
}

/// The Warning the operator published about the controller object with `reason`.
async fn controller_event(client: &kube::Client, name: &str, reason: &str) -> Event {
    wait_for_event(client, None, reason, |e| {
        e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("DecoratorController")
            && regarding_name(e) == Some(name)
    })
    .await
}

/// The report's exfiltration: a customize hook asks for a Secret in another namespace, and the
/// sync hook would copy its password into a ConfigMap its account may write. The Secret is
/// never handed over while the account may not read it; once a Role lets it, the same
/// controller syncs, without a restart.
#[tokio::test]
async fn a_customize_hook_gets_no_secret_its_account_may_not_read_until_rbac_allows_it() {
    let client = client().await;
    operator().await;
    let team = test_namespace(&client, "reads-team").await;
    let victim = test_namespace(&client, "reads-victim").await;
    config_map_account(&client, &team, "author").await;
    apply(
        &client,
        &json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "top-secret", "namespace": victim},
            "stringData": {"password": "hunter2-do-not-leak"}
        }),
    )
    .await;
    let name = unique_name("reads-exfiltrate");
    let customize = format!(
        r#"return {{ relatedResources = {{ {{ apiVersion = "v1", resource = "secrets", namespace = "{victim}", names = {{ "top-secret" }} }} }} }}"#
    );
    let sync = r#"
        local loot = "none"
        for _, secret in pairs(request.related["Secret.v1"]) do
            loot = base64_decode(secret.data.password)
        end
        return { attachments = { {
            apiVersion = "v1", kind = "ConfigMap",
            metadata = { name = name(request.object) .. "-loot" },
            data = { loot = loot },
        } } }
    "#;
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "serviceAccountName": "author",
            "serviceAccountNamespace": team,
            "hooks": {
                "customize": {"script": {"language": "lua", "inline": customize}},
                "sync": {"script": {"language": "lua", "inline": sync}}
            }
        }
    }))
    .await;
    let target = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "innocent", "namespace": team, "labels": {"decorate": name}}});
    apply(&client, &target).await;

    let refused = reads_allowed(&client, &name, "False").await;
    assert_eq!(refused["reason"], "ReadForbidden", "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    for part in [
        format!("ServiceAccount {team}/author"),
        format!("may not get secrets (core) in namespace {victim}"),
    ] {
        assert!(
            message.contains(&part),
            "the condition names {part:?}: {message}"
        );
    }
    let event = controller_event(&client, &name, "ReadForbidden").await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(&format!("secrets (core) in namespace {victim}")),
        "{note}"
    );
    let loot = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "innocent-loot", "namespace": team}});
    assert!(
        get(&client, &loot).await.is_none(),
        "the sync hook never ran with the Secret"
    );
    let controller = get(&client, &decorator(&name)).await.unwrap();
    assert_eq!(controller["status"]["failing"], 1, "{controller}");

    // The victim's owner lets the account read its Secrets: the refused target is retried on
    // the RBAC change (not after its backoff), and its hook now gets the Secret.
    apply(&client, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-secrets", "namespace": victim},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]
    }))
    .await;
    bind(&client, &victim, "read-secrets", &team, "author").await;
    let copied = wait_for(
        &client,
        &loot,
        "the hook's attachment, once RBAC allows",
        |_| true,
    )
    .await;
    assert_eq!(copied["data"]["loot"], "hunter2-do-not-leak");
    reads_allowed(&client, &name, "True").await;
}

/// A selection across namespaces is refused where the account may not read, never filtered: a
/// target in a namespace the account cannot read is not synced (the controller says which
/// namespace), the others are; and the webhook serving the hooks never receives an object of
/// that namespace, neither as a target nor as a related object of a customize answer that
/// spans every namespace.
#[tokio::test]
async fn a_webhook_never_receives_an_object_its_account_may_not_read() {
    let client = client().await;
    operator().await;
    let team = test_namespace(&client, "reads-hook-team").await;
    let other = test_namespace(&client, "reads-hook-other").await;
    config_map_account(&client, &team, "author").await;
    let name = unique_name("reads-webhook");
    let (team_ns, other_ns) = (team.clone(), other.clone());
    let server = HookServer::start(move |path, request| match path {
        // Targets labelled `across` ask for every labelled ConfigMap in every namespace.
        "/customize" => {
            let across = request["parent"]["metadata"]["labels"]["across"] == "yes";
            let rules = if across {
                json!([{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"related": "yes"}}}])
            } else {
                json!([{"apiVersion": "v1", "resource": "configmaps", "namespace": team_ns, "labelSelector": {"matchLabels": {"related": "yes"}}}])
            };
            Reply::json(&json!({"relatedResources": rules}))
        }
        _ => Reply::json(&json!({"labels": {"reads.test/seen": "yes"}})),
    })
    .expect("hook server");
    let hooks = json!({
        "customize": {"webhook": {"url": server.url("/customize")}, "version": "v2"},
        "sync": {"webhook": {"url": server.url("/sync")}, "version": "v2"}
    });
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "serviceAccountName": "author",
            "serviceAccountNamespace": team,
            "hooks": hooks
        }
    }))
    .await;
    let config_map = |namespace: &str, cm: &str, labels: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm, "namespace": namespace, "labels": labels}});
    apply(
        &client,
        &config_map(&team, "related", json!({"related": "yes"})),
    )
    .await;
    apply(
        &client,
        &config_map(&other_ns, "related", json!({"related": "yes"})),
    )
    .await;
    apply(
        &client,
        &config_map(&team, "mine", json!({"decorate": name})),
    )
    .await;
    apply(
        &client,
        &config_map(&other_ns, "theirs", json!({"decorate": name})),
    )
    .await;

    // Its own target syncs, with what it may read related to it.
    wait_for(
        &client,
        &config_map(&team, "mine", json!({})),
        "the target the account may read synced",
        |cm| cm["metadata"]["labels"]["reads.test/seen"] == "yes",
    )
    .await;
    let refused = reads_allowed(&client, &name, "False").await;
    assert_eq!(refused["reason"], "ReadForbidden", "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "may not get configmaps (core) in namespace {other}"
        )),
        "refused, naming the namespace: {message}"
    );

    // A customize answer spanning every namespace is refused as a whole, not filtered.
    apply(
        &client,
        &config_map(&team, "across", json!({"decorate": name, "across": "yes"})),
    )
    .await;
    eventually(
        "the refused selection across namespaces reported",
        || async {
            let controller = get(&client, &decorator(&name)).await?;
            let message = condition(&controller, "ReadsAllowed")?["message"]
                .as_str()?
                .to_string();
            (controller["status"]["failing"] == 2).then_some(message)
        },
    )
    .await;
    let event = controller_event(&client, &name, "ReadForbidden").await;
    assert!(event.note.is_some_and(|n| n.contains("ServiceAccount")));

    let sent = server.requests("/sync");
    assert!(!sent.is_empty());
    for request in sent.iter().chain(server.requests("/customize").iter()) {
        let text = request.to_string();
        assert!(
            !text.contains(&format!("\"namespace\":\"{other}\"")),
            "a webhook request holds an object of {other}: {text}"
        );
    }
    let synced: Vec<&str> = sent
        .iter()
        .filter_map(|r| r["object"]["metadata"]["name"].as_str())
        .collect();
    assert!(synced.iter().all(|n| *n == "mine"), "{synced:?}");
    let related = &sent.last().unwrap()["related"]["ConfigMap.v1"];
    assert_eq!(
        related
            .as_object()
            .map(|r| r.keys().cloned().collect::<Vec<_>>()),
        Some(vec![format!("{team}/related")]),
        "{related}"
    );
}

/// A decorator of the ConfigMaps labelled `decorate: <name>` in `namespace`, run as `account`
/// there, with the given hooks (Rhai scripts).
fn rhai_decorator(name: &str, namespace: &str, account: &str, hooks: Value) -> Value {
    let hooks: serde_json::Map<String, Value> = hooks
        .as_object()
        .expect("hooks by name")
        .iter()
        .map(|(hook, code)| {
            (
                hook.clone(),
                json!({"script": {"language": "rhai", "inline": code}}),
            )
        })
        .collect();
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "serviceAccountName": account,
            "serviceAccountNamespace": namespace,
            "hooks": hooks
        }
    })
}

/// A customize hook asking for the Secret `db` of the target's namespace.
const CUSTOMIZE_DB: &str =
    r#"#{ relatedResources: [#{ apiVersion: "v1", resource: "secrets", names: ["db"] }] }"#;

/// RBAC changes cost only what they can alter. RoleBindings made in another namespace, even
/// naming the controller's own account, ask nothing of the API server again for it; a grant
/// in the controller's own namespace still heals a refused controller at once (within the
/// second changes are gathered in, not after its backoff).
#[tokio::test]
async fn rbac_changes_elsewhere_ask_nothing_again_and_a_grant_here_heals_at_once() {
    let client = client().await;
    let operator = &operator().await.operator;
    let team = test_namespace(&client, "rbac-reach").await;
    config_map_account(&client, &team, "steady").await;
    config_map_account(&client, &team, "author").await;

    // `steady` syncs its target, copying the target's `round` annotation into a label.
    let steady = unique_name("rbac-steady");
    let copy = r#"#{ labels: #{ "rbac.test/round": request.object.metadata.annotations.round } }"#;
    apply(
        &client,
        &rhai_decorator(&steady, &team, "steady", json!({"sync": copy})),
    )
    .await;
    // `refused` asks for a Secret its account may not read.
    let refused = unique_name("rbac-refused");
    let healed = r#"#{ labels: #{ "rbac.test/healed": `${request.related["Secret.v1"].len()}` } }"#;
    apply(
        &client,
        &rhai_decorator(
            &refused,
            &team,
            "author",
            json!({"customize": CUSTOMIZE_DB, "sync": healed}),
        ),
    )
    .await;
    let target = |name: &str, round: usize| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": team, "labels": {"decorate": name}, "annotations": {"round": round.to_string()}}});
    apply(&client, &target(&refused, 0)).await;
    reads_allowed(&client, &refused, "False").await;

    let account = metascript::api::ServiceAccountRef {
        namespace: team.clone(),
        name: "steady".into(),
    };
    let synced = |round: usize| {
        let (client, steady) = (client.clone(), steady.clone());
        async move {
            wait_for(
                &client,
                &target(&steady, round),
                &format!("round {round} synced"),
                |cm| {
                    cm["metadata"]["labels"]["rbac.test/round"].as_str() == Some(&round.to_string())
                },
            )
            .await
        }
    };
    // Concurrent tests may change a ClusterRole (which reaches everything) or let an answer
    // expire meanwhile: a few tries, each with bindings of its own.
    let mut asked = Vec::new();
    for attempt in 0..3 {
        let round = 2 * attempt + 1;
        apply(&client, &target(&steady, round)).await;
        synced(round).await;
        let elsewhere = test_namespace(&client, "rbac-elsewhere").await;
        apply(&client, &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "anything", "namespace": elsewhere},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]
        }))
        .await;
        bind(&client, &elsewhere, "anything", &team, "steady").await;
        apply(&client, &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "team-accounts", "namespace": elsewhere},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "anything"},
            "subjects": [{"kind": "Group", "name": format!("system:serviceaccounts:{team}"), "apiGroup": "rbac.authorization.k8s.io"}]
        }))
        .await;
        // Past the window and its settle: any forget they cause has happened.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let before = operator.metrics().access_reviews_of(&account);
        apply(&client, &target(&steady, round + 1)).await;
        synced(round + 1).await;
        let reviews = operator.metrics().access_reviews_of(&account) - before;
        asked.push(reviews);
        if reviews == 0 {
            break;
        }
    }
    assert_eq!(
        asked.last(),
        Some(&0),
        "SubjectAccessReviews for the steady account after RoleBindings in other namespaces, per try: {asked:?}"
    );

    // A grant in the team's namespace heals `refused` at once. Waited for right after one of
    // its retries, once its backoff is at least 8 s: healing sooner is the RBAC change's doing.
    let id = ControllerId::new(metascript::kinds::decorator::KIND, &refused);
    let mut last = operator.metrics().syncs_of(&id);
    eventually("the refused target retried a fourth time", || {
        let now = operator.metrics().syncs_of(&id);
        let retried = now > last && now >= 4;
        last = now;
        async move { retried.then_some(()) }
    })
    .await;
    let granted = Instant::now();
    apply(&client, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-secrets", "namespace": team},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]
    }))
    .await;
    bind(&client, &team, "read-secrets", &team, "author").await;
    wait_for(
        &client,
        &target(&refused, 0),
        "the refused target synced once granted",
        |cm| cm["metadata"]["labels"]["rbac.test/healed"] == "0",
    )
    .await;
    let took = granted.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "healed {took:?} after the grant"
    );
    reads_allowed(&client, &refused, "True").await;
}

/// The values of a Secret a controller may read reach nothing the operator writes or logs:
/// not the note of an Event its hook asks for, nor the error its hook fails with (as the
/// Warning Event on the target, the controller's status and its Events say it).
#[tokio::test]
async fn secret_values_reach_no_event_or_status() {
    let client = client().await;
    operator().await;
    let team = test_namespace(&client, "reads-scrub").await;
    config_map_account(&client, &team, "author").await;
    // Reads are checked per type and namespace, not per name: the account may get Secrets.
    apply(
        &client,
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "get-secrets", "namespace": team},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
        }),
    )
    .await;
    bind(&client, &team, "get-secrets", &team, "author").await;
    let password = "hunter2-e2e-scrub";
    let encoded = "aHVudGVyMi1lMmUtc2NydWI=";
    apply(
        &client,
        &json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": team},
            "stringData": {"password": password}
        }),
    )
    .await;
    let name = unique_name("reads-scrub");
    // Targets labelled `fail` fail with the value in the error; the others succeed after an
    // Event carrying it (the Events of a failed sync are not published at all).
    let sync = r#"
        let encoded = request.related["Secret.v1"].db.data.password;
        let value = base64_decode(encoded);
        event("Normal", "Leak", `${value} ${encoded}`);
        if request.object.metadata.labels.fail == "yes" {
            throw `cannot use ${value} (${encoded})`;
        }
        #{ labels: #{ "scrub.test/synced": "yes" } }
    "#;
    apply(
        &client,
        &rhai_decorator(
            &name,
            &team,
            "author",
            json!({"customize": CUSTOMIZE_DB, "sync": sync}),
        ),
    )
    .await;
    let target = |cm: &str, fail: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm, "namespace": team, "labels": {"decorate": name, "fail": fail}}});
    apply(&client, &target("talks", "no")).await;
    apply(&client, &target("fails", "yes")).await;

    let leaked = |what: &str, text: &str| {
        for secret in [password, encoded] {
            assert!(!text.contains(secret), "{what} holds {secret}: {text}");
        }
    };
    let leak = wait_for_event(&client, Some(&team), "Leak", |e| {
        regarding_name(e) == Some("talks")
    })
    .await;
    let note = leak.note.unwrap_or_default();
    leaked("the Leak Event's note", &note);
    assert!(
        note.contains(metascript::reads::REDACTED),
        "scrubbed, not dropped: {note}"
    );
    let failed = wait_for_event(&client, Some(&team), "HookFailed", |e| {
        regarding_name(e) == Some("fails")
    })
    .await;
    let note = failed.note.unwrap_or_default();
    leaked("the HookFailed Event's note", &note);
    assert!(note.contains("cannot use"), "{note}");
    let controller = wait_for(
        &client,
        &decorator(&name),
        "the controller counting the failing target",
        |c| c["status"]["failing"] == 1,
    )
    .await;
    leaked("the controller", &controller.to_string());
    for cm in ["talks", "fails"] {
        let object = get(&client, &target(cm, "")).await.unwrap();
        leaked(cm, &object.to_string());
    }
    let events: kube::Api<Event> = kube::Api::namespaced(client.clone(), &team);
    for event in events.list(&Default::default()).await.unwrap().items {
        leaked("an Event", &serde_json::to_string(&event).unwrap());
    }
}
