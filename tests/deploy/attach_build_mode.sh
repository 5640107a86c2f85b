#!/usr/bin/env bash
# attach.sh --mode build for real: tests/deploy/attach_e2e_test.py with ATTACH_E2E_MODE=build, so
# remote-build.sh compiles ablate-worker (CPU, against the system LibTorch) on the loopback-sshd
# "box" from the committed tree, then the same register over TLS -> run succeeded -> stop.sh.
#
#   tests/deploy/attach_build_mode.sh [BUILD_DIR]    (default: build)
#
# Not in the ctest suite: the compile takes over 10 minutes on a small machine. It needs what
# the suite needs (scripts/install-deps, ablate-server and ablate built in BUILD_DIR) plus network
# access for the apt-get that remote-build.sh runs, and it starts its own PostgreSQL.
# It runs under nice, so a shared machine stays usable.
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-$src/build}" && pwd)
for exe in server/ablate-server client/ablate; do
  [[ -x $bin/$exe ]] || { echo "attach_build_mode.sh: $bin/$exe missing; build it first" >&2; exit 1; }
done

pg=$(mktemp -d)
trap '"$src/scripts/dev-postgres" stop "$pg/db" >/dev/null 2>&1 || true; rm -rf "$pg"' EXIT
"$src/scripts/dev-postgres" start "$pg/db" >/dev/null

start=$(date +%s)
ATTACH_E2E_MODE=build ABLATE_TEST_PG_DIR="$pg/db" ABLATE_SOURCE_DIR="$src" ABLATE_BINARY_DIR="$bin" \
  nice -n 10 python3 "$src/tests/deploy/attach_e2e_test.py" -v
echo "attach_build_mode.sh: passed in $(($(date +%s) - start)) s"
