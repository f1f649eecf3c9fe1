#!/usr/bin/env bash
# Runs the operator against a local Kubernetes control plane that this script builds and starts,
# on a machine with only Rust and Go (no Docker, no cluster):
#
#   bash hack/run-local.sh [METASCRIPT RUN FLAGS...]      e.g. --scripts-dir scripts/service-per-pod
#
# It builds (or reuses, from ~/.cache/metascript) etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok and kubectl, builds metascript (or reuses target/ when it is newer than
# the sources, or METASCRIPT_BIN_DIR; hack/local-plane.sh), starts the plane (every controller,
# kube-scheduler, 3 simulated Nodes; METASCRIPT_PLANE_ARGS=--lean for a lighter one) with the
# metascript CRDs installed, prints the KUBECONFIG to use from another shell, and runs
# `metascript run` in the foreground. Ctrl-C stops the operator, then the plane, and removes its
# files. With a cluster of your own, run `metascript run` instead.
set -euo pipefail
# Flags such as --scripts-dir name paths from where it was started.
caller=$PWD
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
timeout=${LOCAL_PLANE_TIMEOUT:-180}
work=$(mktemp -d "${TMPDIR:-/tmp}/metascript-local.XXXXXX")
operator_pid=""
# shellcheck source=hack/local-plane.sh
source hack/local-plane.sh

fail() {
    echo "run-local: $*" >&2
    exit 1
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    stop "$operator_pid" "the operator"
    stop "$plane_pid" "the control plane"
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "Building the control plane (cached after the first build)"
build_control_plane
say "Building metascript (${METASCRIPT_PROFILE:-release})"
build_metascript
say "Starting the control plane"
# shellcheck disable=SC2086 # METASCRIPT_PLANE_ARGS is a list of flags
start_control_plane ${METASCRIPT_PLANE_ARGS:-}
# The example's hook script lives in a ConfigMap the fresh plane lacks, so the commands create it
# first; absolute paths, as the other shell may be anywhere.
example=$root/scripts/service-per-pod
config_map_of "$example/controller.rhai.yaml"
cat <<MSG

The plane is up with the metascript CRDs. From another shell, run an example:

  export KUBECONFIG=$KUBECONFIG
  export PATH=$bin:\$PATH
  kubectl create namespace $cm_namespace
  kubectl -n $cm_namespace create configmap $cm_name --from-file=$cm_key=$example/$cm_key
  kubectl apply -f $example/controller.rhai.yaml
  kubectl get decoratorcontrollers         # LOADED True

MSG
# Staged rollouts keep snapshots in the operator's namespace, which a fresh plane lacks; the
# default namespace always exists (a --snapshot-namespace flag still wins).
export METASCRIPT_SNAPSHOT_NAMESPACE="${METASCRIPT_SNAPSHOT_NAMESPACE:-default}"
say "Running the operator: metascript run $* (Ctrl-C stops it and the plane)"
(cd "$caller" && exec "$metascript" run --kubeconfig "$KUBECONFIG" "$@" </dev/null) &
operator_pid=$!
# In the background and waited for, so Ctrl-C reaches the trap at once.
wait "$operator_pid"
