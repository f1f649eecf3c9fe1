//! The service-per-pod example over a StatefulSet whose Pods really run (the shared plane
//! schedules them onto simulated Nodes and makes them Ready): every Pod gets its own Service,
//! the Service has exactly that Pod behind it, and the Services follow the StatefulSet as it is
//! scaled up and down. And Metacontroller's catset, whose Pods admission gives volumes and
//! tolerations of its own, rolled out without recreating them.

use crate::support::cluster::Cluster;
use crate::support::manifests::{inline_sync, service_per_pod};
use crate::support::operator::{apply, quiet_of};
use crate::support::watch::watch_until;
use crate::support::workloads::{cluster_client, cluster_operator};
use crate::support::{test_namespace, unique_name};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::DeleteParams;
use metascript::runtime::ControllerId;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

const SYNC_RHAI: &str = include_str!("../../scripts/service-per-pod/sync.rhai");

/// The example's controller with its script inline, selecting only StatefulSets labelled for it.
fn controller(name: &str) -> Value {
    let mut controller = service_per_pod(name, inline_sync("rhai", SYNC_RHAI));
    // Hour-long resyncs: whatever the hooks run again in these tests, a watch event caused.
    controller["spec"]["resyncPeriodSeconds"] = json!(3600);
    controller
}

fn stateful_set(namespace: &str, controller: &str, replicas: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": "web", "namespace": namespace,
            "labels": {"test-controller": controller},
            "annotations": {
                "service-per-pod-label": "statefulset.kubernetes.io/pod-name",
                "service-per-pod-ports": "80:8080"
            }
        },
        "spec": {
            "replicas": replicas,
            "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "example.invalid/web", "ports": [{"containerPort": 8080}]}]}
            }
        }
    })
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn names(n: usize) -> BTreeSet<String> {
    (0..n).map(|i| format!("web-{i}")).collect()
}

/// Waits until the StatefulSet runs exactly `replicas` Pods, all Ready, the operator has made
/// exactly their Services, and each Service has exactly its own Pod (same name, same IP) as a
/// ready endpoint, nothing else.
async fn every_pod_behind_its_service(
    client: &kube::Client,
    namespace: &str,
    controller: &str,
    replicas: usize,
) {
    let expected = names(replicas);
    let pods = watch_until(
        Api::<Pod>::namespaced(client.clone(), namespace),
        Some("app=web"),
        &format!("{replicas} Ready Pods"),
        |pods| {
            let ready: BTreeSet<String> = pods
                .iter()
                .filter(|p| ready(p))
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            pods.len() == replicas && ready == expected
        },
    )
    .await;
    let ips: BTreeMap<String, String> = pods
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap();
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
            (
                name.clone(),
                ip.unwrap_or_else(|| panic!("{name} has an IP")),
            )
        })
        .collect();

    let services = watch_until(
        Api::<Service>::namespaced(client.clone(), namespace),
        Some(&format!("metascript.dev/decorator={controller}")),
        &format!("the Services of {replicas} Pods"),
        |services| {
            let names: BTreeSet<String> = services
                .iter()
                .filter_map(|s| s.metadata.name.clone())
                .collect();
            names == expected
        },
    )
    .await;
    for service in &services {
        let name = service.metadata.name.as_deref().unwrap();
        let selector = service.spec.as_ref().and_then(|s| s.selector.clone());
        assert_eq!(
            selector,
            Some(BTreeMap::from([(
                "statefulset.kubernetes.io/pod-name".to_owned(),
                name.to_owned()
            )])),
            "{name} selects its own Pod"
        );
    }

    // What the EndpointSlice controller makes of the Services: the proof that each selects a
    // Pod that exists, and only that one.
    watch_until(
        Api::<EndpointSlice>::namespaced(client.clone(), namespace),
        None,
        "each Service with its own Pod as its only endpoint",
        |slices| {
            let mut endpoints: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
            for slice in slices {
                let Some(service) = slice
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("kubernetes.io/service-name"))
                else {
                    continue;
                };
                let entry = endpoints.entry(service.clone()).or_default();
                for endpoint in slice.endpoints.iter().flatten() {
                    let ready = endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(true);
                    let pod = endpoint.target_ref.as_ref().and_then(|r| r.name.clone());
                    if let (true, Some(pod)) = (ready, pod) {
                        for address in &endpoint.addresses {
                            entry.insert((pod.clone(), address.clone()));
                        }
                    }
                }
            }
            ips.iter().all(|(pod, ip)| {
                endpoints.get(pod) == Some(&BTreeSet::from([(pod.clone(), ip.clone())]))
            })
        },
    )
    .await;
}

#[tokio::test]
async fn service_per_pod_gives_every_pod_of_a_scaled_statefulset_its_service() {
    let client = cluster_client().await;
    cluster_operator().await;
    let namespace = test_namespace(&client, "spp-workload").await;
    let name = unique_name("spp-workload");
    apply(&client, &controller(&name)).await;

    apply(&client, &stateful_set(&namespace, &name, 2)).await;
    every_pod_behind_its_service(&client, &namespace, &name, 2).await;

    // Scaled up: the new Pods come up one after another and each gets its Service.
    apply(&client, &stateful_set(&namespace, &name, 4)).await;
    every_pod_behind_its_service(&client, &namespace, &name, 4).await;

    // Scaled down: the Pods and the Services of the removed ordinals go, the rest stay served.
    apply(&client, &stateful_set(&namespace, &name, 1)).await;
    every_pod_behind_its_service(&client, &namespace, &name, 1).await;
}

