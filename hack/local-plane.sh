# Sourced by hack/demo.sh and hack/run-local.sh: build and start a local control plane with the
# metascript CRDs installed, on a machine with only Rust and Go. The caller sets `work` (a
# private directory for the kubeconfig and logs) and `timeout` (seconds any one wait may take),
# and defines `fail MESSAGE` (exits).
#
# METASCRIPT_PROFILE=release (default) or dev chooses the cargo profile metascript is built with;
# binaries of that profile newer than every source file are used without running cargo;
# METASCRIPT_BIN_DIR=DIR uses DIR/metascript and DIR/examples/control-plane as they are instead;
# METASCRIPT_BUILD_KUBECTL=0 skips building kubectl (the operator does not need it; you do, to
# talk to the plane).

root=${root:-$PWD}
plane_pid=""

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# Stops process `pid` (named `name` in messages): SIGTERM, up to 20 s, then SIGKILL.
stop() {
    local pid=$1 name=$2
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "$name did not stop on SIGTERM; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# Builds (or reuses from ~/.cache/metascript) etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok and kubectl; sets `bin` and exports METASCRIPT_CONTROL_PLANE_BIN.
build_control_plane() {
    command -v go >/dev/null || fail "go not found: the control plane is built from source (https://go.dev/dl/)"
    if ! bin=$(METASCRIPT_BUILD_KUBECTL=${METASCRIPT_BUILD_KUBECTL:-1} hack/control-plane/build.sh | tail -n 1); then
        fail "hack/control-plane/build.sh failed"
    fi
    export METASCRIPT_CONTROL_PLANE_BIN="$bin"
}

# Whether every binary given exists and is newer than every file it is built from. cargo would
# also rebuild for a new git commit (build.rs stamps it into --version), which in the release
# profile costs minutes on a small machine for no change in behaviour.
binaries_current() {
    local binary
    for binary in "$@"; do
        [[ -x "$binary" ]] || return 1
        [[ -z "$(cd "$root" && find src examples build.rs Cargo.toml Cargo.lock \
            -newer "$binary" -print -quit 2>/dev/null)" ]] || return 1
    done
}

# Builds the metascript binary and the control-plane example, unless they are current (or
# METASCRIPT_BIN_DIR names them); sets `metascript` and `plane`.
build_metascript() {
    if [[ -n "${METASCRIPT_BIN_DIR:-}" ]]; then
        metascript="$METASCRIPT_BIN_DIR/metascript"
        plane="$METASCRIPT_BIN_DIR/examples/control-plane"
        [[ -x "$metascript" && -x "$plane" ]] ||
            fail "METASCRIPT_BIN_DIR=$METASCRIPT_BIN_DIR needs metascript and examples/control-plane (cargo build --bin metascript --example control-plane)"
        return
    fi
    local profile=${METASCRIPT_PROFILE:-release} dir
    case $profile in dev) dir=debug ;; *) dir=$profile ;; esac
    local target="${CARGO_TARGET_DIR:-$root/target}/$dir"
    metascript="$target/metascript"
    plane="$target/examples/control-plane"
    if binaries_current "$metascript" "$plane"; then
        echo "reusing $metascript and $plane (newer than every source file)"
        return
    fi
    command -v cargo >/dev/null || fail "cargo not found: install Rust (https://rustup.rs)"
    cargo build --profile "$profile" --quiet --bin metascript --example control-plane
}

# The ConfigMap the first `configMapRef` of a controller manifest names: sets `cm_namespace`,
# `cm_name` and `cm_key`, so what creates or prints it follows the manifest.
config_map_of() {
    local controller=$1 ref
    ref=$(grep -m1 -o 'configMapRef: *{[^}]*}' "$controller") ||
        fail "no configMapRef in $controller"
    field() { sed -E "s/.*[{ ,]$1: *([^,} ]+).*/\1/" <<<"$ref"; }
    cm_namespace=$(field namespace)
    cm_name=$(field name)
    cm_key=$(field key)
    [[ -n "$cm_namespace" && -n "$cm_name" && -n "$cm_key" ]] ||
        fail "could not read the ConfigMap's namespace, name and key from $controller"
}

# Starts the plane (arguments: the control-plane example's, e.g. --lean) with the CRDs
# installed, in the background; waits until it is ready and exports KUBECONFIG.
start_control_plane() {
    export KUBECONFIG="$work/kubeconfig"
    "$plane" --install-crds --kubeconfig "$KUBECONFIG" "$@" \
        </dev/null >"$work/control-plane.log" 2>&1 &
    plane_pid=$!
    local deadline=$((SECONDS + timeout))
    until [[ -s "$KUBECONFIG" ]]; do
        kill -0 "$plane_pid" 2>/dev/null || fail "the control plane exited during startup (log: $work/control-plane.log)"
        ((SECONDS < deadline)) || fail "the control plane did not start within ${timeout}s"
        sleep 0.2
    done
    grep -m1 '^Kubernetes' "$work/control-plane.log" || true
}
