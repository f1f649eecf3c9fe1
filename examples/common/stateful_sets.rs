//! The service-per-pod example's workload, as every benchmark of it builds it: StatefulSets
//! that ask for a Service per Pod (targets, `metascript::testing::service_per_pod_target`) or
//! do not (a yardstick's), created by a plain client a few at a time.

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, PostParams};
use metascript::testing::service_per_pod_target;
use serde_json::json;
use std::time::{Duration, Instant};

/// Requests the plain client keeps in flight when creating StatefulSets.
pub const CREATE_CONCURRENCY: usize = 16;

/// A StatefulSet of `replicas` Pods; a target of the example's controller only when `target`
/// (a yardstick's are not, so no controller acts on them).
pub fn stateful_set(namespace: &str, name: &str, replicas: usize, target: bool) -> StatefulSet {
    let mut sts = service_per_pod_target(namespace, name, replicas as i64, "80:8080");
    if !target {
        sts["metadata"]["annotations"] = json!({});
    }
    serde_json::from_value(sts).expect("a valid StatefulSet")
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
