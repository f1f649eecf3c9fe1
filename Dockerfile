# The metascript operator image. Build: `docker build -t metascript:dev .` (docs/operations.md#install).

# Debian 12 (bookworm), like the runtime image below: the binary links glibc and libstdc++
# dynamically (Luau, vendored by mlua, is C++), so it must not be built against newer versions
# of them than cc-debian12 ships; plain `rust:1` moves to newer Debian releases.
FROM rust:1-bookworm AS build
# .git is not sent to the build (.dockerignore), so build.rs takes the commit that
# `metascript --version` and metascript_build_info report from here:
# `docker build --build-arg METASCRIPT_COMMIT=$(git rev-parse --short=12 HEAD) …`.
ARG METASCRIPT_COMMIT=""
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin metascript

# glibc, libgcc and libstdc++ and nothing else: no shell, no package manager. The nonroot tag
# runs as uid/gid 65532, the user deploy/deployment.yaml asks for.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/metascript /usr/local/bin/metascript
USER 65532:65532
# `metascript run` serves metrics and probes on loopback unless told otherwise; in a pod the
# kubelet and Prometheus reach them on the pod's IP. deploy/ and the chart pass the flag too.
ENV METASCRIPT_METRICS_ADDR=0.0.0.0:9090
# The binary never asks for transparent huge pages; this also keeps them off on nodes whose THP
# setting is `always` (partly used 2 MiB pages cost RSS, and zeroing them CPU).
ENV MIMALLOC_ALLOW_THP=0
ENTRYPOINT ["/usr/local/bin/metascript"]
