# syntax=docker/dockerfile:1
# ablate-worker for NVIDIA GPUs, built on the official LibTorch CUDA distribution.
#   docker build -f deploy/docker/worker-cuda.Dockerfile -t ablate-worker-cuda .
#   docker run --gpus all --env-file worker.env ablate-worker-cuda --server HOST:7070 --tls-ca /ca.crt
#
# Why not Debian's LibTorch: Debian 12's is CPU-only. Debian 13 has one built for CUDA (contrib
# libtorch-cuda-dev 2.6 with non-free nvidia-cuda-toolkit 12.4; scripts/check-cuda-build compiles
# every target against it), but as an image recipe it is worse: its cuDNN comes from
# nvidia-cudnn, a script that downloads cuDNN from NVIDIA during the build after accepting
# NVIDIA's license, and that depends on the whole CUDA toolkit (nvidia-cuda-dev); what apt
# installs for libtorch-cuda-2.6 adds up to ~6.4 GiB (dpkg Installed-Size, before cuDNN), and it
# includes Debian's user-space driver (libcuda1 550), a second copy beside the host's that
# `--gpus all` mounts. Why Ubuntu 24.04: the project needs CMake >= 3.25 and gRPC/abseil/
# prometheus-cpp packages as recent as Debian 12's, and NVIDIA publishes CUDA images for it. LIBTORCH_VERSION and CUDA_TAG must name a pair download.pytorch.org publishes,
# and CUDA_IMAGE's toolkit must match CUDA_TAG (TorchConfig.cmake looks for that toolkit).
ARG CUDA_VERSION=12.6.3
ARG CUDA_TAG=cu126
ARG LIBTORCH_VERSION=2.6.0

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-devel-ubuntu24.04 AS build
ARG CUDA_TAG
ARG LIBTORCH_VERSION
ENV DEBIAN_FRONTEND=noninteractive
# scripts/install-deps minus libtorch-dev (CPU-only, would shadow the CUDA build) and the
# report-only gnuplot: the worker needs nothing else.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config git ca-certificates curl unzip \
        libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev libssl-dev \
        libpqxx-dev prometheus-cpp-dev \
        libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libcurl4-openssl-dev \
    && rm -rf /var/lib/apt/lists/*
# The "-with-deps" archive bundles the CUDA runtime, cuBLAS and cuDNN libraries LibTorch was
# built against, so the runtime image needs only the driver that `--gpus all` injects.
RUN curl -fsSL -o /tmp/libtorch.zip \
        "https://download.pytorch.org/libtorch/${CUDA_TAG}/libtorch-cxx11-abi-shared-with-deps-${LIBTORCH_VERSION}%2B${CUDA_TAG}.zip" \
    && unzip -q /tmp/libtorch.zip -d /opt \
    && rm /tmp/libtorch.zip
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DABLATE_WITH_TORCH=ON \
        -DABLATE_BUILD_TESTS=OFF -DABLATE_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH=/opt/libtorch \
    && cmake --build /build -j"$(nproc)" --target ablate-worker \
    && LD_LIBRARY_PATH=/opt/libtorch/lib ALLOW_MISSING=libcuda.so.1 \
        deploy/docker/runtime-packages.sh /build/worker/ablate-worker > /runtime-packages.txt

FROM nvidia/cuda:${CUDA_VERSION}-base-ubuntu24.04 AS runtime
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
    && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends ca-certificates curl \
        sentencepiece \
    && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=build /opt/libtorch/lib /opt/libtorch/lib
RUN groupadd --system --gid 10001 ablate \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/ablate --shell /usr/sbin/nologin ablate \
    && mkdir -p /var/lib/ablate/work \
    && chown -R ablate:ablate /var/lib/ablate
COPY --from=build /build/worker/ablate-worker /usr/local/bin/
ENV LD_LIBRARY_PATH=/opt/libtorch/lib \
    ABLATE_WORK_DIR=/var/lib/ablate/work \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER ablate
WORKDIR /var/lib/ablate
VOLUME ["/var/lib/ablate/work"]
ENTRYPOINT ["ablate-worker"]
CMD ["--device", "cuda"]
