#!/usr/bin/env bash
# Builds (or reuses) the OTLP/HTTP trace receiver the trace tests and benchmarks export to
# (otlp-receiver/main.go: the OpenTelemetry project's own protobuf types, from the Go module
# proxy with a committed go.sum, like helm and the control plane).
#
# Cached outside the work tree, keyed by the hash of its source and go.sum, so a fresh clone or
# `cargo clean` does not pay the build again and an edit rebuilds it:
#   ${METASCRIPT_OTLP_RECEIVER_DIR:-$HOME/.cache/metascript/tools}/otlp-receiver-<hash>
# The binary's path is printed on stdout (progress goes to stderr), so
#   export METASCRIPT_OTLP_RECEIVER="$(hack/tools/build-otlp-receiver.sh)"
# works.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/otlp-receiver"
hash="$(cat "$here/main.go" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)"
dir="${METASCRIPT_OTLP_RECEIVER_DIR:-$HOME/.cache/metascript/tools}"
receiver="$dir/otlp-receiver-$hash"

# shellcheck source=go-tool.sh
source "$(dirname "${BASH_SOURCE[0]}")/go-tool.sh"
build_go_tool build-otlp-receiver.sh "$receiver" "$here" .
