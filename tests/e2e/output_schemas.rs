//! What a hook returns is checked against its type's schema and CEL rules before anything of
//! it is written: live against a real kube-apiserver (a CRD with rules, one of them a
//! transition rule with a `messageExpression`), and offline through `render` and `test`, with
//! the same messages.

use crate::support::manifests::{self, inline_sync};
use crate::support::operator::{
    apply, get, operator, try_apply, wait_for_condition, wait_for_event,
};
use crate::support::tenants::AdmissionWebhook;
use crate::support::{client, eventually, test_namespace, unique_name};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// A CRD of Gadgets in a group of its own: a size from an enum that may not change once set
/// (a transition rule whose message is an expression), replicas that only a large gadget may
/// have more than five of (a rule with a field path), and no other field.
fn gadgets(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "required": ["size"],
                        "x-kubernetes-validations": [
                            {"rule": "self.size == oldSelf.size",
                             "messageExpression": "'size is immutable: it was ' + oldSelf.size"},
                            {"rule": "self.replicas <= 5 || self.size == 'large'",
                             "message": "only a large gadget runs more than 5 replicas",
                             "fieldPath": ".replicas"}
                        ],
                        "properties": {
                            "size": {"type": "string", "enum": ["small", "large"]},
                            "replicas": {"type": "integer", "minimum": 0, "default": 1}
                        }
                    }}
                }}
            }]
        }
    })
}

/// Attaches to each labelled ConfigMap a Gadget built from its data, field for field: what the
/// ConfigMap says is what the hook returns.
fn hook(group: &str) -> String {
    format!(
        r#"
let cm = request.object;
let spec = #{{}};
for key in cm.data.keys() {{
    spec[key] = if key == "replicas" {{ parse_int(cm.data[key]) }} else {{ cm.data[key] }};
}}
#{{ attachments: [#{{
    apiVersion: "{group}/v1", kind: "Gadget",
    metadata: #{{ name: cm.metadata.name }},
    spec: spec
}}] }}
"#
    )
}

/// A DecoratorController of the ConfigMaps labelled `test-controller: <name>`, attaching
/// objects of the `attachment` rule's type with a Rhai sync hook.
fn decorator(name: &str, attachment: Value, script: &str) -> Value {
    let mut controller =
        manifests::decorator(name, ("v1", "configmaps"), inline_sync("rhai", script));
    controller["spec"]["attachments"] = json!([attachment]);
    controller
}

fn controller(name: &str, group: &str) -> Value {
    let gadgets = json!({"apiVersion": format!("{group}/v1"), "resource": "gadgets",
                         "updateStrategy": {"method": "InPlace"}});
    decorator(name, gadgets, &hook(group))
}

fn config_map(namespace: &str, controller: &str, data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web", "namespace": namespace, "labels": {"test-controller": controller}},
        "data": data
    })
}

fn gadget(group: &str, namespace: &str) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
           "metadata": {"name": "web", "namespace": namespace}})
}

/// The Gadget `web` of the namespace as the API server has it now.
async fn gadget_now(client: &kube::Client, group: &str, namespace: &str) -> Option<Value> {
    let resource = ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let found = api.get_opt("web").await.expect("gadgets can be read");
    found.map(|gadget| serde_json::to_value(gadget).expect("objects serialize"))
}

/// Waits until the Gadget has `replicas`, returning it.
async fn wait_for_replicas(
    client: &kube::Client,
    group: &str,
    namespace: &str,
    replicas: i64,
) -> Value {
    eventually(&format!("a gadget of {replicas} replicas"), || async {
        gadget_now(client, group, namespace)
            .await
            .filter(|g| g["spec"]["replicas"] == replicas)
    })
    .await
}

