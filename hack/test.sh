#!/usr/bin/env bash
# THE test command (README, CI). Integration tests under tests/ start a real control plane from
# the binaries `hack/control-plane/build.sh` caches; they fail (never skip) without them. The chart
# tests (tests/e2e/chart.rs) need the helm `hack/tools/build-helm.sh` caches, the same way.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets
# Nothing changed, so a second build compiles nothing (build.rs watches only files that exist).
bash hack/check-fresh-build.sh
# The example hooks through the offline harness, as users run it; its last line is the summary
# (`N passed, N failed`).
cargo run --quiet -- test scripts/
