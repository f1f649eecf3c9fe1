#!/usr/bin/env bash
# The metascript demo, from a clean clone (needs Rust and Go; no Docker, no cluster):
#
#   bash hack/demo.sh
#
# 1. builds the local control plane's binaries (cached after the first, ~8 minute, build) and
#    metascript;
# 2. starts a control plane on loopback that behaves like a cluster: etcd, kube-apiserver, every
#    kube-controller-manager controller, kube-scheduler, and kwok simulating 3 Nodes, so the
#    StatefulSet's Pods are scheduled, Running and Ready;
# 3. installs the CRDs and runs the operator (`metascript run`, log in the work directory);
# 4. applies the service-per-pod example (script in a ConfigMap, DecoratorController, one
#    StatefulSet) and shows the Services the script created, the Pods behind them (each the
#    only endpoint of its own Service) and the controller's status;
# 5. edits the script in the ConfigMap and shows the change reach the StatefulSet, timed;
# 6. scales the StatefulSet down and shows the surplus Services go with their Pods;
# 7. stops everything it started, whatever happened (trap on EXIT).
#
# Non-interactive: exits 0 when every step worked, non-zero with the failing step otherwise.
# DEMO_KEEP=1 keeps the work directory (operator and control-plane logs) afterwards.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

# How long any one wait may take before the demo gives up; generous for a busy 2-core machine.
timeout=${DEMO_TIMEOUT:-120}

work=$(mktemp -d "${TMPDIR:-/tmp}/metascript-demo.XXXXXX")
operator_pid=""
step="starting"
# shellcheck source=hack/local-plane.sh
source hack/local-plane.sh

run() { # echo a command, then run it
    printf '$ %s\n' "$*"
    "$@"
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [[ $status -ne 0 ]]; then
        echo >&2
        echo "demo: FAILED while $step (exit status $status)" >&2
        if [[ -s "$work/operator.log" ]]; then
            echo "demo: last lines of the operator log:" >&2
            tail -n 20 "$work/operator.log" >&2
        fi
        if [[ -s "$work/control-plane.log" ]]; then
            echo "demo: last lines of the control-plane output:" >&2
            tail -n 20 "$work/control-plane.log" >&2
        fi
    fi
    # The operator first, so it does not log a burst of errors about the vanished API.
    stop "$operator_pid" "the operator"
    # The plane's example kills etcd, the apiserver and the controller-manager and removes their
    # directory on SIGTERM; they also die with it if it is SIGKILLed (PR_SET_PDEATHSIG).
    stop "$plane_pid" "the control plane"
    if [[ "${DEMO_KEEP:-0}" == 1 ]]; then
        echo "demo: logs kept in $work" >&2
    else
        rm -rf "$work"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "demo: $*" >&2
    exit 1
}

# Polls `$@` every 0.2 s until it succeeds; fails with `what` after $timeout seconds.
wait_for() {
    local what=$1
    shift
    local deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "timed out after ${timeout}s waiting for $what"
        if [[ -n "$operator_pid" ]] && ! kill -0 "$operator_pid" 2>/dev/null; then
            fail "the operator exited while waiting for $what"
        fi
        sleep 0.2
    done
}

now_ms() { date +%s%3N; }

step="building the control-plane binaries"
say "Building the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, kubectl; cached)"
build_control_plane
[[ -x "$bin/kubectl" ]] || fail "no kubectl in $bin after hack/control-plane/build.sh"
kubectl() { "$bin/kubectl" "$@"; }

step="building metascript"
say "Building metascript (${METASCRIPT_PROFILE:-release})"
build_metascript

step="starting the control plane"
say "Starting a local control plane: every controller, kube-scheduler, 3 simulated Nodes, the metascript CRDs"
start_control_plane
echo "KUBECONFIG=$KUBECONFIG"

step="starting the operator"
say "Running the operator: metascript run (log: operator.log)"
# Plain text without colour codes, so the log reads well and can be searched.
# Snapshots of staged rollouts go to the default namespace: a fresh plane has no
# metascript-system, and a snapshot that cannot be saved makes every rollout unsafe.
NO_COLOR=1 "$metascript" run --kubeconfig "$KUBECONFIG" --status-interval 1 \
    --snapshot-namespace default \
    </dev/null >"$work/operator.log" 2>&1 &