/// What the lean plane's tests fake by writing a StatefulSet's status, for real: a Pod lost (as
/// with a failed Node) is replaced by the StatefulSet controller, whose status goes through
/// not-ready and back. That is all that changes, so the operator writes nothing; with
/// `ignoreStatusChanges` it does not even run the hook.
#[tokio::test]
async fn a_replaced_pod_changes_only_status_and_nothing_is_written() {
    let client = cluster_client().await;
    let operator = &cluster_operator().await.operator;
    for ignore_status in [false, true] {
        let namespace = test_namespace(&client, "spp-churn").await;
        let name = unique_name("spp-churn");
        let id = ControllerId::new(metascript::kinds::decorator::KIND, &name);
        let mut decorator = controller(&name);
        decorator["spec"]["resources"][0]["ignoreStatusChanges"] = json!(ignore_status);
        apply(&client, &decorator).await;
        apply(&client, &stateful_set(&namespace, &name, 3)).await;
        every_pod_behind_its_service(&client, &namespace, &name, 3).await;
        let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
        let all_ready = |sets: &[StatefulSet]| {
            sets.iter().all(|s| {
                s.status.as_ref().and_then(|s| s.ready_replicas) == Some(3)
                    && s.status.as_ref().and_then(|s| s.available_replicas) == Some(3)
            })
        };
        watch_until(statefulsets.clone(), None, "3 ready replicas", all_ready).await;
        let (writes, syncs) = quiet_of(operator, &id).await;

        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let lost = pods.get("web-1").await.expect("web-1 runs");
        pods.delete("web-1", &DeleteParams::default())
            .await
            .expect("deleting web-1");
        let old_uid = lost.metadata.uid.clone();
        watch_until(pods, Some("app=web"), "web-1 replaced and Ready", |pods| {
            pods.iter().any(|p| {
                p.metadata.name.as_deref() == Some("web-1") && p.metadata.uid != old_uid && ready(p)
            })
        })
        .await;
        watch_until(statefulsets, None, "3 ready replicas again", all_ready).await;
        every_pod_behind_its_service(&client, &namespace, &name, 3).await;

        let (writes_after, syncs_after) = quiet_of(operator, &id).await;
        assert_eq!(
            writes_after,
            writes,
            "ignoreStatusChanges {ignore_status}: a replaced Pod caused {} write(s)",
            writes_after - writes
        );
        if ignore_status {
            assert_eq!(
                syncs_after, syncs,
                "ignoreStatusChanges: the StatefulSet's status changes re-ran the hook"
            );
        }
    }
}

const CATSET_CRDS: &str = include_str!("../../scripts/catset/crds.yaml");
const CATSET_RHAI: &str = include_str!("../../scripts/catset/sync.rhai");

/// Metacontroller's examples/catset, whose Pod template has a downward API volume, on Pods that
/// admission completes as in any cluster: a `kube-api-access-*` volume and mount appended after
/// the hook's, default tolerations. Under `RollingRecreate` a Pod that "differs" is deleted, and
/// comparing lists by length made every Pod differ: each was deleted as soon as it was created
/// and none ever became Ready. Now the Pods come up one after another, Ready, and stay.
#[tokio::test]
async fn catset_pods_that_admission_adds_volumes_to_are_not_recreated() {
    let client = cluster_client().await;
    let operator = &cluster_operator().await.operator;
    let mut cluster = Cluster::of(client.clone());
    let group = format!("{}.example.com", unique_name("catset-admitted"));
    cluster.install(CATSET_CRDS, "CatSet", &group).await;
    let namespace = test_namespace(&client, "catset-admitted").await;
    let name = unique_name("catset-admitted");
    apply(
        &client,
        &json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": name},
            "spec": {
                "parentResource": {"apiVersion": format!("{group}/v1"), "resource": "catsets",
                                   "revisionHistory": {"fieldPaths": ["spec.template"]}},
                "childResources": [{"apiVersion": "v1", "resource": "pods", "updateStrategy": {
                    "method": "RollingRecreate",
                    "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}
                }}],
                "resyncPeriodSeconds": 3600,
                "hooks": {"sync": {"script": {"language": "rhai", "inline": CATSET_RHAI}}}
            }
        }),
    )
    .await;
    let catset = json!({
        "apiVersion": format!("{group}/v1"), "kind": "CatSet",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 2, "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "volumes": [{"name": "pod-info", "downwardAPI": {"items": [
                        {"path": "pod_name", "fieldRef": {"fieldPath": "metadata.name"}}
                    ]}}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "nginx", "image": "example.invalid/nginx",
                                    "volumeMounts": [{"name": "pod-info", "mountPath": "/info"}]}]
                }
            }
        }
    });
    cluster.apply(&catset).await;
    cluster
        .wait_for(&catset, "2 Pods ready", |c| {
            c["status"]["readyReplicas"] == 2 && c["status"]["replicas"] == 2
        })
        .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let uids = || async {
        let list = pods.list(&Default::default()).await.expect("listing Pods");
        list.items
            .iter()
            .map(|p| (p.metadata.name.clone(), p.metadata.uid.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    let before = uids().await;
    let admitted = pods.get("web-0").await.expect("web-0");
    let volumes = admitted.spec.as_ref().and_then(|s| s.volumes.as_ref());
    assert!(
        volumes.is_some_and(|v| v.len() == 2),
        "admission added the token volume after the hook's: {volumes:?}"
    );
    let id = ControllerId::new(metascript::kinds::composite::KIND, &name);
    quiet_of(operator, &id).await;
    assert_eq!(uids().await, before, "no Pod was recreated");
}
