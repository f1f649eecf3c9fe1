//! Customize answers are kept per target until the target or the controller changes: a change
//! to a related object re-syncs the target without asking customize again.

use crate::support::operator::{apply, operator, wait_for};
use crate::support::{client, eventually, test_namespace, unique_name};
use metascript::testing::{HookServer, Reply};
use serde_json::{Value, json};

#[tokio::test]
async fn a_related_change_resyncs_without_asking_customize_again() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "customize-cache").await;
    let name = unique_name("customize-cache");
    // customize relates the ConfigMap `shared`; sync copies its `value` into an attachment (so
    // the target itself, which the answer is kept for, does not change).
    let server = HookServer::start(|path, request| match path {
        "/customize" => Reply::json(&json!({"relatedResources": [
            {"apiVersion": "v1", "resource": "configmaps", "names": ["shared"]}
        ]})),
        _ => {
            let value = request["related"]["ConfigMap.v1"]["shared"]["data"]["value"].clone();
            Reply::json(&json!({"attachments": [{
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "copy"}, "data": {"value": value}
            }]}))
        }
    })
    .expect("a hook server");
    apply(
        &client,
        &json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": name},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "configmaps",
                               "labelSelector": {"matchLabels": {"customized": name}}}],
                "attachments": [{"apiVersion": "v1", "resource": "configmaps",
                                 "updateStrategy": {"method": "InPlace"}}],
                "hooks": {
                    "customize": {"webhook": {"url": server.url("/customize")}},
                    "sync": {"webhook": {"url": server.url("/sync")}}
                }
            }
        }),
    )
    .await;
    let shared = |value: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "shared", "namespace": namespace}, "data": {"value": value}})
    };
    let target = |extra: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "target", "namespace": namespace,
                            "labels": {"customized": name}, "annotations": extra}})
    };
    let copy = json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "copy", "namespace": namespace}});
    apply(&client, &shared("one")).await;
    apply(&client, &target(json!({}))).await;
    wait_for(&client, &copy, "the first copy", |o| {
        o["data"]["value"] == "one"
    })
    .await;
    let asked = server.requests("/customize").len();

    // The related object changes: sync runs again with it, customize is not asked.
    apply(&client, &shared("two")).await;
    wait_for(&client, &copy, "the second copy", |o| {
        o["data"]["value"] == "two"
    })
    .await;
    assert_eq!(
        server.requests("/customize").len(),
        asked,
        "customize was asked again though the target did not change"
    );

    // The target changes: customize is asked again.
    apply(&client, &target(json!({"touched": "yes"}))).await;
    eventually("customize asked about the changed target", || async {
        (server.requests("/customize").len() > asked).then_some(())
    })
    .await;
}