/// What each bad ConfigMap makes the hook return, and what the check says of it.
fn violations() -> [(Value, &'static str); 4] {
    [
        (
            json!({"size": "medium"}),
            r#"spec.size: must be one of "small", "large", not "medium""#,
        ),
        (
            json!({"size": "small", "replicas": "9"}),
            "spec.replicas: only a large gadget runs more than 5 replicas",
        ),
        (
            json!({"size": "large"}),
            "spec: size is immutable: it was small",
        ),
        (
            json!({"size": "small", "colour": "red"}),
            "spec.colour: unknown field, not in the schema",
        ),
    ]
}

#[tokio::test]
async fn an_output_that_breaks_its_schema_is_not_applied_and_says_where() {
    let client = client().await;
    operator().await;
    let group = format!("{}.example.com", unique_name("schemas"));
    let crd: CustomResourceDefinition = serde_json::from_value(gadgets(&group)).unwrap();
    metascript::testing::install_these_crds(&client, [crd])
        .await
        .expect("the CRD is served");
    let namespace = test_namespace(&client, "schemas").await;
    let name = unique_name("schemas");
    apply(&client, &controller(&name, &group)).await;
    apply(
        &client,
        &config_map(&namespace, &name, json!({"size": "small", "replicas": "2"})),
    )
    .await;
    let applied = wait_for_replicas(&client, &group, &namespace, 2).await;

    for (data, says) in violations() {
        apply(&client, &config_map(&namespace, &name, data.clone())).await;
        let event = wait_for_event(&client, Some(&namespace), "SchemaViolation", |e| {
            e.note.as_deref().is_some_and(|note| note.contains(says))
        })
        .await;
        let note = event.note.unwrap_or_default();
        assert!(
            note.contains(&format!("Gadget.{group}/v1 {namespace}/web: ")),
            "names the object: {note}"
        );
        assert!(note.contains("nothing of this sync was written"), "{note}");
        let now = gadget_now(&client, &group, &namespace).await.unwrap();
        assert_eq!(
            now["metadata"]["resourceVersion"], applied["metadata"]["resourceVersion"],
            "{data}: the gadget is left as it was"
        );
    }

    // Mended: written at once.
    apply(
        &client,
        &config_map(&namespace, &name, json!({"size": "small", "replicas": "3"})),
    )
    .await;
    wait_for_replicas(&client, &group, &namespace, 3).await;
}

/// The admission webhook and the operator's gate run a controller's `spec.tests` with the
/// CRDs of the types it names (never written before here): a case whose output breaks the
/// Gadget schema keeps the controller out.
#[tokio::test]
async fn spec_tests_outputs_are_checked_against_the_crds_the_controller_names() {
    let client = client().await;
    operator().await;
    let group = format!("{}.example.com", unique_name("schemas-admit"));
    let crd: CustomResourceDefinition = serde_json::from_value(gadgets(&group)).unwrap();
    metascript::testing::install_these_crds(&client, [crd])
        .await
        .expect("the CRD is served");
    let namespace = test_namespace(&client, "schemas-admit").await;
    let webhook = AdmissionWebhook::start(&client, &namespace, false, &[]).await;
    let tested = |name: &str, size: &str, labels: Value| {
        let mut manifest = controller(name, &group);
        manifest["metadata"]["labels"] = labels;
        let wanted = json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
                            "metadata": {"name": "web"}, "spec": {"size": size}});
        manifest["spec"]["tests"] = json!([{
            "name": size,
            "request": {"object": config_map(&namespace, name, json!({"size": size}))},
            "expect": {"attachments": [wanted]}
        }]);
        manifest
    };

    let says = [
        "spec.tests[0] (medium)",
        r#"spec.size: must be one of "small", "large", not "medium""#,
    ];
    let labels = webhook.labels();
    let refused = try_apply(
        &client,
        &tested(
            &format!("{}-medium", webhook.instance),
            "medium",
            labels.clone(),
        ),
    )
    .await
    .expect_err("a case whose output breaks the CRD's enum is refused");
    for part in says {
        assert!(refused.contains(part), "{part:?} in: {refused}");
    }
    try_apply(
        &client,
        &tested(&format!("{}-small", webhook.instance), "small", labels),
    )
    .await
    .expect("a case whose output holds is admitted");

    // Past no webhook, the operator's own gate keeps it from serving.
    let unchecked = tested(&unique_name("schemas-gate"), "medium", json!({}));
    apply(&client, &unchecked).await;
    let loaded = wait_for_condition(&client, &unchecked, "ScriptsLoaded", "False").await;
    assert_eq!(loaded["reason"], "TestsFailed", "{loaded}");
    let message = loaded["message"].as_str().unwrap_or_default();
    for part in says {
        assert!(message.contains(part), "{part:?} in: {message}");
    }

    // The CRD, not the controller, was wrong: once it takes "medium", the same revision's
    // cases run again and pass, with nothing else touched.
    let mut wider = gadgets(&group);
    wider["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["size"]["enum"] = json!(["small", "medium", "large"]);
    let wider: CustomResourceDefinition = serde_json::from_value(wider).unwrap();
    metascript::testing::install_these_crds(&client, [wider])
        .await
        .expect("the CRD is changed");
    wait_for_condition(&client, &unchecked, "ScriptsLoaded", "True").await;
}

