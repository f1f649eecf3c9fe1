# Sourced by the build scripts of the Go tools the tests run (build-helm.sh,
# build-otlp-receiver.sh): each builds one binary from a wrapper module with a committed go.sum,
# from the Go module proxy only, once, into a cache outside the work tree.

# build_go_tool WHAT BINARY MODULE_DIR PACKAGE [LDFLAGS]: prints BINARY's path on stdout (progress
# on stderr), building PACKAGE of MODULE_DIR into it first unless it is already there.
build_go_tool() {
    local what=$1 binary=$2 module=$3 package=$4 ldflags=${5:-}
    if [[ -x "$binary" ]]; then
        echo "$binary"
        return 0
    fi
    command -v go >/dev/null || {
        echo "$what: 'go' is not on PATH; install Go >= 1.26" >&2
        return 1
    }
    mkdir -p "$(dirname "$binary")"
    local start=$SECONDS
    echo "$what: building $(basename "$binary") ..." >&2
    # Temp name + rename: an interrupted build never leaves a half binary that the next run
    # would mistake for a finished one. Global, so the EXIT trap still sees it after a failure.
    # Failures return here whether or not the caller runs under `set -e`, and a caller's own
    # EXIT trap is put back afterwards.
    go_tool_tmp="$(dirname "$binary")/.$(basename "$binary").tmp.$$"
    local caller_trap
    caller_trap="$(trap -p EXIT)"
    trap 'rm -f "$go_tool_tmp"' EXIT
    if ! (cd "$module" && CGO_ENABLED=0 go build -mod=readonly -trimpath -buildvcs=false \
        -ldflags "-s -w $ldflags" -o "$go_tool_tmp" "$package") ||
        ! mv -f "$go_tool_tmp" "$binary"; then
        rm -f "$go_tool_tmp"
        eval "${caller_trap:-trap - EXIT}"
        echo "$what: building $(basename "$binary") failed" >&2
        return 1
    fi
    eval "${caller_trap:-trap - EXIT}"
    echo "$what: built in $((SECONDS - start))s" >&2
    echo "$binary"
}
