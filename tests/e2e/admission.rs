//! Admission: the API server asks `metascript run`'s validating webhook before it stores a
//! controller or a labelled ConfigMap of scripts, and refuses broken scripts and failing tests
//! with the hook, line and column.

use crate::support::operator::{operator, try_apply};
use crate::support::tenants::AdmissionWebhook;
use crate::support::{client, test_namespace};
use serde_json::{Value, json};

#[tokio::test]
async fn broken_scripts_and_failing_tests_are_refused_with_the_line() {
    let client = client().await;
    operator().await; // installs the CRDs
    let namespace = test_namespace(&client, "admission").await;
    let webhook = AdmissionWebhook::start(&client, &namespace, false, &[]).await;
    let (labels, instance) = (webhook.labels(), &webhook.instance);
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

    try_apply(
        &client,
        &controller(&format!("{instance}-good"), labeller, passing),
    )
    .await
    .expect("a good controller admitted");

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
}
