# The metascript operator image. Build: `docker build -t metascript:dev .` (deploy/README.md).

# Debian 12 (bookworm), like the runtime image below: the binary links glibc and libstdc++
# dynamically (Luau, vendored by mlua, is C++), so it must not be built against newer versions
# of them than cc-debian12 ships. Plain `rust:1` follows Debian's newest release.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin metascript

# glibc, libgcc and libstdc++ and nothing else: no shell, no package manager. The nonroot tag
# runs as uid/gid 65532, the user deploy/deployment.yaml asks for.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/metascript /usr/local/bin/metascript
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/metascript"]
