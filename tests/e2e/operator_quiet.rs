//! Nothing changed, nothing written: a converged cluster's resync makes zero write requests,
//! an unchanged script or a status-only change re-runs nothing. Counted per controller, so the
//! other tests sharing the operator do not show up in the counts.

use crate::support::cluster::Cluster;
use crate::support::operator::{apply, operator, quiet};
use crate::support::transform::{
    TRANSFORM_LUA, install_transform, render_three, transform_controller,
};
use crate::support::{client, eventually, test_namespace, unique_name};
use metascript::runtime::ControllerId;
use serde_json::{Value, json};

fn stateful_set(namespace: &str, name: &str, controller: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {"test-controller": controller},
            "annotations": {"service-per-pod-label": "statefulset.kubernetes.io/pod-name", "service-per-pod-ports": "80:8080"}
        },
        "spec": {
            "replicas": 2, "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "example.invalid/c"}]}}
        }
    })
}

#[tokio::test]
async fn a_converged_cluster_is_left_alone() {
    let client = client().await;
    let operator = &operator().await.operator;
    let hooks_namespace = test_namespace(&client, "quiet-hooks").await;
    let namespace = test_namespace(&client, "quiet").await;
    let name = unique_name("quiet");
    let decorator = ControllerId::new(metascript::kinds::decorator::KIND, &name);
    let script = include_str!("../../scripts/service-per-pod/sync.rhai");
    let hooks = |extra: &str| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "hooks", "namespace": hooks_namespace},
            "data": {"sync.rhai": script, "notes": extra}
        })
    };
    apply(&client, &hooks("first")).await;
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{
                "apiVersion": "apps/v1", "resource": "statefulsets",
                "labelSelector": {"matchLabels": {"test-controller": name}},
                "ignoreStatusChanges": true
            }],
            "attachments": [{"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}}],
            "resyncPeriodSeconds": 3600,
            "hooks": {"sync": {"script": {"configMapRef": {"namespace": hooks_namespace, "name": "hooks", "key": "sync.rhai"}}}}
        }
    }))
    .await;
    for sts in ["a", "b", "c"] {
        apply(&client, &stateful_set(&namespace, sts, &name)).await;
    }
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(client.clone(), &namespace);
    eventually("six services", || async {
        (services.list(&Default::default()).await.ok()?.items.len() == 6).then_some(())
    })
    .await;

    // A resync of a converged cluster writes nothing (which hooks it runs again and which it
    // skips as unchanged: `operator_resync`).
    let (writes, _) = quiet(&decorator).await;
    operator.resync(&decorator);
    let (writes_after, syncs_after) = quiet(&decorator).await;
    assert_eq!(
        writes_after,
        writes,
        "a resync of an unchanged cluster wrote {} time(s)",
        writes_after - writes
    );

    // The script's ConfigMap changes but the script does not: nothing re-runs.
    apply(&client, &hooks("second")).await;
    let (writes_after, syncs_after_edit) = quiet(&decorator).await;
    assert_eq!(
        syncs_after_edit, syncs_after,
        "an unchanged script re-ran hooks"
    );
    assert_eq!(writes_after, writes);

    // ignoreStatusChanges: a status-only change of a target re-runs nothing.
    let sts_api: kube::Api<k8s_openapi::api::apps::v1::StatefulSet> =
        kube::Api::namespaced(client.clone(), &namespace);
    sts_api
        .patch_status(
            "a",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"status": {"replicas": 2, "readyReplicas": 1}})),
        )
        .await
        .unwrap();
    let (writes_after, syncs_after_status) = quiet(&decorator).await;
    assert_eq!(
        syncs_after_status, syncs_after,
        "a status-only change re-ran hooks"
    );
    assert_eq!(writes_after, writes);

    // A spec change does re-run (the control for the two checks above).
    let mut bigger = stateful_set(&namespace, "a", &name);
    bigger["spec"]["replicas"] = json!(3);
    apply(&client, &bigger).await;
    eventually("a seventh service", || async {
        (services.list(&Default::default()).await.ok()?.items.len() == 7).then_some(())
    })
    .await;
    let (writes_final, syncs_final) = quiet(&decorator).await;
    assert!(syncs_final > syncs_after);
    assert!(writes_final > writes);

    // The same for a MapController: outputs and aggregated status in place, a resync writes nothing.
    let mut cluster = Cluster::new().await;
    let group = install_transform(&mut cluster, "quiet-map").await;
    let map_namespace = test_namespace(&client, "quiet-map").await;
    let map = ControllerId::new(metascript::kinds::map::KIND, unique_name("quiet-map"));
    apply(
        &client,
        &transform_controller(&map.name, &group, TRANSFORM_LUA),
    )
    .await;
    render_three(&cluster, &group, &map_namespace).await;
    let (writes, _) = quiet(&map).await;
    operator.resync(&map);
    let (writes_after, _) = quiet(&map).await;
    assert_eq!(
        writes_after,
        writes,
        "a map resync of an unchanged cluster wrote {} time(s)",
        writes_after - writes
    );
}
