#!/usr/bin/env bash
# THE test command (README, CI). Integration tests under tests/ start a real control plane from
# the binaries `hack/control-plane/build.sh` caches; they fail (never skip) without them. The chart
# tests (tests/e2e/chart.rs) need the helm `hack/tools/build-helm.sh` caches, and the trace test
# (tests/e2e/traces.rs) the OTLP receiver `hack/tools/build-otlp-receiver.sh` caches, the same
# way. All are built below when the environment does not name them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# On a fresh machine (Rust and Go only) build what the integration tests run; each build is
# cached in ~/.cache/metascript and instant afterwards. `.ci/run` builds them first and says so.
if [[ -z "${METASCRIPT_CONTROL_PLANE_BIN:-}" ]]; then
    METASCRIPT_CONTROL_PLANE_BIN="$(hack/control-plane/build.sh </dev/null | tail -n 1)"
    export METASCRIPT_CONTROL_PLANE_BIN
fi
if [[ -z "${METASCRIPT_HELM:-}" ]]; then
    METASCRIPT_HELM="$(hack/tools/build-helm.sh </dev/null | tail -n 1)"
    export METASCRIPT_HELM
fi
if [[ -z "${METASCRIPT_OTLP_RECEIVER:-}" ]]; then
    METASCRIPT_OTLP_RECEIVER="$(hack/tools/build-otlp-receiver.sh </dev/null | tail -n 1)"
    export METASCRIPT_OTLP_RECEIVER
fi

cargo fmt --check
cargo clippy --all-targets -- -D warnings
# tests/e2e/run_local.rs runs hack/run-local.sh on the binaries of this build: the operator and
# the control-plane example as a program (`cargo test` builds examples only as test harnesses).
# Same features as the test build, so this links one more binary and compiles nothing else.
cargo build --bin metascript --example control-plane
cargo test --all-targets
# The fuzz targets (proptests named fuzz_…, over what authors hand the operator: hook
# responses, webhook bodies, engine values, selectors, manifests) once more with many more
# cases than the suite's: a bounded fuzz run on every CI run (docs/performance.md).
PROPTEST_CASES="${METASCRIPT_FUZZ_CASES:-2000}" cargo test --lib -- fuzz_
# Nothing changed, so a second build compiles nothing (build.rs watches only files that exist).
bash hack/check-fresh-build.sh
# The example hooks through the offline harness, as users run it; its last line is the summary
# (`N passed, N failed`).
cargo run --quiet -- test scripts/
