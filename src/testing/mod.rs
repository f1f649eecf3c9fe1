//! Support for tests, benchmarks and the demo that need a real Kubernetes API.
//!
//! [`ControlPlane`] starts etcd, kube-apiserver and kube-controller-manager on loopback from
//! binaries built by `hack/control-plane/build.sh`, and for a [`Flavor::Cluster`] plane also
//! kube-scheduler and kwok with simulated Nodes ([`nodes`]); [`HookServer`] serves webhook hooks
//! on loopback. Nothing here is used by the operator itself.

mod control_plane;
mod crds;
pub mod nodes;
mod webhook;

pub use control_plane::{
    BIN_DIR_ENV, ControlPlane, ControlPlaneError, Flavor, default_bin_dir, kubectl,
};
pub use crds::{InstallCrdsError, install_crds, install_these_crds};
pub use webhook::{
    Call, HookServer, HookServerError, Reply, SERVICE_PER_POD_MARKER, service_per_pod,
    service_per_pod_target,
};
