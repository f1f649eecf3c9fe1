#!/usr/bin/env bash
# Builds (or reuses) the helm binary that renders charts/metascript in the tests
# (tests/e2e/chart.rs) and in CI. Nothing but the Go module proxy is needed: helm is built from
# source at a pinned version through the wrapper module in helm/ (committed go.sum), like the
# control plane (hack/control-plane/build.sh).
#
# Cached outside the work tree, keyed by version, so a fresh clone or `cargo clean` does not pay
# the cold build again:
#   ${METASCRIPT_HELM_DIR:-$HOME/.cache/metascript/tools/helm-v4.3.1}/helm
# The binary's path is printed on stdout (progress goes to stderr), so
#   export METASCRIPT_HELM="$(hack/tools/build-helm.sh)"
# works. A helm already on PATH is not used: a chart test must not depend on whichever version a
# machine happens to have.
set -euo pipefail

HELM_VERSION=v4.3.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${METASCRIPT_HELM_DIR:-$HOME/.cache/metascript/tools/helm-${HELM_VERSION}}"
helm="$dir/helm"

# shellcheck source=go-tool.sh
source "$here/go-tool.sh"
# helm's own version variable, so `helm version` names what was built (the module proxy has no
# VCS data to stamp).
build_go_tool build-helm.sh "$helm" "$here/helm" helm.sh/helm/v4/cmd/helm \
    "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