operator_pid=$!
wait_for "the operator to start" grep -q "operator started" "$work/operator.log"
grep -m1 "operator started" "$work/operator.log"

# The controller names the ConfigMap that holds its script; create exactly that one.
step="reading the example controller"
example=scripts/service-per-pod
controller="$example/controller.rhai.yaml"
config_map_of "$controller"
controller_name=$(sed -nE 's/^  name: *([^ ]+)$/\1/p' "$controller" | head -n 1)
[[ -n "$controller_name" ]] || fail "could not read the controller's name from $controller"

step="applying the example"
say "The service-per-pod example: script in ConfigMap $cm_namespace/$cm_name, key $cm_key"
kubectl create namespace "$cm_namespace" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# create --dry-run | apply, here and for the edit below, so that kubectl owns the ConfigMap
# the same way both times.
echo "\$ kubectl create configmap $cm_name -n $cm_namespace --from-file=$cm_key=$example/$cm_key --dry-run=client -o yaml | kubectl apply -f -"
kubectl create configmap "$cm_name" -n "$cm_namespace" --from-file="$cm_key=$example/$cm_key" \
    --dry-run=client -o yaml | kubectl apply -f -
run kubectl apply -f "$controller"
cat >"$work/web.yaml" <<'EOF'
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  namespace: default
  annotations:
    service-per-pod-label: statefulset.kubernetes.io/pod-name
    service-per-pod-ports: "80:8080,443:8443"
spec:
  replicas: 3
  serviceName: web
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - {name: web, image: nginx:1.27}
EOF
echo "A StatefulSet asking for a Service per pod (3 replicas, ports 80:8080 and 443:8443):"
sed -n '/annotations:/,/^spec:/p' "$work/web.yaml" | sed '$d'
run kubectl apply -f "$work/web.yaml"

step="waiting for the Services"
started=$(now_ms)
for i in 0 1 2; do
    wait_for "Service web-$i" kubectl get service "web-$i" -n default
done
wait_for "the marker label on the StatefulSet" \
    bash -c '[[ $("$0" get statefulset web -n default -o jsonpath="{.metadata.labels.metascript\.dev/service-per-pod}") == true ]]' "$bin/kubectl"
echo "(created within $(($(now_ms) - started)) ms of the apply)"

say "What the script created: one Service per pod, owned by the StatefulSet"
run kubectl get services -n default -l "metascript.dev/decorator=$controller_name" \
    -o custom-columns='NAME:.metadata.name,SELECTOR:.spec.selector,PORTS:.spec.ports[*].port,TARGET-PORTS:.spec.ports[*].targetPort,OWNER:.metadata.ownerReferences[0].kind,OWNER-NAME:.metadata.ownerReferences[0].name,CONTROLLER:.metadata.ownerReferences[0].controller'
run kubectl get statefulset web -n default --show-labels

step="waiting for the Pods behind the Services"
# The Pods come up one after another (a StatefulSet's default ordering); each Service has the
# Pod it selects as its endpoint once that Pod is Ready. The EndpointSlice controller says so.
endpoint_of() { # service: "<pod> <ip> <ready>" of its endpoints
    kubectl get endpointslices -n default -l "kubernetes.io/service-name=$1" \
        -o jsonpath='{range .items[*].endpoints[*]}{.targetRef.name} {.addresses[0]} {.conditions.ready}{"\n"}{end}'
}
served() { # pod: its Service's only endpoint is this Pod, at its IP, ready
    local ip
    ip=$(kubectl get pod "$1" -n default -o jsonpath='{.status.podIP}') && [[ -n "$ip" ]] &&
        [[ "$(endpoint_of "$1")" == "$1 $ip true" ]]
}
started=$(now_ms)
for i in 0 1 2; do
    wait_for "Pod web-$i behind Service web-$i" served "web-$i"
