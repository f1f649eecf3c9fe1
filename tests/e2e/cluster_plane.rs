//! The shared cluster plane behaves like a cluster: every kind of workload gets Pods that are
//! scheduled onto the simulated Nodes, Running and Ready; Jobs complete; Services get their Pods
//! as endpoints; namespaces get their `default` ServiceAccount. The operator's examples rely on
//! all of it.

use crate::support::test_namespace;
use crate::support::watch::watch_until;
use crate::support::workloads::{cluster, cluster_client};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams};
use metascript::testing::nodes::FAKE_NODE_LABEL;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Server-side applies a typed object given as JSON.
async fn apply<K>(api: &Api<K>, object: Value) -> K
where
    K: kube::Resource + Clone + Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    api.patch(
        &name,
        &PatchParams::apply("cluster-plane-test").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {name}: {e}"))
}

fn pod_template(app: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": "example.invalid/app"}]}
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

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Waits until exactly `count` Pods labelled `app=<app>` are Ready, and returns them.
async fn ready_pods(pods: &Api<Pod>, app: &str, count: usize) -> Vec<Pod> {
    watch_until(
        pods.clone(),
        Some(&format!("app={app}")),
        &format!("{count} Ready Pods of {app}"),
        |pods| pods.len() == count && pods.iter().all(ready),
    )
    .await
}

#[tokio::test]
async fn workloads_get_pods_that_are_scheduled_running_and_ready() {
    let client = cluster_client().await;
    let nodes: BTreeSet<String> = cluster().await.node_names().into_iter().collect();
    assert!(!nodes.is_empty(), "the cluster plane simulates Nodes");
    let namespace = test_namespace(&client, "workloads").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);

    // The simulated Nodes: Ready, untainted, labelled for selection.
    let node_list = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("listing Nodes");
    let fake: BTreeSet<String> = node_list
        .items
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(FAKE_NODE_LABEL.0))
                .is_some_and(|v| v == FAKE_NODE_LABEL.1)
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    assert_eq!(fake, nodes);

    // A Deployment: its ReplicaSet's Pods run and it reports them available.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    apply(
        &deployments,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": pod_template("web")}
        }),
    )
    .await;
    let web = ready_pods(&pods, "web", 3).await;
    for pod in &web {
        let spec = pod.spec.as_ref().unwrap();
        let node = spec.node_name.as_deref().expect("scheduled");
        assert!(nodes.contains(node), "{node} is a simulated Node");
        assert_eq!(phase(pod), "Running");
        // The ServiceAccount admission plugin is on, and the namespace has its account.
        assert_eq!(spec.service_account_name.as_deref(), Some("default"));
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
        assert!(ip.is_some_and(|ip| ip.starts_with("10.")), "{ip:?}");
    }
    let ips: BTreeSet<_> = web
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    assert_eq!(ips.len(), 3, "every Pod has its own IP");
    Api::<ServiceAccount>::namespaced(client.clone(), &namespace)
        .get("default")
        .await
        .expect("the serviceaccount controller created `default`");
    watch_until(deployments.clone(), None, "the Deployment available", |d| {
        d.iter().any(|d| {
            d.status
                .as_ref()
                .is_some_and(|s| s.available_replicas == Some(3))
        })
    })
    .await;

    // A Service selecting them gets them as ready endpoints.
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    apply(
        &services,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}
        }),
    )
    .await;
    watch_until(
        Api::<EndpointSlice>::namespaced(client.clone(), &namespace),
        Some("kubernetes.io/service-name=web"),
        "the web Service's endpoints",
        |slices| {
            let ready: BTreeSet<String> = slices
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .flat_map(|e| e.addresses.clone())
                .collect();
            ready == ips
        },
    )
    .await;

    // A DaemonSet: one Pod on every Node.
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), &namespace);
    apply(
        &daemonsets,
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": pod_template("agent")}
        }),
    )
    .await;
    let agents = ready_pods(&pods, "agent", nodes.len()).await;
    let placed: BTreeSet<String> = agents
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(placed, nodes, "one agent per Node");

    // A StatefulSet: its Pods come up in order, with their stable names.
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    apply(
        &statefulsets,
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": namespace},
            "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": pod_template("db")}
        }),
    )
    .await;
    let db = ready_pods(&pods, "db", 2).await;
    let names: Vec<_> = db.iter().filter_map(|p| p.metadata.name.clone()).collect();
    assert_eq!(names, ["db-0", "db-1"]);

    // A Job: its Pods succeed and it completes.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &namespace);
    let mut job_template = pod_template("batch");
    job_template["spec"]["restartPolicy"] = json!("Never");
    apply(
        &jobs,
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "batch", "namespace": namespace},
            "spec": {"completions": 2, "parallelism": 2, "template": job_template}
        }),
    )
    .await;
    let done = watch_until(jobs, None, "the Job complete", |jobs| {
        jobs.iter().any(|j| {
            j.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Complete" && c.status == "True")
                })
        })
    })
    .await;
    assert_eq!(done[0].status.as_ref().unwrap().succeeded, Some(2));
    let finished = pods
        .list(&kube::api::ListParams::default().labels("app=batch"))
        .await
        .expect("listing the Job's Pods");
    assert_eq!(finished.items.len(), 2);
    assert!(finished.items.iter().all(|p| phase(p) == "Succeeded"));
}

/// Deleting a workload deletes its Pods, which kwok lets go of at once (no kubelet to wait for),
/// so namespace teardown and garbage collection are as quick as on the lean plane.
#[tokio::test]
async fn deleting_a_workload_deletes_its_pods() {
    let client = cluster_client().await;
    let namespace = test_namespace(&client, "workload-delete").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    apply(
        &deployments,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "gone", "namespace": namespace},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "gone"}}, "template": pod_template("gone")}
        }),
    )
    .await;
    ready_pods(&pods, "gone", 2).await;
    deployments
        .delete("gone", &kube::api::DeleteParams::foreground())
        .await
        .expect("deleting the Deployment");
    watch_until(pods, Some("app=gone"), "the Pods deleted", |pods| {
        pods.is_empty()
    })
    .await;
}
