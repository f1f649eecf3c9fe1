//! Least privilege: a controller's writes go as its ServiceAccount, so a script can do only
//! what RBAC grants that account, whatever the operator itself may do.

use crate::support::operator::{
    OWN_OPERATOR_LABEL, apply, get, operator, regarding_name, wait_for, wait_for_condition,
    wait_for_event,
};
use crate::support::process::OperatorProcess;
use crate::support::{client, test_namespace, unique_name};
use serde_json::{Value, json};

#[tokio::test]
async fn writes_go_as_the_service_account_and_a_forbidden_one_stops_the_sync() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "impersonation").await;
    let name = unique_name("impersonation");
    // An account that may manage Services here (and, to create them owned by a ConfigMap,
    // update ConfigMap finalizers), read what its hooks are handed, and nothing else.
    apply(&client, &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "limited", "namespace": namespace}})).await;
    apply(&client, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "services", "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["configmaps/finalizers"], "verbs": ["update"]},
            // What its hooks are handed (targets, observed attachments): only what the account
            // may read. Reading RoleBindings does not let it write one.
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"], "verbs": ["get", "list", "watch"]}
        ]
    }))
    .await;
    apply(&client, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "services", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "services"},
        "subjects": [{"kind": "ServiceAccount", "name": "limited", "namespace": namespace}]
    }))
    .await;
    // Every target gets a Service; a target labelled `escalate` also asks, first, for a
    // RoleBinding that would make the account cluster-admin in this namespace.
    let hook = r#"
        local cm = request.object
        local attachments = {}
        if label(cm, "escalate") == "yes" then
            table.insert(attachments, {
                apiVersion = "rbac.authorization.k8s.io/v1", kind = "RoleBinding",
                metadata = { name = name(cm) .. "-admin" },
                roleRef = { apiGroup = "rbac.authorization.k8s.io", kind = "ClusterRole", name = "cluster-admin" },
                subjects = { { kind = "ServiceAccount", name = "limited", namespace = namespace(cm) } },
            })
        end
        table.insert(attachments, {
            apiVersion = "v1", kind = "Service",
            metadata = { name = name(cm) .. "-svc" },
            spec = { ports = { { port = 80 } } },
        })
        return { attachments = attachments }
    "#;
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "attachments": [
                {"apiVersion": "v1", "resource": "services"},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "rolebindings"}
            ],
            "serviceAccountName": "limited",
            "serviceAccountNamespace": namespace,
            "hooks": {"sync": {"script": {"language": "lua", "inline": hook}}}
        }
    }))
    .await;
    let config_map = |cm: &str, labels: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm, "namespace": namespace, "labels": labels}});
    apply(&client, &config_map("plain", json!({"decorate": name}))).await;
    apply(
        &client,
        &config_map("greedy", json!({"decorate": name, "escalate": "yes"})),
    )
    .await;

    let service = |svc: &str| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": svc, "namespace": namespace}});
    let created = wait_for(
        &client,
        &service("plain-svc"),
        "the permitted Service",
        |_| true,
    )
    .await;
    let manager = format!("metascript.dev/decorator-{name}");
    assert!(
        created["metadata"]["managedFields"]
            .as_array()
            .is_some_and(|fields| fields.iter().any(|f| f["manager"] == manager.as_str())),
        "applied by the controller's field manager: {created}"
    );

    let forbidden = wait_for_event(&client, Some(&namespace), "Forbidden", |e| {
        regarding_name(e) == Some("greedy")
    })
    .await;
    let note = forbidden.note.unwrap_or_default();
    let identity = format!("system:serviceaccount:{namespace}:limited");
    for part in [identity.as_str(), "rolebindings", "cannot patch"] {
        assert!(note.contains(part), "the Event names {part:?}: {note}");
    }
    let rolebinding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "greedy-admin", "namespace": namespace}});
    assert!(
        get(&client, &rolebinding).await.is_none(),
        "nothing escalated"
    );
    assert!(
        get(&client, &service("greedy-svc")).await.is_none(),
        "nothing of the plan after the forbidden write was applied"
    );
    let controller = json!({"apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController", "metadata": {"name": name}});
    wait_for(&client, &controller, "the failing target counted", |c| {
        c["status"]["failing"] == 1 && c["status"]["synced"] == 1
    })
    .await;
}

/// With `--allow-unimpersonated=false`, a controller that names no ServiceAccount does not run,
/// and says why.
#[tokio::test]
async fn an_operator_that_requires_impersonation_refuses_a_controller_without_an_account() {
    let client = client().await;
    operator().await; // installs the CRDs
    let name = unique_name("unimpersonated");
    let _operator = OperatorProcess::start(&name, &["--allow-unimpersonated=false"]).await;
    let namespace = test_namespace(&client, "unimpersonated").await;
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": {OWN_OPERATOR_LABEL: name}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": "return { labels = { seen = 'yes' } }"}}}
        }
    }))
    .await;
    let target = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target", "namespace": namespace, "labels": {"decorate": name}}});
    apply(&client, &target).await;
    let controller = json!({"apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController", "metadata": {"name": name}});
    let ready = wait_for_condition(&client, &controller, "Ready", "False").await;
    assert_eq!(ready["reason"], "ServiceAccountRequired", "{ready}");
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains("serviceAccountName")
    );
    let target = get(&client, &target).await.expect("the target exists");
    assert!(
        target["metadata"]["labels"]["seen"].is_null(),
        "nothing was written"
    );
}
