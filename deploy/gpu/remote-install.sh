#!/usr/bin/env bash
# Runs on the rented box (attach.sh --mode binary): makes the prebuilt worker that attach.sh
# shipped into ~/.ablate runnable, or says why it cannot be.
#
#   ~/.ablate/bin/ablate-worker      the binary
#   ~/.ablate/lib/                   libraries no Debian package owns (e.g. the official LibTorch),
#                                    found through LD_LIBRARY_PATH (remote-service.sh sets it)
#   ~/.ablate/runtime-packages.txt   the Debian packages owning the libraries it loads, plus
#                                    those it needs but ldd cannot see (BLAS, spm_* tools)
#   ~/.ablate/build-os               ID:VERSION_ID of the machine the binary was built on
#
# A binary only runs on the distribution release it was built on (its packages' sonames), so a
# different release is refused here rather than failing later in the restart loop. Packages
# are installed only when some are missing, so a box that has them needs no apt-get at all.
set -euo pipefail

state="$HOME/.ablate"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"

# shellcheck disable=SC1091
. /etc/os-release
built_on=$(cat "$state/build-os")
if [[ "$ID:$VERSION_ID" != "$built_on" ]]; then
  echo "remote-install.sh: the worker was built on $built_on, this box runs $ID:$VERSION_ID;" \
       "use attach.sh --mode build or --mode docker" >&2
  exit 1
fi

missing=()
while read -r pkg; do
  [[ -n $pkg ]] || continue
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then missing+=("$pkg"); fi
done <"$state/runtime-packages.txt"
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "remote-install.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's LibTorch reaches BLAS through the libblas.so.3 alternative; BLIS, as scripts/install-deps
# explains, because OpenBLAS breaks the worker's metrics HTTP server.
if [[ -e /usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3 ]]; then
  $sudo update-alternatives --set libblas.so.3-x86_64-linux-gnu \
    /usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3 >/dev/null 2>&1 || true
fi

# libcuda.so.1 comes with the box's NVIDIA driver, not a package the binary names.
export LD_LIBRARY_PATH="$state/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unresolved=$(ldd "$state/bin/ablate-worker" | awk '$2 == "=>" && $3 == "not" && $1 != "libcuda.so.1" {print $1}')
if [[ -n $unresolved ]]; then
  echo "remote-install.sh: ablate-worker needs libraries this box lacks: ${unresolved//$'\n'/ }" >&2
  exit 1
fi
"$state/bin/ablate-worker" --help >/dev/null
echo "remote-install.sh: $state/bin/ablate-worker is ready"
