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

if [[ -x "$receiver" ]]; then
    echo "$receiver"
    exit 0
fi

command -v go >/dev/null || {
    echo "build-otlp-receiver.sh: 'go' is not on PATH; install Go >= 1.26" >&2
    exit 1
}
mkdir -p "$dir"

start=$SECONDS
echo "build-otlp-receiver.sh: building the OTLP receiver ..." >&2
# Temp name + rename: an interrupted build never leaves a half binary behind.
tmp="$dir/.otlp-receiver.tmp.$$"
trap 'rm -f "$tmp"' EXIT
(cd "$here" && CGO_ENABLED=0 go build -mod=readonly -trimpath -buildvcs=false -ldflags "-s -w" -o "$tmp" .)
mv -f "$tmp" "$receiver"
trap - EXIT
echo "build-otlp-receiver.sh: built in $((SECONDS - start))s" >&2
echo "$receiver"
