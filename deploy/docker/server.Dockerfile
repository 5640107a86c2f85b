# syntax=docker/dockerfile:1
# ablate-server and the ablate CLI, without LibTorch. Build from the repository root:
#   docker build -f deploy/docker/server.Dockerfile -t ablate-server .
# The server migrates the database on start (migrations are compiled in), so the image needs no
# SQL files and no client tools.
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
# install-deps alone first, so editing the source does not invalidate the package layer. It also
# installs LibTorch headers this build never uses; that costs build-stage disk only, and keeps one
# list of build dependencies for every image and host.
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps --no-test-deps
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DABLATE_WITH_TORCH=OFF \
        -DABLATE_BUILD_TESTS=OFF -DABLATE_BUILD_BENCH=OFF \
    && cmake --build /build -j"$(nproc)" --target ablate-server ablate \
    && deploy/docker/runtime-packages.sh /build/server/ablate-server /build/client/ablate \
        > /runtime-packages.txt

FROM ${DEBIAN_IMAGE} AS runtime
COPY --from=build /runtime-packages.txt /tmp/runtime-packages.txt
# curl serves the container health check (GET /metrics).
RUN apt-get update \
    && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends \
        ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
RUN groupadd --system --gid 10001 ablate \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/ablate --shell /usr/sbin/nologin ablate \
    && mkdir -p /var/lib/ablate/data /var/lib/ablate/store /var/lib/ablate/tokens \
    && chown -R ablate:ablate /var/lib/ablate
COPY --from=build /build/server/ablate-server /build/client/ablate /usr/local/bin/
USER ablate
WORKDIR /var/lib/ablate
ENV ABLATE_SERVER=127.0.0.1:7070
EXPOSE 7070 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD curl -fsS -o /dev/null http://127.0.0.1:9464/metrics || exit 1
ENTRYPOINT ["ablate-server"]
CMD ["serve", "--listen", "127.0.0.1:7070", "--metrics-listen", "0.0.0.0:9464", "--metrics-insecure", \
     "--data-dir", "/var/lib/ablate/data", "--store-dir", "/var/lib/ablate/store"]
