//! The second shared plane: a cluster (every kube-controller-manager controller, kube-scheduler,
//! kwok simulating a few Nodes), for the tests whose subject is workloads that run, with an
//! operator of its own.
//!
//! The other tests keep the lean plane: it starts quicker, and many of them stand in for a
//! workload controller themselves (they write a StatefulSet's status, count the Events on an
//! object, list every ConfigMap of a namespace), which a cluster's controllers would change
//! under them. This plane starts on first use, so a run that selects none of its tests does
//! not pay for it.

use super::operator::{TestOperator, start};
use super::start_shared;
use metascript::testing::{ControlPlane, Flavor};
use std::sync::OnceLock;

static CLUSTER: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
static OPERATOR: OnceLock<Result<TestOperator, String>> = OnceLock::new();

/// The cluster plane shared by the workload tests of this binary, started on first call.
///
/// Panics (failing the test) with instructions if it cannot start.
pub async fn cluster() -> &'static ControlPlane {
    match CLUSTER.get_or_init(|| start_shared(Flavor::cluster(), stop_cluster)) {
        Ok(plane) => plane,
        Err(message) => panic!("{message}"),
    }
}

/// An admin client for the cluster plane, bound to the calling test's runtime (see
/// [`super::client`]).
pub async fn cluster_client() -> kube::Client {
    cluster()
        .await
        .client()
        .await
        .expect("building a client for the shared cluster plane")
}

/// The operator serving the cluster plane, with the metascript CRDs installed there.
pub async fn cluster_operator() -> &'static TestOperator {
    let kubeconfig = cluster().await.kubeconfig();
    match OPERATOR.get_or_init(|| start(kubeconfig, "-cluster")) {
        Ok(operator) => operator,
        Err(message) => panic!("{message}"),
    }
}

extern "C" fn stop_cluster() {
    if let Some(Ok(plane)) = CLUSTER.get() {
        plane.stop();
    }
}