/// A built-in type's misspelled field is refused too, from the schema bundled for its
/// Kubernetes version.
#[tokio::test]
async fn a_misspelled_field_of_a_built_in_type_is_refused_by_name() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "schemas-builtin").await;
    let name = unique_name("schemas-builtin");
    let script = r#"
let cm = request.object;
#{ attachments: [#{
    apiVersion: "v1", kind: "Service",
    metadata: #{ name: cm.metadata.name },
    spec: #{ ports: [#{ port: 80 }], selectr: #{ app: cm.metadata.name } }
}] }
"#;
    let services = json!({"apiVersion": "v1", "resource": "services"});
    apply(&client, &decorator(&name, services, script)).await;
    apply(&client, &config_map(&namespace, &name, json!({}))).await;
    let event = wait_for_event(&client, Some(&namespace), "SchemaViolation", |_| true).await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(&format!(
            r#"Service.v1 {namespace}/web: spec.selectr: unknown field, not in the schema (did you mean "selector"?)"#
        )),
        "{note}"
    );
    let service = json!({"apiVersion": "v1", "kind": "Service",
                         "metadata": {"name": "web", "namespace": namespace}});
    assert!(get(&client, &service).await.is_none(), "nothing applied");
}

fn metascript(args: &[&str], dir: &Path) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_metascript"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("metascript runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn write_yaml(path: &Path, documents: &[Value]) {
    let text: Vec<String> = documents
        .iter()
        .map(|d| serde_saphyr::to_string(d).unwrap())
        .collect();
    std::fs::write(path, text.join("---\n")).unwrap();
}

/// The same violations, before anything runs: `render` over manifests (an observed Gadget among
/// them is the transition rule's `oldSelf`) and `metascript test` with the CRD in `crds:`.
#[test]
fn render_and_test_say_the_same_offline() {
    let dir = tempfile::tempdir().unwrap();
    let group = "gadgets.example.com";
    write_yaml(&dir.path().join("crd.yaml"), &[gadgets(group)]);
    write_yaml(
        &dir.path().join("controller.yaml"),
        &[controller("gadgeteer", group)],
    );
    // Made by the controller earlier (its label says so): the one a transition rule compares.
    let mut observed = gadget(group, "shop");
    observed["metadata"]["labels"] = json!({"metascript.dev/decorator": "gadgeteer"});
    observed["spec"] = json!({"size": "small"});
    for (data, says) in violations() {
        write_yaml(
            &dir.path().join("objects.yaml"),
            &[
                config_map("shop", "gadgeteer", data.clone()),
                observed.clone(),
            ],
        );
        let (code, stdout, stderr) = metascript(&["render", "-f", "."], dir.path());
        assert_eq!(code, Some(1), "{data}: {stderr}");
        assert_eq!(stdout, "", "the only sync failed: no empty list on stdout");
        assert!(
            stderr.contains(&format!("Gadget.{group}/v1 shop/web: {says}")),
            "{data}: {stderr}"
        );
    }

    let cases: Vec<Value> = violations()
        .into_iter()
        .map(|(data, _)| {
            json!({"name": format!("{data}"),
                   "request": {"object": config_map("shop", "gadgeteer", data)},
                   "cluster": [observed]})
        })
        .collect();
    write_yaml(
        &dir.path().join("gadgets.test.yaml"),
        &[json!({"controller": "controller.yaml", "crds": ["crd.yaml"], "cases": cases})],
    );
    let (code, stdout, stderr) = metascript(&["test", "gadgets.test.yaml"], dir.path());
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    for (_, says) in violations() {
        assert!(
            stdout.contains(&format!("Gadget.{group}/v1 shop/web: {says}")),
            "{says}: {stdout}"
        );
    }
    assert!(
        stdout.contains("invalid hook response: attachments[0]: the hook's output breaks"),
        "says where in the response: {stdout}"
    );
    assert!(stdout.contains("0 passed, 4 failed"), "{stdout}");
}
