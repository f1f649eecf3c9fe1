//! Tenancy, tried as the attacker would: tenant users (impersonated, as `kubectl --as` does)
//! going through the real API server, its RBAC and `metascript run`'s admission webhook. A
//! controller author acts only with the accounts they were granted, reads no ConfigMap they
//! could not read, cannot change or take over another team's controllers, and the webhook
//! answers a caller only what it could learn anyway; the legitimate paths keep working.

use crate::support::operator::{
    OWN_OPERATOR_LABEL, api_for, apply, get, operator, try_apply, wait_for, wait_for_condition,
    wait_for_event,
};
use crate::support::tenants::{AdmissionWebhook, Tenant, config_map_account, grant};
use crate::support::{client, eventually, kubeconfig, test_namespace, unique_name};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

const LABELLER: &str = r#"#{ labels: #{ "tenancy.test/seen": "yes" } }"#;

/// A DecoratorController labelling the ConfigMaps labelled `decorate: <name>`, running as
/// `account` (namespace, name) when given, with `labels`.
fn labeller(name: &str, labels: &Value, account: Option<(&str, &str)>) -> Value {
    let mut controller = json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "hooks": {"sync": {"script": {"language": "rhai", "inline": LABELLER}}}
        }
    });
    if let Some((namespace, account)) = account {
        controller["spec"]["serviceAccountNamespace"] = namespace.into();
        controller["spec"]["serviceAccountName"] = account.into();
    }
    controller
}

fn config_map(namespace: &str, name: &str, labels: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": data
    })
}

