# syntax=docker/dockerfile:1
# ablate-worker for CPU, on Debian's LibTorch (the same build the project's CI trains with).
#   docker build -f deploy/docker/worker-cpu.Dockerfile -t ablate-worker-cpu .
#   docker run --env-file worker.env ablate-worker-cpu --server HOST:7070 --device cpu
# worker.env holds ABLATE_TOKEN=...: env, not argv, so the token stays out of `ps` and shell history.
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps --no-test-deps
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DABLATE_WITH_TORCH=ON \
        -DABLATE_BUILD_TESTS=OFF -DABLATE_BUILD_BENCH=OFF \
    && cmake --build /build -j"$(nproc)" --target ablate-worker \
    && deploy/docker/runtime-packages.sh /build/worker/ablate-worker > /runtime-packages.txt

FROM ${DEBIAN_IMAGE} AS runtime
COPY --from=build /runtime-packages.txt /tmp/runtime-packages.txt
# libblis4-pthread: LibTorch reaches BLAS through the libblas.so.3 alternative, which ldd cannot
# see; BLIS rather than OpenBLAS because OpenBLAS breaks prometheus-cpp's HTTP server in the same
# process (see scripts/install-deps). sentencepiece: the tokenizer runs its spm_* tools.
RUN apt-get update \
    && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends \
        ca-certificates curl libblis4-pthread sentencepiece \
    && update-alternatives --set libblas.so.3-x86_64-linux-gnu \
        /usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3 \
    && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
RUN groupadd --system --gid 10001 ablate \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/ablate --shell /usr/sbin/nologin ablate \
    && mkdir -p /var/lib/ablate/work /var/lib/ablate/tokens \
    && chown -R ablate:ablate /var/lib/ablate
COPY --from=build /build/worker/ablate-worker /usr/local/bin/
USER ablate
WORKDIR /var/lib/ablate
ENV ABLATE_WORK_DIR=/var/lib/ablate/work
VOLUME ["/var/lib/ablate/work"]
ENTRYPOINT ["ablate-worker"]
CMD ["--device", "cpu"]