done
echo "(every Pod Ready behind its Service within $(($(now_ms) - started)) ms of the Services)"
say "The Pods behind them: scheduled onto simulated Nodes, Running, Ready, each its Service's endpoint"
run kubectl get pods -n default -l app=web -o wide
run kubectl get endpointslices -n default -l 'kubernetes.io/service-name in (web-0,web-1,web-2)' \
    -o custom-columns='SERVICE:.metadata.labels.kubernetes\.io/service-name,POD:.endpoints[*].targetRef.name,ADDRESS:.endpoints[*].addresses[0],READY:.endpoints[*].conditions.ready'
run kubectl get statefulset web -n default

step="waiting for the controller status"
# Status is written every --status-interval; wait until it counts the target as synced.
wait_for "the controller status" \
    bash -c '[[ $("$0" get dec "$1" -o jsonpath="{.status.synced}") == 1 ]]' "$bin/kubectl" "$controller_name"
run kubectl get dec

step="editing the script"
say "Editing the script in the ConfigMap: the marker label becomes \"edited\""
case "$cm_key" in
*.rhai) from='"metascript.dev/service-per-pod": "true"' to='"metascript.dev/service-per-pod": "edited"' ;;
*.lua) from='[MARKER] = "true"' to='[MARKER] = "edited"' ;;
*) fail "unexpected script key $cm_key" ;;
esac
grep -qF "$from" "$example/$cm_key" || fail "$example/$cm_key no longer contains $from"
mkdir -p "$work/edited"
# A literal replacement (no regex): the text holds dots, brackets and quotes.
FROM="$from" TO="$to" perl -pe 's/\Q$ENV{FROM}\E/$ENV{TO}/' "$example/$cm_key" >"$work/edited/$cm_key"
diff -u "$example/$cm_key" "$work/edited/$cm_key" | sed -n '3,$p' | grep -E '^[-+]' || true
started=$(now_ms)
echo "\$ kubectl create configmap $cm_name -n $cm_namespace --from-file=$cm_key=edited/$cm_key --dry-run=client -o yaml | kubectl apply -f -"
kubectl create configmap "$cm_name" -n "$cm_namespace" --from-file="$cm_key=$work/edited/$cm_key" \
    --dry-run=client -o yaml | kubectl apply -f -
step="waiting for the edited script to take effect"
wait_for "the edited label" \
    bash -c '[[ $("$0" get statefulset web -n default -o jsonpath="{.metadata.labels.metascript\.dev/service-per-pod}") == edited ]]' "$bin/kubectl"
echo "The StatefulSet carries the new label $(($(now_ms) - started)) ms after the ConfigMap edit, without a restart:"
run kubectl get statefulset web -n default --show-labels
echo "The operator's log of the reload:"
grep -F "controller loaded" "$work/operator.log" | tail -n 1 || true

step="scaling down"
say "Scaling the StatefulSet to 1 replica: the Services of the pods that no longer exist go"
run kubectl scale statefulset web -n default --replicas=1
started=$(now_ms)
wait_for "Services web-1 and web-2 to be deleted" \
    bash -c '! "$0" get service web-1 web-2 -n default -o name 2>/dev/null | grep -q .' "$bin/kubectl"
echo "(Services deleted within $(($(now_ms) - started)) ms)"
wait_for "Pods web-1 and web-2 to be deleted" \
    bash -c '! "$0" get pod web-1 web-2 -n default -o name 2>/dev/null | grep -q .' "$bin/kubectl"
echo "(their Pods gone within $(($(now_ms) - started)) ms: the StatefulSet removes them one at a time)"
run kubectl get services -n default -l "metascript.dev/decorator=$controller_name"
run kubectl get pods -n default -l app=web -o wide

step="checking the operator log"
if grep -E '^\S+ +(WARN|ERROR) ' "$work/operator.log" >/dev/null; then
    echo "demo: the operator logged warnings or errors:" >&2
    grep -E '^\S+ +(WARN|ERROR) ' "$work/operator.log" >&2
    fail "see above"
fi

step="stopping"
say "Done: stopping the operator and the control plane"