/// A JSON merge patch as a user would send it (`kubectl patch --type merge`).
async fn try_merge(client: &kube::Client, like: &Value, patch: Value) -> Result<(), String> {
    api_for(client, like)
        .patch(
            metascript::object::name(like),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(drop)
        .map_err(|error| error.to_string())
}

async fn try_delete(client: &kube::Client, like: &Value) -> Result<(), String> {
    api_for(client, like)
        .delete(metascript::object::name(like), &DeleteParams::default())
        .await
        .map(drop)
        .map_err(|error| error.to_string())
}

fn assert_refused(result: Result<(), String>, parts: &[&str], what: &str) -> String {
    let refusal = result.expect_err(what);
    assert!(
        refusal.contains("admission webhook"),
        "{what}: refused by the webhook: {refusal}"
    );
    for part in parts {
        assert!(refusal.contains(part), "{what}: {part:?} in: {refusal}");
    }
    refusal
}

/// Waits until a target carries the labeller's label.
async fn labelled(client: &kube::Client, target: &Value) {
    wait_for(client, target, "the target labelled", |o| {
        o["metadata"]["labels"]["tenancy.test/seen"] == "yes"
    })
    .await;
}

/// The attacks of "any account, by name" and "take over another team's controller", and the
/// team's own path: alice (team a) may write controllers only as team a's accounts, bob (team
/// b) can neither change, annotate, relabel nor delete hers, and she can.
#[tokio::test]
async fn a_tenant_acts_only_as_the_accounts_it_was_granted() {
    let admin = client().await;
    let operator_namespace = test_namespace(&admin, "tenancy-op").await;
    let team_a = test_namespace(&admin, "tenancy-a").await;
    let team_b = test_namespace(&admin, "tenancy-b").await;
    let webhook = AdmissionWebhook::start(&admin, &operator_namespace, true, &[]).await;
    let labels = webhook.labels();
    for team in [&team_a, &team_b] {
        config_map_account(&admin, team, "bot").await;
    }
    let (alice, bob) = (Tenant::new("team-a"), Tenant::new("team-b"));
    alice.grant(&admin, &team_a).await;
    bob.grant(&admin, &team_b).await;
    let (as_alice, as_bob) = (alice.client().await, bob.client().await);
    let name = unique_name("tenancy-labeller");

    assert_refused(
        try_apply(&as_alice, &labeller(&name, &labels, Some((&team_b, "bot")))).await,
        &[
            &format!(
                "user \"{}\" may not use ServiceAccount {team_b}/bot",
                alice.user
            ),
            &format!("in namespace {team_b} (bind the ClusterRole metascript-author there)"),
        ],
        "another team's account",
    );
    assert_refused(
        try_apply(&as_alice, &labeller(&name, &labels, None)).await,
        &["without spec.serviceAccountName", "cluster-wide"],
        "no account: the operator's own rights",
    );
    let mut unqualified = labeller(&name, &labels, None);
    unqualified["spec"]["serviceAccountName"] = "bot".into();
    assert_refused(
        try_apply(&as_alice, &unqualified).await,
        &["spec.serviceAccountNamespace is required"],
        "an account without its namespace",
    );
    unqualified["spec"]["serviceAccountName"] = format!("{team_a}/bot").into();
    assert_refused(
        try_apply(&as_alice, &unqualified).await,
        &[&format!("serviceAccountNamespace: \"{team_a}\"")],
        "NAMESPACE/NAME in serviceAccountName",
    );
    assert!(
        get(&admin, &labeller(&name, &labels, None)).await.is_none(),
        "nothing refused was stored"
    );

    // Her own team's account: admitted, and it runs.
    let controller = labeller(&name, &labels, Some((&team_a, "bot")));
    try_apply(&as_alice, &controller)
        .await
        .expect("alice may write a controller that runs as team a's account");
    let target = config_map(&team_a, "target", json!({"decorate": name}), json!({}));
    apply(&as_alice, &target).await;
    labelled(&admin, &target).await;

    // Bob can neither take it over nor change what runs, nor delete it.
    let mut taken = controller.clone();
    taken["spec"]["serviceAccountNamespace"] = team_b.clone().into();
    assert_refused(
        try_apply(&as_bob, &taken).await,
        &[&format!("may not use ServiceAccount {team_a}/bot")],
        "bob moving alice's controller to his account",
    );
    for (patch, what) in [
        (
            json!({"spec": {"resyncPeriodSeconds": 1}}),
            "bob changing the spec",
        ),
        (
            json!({"metadata": {"labels": {OWN_OPERATOR_LABEL: "elsewhere"}}}),
            "bob relabelling it",
        ),
        (
            json!({"metadata": {"annotations": {"metascript.dev/sync-requested-at": "now"}}}),
            "bob asking for a sync",
        ),
        (
            json!({"metadata": {"finalizers": ["tenancy.test/hold"]}}),
            "bob holding its deletion with a finalizer",
        ),
    ] {
        assert_refused(
            try_merge(&as_bob, &controller, patch).await,
            &[&format!("may not use ServiceAccount {team_a}/bot")],
            what,
        );
    }
    assert_refused(
        try_delete(&as_bob, &controller).await,
        &[&format!("may not use ServiceAccount {team_a}/bot")],
        "bob deleting it",
    );

    // kubectl --as, as a user types it: alice cannot move her controller to team b either.
    let kubectl = metascript::testing::kubectl().expect("kubectl beside the plane's binaries");
    let output = std::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(crate::support::plane().await.kubeconfig_path())
        .args(["--as", &alice.user, "--as-group", &alice.group])
        .args([
            "patch",
            "decoratorcontroller",
            &name,
            "--type",
            "merge",
            "-p",
        ])
        .arg(json!({"spec": {"serviceAccountNamespace": team_b}}).to_string())
        .output()
        .expect("kubectl runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "kubectl --as alice moved it: {stderr}"
    );
    assert!(
        stderr.contains(&format!("may not use ServiceAccount {team_b}/bot")),
        "{stderr}"
    );

    // She may change and delete her own.
    try_merge(
        &as_alice,
        &controller,
        json!({"metadata": {"annotations": {"metascript.dev/sync-requested-at": "now"}}}),
    )
    .await
    .expect("alice asking her controller for a sync");
    try_delete(&as_alice, &controller)
        .await
        .expect("alice deleting her controller");
    eventually("the controller gone (its finalizer released)", || async {
        get(&admin, &controller).await.is_none().then_some(())
    })
    .await;
}

/// The operator's own ServiceAccount is never a controller's: admission refuses it, and a
/// controller naming it that got past admission (stored before the webhook) does not load, yet
/// can still be deleted by whoever may use the account.
#[tokio::test]
async fn the_operators_own_account_is_refused() {
    let admin = client().await;
    let namespace = test_namespace(&admin, "tenancy-own").await;
    apply(&admin, &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator", "namespace": namespace}})).await;
    apply(&admin, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{namespace}-operator")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}]
    }))
    .await;
    // The operator runs as that account, as in a pod.
    let mut config = kubeconfig().await;
    for auth in &mut config.auth_infos {
        if let Some(info) = auth.auth_info.as_mut() {
            info.impersonate = Some(format!("system:serviceaccount:{namespace}:operator"));
        }
    }
    let path = std::env::temp_dir().join(format!("{namespace}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).expect("writing kubeconfig");
    // Stored before the webhook exists, as a controller from before the check would be.
    let instance = unique_name("admission");
    let labels = AdmissionWebhook::labels_of(&instance);
    let stored = labeller(
        &unique_name("tenancy-own"),
        &labels,
        Some((&namespace, "operator")),
    );
    apply(&admin, &stored).await;
    let _webhook =
        AdmissionWebhook::start_as(&admin, &namespace, true, &instance, Some(&path), &[]).await;

    let ready = wait_for_condition(&admin, &stored, "Ready", "False").await;
    assert_eq!(ready["reason"], "ServiceAccountRefused", "{ready}");
    assert_refused(
        try_apply(
            &admin,
            &labeller(
                &unique_name("tenancy-own"),
                &labels,
                Some((&namespace, "operator")),
            ),
        )
        .await,
        &[&format!(
            "ServiceAccount {namespace}/operator is the operator's own"
        )],
        "even a cluster admin naming the operator's account",
    );
    try_delete(&admin, &stored)
        .await
        .expect("the one stored before can still be deleted");
    eventually("the stored controller gone", || async {
        get(&admin, &stored).await.is_none().then_some(())
    })
    .await;
    let _ = std::fs::remove_file(path);
}

/// "Any ConfigMap, one line at a time": a controller may take scripts only from ConfigMaps its
/// author may read (admission) and its account may read (the operator), and no error quotes a
/// ConfigMap's line.
#[tokio::test]
async fn script_config_maps_are_read_only_by_those_who_may() {
    let admin = client().await;
    let operator_namespace = test_namespace(&admin, "tenancy-cm-op").await;
    let team_a = test_namespace(&admin, "tenancy-cm-a").await;
    let vault = test_namespace(&admin, "tenancy-cm-vault").await;
    let webhook = AdmissionWebhook::start(&admin, &operator_namespace, true, &[]).await;
    let labels = webhook.labels();
    config_map_account(&admin, &team_a, "bot").await;
    let alice = Tenant::new("team-a");
    alice.grant(&admin, &team_a).await;
    let as_alice = alice.client().await;
    apply(
        &admin,
        &config_map(&vault, "hooks", json!({}), json!({"sync.rhai": "let token = \"vault-content-7\";\n#{ labels: #{ token: token } }"})),
    )
    .await;
    let from = |namespace: &str| {
        let mut controller = labeller(&unique_name("tenancy-cm"), &labels, Some((&team_a, "bot")));
        controller["spec"]["hooks"]["sync"] = json!({"script": {"configMapRef": {"namespace": namespace, "name": "hooks", "key": "sync.rhai"}}});
        controller
    };

    let refusal = assert_refused(
        try_apply(&as_alice, &from(&vault)).await,
        &[&format!("may not get ConfigMap {vault}/hooks")],
        "alice naming a ConfigMap she may not read",
    );
    assert!(!refusal.contains("vault-content-7"), "{refusal}");

    // Her own ConfigMap: read for her (she may), and a compile error says where, not what.
    apply(
        &as_alice,
        &config_map(
            &team_a,
            "hooks",
            json!({}),
            json!({"sync.rhai": "let x = 1;\nlet y = \"alice-line-2\" + ;\n#{}"}),
        ),
    )
    .await;
    let refusal = assert_refused(
        try_apply(&as_alice, &from(&team_a)).await,
        &[&format!("ConfigMap {team_a}/hooks key sync.rhai"), "line 2"],
        "a ConfigMap script that does not compile",
    );
    assert!(!refusal.contains("alice-line-2"), "{refusal}");

    // An admin may name the vault's ConfigMap, but the controller's account may not read it:
    // the operator does not load it, and says why without its content.
    let admins = from(&vault);
    try_apply(&admin, &admins)
        .await
        .expect("an admin may read the vault");
    let ready = wait_for_condition(&admin, &admins, "Ready", "False").await;
    assert_eq!(ready["reason"], "ReadForbidden", "{ready}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("ConfigMap {vault}/hooks is not its to read")),
        "{message}"
    );
    let status = get(&admin, &admins).await.unwrap()["status"].to_string();
    assert!(!status.contains("vault-content-7"), "{status}");
}

/// POSTs an AdmissionReview straight to the webhook's port, as anyone on the network could:
/// the status line and body, or the connection's error. `client_cert`: (cert, key) PEM.
fn call_directly(
    port: u16,
    ca_pem: &[u8],
    client_cert: Option<(&[u8], &[u8])>,
    review: &Value,
) -> Result<String, String> {
    use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
    let roots = RootCerts::new_with_certs(&[Certificate::from_pem(ca_pem).unwrap()]);
    let client_cert = client_cert.map(|(cert, key)| {
        let chain: Vec<Certificate> = ureq::tls::parse_pem(cert)
            .filter_map(|item| match item {
                Ok(PemItem::Certificate(cert)) => Some(cert),
                _ => None,
            })
            .collect();
        ClientCert::new_with_certs(&chain, PrivateKey::from_pem(key).unwrap())
    });
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(
            TlsConfig::builder()
                .root_certs(roots)
                .client_cert(client_cert)
                .unversioned_rustls_crypto_provider(provider)
                .build(),
        )
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .post(format!("https://127.0.0.1:{port}/validate"))
        .header("Content-Type", "application/json")
        .send(review.to_string().as_bytes())
        .map_err(|error| error.to_string())?;
    Ok(response.body_mut().read_to_string().unwrap_or_default())
}

/// "An open door": the webhook answers a caller only what it could learn anyway. Without a
/// client CA, a forged review (claiming system:masters) about a controller whose script is a
/// ConfigMap of another namespace gets no byte of it; with one, only the API server's
/// certificate is let in at all.
#[tokio::test]
async fn a_caller_the_webhook_cannot_authenticate_learns_nothing() {
    let admin = client().await;
    let operator_namespace = test_namespace(&admin, "tenancy-door").await;
    let vault = test_namespace(&admin, "tenancy-door-vault").await;
    apply(
        &admin,
        &config_map(
            &vault,
            "vault",
            json!({}),
            json!({"sync.rhai": "\"door-secret-31\""}),
        ),
    )
    .await;
    let controller = json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "forged"},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"script": {"configMapRef": {"namespace": vault, "name": "vault", "key": "sync.rhai"}}}},
            "tests": [{"name": "echo", "request": {"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}}, "expect": {"labels": {"a": "b"}}}]
        }
    });
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "forged", "operation": "CREATE", "name": "forged",
            "kind": {"group": "metascript.dev", "version": "v1alpha1", "kind": "DecoratorController"},
            "resource": {"group": "metascript.dev", "version": "v1alpha1", "resource": "decoratorcontrollers"},
            "userInfo": {"username": "mallory", "groups": ["system:masters"]},
            "object": controller, "dryRun": false
        }
    });
    let ca_of = |secret: Secret| secret.data.unwrap()["ca.crt"].0.clone();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &operator_namespace);

    let open = AdmissionWebhook::start(&admin, &operator_namespace, false, &[]).await;
    let ca = ca_of(secrets.get("webhook-tls").await.unwrap());
    let answer = call_directly(open.port, &ca, None, &review).expect("an open webhook answers");
    assert!(answer.contains("\"uid\":\"forged\""), "{answer}");
    assert!(
        !answer.contains("door-secret-31"),
        "the vault's content: {answer}"
    );
    assert!(
        answer.contains("not checked"),
        "says why it did not check: {answer}"
    );
    drop(open);

    let closed = AdmissionWebhook::start(&admin, &operator_namespace, true, &[]).await;
    let error = call_directly(closed.port, &ca, None, &review)
        .expect_err("no client certificate: refused at the handshake");
    assert!(!error.contains("door-secret-31"), "{error}");
    // A client certificate from any other CA is not the API server's.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver-webhook-client");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.self_signed(&key).unwrap();
    let (cert, key) = (cert.pem(), key.serialize_pem());
    call_directly(
        closed.port,
        &ca,
        Some((cert.as_bytes(), key.as_bytes())),
        &review,
    )
    .expect_err("a certificate of another CA: refused at the handshake");
}

