//! The service-per-pod example's workload, as every benchmark of it builds it: StatefulSets
//! that ask for a Service per Pod (targets) or do not (a yardstick's), created by a plain
//! client a few at a time.

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

/// Requests the plain client keeps in flight when creating StatefulSets.
pub const CREATE_CONCURRENCY: usize = 16;

/// A StatefulSet of `replicas` Pods; a target of the example's controller only when `target`
/// (a yardstick's are not, so no controller acts on them).
pub fn stateful_set(namespace: &str, name: &str, replicas: usize, target: bool) -> StatefulSet {
    let annotations = if target {
        json!({
            "service-per-pod-label": "statefulset.kubernetes.io/pod-name",
            "service-per-pod-ports": "80:8080"
        })
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                // No kubelet runs containers (kwok, where there are Nodes, pulls nothing).
                "spec": {"containers": [{"name": "web", "image": "example.invalid/web", "ports": [{"containerPort": 8080}]}]}
            }
        }
    }))
    .expect("a valid StatefulSet")
}

/// Creates `n` StatefulSets `<prefix>-<i>` of `replicas` Pods, [`CREATE_CONCURRENCY`] requests
/// in flight; returns how long that took.
pub async fn create_stateful_sets(
    client: &kube::Client,
    namespace: &str,
    prefix: &str,
    n: usize,
    replicas: usize,
    targets: bool,
) -> anyhow::Result<Duration> {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let sts = stateful_set(namespace, &format!("{prefix}-{i}"), replicas, targets);
                api.create(&PostParams::default(), &sts).await
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(started.elapsed())
}
