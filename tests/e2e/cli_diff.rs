//! `metascript diff` against the real plane: a revision the operator already serves shows no
//! change (so "no change" means the operator writes nothing), a new revision shows exactly the
//! objects and fields it would write, a failing hook is an error, and every run is read-only:
//! it runs as a user who may only read, and no object's resourceVersion moves.

use crate::support::cli::metascript;
use crate::support::cluster::Cluster;
use crate::support::operator::{apply, quiet, wait_for};
use crate::support::{client, kubeconfig, test_namespace, unique_name};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use metascript::runtime::ControllerId;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A kubeconfig acting as a user who may get, list and watch everything and nothing else, so a
/// diff that tried to write would be refused.
async fn read_only_kubeconfig(client: &kube::Client, dir: &Path) -> PathBuf {
    let user = unique_name("diff-reader");
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(user.clone()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["*".into()]),
            resources: Some(vec!["*".into()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("creating the read-only role");
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(user.clone()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: user.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: user.clone(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Subject::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding the read-only role");
    let mut config = kubeconfig().await;
    for auth in &mut config.auth_infos {
        if let Some(info) = auth.auth_info.as_mut() {
            info.impersonate = Some(user.clone());
        }
    }
    let path = dir.join("read-only.kubeconfig");
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).expect("writing kubeconfig");
    path
}

/// `metascript diff -f FILE… ARGS…` with the kubeconfig.
fn diff(kubeconfig: &Path, files: &[&Path], args: &[&str]) -> Output {
    let mut all: Vec<OsString> = vec!["diff".into(), "--kubeconfig".into(), kubeconfig.into()];
    for file in files {
        all.extend(["-f".into(), file.as_os_str().to_owned()]);
    }
    all.extend(args.iter().map(OsString::from));
    metascript(all)
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "diff -o json printed no JSON ({e}); exit {}\nstdout:\n{}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn write(dir: &Path, name: &str, object: &Value) -> PathBuf {
    let path = dir.join(name);
    // JSON is YAML.
    std::fs::write(&path, object.to_string()).expect("writing a manifest");
    path
}

/// Every object's resourceVersion of the types a diff could write, in one namespace, by
/// `<kind>/<name>`.
async fn versions(client: &kube::Client, namespace: &str) -> BTreeMap<String, String> {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
    async fn of<K>(client: &kube::Client, namespace: &str) -> Vec<(String, String)>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::<K>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .expect("listing the namespace")
            .items
            .into_iter()
            .map(|o| {
                let kind = K::kind(&K::DynamicType::default()).to_string();
                let metadata = o.meta().clone();
                (
                    format!("{kind}/{}", metadata.name.unwrap_or_default()),
                    metadata.resource_version.unwrap_or_default(),
                )
            })
            .collect()
    }
    let mut versions = BTreeMap::new();
    versions.extend(of::<ConfigMap>(client, namespace).await);
    versions.extend(of::<Service>(client, namespace).await);
    versions.extend(of::<Pod>(client, namespace).await);
    versions
}

fn decorator(name: &str, hook: Value) -> Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "attachments": [{"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"script": hook}}
        }
    })
}

