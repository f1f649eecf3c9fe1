#!/usr/bin/env bash
# Builds (or reuses) the control-plane binaries used by integration tests,
# benchmarks and the demo: etcd, kube-apiserver, kube-controller-manager, and for
# the cluster flavor of the plane kube-scheduler and kwok (simulated Nodes).
#
# The binaries are cached outside the work tree, keyed by version, so a fresh
# clone or `cargo clean` does not pay the ~10 minute cold build again:
#   ${METASCRIPT_CONTROL_PLANE_DIR:-$HOME/.cache/metascript/control-plane/k8s-v1.36.3-etcd-v3.6.16}/bin
# The bin directory is printed on stdout (progress goes to stderr), so
#   export METASCRIPT_CONTROL_PLANE_BIN="$(hack/control-plane/build.sh)"
# works.
#
# kubectl is built too, for pointing at a running plane by hand; it shares nearly all
# packages with the others, so it adds well under a minute. METASCRIPT_BUILD_KUBECTL=0 skips it.
set -euo pipefail

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
# Also pinned by kwok/go.mod; checked against `kwok --version` of a cached binary, since it is
# not part of the cache key (adding kwok must not throw away a cache of the others).
KWOK_VERSION=v0.8.0
# The module proxy does not serve the release commits, so /version says "unknown" there.
K8S_GIT_COMMIT=unknown
ETCD_GIT_SHA=unknown
# The release's publication time (proxy .info) rather than now, so builds are bit-for-bit
# reproducible.
K8S_BUILD_DATE=2026-07-22T18:07:38Z

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${METASCRIPT_CONTROL_PLANE_DIR:-$HOME/.cache/metascript/control-plane/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}}"
bin="$cache/bin"

wanted=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
if [[ "${METASCRIPT_BUILD_KUBECTL:-1}" != 0 ]]; then
    wanted+=(kubectl)
fi

missing=()
for b in "${wanted[@]}"; do
    [[ -x "$bin/$b" ]] || missing+=("$b")
done
# A kwok of another version (the pin was raised) is rebuilt.
if [[ -x "$bin/kwok" ]] && ! "$bin/kwok" --version 2>/dev/null | grep -qF "${KWOK_VERSION#v}"; then
    missing+=(kwok)
fi
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "$bin"
    exit 0
fi

command -v go >/dev/null || {
    echo "build.sh: 'go' is not on PATH; install Go >= 1.26" >&2
    exit 1
}
mkdir -p "$bin"

export CGO_ENABLED=0
# Builds run one after another: each link of kube-apiserver alone wants ~2 GiB
# and the machines this runs on have 2 cores shared with cargo.
minor="${K8S_VERSION#v1.}"
minor="${minor%%.*}"
k8s_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION"
    k8s_ldflags+=" -X $pkg.gitMajor=1"
    k8s_ldflags+=" -X $pkg.gitMinor=$minor"
    k8s_ldflags+=" -X $pkg.gitCommit=$K8S_GIT_COMMIT"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean"
    k8s_ldflags+=" -X $pkg.buildDate=$K8S_BUILD_DATE"
done

build() { # name module-dir package ldflags
    local name="$1" dir="$2" pkg="$3" ldflags="$4"
    local tmp="$bin/.$name.tmp.$$"
    local start=$SECONDS
    echo "build.sh: building $name ($pkg) ..." >&2
    # Temp name + rename: an interrupted build never leaves a half binary
    # that the next run would mistake for a finished one.
    trap 'rm -f "$tmp"' EXIT
    (cd "$here/$dir" && go build -mod=readonly -trimpath -buildvcs=false -ldflags "-s -w $ldflags" -o "$tmp" "$pkg")
    mv -f "$tmp" "$bin/$name"
    trap - EXIT
    echo "build.sh: built $name in $((SECONDS - start))s" >&2
}

for b in "${missing[@]}"; do
    case "$b" in
    etcd)
        build etcd etcd go.etcd.io/etcd/server/v3 \
            "-X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_GIT_SHA"
        ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubectl)
        build "$b" kubernetes "k8s.io/kubernetes/cmd/$b" "$k8s_ldflags"
        ;;
    kwok)
        # Its own module (its own versions of the client libraries); the version it reports is
        # a constant in its source, so no -X flags.
        build kwok kwok sigs.k8s.io/kwok/cmd/kwok ""
        ;;
    esac
done

echo "$bin"
