#!/usr/bin/env bash
# Runs on the rented box (attach.sh --mode build): builds ablate-worker against CUDA LibTorch and
# installs it as ~/.ablate/bin/ablate-worker, where remote-service.sh runs it. Source is in ~/.ablate/src (shipped by attach.sh).
#
# LibTorch: the box's own PyTorch when its C++ ABI matches ours (torch built with the C++11 ABI,
# as conda builds and pip wheels from 2.7 on are); otherwise the official LibTorch archive of
# the same version and CUDA flavour, downloaded once into ~/.ablate. Pip wheels before 2.7 use the
# old std::string ABI and cannot link with Debian's gRPC and abseil, hence the download.
# Needs Debian 12 or Ubuntu 24.04 (CMake >= 3.25, recent gRPC) and the CUDA toolkit (nvcc), which
# TorchConfig.cmake looks for: "devel" images have it.
#
#   remote-build.sh [--device cuda|cpu]
#
# --device cpu (a box without a GPU) builds against the distribution's CPU LibTorch
# (libtorch-dev, which install-deps installs) instead: no download, no CUDA toolkit.
set -euo pipefail

device=cuda
case ${1:-} in
  "") ;;
  --device) [[ ${2:-} == cuda || ${2:-} == cpu ]] || { echo "remote-build.sh: --device cuda|cpu" >&2; exit 2; }
            device=$2 ;;
  *) echo "usage: remote-build.sh [--device cuda|cpu]" >&2; exit 2 ;;
esac

src="$HOME/.ablate/src"
build="$HOME/.ablate/build"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"

# shellcheck disable=SC1091
. /etc/os-release
case "$ID:$VERSION_ID" in
  debian:12|ubuntu:24.04) ;;
  *) echo "remote-build.sh: needs Debian 12 or Ubuntu 24.04, this box runs ${PRETTY_NAME:-$ID}; use attach.sh --mode docker" >&2
     exit 1 ;;
esac

"$src/scripts/install-deps" --no-test-deps
$sudo apt-get install -y -qq --no-install-recommends curl unzip >/dev/null

torch_info() {
  python3 - <<'PY' 2>/dev/null
import torch
print(torch.__version__.split("+")[0], "cu" + torch.version.cuda.replace(".", "") if torch.version.cuda else "cpu",
      int(torch.compiled_with_cxx11_abi()), torch.utils.cmake_prefix_path)
PY
}

prefix=""
version=${ABLATE_LIBTORCH_VERSION:-2.6.0}
flavour=${ABLATE_LIBTORCH_CUDA:-cu126}
if [[ $device == cpu ]]; then
  # The empty prefix leaves CMake to find /usr/share/cmake/Torch from libtorch-dev.
  echo "remote-build.sh: a CPU worker; building against the system LibTorch"
elif info=$(torch_info) && [[ -n $info ]]; then
  read -r t_version t_flavour t_abi t_prefix <<<"$info"
  if [[ $t_flavour == cpu ]]; then
    echo "remote-build.sh: the box's PyTorch $t_version has no CUDA; downloading LibTorch $version+$flavour"
  elif [[ $t_abi == 1 ]]; then
    prefix=$t_prefix
    echo "remote-build.sh: using the box's PyTorch $t_version+$t_flavour at $prefix"
  else
    version=$t_version flavour=$t_flavour
    echo "remote-build.sh: the box's PyTorch $t_version uses the old C++ ABI; downloading LibTorch $version+$flavour"
  fi
fi
if [[ -z $prefix && $device == cuda ]]; then
  dir="$HOME/.ablate/libtorch-$version-$flavour"
  if [[ ! -d $dir/libtorch ]]; then
    mkdir -p "$dir"
    curl -fSL --retry 3 -o "$dir/libtorch.zip" \
      "https://download.pytorch.org/libtorch/$flavour/libtorch-cxx11-abi-shared-with-deps-$version%2B$flavour.zip"
    unzip -q "$dir/libtorch.zip" -d "$dir"
    rm "$dir/libtorch.zip"
  fi
  prefix="$dir/libtorch"
fi

cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DABLATE_WITH_TORCH=ON \
  -DABLATE_BUILD_TESTS=OFF -DABLATE_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH="$prefix"
cmake --build "$build" -j"$(nproc)" --target ablate-worker
install -D -m 0755 "$build/worker/ablate-worker" "$HOME/.ablate/bin/ablate-worker"
echo "remote-build.sh: installed $HOME/.ablate/bin/ablate-worker"