/// Revision A (Lua) is what the operator serves; revision B (Rhai) changes a port, adds a
/// Service for `a`, drops `b`'s and relabels both targets; revision C fails on `b`.
#[tokio::test]
async fn diff_shows_exactly_what_a_revision_would_write_and_writes_nothing() {
    let client = client().await;
    crate::support::operator::operator().await;
    let namespace = test_namespace(&client, "cli-diff").await;
    let name = unique_name("diff");
    let dir = tempfile::tempdir().expect("a temp dir");
    let reader = read_only_kubeconfig(&client, dir.path()).await;

    let revision_a = decorator(
        &name,
        json!({"language": "lua", "inline": r#"
            local svc = { apiVersion = 'v1', kind = 'Service',
                          metadata = { name = name(request.object) .. '-svc' },
                          spec = { ports = { { port = 80 } } } }
            return { labels = { rev = 'a' }, attachments = { svc } }
        "#}),
    );
    apply(&client, &revision_a).await;
    for target in ["a", "b"] {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": target, "namespace": namespace, "labels": {"decorate": name}}});
        apply(&client, &object).await;
        wait_for(&client, &object, "revision a's label", |o| {
            o["metadata"]["labels"]["rev"] == "a"
        })
        .await;
    }
    quiet(&ControllerId::new(
        metascript::kinds::decorator::KIND,
        &name,
    ))
    .await;
    let before = versions(&client, &namespace).await;
    assert!(before.contains_key("Service/b-svc"), "{before:?}");

    // The revision being served: the operator has written everything, so nothing would change.
    let served = write(dir.path(), "a.yaml", &revision_a);
    let output = diff(&reader, &[&served], &["--exit-code"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(text, "no changes (2 evaluated)\n");

    let revision_b = decorator(
        &name,
        json!({"language": "rhai", "inline": r#"
            let n = name(request.object);
            let services = [];
            if n == "a" {
                services.push(#{ apiVersion: "v1", kind: "Service", metadata: #{ name: `${n}-svc` },
                                 spec: #{ ports: [#{ port: 81 }] } });
                services.push(#{ apiVersion: "v1", kind: "Service", metadata: #{ name: `${n}-extra` },
                                 spec: #{ ports: [#{ port: 82 }] } });
            }
            #{ labels: #{ rev: "b" }, attachments: services }
        "#}),
    );
    let candidate = write(dir.path(), "b.yaml", &revision_b);
    let output = diff(&reader, &[&candidate], &["--exit-code", "-o", "json"]);
    let report = json_of(&output);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    assert_eq!(
        report["summary"],
        json!({"evaluated": 2, "create": 1, "update": 3, "delete": 1, "claim": 0, "errors": 0})
    );
    let changes: Vec<(String, String, Value)> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|entry| entry["changes"].as_array().unwrap().clone())
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["action"].as_str().unwrap().to_string(),
                c["fields"].clone(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        vec![
            (
                "a-svc".into(),
                "update".into(),
                json!([{"path": "spec.ports[0].port", "before": 80, "after": 81}])
            ),
            ("a-extra".into(), "create".into(), Value::Null),
            (
                "a".into(),
                "update".into(),
                json!([{"path": "metadata.labels.rev", "before": "a", "after": "b"}])
            ),
            ("b-svc".into(), "delete".into(), Value::Null),
            (
                "b".into(),
                "update".into(),
                json!([{"path": "metadata.labels.rev", "before": "a", "after": "b"}])
            ),
        ]
    );
    let text = diff(&reader, &[&candidate], &[]);
    assert_eq!(
        text.status.code(),
        Some(0),
        "without --exit-code changes exit 0"
    );
    let text = String::from_utf8_lossy(&text.stdout);
    for part in [
        &format!("DecoratorController/{name} ConfigMap.v1 {namespace}/a (sync):"),
        "spec.ports[0].port: 80 -> 81",
        &format!("+ Service.v1 {namespace}/a-extra (create)"),
        &format!("- Service.v1 {namespace}/b-svc (delete): no longer returned by the hook"),
        "1 to create, 3 to change, 1 to delete (2 evaluated)",
    ] {
        assert!(text.contains(part), "{part:?} in:\n{text}");
    }

    let revision_c = decorator(
        &name,
        json!({"language": "lua", "inline": r#"
            if name(request.object) == 'b' then error('b is not ready for this') end
            return { labels = { rev = 'a' } }
        "#}),
    );
    let failing = write(dir.path(), "c.yaml", &revision_c);
    let output = diff(&reader, &[&failing], &["-o", "json"]);
    let report = json_of(&output);
    assert_eq!(output.status.code(), Some(2), "{report:#}");
    assert_eq!(report["summary"]["errors"], 1, "{report:#}");
    let failed = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["error"].is_string())
        .expect("the failing sync is listed");
    assert_eq!(failed["object"], format!("ConfigMap.v1 {namespace}/b"));
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("b is not ready for this"),
        "{failed:#}"
    );

    // Read-only: nothing in the namespace was written by any of the runs.
    assert_eq!(versions(&client, &namespace).await, before);
}

/// A MapController and a CompositeController that are not in the cluster yet, previewed
/// together against their parents (scripts from `--scripts-dir`, as the examples keep them).
#[tokio::test]
async fn diff_previews_map_and_composite_controllers_before_they_are_applied() {
    let mut cluster = Cluster::new().await;
    let transform = format!("{}.example.com", unique_name("diff-transform"));
    cluster
        .install(
            crate::support::transform::TRANSFORM_CRDS,
            "ConfigTemplate",
            &transform,
        )
        .await;
    let catset = format!("{}.example.com", unique_name("diff-catset"));
    cluster
        .install(
            include_str!("../../scripts/catset/crds.yaml"),
            "CatSet",
            &catset,
        )
        .await;
    let namespace = test_namespace(&cluster.client, "cli-diff-kinds").await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let reader = read_only_kubeconfig(&cluster.client, dir.path()).await;
    for source in ["one", "two"] {
        cluster
            .apply(&crate::support::transform::config_map(
                &namespace,
                source,
                json!({"render": "yes"}),
                json!({"k": source}),
            ))
            .await;
    }
    cluster
        .apply(&json!({
            "apiVersion": format!("{transform}/v1"), "kind": "ConfigTemplate",
            "metadata": {"name": "t", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"render": "yes"}}, "keyPrefix": "X_"}
        }))
        .await;
    cluster
        .apply(&json!({
            "apiVersion": format!("{catset}/v1"), "kind": "CatSet",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "replicas": 1, "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "nginx", "image": "nginx:1"}]}}
            }
        }))
        .await;
    let manifest = |path: &str, group: &str, name: &str| {
        let text = std::fs::read_to_string(crate::support::cli::root().join(path)).unwrap();
        let mut controller: Value = serde_saphyr::from_str(&text).expect("the example parses");
        controller["metadata"]["name"] = json!(name);
        controller["spec"]["parentResource"]["apiVersion"] = json!(format!("{group}/v1"));
        write(dir.path(), &format!("{name}.yaml"), &controller)
    };
    let (map_name, composite_name) = (unique_name("diff-map"), unique_name("diff-cc"));
    let map = manifest(
        "scripts/configmap-transform/controller.lua.yaml",
        &transform,
        &map_name,
    );
    let composite = manifest(
        "scripts/catset/controller.rhai.yaml",
        &catset,
        &composite_name,
    );
    let before = versions(&cluster.client, &namespace).await;

    // Each example's scripts live in its own directory: one run per controller.
    let run = |file: &Path, scripts: &str| {
        let output = diff(
            &reader,
            &[file],
            &["--exit-code", "-o", "json", "--scripts-dir", scripts],
        );
        let report = json_of(&output);
        assert_eq!(output.status.code(), Some(1), "{report:#}");
        report
    };
    let report = run(&map, "scripts/configmap-transform");
    let created: Vec<&str> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["controller"] == format!("MapController/{map_name}"))
        .flat_map(|entry| entry["changes"].as_array().unwrap())
        .filter(|change| change["action"] == "create")
        .map(|change| change["name"].as_str().unwrap())
        .collect();
    assert_eq!(created, ["one-rendered", "two-rendered"], "{report:#}");
    assert_eq!(report["summary"]["errors"], 0, "{report:#}");

    let report = run(&composite, "scripts/catset");
    let created: Vec<(&str, &str)> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["controller"] == format!("CompositeController/{composite_name}"))
        .flat_map(|entry| entry["changes"].as_array().unwrap())
        .filter(|change| change["action"] == "create")
        .map(|change| {
            (
                change["kind"].as_str().unwrap(),
                change["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(created.contains(&("Pod", "web-0")), "{report:#}");
    assert_eq!(report["summary"]["errors"], 0, "{report:#}");

    assert_eq!(versions(&cluster.client, &namespace).await, before);
}

/// A webhook hook is called as the operator would call it, with the target as the cluster
/// holds it, and its answer is compared like a script's.
#[tokio::test]
async fn diff_calls_a_webhook_hook_with_the_live_target() {
    use metascript::testing::{HookServer, Reply};
    let client = client().await;
    let namespace = test_namespace(&client, "cli-diff-webhook").await;
    let name = unique_name("diff-webhook");
    let dir = tempfile::tempdir().expect("a temp dir");
    let reader = read_only_kubeconfig(&client, dir.path()).await;
    let server = HookServer::start(|_, request| {
        let data = request["object"]["data"]["value"].clone();
        Reply::json(&json!({"labels": {"copied": data}}))
    })
    .expect("hook server");
    let target = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app", "namespace": namespace, "labels": {"decorate": name}},
        "data": {"value": "v1"}});
    apply(&client, &target).await;
    let mut controller = decorator(&name, Value::Null);
    controller["spec"]["hooks"]["sync"] = json!({"webhook": {"url": server.url("/sync")}});
    let file = write(dir.path(), "webhook.yaml", &controller);

    let output = diff(&reader, &[&file], &["--exit-code", "-o", "json"]);
    let report = json_of(&output);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    assert_eq!(
        report["entries"][0]["changes"][0]["fields"],
        json!([{"path": "metadata.labels.copied", "after": "v1"}])
    );
    let requests = server.requests("/sync");
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(requests[0]["object"]["data"]["value"], "v1");
}
