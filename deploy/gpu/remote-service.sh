#!/usr/bin/env bash
# Runs on the rented box: keeps ~/.ablate/bin/ablate-worker (built there by remote-build.sh, or
# shipped by attach.sh --mode binary) running, restarting it on failure.
#
#   remote-service.sh start | stop | status | loop
#
# With systemd (a VM or bare metal): installs deploy/systemd/ablate-worker.service, with a drop-in
# that runs it as the ssh user, whose home may hold the PyTorch it was built against; secrets go
# to /etc/ablate/worker.env (0600). Without systemd (most rented "GPU containers"): a restart
# loop in its own session under nohup, logging to ~/.ablate/worker.log. That loop does not
# survive a reboot of the box; attach.sh again after one.
# Input: ~/.ablate/worker.env (ABLATE_SERVER, ABLATE_TOKEN, ABLATE_WORKER_ARGS), when the server
# uses a private CA ~/.ablate/ca.crt, and libraries shipped with the binary in ~/.ablate/lib.
# ABLATE_SERVICE_MANAGER=systemd|loop overrides the detection (e.g. a box whose systemd is not
# usable); ABLATE_RESTART_DELAY (seconds, default 10) spaces the loop's restarts.
set -euo pipefail

state="$HOME/.ablate"
# In the ssh user's home rather than /usr/local/bin: attaching needs no root for the binary, and
# a second attach (or a test using this machine as the box) replaces only its own copy.
worker="$state/bin/ablate-worker"
here=$(cd "$(dirname "$0")" && pwd)
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
has_systemd() {
  case ${ABLATE_SERVICE_MANAGER:-auto} in
    systemd) return 0 ;;
    loop) return 1 ;;
    *) [[ -d /run/systemd/system ]] ;;
  esac
}
restart_delay=${ABLATE_RESTART_DELAY:-10}
[[ $restart_delay =~ ^[0-9]+$ ]] || { echo "remote-service.sh: ABLATE_RESTART_DELAY must be whole seconds" >&2; exit 2; }

# The env file the worker reads: attach.sh's, plus where the CA ended up and, when attach.sh
# shipped libraries with the binary, where they are.
compose_env() {
  cat "$state/worker.env"
  if [[ -f $state/ca.crt ]]; then echo "ABLATE_TLS_CA=$1"; fi
  if [[ -d $state/lib ]] && [[ -n $(ls -A "$state/lib") ]]; then echo "LD_LIBRARY_PATH=$state/lib"; fi
}

start_systemd() {
  $sudo install -d -m 0755 /etc/ablate
  if [[ -f $state/ca.crt ]]; then $sudo install -m 0644 "$state/ca.crt" /etc/ablate/ca.crt; fi
  compose_env /etc/ablate/ca.crt | $sudo install -m 0600 /dev/stdin /etc/ablate/worker.env
  $sudo install -m 0644 "$here/../systemd/ablate-worker.service" /etc/systemd/system/ablate-worker.service
  $sudo install -d -m 0755 /etc/systemd/system/ablate-worker.service.d
  # The unit's ExecStart names /usr/local/bin (a hand install); the empty ExecStart= clears it.
  # $ABLATE_WORKER_ARGS is for systemd to expand, hence single quotes.
  # shellcheck disable=SC2016
  printf '[Service]\nUser=%s\nGroup=%s\nProtectHome=read-only\nExecStart=\nExecStart=%s $ABLATE_WORKER_ARGS\n' \
    "$(id -un)" "$(id -gn)" "$worker" |
    $sudo install -m 0644 /dev/stdin /etc/systemd/system/ablate-worker.service.d/attach.conf
  $sudo systemctl daemon-reload
  $sudo systemctl enable ablate-worker.service
  $sudo systemctl restart ablate-worker.service
}

loop() {
  local child=""
  # SIGTERM reaches the worker, which hands its lease back before exiting; then the loop ends.
  trap 'if [[ -n $child ]]; then kill -TERM "$child" 2>/dev/null; wait "$child"; fi; exit 0' TERM INT
  while true; do
    set -a
    # shellcheck disable=SC1091
    . "$state/worker.run.env"
    set +a
    # shellcheck disable=SC2086  # ABLATE_WORKER_ARGS is a word list by design
    "$worker" $ABLATE_WORKER_ARGS &
    child=$!
    rc=0
    wait "$child" || rc=$?
    child=""
    echo "$(date -Is) remote-service.sh: ablate-worker exited with $rc; restarting in ${restart_delay} s"
    # In the background so that a SIGTERM during the pause is handled at once.
    sleep "$restart_delay" &
    wait $! || true
  done
}

stop_loop() {
  [[ -f $state/worker.pid ]] || return 0
  local pid
  pid=$(cat "$state/worker.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    # The worker finishes its step and hands the lease back; give it the heartbeat window.
    for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$state/worker.pid"
}

case ${1:-} in
  start)
    [[ -f $state/worker.env ]] || { echo "remote-service.sh: $state/worker.env missing (run attach.sh)" >&2; exit 1; }
    [[ -x $worker ]] || { echo "remote-service.sh: $worker missing (run attach.sh)" >&2; exit 1; }
    if has_systemd; then
      start_systemd
    else
      stop_loop
      (umask 077; compose_env "$state/ca.crt" >"$state/worker.run.env")
      setsid nohup bash "$here/remote-service.sh" loop >>"$state/worker.log" 2>&1 </dev/null &
      echo $! >"$state/worker.pid"
    fi
    ;;
  stop)
    if has_systemd && [[ -f /etc/systemd/system/ablate-worker.service ]]; then
      $sudo systemctl disable --now ablate-worker.service
    fi
    stop_loop
    ;;
  status)
    if has_systemd && [[ -f /etc/systemd/system/ablate-worker.service ]]; then
      systemctl is-active ablate-worker.service
      $sudo journalctl -u ablate-worker.service -n 20 --no-pager
    elif [[ -f $state/worker.pid ]] && kill -0 "$(cat "$state/worker.pid")" 2>/dev/null; then
      echo "running (restart loop, pid $(cat "$state/worker.pid"))"
      tail -n 20 "$state/worker.log"
    else
      echo "not running" >&2
      exit 1
    fi
    ;;
  loop) loop ;;
  *) echo "usage: remote-service.sh start|stop|status" >&2; exit 2 ;;
esac
