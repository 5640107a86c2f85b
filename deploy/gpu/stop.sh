#!/usr/bin/env bash
# Stops the ablate worker that deploy/gpu/attach.sh started on a box, whichever way it runs
# (docker container, systemd unit or restart loop).
#
#   deploy/gpu/stop.sh USER@HOST [--purge] [--ssh-port N] [--identity FILE] [--dry-run]
#
# The worker gets SIGTERM and up to 120 s to hand its lease back, so its run is re-queued at
# once (and resumes from its newest checkpoint) instead of waiting for the lease to expire.
# --purge also deletes what attach.sh left on the box: ~/.ablate (token env file, CA, source,
# build, LibTorch download), /etc/ablate, the systemd unit, the image and the work volume.
# When the box is gone for good, revoke its token too: ablate-server token list / revoke ID.
#
# Remote commands are written in single quotes on purpose: $HOME must expand on the box.
# shellcheck disable=SC2016
set -euo pipefail

prog=stop.sh
# shellcheck source-path=SCRIPTDIR source=ssh-lib.sh
. "$(cd "$(dirname "$0")" && pwd)/ssh-lib.sh"
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

host="" purge=0 ssh_port="" identity="" dry_run=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --purge) purge=1; shift ;;
    *) common_arg "$@"; [[ $consumed -gt 0 ]] || die_usage "unknown option $1"; shift "$consumed" ;;
  esac
done
check_ssh_args "$host" "$ssh_port" "$identity"
make_ssh_cmd "$host" "$ssh_port" "$identity"

remote 'if command -v docker >/dev/null 2>&1 && docker inspect ablate-worker >/dev/null 2>&1; then docker stop -t 120 ablate-worker && docker rm ablate-worker; fi'
remote 'if [ -f "$HOME/.ablate/src/deploy/gpu/remote-service.sh" ]; then bash "$HOME/.ablate/src/deploy/gpu/remote-service.sh" stop; fi'
if [[ $purge == 1 ]]; then
  remote 'if command -v docker >/dev/null 2>&1; then docker volume rm -f ablate-worker-work; docker image rm -f ablate-worker-cuda:local; fi >/dev/null 2>&1 || true'
  remote 's=""; [ "$(id -u)" -eq 0 ] || s=sudo; $s rm -rf /etc/ablate /etc/systemd/system/ablate-worker.service /etc/systemd/system/ablate-worker.service.d; if [ -d /run/systemd/system ]; then $s systemctl daemon-reload; fi; rm -rf "$HOME/.ablate"'
fi
[[ $dry_run == 1 ]] || echo "stop.sh: worker on $host stopped"