/// Admission's own budgets: a test case that would loop for ten minutes under the author's
/// limits is stopped at the webhook's ceiling, and the refusal says so (not an API server
/// timeout).
#[tokio::test]
async fn admission_runs_tests_under_its_own_ceilings() {
    let admin = client().await;
    let namespace = test_namespace(&admin, "tenancy-bounded").await;
    let webhook = AdmissionWebhook::start(&admin, &namespace, false, &[]).await;
    let name = unique_name("tenancy-loop");
    let mut controller = labeller(&name, &webhook.labels(), None);
    let spinning = |limits: Value| {
        json!({"script": {
            "language": "rhai", "inline": "let n = 0;\nloop { n += 1; }", "limits": limits
        }})
    };
    controller["spec"]["tests"] = json!([{"name": "spins", "request": {"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}}, "expect": {}}]);
    // Beyond what the operator would ever run: refused before any test runs.
    controller["spec"]["hooks"]["sync"] =
        spinning(json!({"maxOperations": 1_000_000_000_000u64, "timeoutMillis": 600_000}));
    assert_refused(
        try_apply(&admin, &controller).await,
        &["maxOperations is 1000000000000", "--max-hook-operations"],
        "limits above the operator's ceilings",
    );
    // At the operator's ceilings: allowed in production, but not at admission.
    controller["spec"]["hooks"]["sync"] =
        spinning(json!({"maxOperations": 100_000_000u64, "timeoutMillis": 10_000}));
    let refusal = assert_refused(
        try_apply(&admin, &controller).await,
        &["spec.tests[0] (spins)", "limit exceeded"],
        "an endless test case",
    );
    // The webhook's ceilings, not the author's 10^8 operations and ten seconds: whichever
    // stops the loop first on this machine.
    assert!(
        refusal.contains("operation budget of 1000000 exhausted")
            || refusal.contains("timed out after 250 ms"),
        "{refusal}"
    );
}

/// "Around admission": a ConfigMap edit (no admission at all) that breaks the controller's own
/// `spec.tests` never serves; the last good revision keeps serving, the controller says which
/// case failed, and fixing the tests lets the new code serve.
#[tokio::test]
async fn a_script_edit_that_fails_the_controllers_tests_does_not_serve() {
    let admin = client().await;
    operator().await;
    let namespace = test_namespace(&admin, "tenancy-gate").await;
    let name = unique_name("tenancy-gate");
    let hooks = |version: &str| {
        config_map(
            &namespace,
            "hooks",
            json!({}),
            json!({"sync.rhai": format!("#{{ labels: #{{ \"gate.test/version\": \"{version}\" }} }}")}),
        )
    };
    let controller = |expected: &str| {
        json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": name},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
                "hooks": {"sync": {"script": {"configMapRef": {"namespace": namespace, "name": "hooks", "key": "sync.rhai"}}}},
                "tests": [{"name": "labels its version", "request": {"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}}, "expect": {"labels": {"gate.test/version": expected}}}]
            }
        })
    };
    let target = |n: &str| config_map(&namespace, n, json!({"decorate": name}), json!({}));
    let version_of = |expected: &'static str| {
        move |o: &Value| o["metadata"]["labels"]["gate.test/version"] == expected
    };
    apply(&admin, &hooks("1")).await;
    apply(&admin, &controller("1")).await;
    apply(&admin, &target("first")).await;
    wait_for(&admin, &target("first"), "version 1", version_of("1")).await;

    apply(&admin, &hooks("2")).await;
    let loaded = wait_for_condition(&admin, &controller("1"), "ScriptsLoaded", "False").await;
    assert_eq!(loaded["reason"], "TestsFailed", "{loaded}");
    let message = loaded["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.tests[0] (labels its version)"),
        "{message}"
    );
    let event = wait_for_event(&admin, None, "TestsFailed", |e| {
        crate::support::operator::regarding_name(e) == Some(name.as_str())
    })
    .await;
    assert!(
        event
            .note
            .unwrap_or_default()
            .contains("labels its version"),
        "the Event names the case"
    );
    // The last good revision serves what comes next.
    apply(&admin, &target("second")).await;
    wait_for(
        &admin,
        &target("second"),
        "version 1 still",
        version_of("1"),
    )
    .await;
    assert_eq!(
        get(&admin, &target("first")).await.unwrap()["metadata"]["labels"]["gate.test/version"],
        "1"
    );

    // Tests that expect the new behaviour let it serve.
    apply(&admin, &controller("2")).await;
    for n in ["first", "second"] {
        wait_for(&admin, &target(n), "version 2", version_of("2")).await;
    }
}

/// "Blocked exits": while a ConfigMap breaks the controller's tests, its owner may still ask
/// for a sync, abort or promote, and delete it; the operator's own finalizer removal is never
/// refused.
#[tokio::test]
async fn a_broken_config_map_blocks_no_exit() {
    let admin = client().await;
    let operator_namespace = test_namespace(&admin, "tenancy-exit-op").await;
    let team_a = test_namespace(&admin, "tenancy-exit-a").await;
    let webhook = AdmissionWebhook::start(&admin, &operator_namespace, true, &[]).await;
    config_map_account(&admin, &team_a, "bot").await;
    let alice = Tenant::new("team-a");
    alice.grant(&admin, &team_a).await;
    let as_alice = alice.client().await;
    let hooks = |code: &str| config_map(&team_a, "hooks", json!({}), json!({"sync.rhai": code}));
    apply(&as_alice, &hooks(LABELLER)).await;
    let name = unique_name("tenancy-exit");
    let mut controller = labeller(&name, &webhook.labels(), Some((&team_a, "bot")));
    controller["spec"]["hooks"]["sync"] = json!({"script": {"configMapRef": {"namespace": team_a, "name": "hooks", "key": "sync.rhai"}}});
    controller["spec"]["tests"] = json!([{"name": "labels", "request": {"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}}, "expect": {"labels": {"tenancy.test/seen": "yes"}}}]);
    try_apply(&as_alice, &controller)
        .await
        .expect("alice's controller admitted");
    let target = config_map(&team_a, "target", json!({"decorate": name}), json!({}));
    apply(&as_alice, &target).await;
    labelled(&admin, &target).await;

    apply(&as_alice, &hooks("#{ labels: #{} }")).await;
    wait_for_condition(&admin, &controller, "ScriptsLoaded", "False").await;
    for annotation in [
        "metascript.dev/sync-requested-at",
        "metascript.dev/abort",
        "metascript.dev/promote",
    ] {
        try_merge(
            &as_alice,
            &controller,
            json!({"metadata": {"annotations": {annotation: "now"}}}),
        )
        .await
        .unwrap_or_else(|error| panic!("{annotation} refused: {error}"));
    }
    try_delete(&as_alice, &controller)
        .await
        .expect("deleting it while its ConfigMap is broken");
    eventually("the controller gone", || async {
        get(&admin, &controller).await.is_none().then_some(())
    })
    .await;
}

/// "Amplification": a type starts being watched only once an account that uses it may list
/// it. Neither a controller acting on a type its account may not list nor a customize answer
/// naming one has the operator watch it; a grant does.
#[tokio::test]
async fn a_type_is_watched_only_for_an_account_that_may_list_it() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let admin = client().await;
    let shared = operator().await;
    let team = test_namespace(&admin, "tenancy-watch").await;
    config_map_account(&admin, &team, "bot").await;
    let group = format!("{}.tenancy.metascript.test", unique_name("watch"));
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": format!("vaults.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "vaults", "kind": "Vault"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(admin.clone())
        .create(&Default::default(), &crd)
        .await
        .expect("creating the CRD");
    let api_version = format!("{group}/v1");

    // Acting on it.
    let acting = unique_name("tenancy-watch-acting");
    let mut on_vaults = labeller(&acting, &json!({}), Some((&team, "bot")));
    on_vaults["spec"]["resources"][0]["apiVersion"] = api_version.clone().into();
    on_vaults["spec"]["resources"][0]["resource"] = "vaults".into();
    apply(&admin, &on_vaults).await;
    // The operator may not have discovered the new type yet (ResolveFailed, retried).
    wait_for(&admin, &on_vaults, "Ready=False with ReadForbidden", |c| {
        c["status"]["conditions"]
            .as_array()
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["reason"] == "ReadForbidden")
            })
    })
    .await;
    // Asking for it in a customize answer.
    let asking = unique_name("tenancy-watch-asking");
    let mut customizer = labeller(&asking, &json!({}), Some((&team, "bot")));
    customizer["spec"]["hooks"]["customize"] = json!({"script": {"language": "rhai", "inline": format!(
        "#{{ relatedResources: [#{{ apiVersion: \"{api_version}\", resource: \"vaults\", namespace: \"{team}\" }}] }}"
    )}});
    apply(&admin, &customizer).await;
    apply(
        &admin,
        &config_map(&team, "asks", json!({"decorate": asking}), json!({})),
    )
    .await;
    let refused = wait_for_condition(&admin, &customizer, "ReadsAllowed", "False").await;
    assert_eq!(refused["reason"], "ReadForbidden", "{refused}");
    assert!(
        !shared.operator.is_watching(&api_version, "vaults"),
        "a type no allowed account uses is not watched"
    );

    // A grant heals both, and only then is the type watched.
    let rules = json!([{"apiGroups": [group], "resources": ["vaults"], "verbs": ["get", "list", "watch", "patch"]}]);
    grant(&admin, &team, "vaults", "bot", rules).await;
    wait_for_condition(&admin, &customizer, "ReadsAllowed", "True").await;
    wait_for_condition(&admin, &on_vaults, "Ready", "True").await;
    assert!(shared.operator.is_watching(&api_version, "vaults"));
}
