#!/usr/bin/env bash
# Prints the Debian/Ubuntu packages that own the shared libraries the given binaries load.
#
#   runtime-packages.sh BINARY... > packages.txt
#   ALLOW_MISSING='libcuda.so.1' runtime-packages.sh ...   (space-separated sonames that the host
#                                                            provides at run time, e.g. the driver)
#   UNOWNED_OUT=FILE runtime-packages.sh ...   also writes the paths of the libraries no package
#                                              owns to FILE, one a line (attach.sh --mode binary
#                                              ships those with the binary)
#
# The runtime image installs exactly these instead of a hand-kept list, so a library the C++ code
# starts linking is picked up by the next image build rather than failing at container start.
# Libraries no package owns (the official LibTorch under /opt/libtorch) are reported on stderr
# and left to the Dockerfile to copy. Limitation: libraries opened with dlopen() are invisible
# to ldd; the worker images add the BLAS backend explicitly for that reason.
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: runtime-packages.sh BINARY..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Prints, for each library path on stdin, the candidate paths a package may own it under:
# usrmerge means a file packaged as /lib/x/libfoo.so may be reached as /usr/lib/x/libfoo.so and
# the reverse, and alternatives symlinks resolve to the file a package really ships.
candidates() {
  local p
  while read -r p; do
    echo "$p"
    realpath "$p"
    case $p in
      /usr/lib/*) echo "${p#/usr}" ;;
      /lib/*) echo "/usr$p" ;;
    esac
  done
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
done | sort -u >"$tmp/libs"

# One dpkg query for all candidates (one per library takes minutes for LibTorch's ~250).
candidates <"$tmp/libs" | sort -u | xargs -r dpkg -S 2>/dev/null >"$tmp/owners" || true
while read -r lib; do
  found=""
  while read -r c; do
    # dpkg -S prints "pkg[:arch][, pkg2]: /path"; a path may be owned by several packages. A
    # diverted path also gets "diversion by pkg from|to: /path" lines, which name no owner
    # (Debian 13's libc6 diverts /lib64/ld-linux-x86-64.so.2 for usrmerge): skipped.
    owner=$(awk -v path="$c" '!/^diversion by / && index($0, ": " path) &&
               substr($0, length($0) - length(path) + 1) == path { sub(/: \/.*/, ""); print; exit }' \
               "$tmp/owners")
    if [[ -n $owner ]]; then found=$owner; break; fi
  done < <(echo "$lib" | candidates)
  if [[ -n $found ]]; then
    tr ',' '\n' <<<"$found" | sed 's/^ *//; s/:.*//'
  else
    echo "runtime-packages.sh: no package owns $lib (copy it into the image)" >&2
    echo "$lib" >>"$tmp/unowned"
  fi
done <"$tmp/libs" | sort -u
if [[ -n ${UNOWNED_OUT:-} ]]; then
  if [[ -f $tmp/unowned ]]; then cp "$tmp/unowned" "$UNOWNED_OUT"; else : >"$UNOWNED_OUT"; fi
fi
