#!/usr/bin/env bash
# A build with nothing changed compiles nothing (issue 27): two `cargo build`s in a row, and the
# second must find every unit of this package Fresh. It guards build.rs, whose rerun-if-changed
# list once named a file a fresh clone lacks (.git/packed-refs); Cargo counts a missing file as
# changed (rust-lang/cargo#4076), so every cargo command re-ran the build script and recompiled
# the crate. tests/e2e/build_script.rs covers the checkout shapes this checkout may not have.
#
# Run by hack/test.sh after the test build, and with the targets (so the features) hack/test.sh
# built before the tests: the first build below compiles nothing new (a plain `cargo build`, with
# the crate's features alone, would compile the crate again, minutes on CI, to prove the same).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

targets=(--bin metascript --example control-plane)
cargo build --quiet "${targets[@]}"
second="$(cargo build -v "${targets[@]}" 2>&1)"
# -v names every unit: `Fresh` when reused; `Dirty … : <reason>`, `Compiling` and `Running` when
# not.
stale="$(grep -E '^ *(Dirty|Compiling|Running) ' <<<"$second" || true)"
if [[ -n "$stale" ]]; then
    echo "check-fresh-build: a second \`cargo build\` with nothing changed did work again:" >&2
    cut -c1-240 <<<"$stale" >&2
    exit 1
fi
if ! grep -qE '^ *Fresh metascript ' <<<"$second"; then
    echo "check-fresh-build: \`cargo build -v\` did not report metascript Fresh (output changed?):" >&2
    echo "$second" >&2
    exit 1
fi
echo "check-fresh-build: a second cargo build compiled nothing" >&2
