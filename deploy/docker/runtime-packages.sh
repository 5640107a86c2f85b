#!/usr/bin/env bash
# Prints the Debian/Ubuntu packages that own the shared libraries the given binaries load.
#
#   runtime-packages.sh BINARY... > packages.txt
#   ALLOW_MISSING='libcuda.so.1' runtime-packages.sh ...   (space-separated sonames that the host
#                                                            provides at run time, e.g. the driver)
#
# The runtime image installs exactly these instead of a hand-kept list, so a library the C++ code
# starts linking is picked up by the next image build rather than failing at container start.
# Libraries no package owns (the official LibTorch under /opt/libtorch) are reported on stderr
# and left to the Dockerfile to copy. Limitation: libraries opened with dlopen() are invisible
# to ldd; the worker images add the BLAS backend explicitly for that reason.
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: runtime-packages.sh BINARY..." >&2; exit 2; }

owner() {
  # usrmerge: a file packaged as /lib/x/libfoo.so may be reached as /usr/lib/x/libfoo.so, and
  # the reverse; alternatives symlinks resolve to the file the package really ships.
  local p=$1 candidates=("$1" "$(realpath "$1")")
  case $p in
    /usr/lib/*) candidates+=("${p#/usr}") ;;
    /lib/*) candidates+=("/usr$p") ;;
  esac
  for c in "${candidates[@]}"; do
    if out=$(dpkg -S "$c" 2>/dev/null); then
      echo "${out%%:*}"
      return 0
    fi
  done
  return 1
}

for bin in "$@"; do
  missing=$(ldd "$bin" | awk '$2 == "=>" && $3 == "not" {print $1}')
  for soname in $missing; do
    if [[ " ${ALLOW_MISSING:-} " != *" $soname "* ]]; then
      echo "runtime-packages.sh: $bin needs $soname, which nothing here provides" >&2
      exit 1
    fi
  done
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | sort -u | while read -r lib; do
  owner "$lib" || echo "runtime-packages.sh: no package owns $lib (copy it into the image)" >&2
done | sort -u
