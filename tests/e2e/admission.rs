//! Admission: the API server asks `metascript run`'s validating webhook before it stores a
//! controller or a labelled ConfigMap of scripts, and refuses broken scripts and failing tests
//! with the hook, line and column.

use crate::support::operator::{OWN_OPERATOR_LABEL, api_for, operator};
use crate::support::process::{OperatorProcess, free_port};
use crate::support::{client, eventually, test_namespace, unique_name};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Applies as a user would, returning the API server's refusal instead of panicking.
async fn try_apply(client: &kube::Client, object: &Value) -> Result<(), String> {
    api_for(client, object)
        .patch(
            metascript::object::name(object),
            &PatchParams::apply("test-user").force(),
            &Patch::Apply(object),
        )
        .await
        .map(drop)
        .map_err(|error| error.to_string())
}

#[tokio::test]
async fn broken_scripts_and_failing_tests_are_refused_with_the_line() {
    let client = client().await;
    operator().await; // installs the CRDs
    let namespace = test_namespace(&client, "admission").await;
    let instance = unique_name("admission");
    let port = free_port();
    // Only this test's objects are sent to this webhook.
    let selector = json!({"matchLabels": {"metascript.test/admission": instance}});
    let webhook = |name: &str, group: &str, resources: Value| {
        json!({
            "name": name,
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate")},
            "rules": [{"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": resources}],
            "objectSelector": selector,
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10
        })
    };
    let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": instance},
        "webhooks": [
            webhook("controllers.metascript.dev", "metascript.dev", json!(["decoratorcontrollers", "mapcontrollers"])),
            webhook("scripts.metascript.dev", "", json!(["configmaps"]))
        ]
    }))
    .unwrap();
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configurations
        .create(&PostParams::default(), &configuration)
        .await
        .expect("creating the webhook configuration");
    let _operator = OperatorProcess::start(
        &instance,
        &[
            "--webhook-addr",
            &format!("127.0.0.1:{port}"),
            "--webhook-secret",
            &format!("{namespace}/webhook-tls"),
            "--webhook-configuration",
            &instance,
            "--webhook-names",
            "127.0.0.1,localhost",
        ],
    )
    .await;
    eventually("the CA published in the configuration", || async {
        let current = configurations.get(&instance).await.ok()?;
        current
            .webhooks?
            .iter()
            .all(|w| w.client_config.ca_bundle.is_some())
            .then_some(())
    })
    .await;

    let labels = json!({OWN_OPERATOR_LABEL: instance, "metascript.test/admission": instance});
    let controller = |name: &str, code: &str, tests: Value| {
        json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
                "hooks": {"sync": {"script": {"language": "rhai", "inline": code}}},
                "tests": tests
            }
        })
    };
    let request = json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}});
    let labeller = "#{ labels: #{ seen: \"yes\" } }";
    let passing =
        json!([{"name": "labels", "request": request, "expect": {"labels": {"seen": "yes"}}}]);
    let failing =
        json!([{"name": "labels", "request": request, "expect": {"labels": {"seen": "no"}}}]);

    // The webhook may take a moment to answer after the CA is published.
    let good = controller(&format!("{instance}-good"), labeller, passing);
    eventually("a good controller admitted", || async {
        try_apply(&client, &good).await.ok()
    })
    .await;

    let refused = try_apply(
        &client,
        &controller(&format!("{instance}-broken"), "let x = ;\n#{}", json!([])),
    )
    .await
    .expect_err("a script that does not compile is refused");
    for part in ["admission webhook", "spec.hooks.sync", "line 1"] {
        assert!(refused.contains(part), "{part:?} in: {refused}");
    }
    let refused = try_apply(
        &client,
        &controller(&format!("{instance}-failing"), labeller, failing),
    )
    .await
    .expect_err("failing tests are refused");
    assert!(refused.contains("spec.tests[0] (labels)"), "{refused}");
    assert!(refused.contains("labels.seen"), "{refused}");

    let scripts = |code: &str| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "scripts", "namespace": namespace, "labels": {"metascript.dev/scripts": "true", "metascript.test/admission": instance}},
            "data": {"sync.lua": code}
        })
    };
    try_apply(&client, &scripts("return { labels = {} }"))
        .await
        .expect("a script that compiles is admitted");
    let refused = try_apply(&client, &scripts("return {"))
        .await
        .expect_err("a script ConfigMap that does not compile is refused");
    assert!(refused.contains("data.sync.lua"), "{refused}");

    configurations
        .delete(&instance, &Default::default())
        .await
        .expect("removing the webhook configuration");
}
