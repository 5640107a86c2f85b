#!/usr/bin/env bash
# Gets an ablate worker running on a rented CUDA box over ssh, dialing the server over TLS and
# restarting on failure.
#
#   deploy/gpu/attach.sh USER@HOST --server PUBLIC_ADDR:PORT --token TOKEN [options]
#
#   --server ADDR:PORT   the server's public gRPC address, as the box will dial it
#   --token T            a worker token (ablate-server token create --role worker); or
#                        --token-file F, or the environment variable ABLATE_TOKEN
#   --tls-ca FILE        CA certificate the server's certificate chains to (deploy/tls/out/ca.crt);
#                        without it the worker trusts the box's system roots (--tls)
#   --insecure           plaintext gRPC (only through an ssh tunnel or a private network)
#   --mode docker|build|binary
#                        docker (default): a container with --gpus all and --restart
#                        unless-stopped; build: compile on the box against its PyTorch; binary:
#                        ship the prebuilt --worker-bin. build and binary run the worker under
#                        systemd (or a restart loop where the box has no systemd)
#   --worker-bin FILE    binary mode: an ablate-worker built on the same OS release as the box;
#                        it travels with the Debian packages its libraries come from (installed
#                        on the box when missing) and the libraries no package owns
#   --device cuda|cpu    what the worker trains on (default cuda)
#   --image REF          docker mode: pull REF instead of building the image on the box
#   --name NAME          worker name shown by `ablate workers` (default: the box's hostname)
#   --price-per-hour USD what the box costs an hour in US dollars (e.g. 0.35): the server's
#                        sweep estimates and budgets use it (default: not declared)
#   --ssh-port N, --identity FILE   passed to ssh
#   --dry-run            print the commands, token redacted, and run nothing
#
# The token never appears on a command line, here or on the box: it travels over ssh's stdin
# into a 0600 env file that docker (--env-file) or systemd (EnvironmentFile) reads.
# Stop the worker with deploy/gpu/stop.sh USER@HOST.
#
# Remote commands are written in single quotes on purpose: $HOME must expand on the box.
# shellcheck disable=SC2016
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

prog=attach.sh
# shellcheck source-path=SCRIPTDIR source=ssh-lib.sh
. "$here/ssh-lib.sh"
usage() {
  sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

host="" server="" token="${ABLATE_TOKEN:-}" token_file="" tls_ca="" insecure=0 mode=docker
image="" name="" price="" ssh_port="" identity="" dry_run=0 worker_bin="" device=cuda
while [[ $# -gt 0 ]]; do
  case $1 in
    --server) need_value "$@"; server=$2; shift 2 ;;
    --token) need_value "$@"; token=$2; shift 2 ;;
    --token-file) need_value "$@"; token_file=$2; shift 2 ;;
    --tls-ca) need_value "$@"; tls_ca=$2; shift 2 ;;
    --insecure) insecure=1; shift ;;
    --mode) need_value "$@"; mode=$2; shift 2 ;;
    --image) need_value "$@"; image=$2; shift 2 ;;
    --name) need_value "$@"; name=$2; shift 2 ;;
    --price-per-hour) need_value "$@"; price=$2; shift 2 ;;
    --worker-bin) need_value "$@"; worker_bin=$2; shift 2 ;;
    --device) need_value "$@"; device=$2; shift 2 ;;
    *) common_arg "$@"; [[ $consumed -gt 0 ]] || die_usage "unknown option $1"; shift "$consumed" ;;
  esac
done

check_ssh_args "$host" "$ssh_port" "$identity"
[[ -n $server ]] || die_usage "--server PUBLIC_ADDR:PORT is required"
[[ $server =~ ^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):[0-9]{1,5}$ ]] ||
  die_usage "--server '$server' is not HOST:PORT"
if [[ -n $token_file ]]; then
  [[ -r $token_file ]] || die_usage "--token-file $token_file is not readable"
  token=$(tr -d '[:space:]' <"$token_file")
fi
[[ -n $token ]] || die_usage "a worker token is required (--token, --token-file or ABLATE_TOKEN)"
# The token is written into an env file read by docker and systemd, neither of which unquotes
# reliably the same way: only characters that need no quoting anywhere are accepted.
[[ $token =~ ^[A-Za-z0-9._~+/=-]+$ ]] || die_usage "the token has characters a token cannot have"
case $mode in docker|build|binary) ;; *) die_usage "--mode must be docker, build or binary, not '$mode'" ;; esac
case $device in cuda|cpu) ;; *) die_usage "--device must be cuda or cpu, not '$device'" ;; esac
[[ $device == cuda || $mode != docker ]] || die_usage "--mode docker runs the CUDA image: --device cuda only"
if [[ $mode == binary ]]; then
  [[ -n $worker_bin ]] || die_usage "--mode binary needs --worker-bin FILE"
  [[ -f $worker_bin && -x $worker_bin ]] || die_usage "--worker-bin $worker_bin is not an executable file"
else
  [[ -z $worker_bin ]] || die_usage "--worker-bin applies to --mode binary only"
fi
[[ -z $image || $mode == docker ]] || die_usage "--image applies to --mode docker only"
[[ -z $image || $image =~ ^[A-Za-z0-9._/:@-]+$ ]] || die_usage "--image '$image' is not an image reference"
[[ -z $name || $name =~ ^[A-Za-z0-9._-]+$ ]] || die_usage "--name may hold letters, digits, . _ - only"
[[ -z $price || $price =~ ^([0-9]+(\.[0-9]*)?|\.[0-9]+)$ ]] ||
  die_usage "--price-per-hour must be a number of US dollars such as 0.35, not '$price'"
if [[ -n $tls_ca ]]; then
  [[ $insecure == 0 ]] || die_usage "--tls-ca and --insecure contradict each other"
  [[ -r $tls_ca ]] || die_usage "--tls-ca $tls_ca is not readable"
  grep -q 'BEGIN CERTIFICATE' "$tls_ca" || die_usage "--tls-ca $tls_ca holds no PEM certificate"
fi
[[ $insecure == 0 ]] ||
  echo "attach.sh: warning: --insecure sends the token and all traffic in plaintext" >&2

make_ssh_cmd "$host" "$ssh_port" "$identity"

# Ships the committed tree (HEAD), not the working copy: what runs on the box is reproducible
# from a commit id. Arguments limit it to those paths (binary mode needs only the scripts).
upload_source() {
  local cmd='rm -rf "$HOME/.ablate/src" && mkdir -p "$HOME/.ablate/src" && tar -x -C "$HOME/.ablate/src"'
  if [[ $dry_run == 1 ]]; then
    echo "$(quote_all git -C "$repo" archive --format=tar HEAD "$@") | $(quote_all "${ssh_cmd[@]}") $(q "$cmd")"
  else
    git -C "$repo" archive --format=tar HEAD "$@" | "${ssh_cmd[@]}" "$cmd"
  fi
}

# Binary mode: stages in $bundle what goes to ~/.ablate on the box (see remote-install.sh). Done
# in a dry run too, so that a binary with a library nothing here provides is refused before any
# box is touched.
make_bundle() {
  local lib
  mkdir -p "$bundle/bin" "$bundle/lib"
  install -m 0755 "$worker_bin" "$bundle/bin/ablate-worker"
  command -v dpkg >/dev/null ||
    { echo "$prog: --mode binary needs dpkg here, to name the packages the worker's libraries come from" >&2; exit 1; }
  # libcuda.so.1 is the NVIDIA driver's, present on a GPU box and on no build machine.
  if ! ALLOW_MISSING=libcuda.so.1 UNOWNED_OUT="$bundle/unowned" \
      "$repo/deploy/docker/runtime-packages.sh" "$worker_bin" >"$bundle/runtime-packages.txt" 2>"$bundle/errors"; then
    grep -v 'no package owns' "$bundle/errors" >&2
    exit 1
  fi
  # What ldd cannot see: the BLAS that Debian's LibTorch loads through an alternative, the
  # tokenizer's spm_* tools, and the roots a --tls worker trusts.
  printf '%s\n' libblis4-pthread sentencepiece ca-certificates >>"$bundle/runtime-packages.txt"
  while read -r lib; do cp -L "$lib" "$bundle/lib/"; done <"$bundle/unowned"
  rm "$bundle/unowned" "$bundle/errors"
  # shellcheck disable=SC1091
  (. /etc/os-release && echo "$ID:$VERSION_ID") >"$bundle/build-os"
}
upload_bundle() {
  # --no-same-owner: the files belong to the ssh user, whoever owned them here.
  local cmd='rm -rf "$HOME/.ablate/bin" "$HOME/.ablate/lib" && tar -x --no-same-owner -C "$HOME/.ablate"'
  if [[ $dry_run == 1 ]]; then
    echo "tar -C $(q "$bundle") -c . | $(quote_all "${ssh_cmd[@]}") $(q "$cmd")"
    # On stderr: stdout holds only the commands, as a reader would type them.
    echo "$prog: the bundle holds bin/ablate-worker, $(find "$bundle/lib" -type f | wc -l) libraries in lib/," \
         "build-os $(cat "$bundle/build-os") and runtime-packages.txt: $(sort -u "$bundle/runtime-packages.txt" | tr '\n' ' ')" >&2
  else
    tar -C "$bundle" -c . | "${ssh_cmd[@]}" "$cmd"
  fi
}

worker_args=()
[[ -n $name ]] && worker_args+=(--name "$name")
[[ -n $price ]] && worker_args+=(--price-per-hour "$price")

if [[ $mode == binary ]]; then
  bundle=$(mktemp -d)
  trap 'rm -rf "$bundle"' EXIT
  make_bundle
fi

remote 'mkdir -p "$HOME/.ablate" && chmod 700 "$HOME/.ablate"'
[[ -n $tls_ca ]] && remote_file "$tls_ca" 'cat > "$HOME/.ablate/ca.crt"'
if [[ $mode == binary ]]; then
  upload_source deploy/gpu deploy/systemd
  upload_bundle
elif [[ -z $image ]]; then
  upload_source
fi

if [[ $mode == docker ]]; then
  # Docker reads --env-file itself, so the token reaches the worker's environment without
  # passing through any process's argv.
  remote_secret "ABLATE_TOKEN=$token" "ABLATE_TOKEN=<redacted>" \
    'umask 077 && cat > "$HOME/.ablate/worker.env"'
  if [[ -n $image ]]; then
    remote "docker pull $(q "$image")"
  else
    image=ablate-worker-cuda:local
    remote 'docker build -f "$HOME/.ablate/src/deploy/docker/worker-cuda.Dockerfile" -t ablate-worker-cuda:local "$HOME/.ablate/src"'
  fi
  run=(docker run -d --name ablate-worker --gpus all --restart unless-stopped
       --env-file '"$HOME/.ablate/worker.env"' -v ablate-worker-work:/var/lib/ablate/work)
  tls_args=()
  if [[ -n $tls_ca ]]; then
    run+=(-v '"$HOME/.ablate/ca.crt":/etc/ablate/ca.crt:ro')
    tls_args=(--tls-ca /etc/ablate/ca.crt)
  elif [[ $insecure == 0 ]]; then
    tls_args=(--tls)
  fi
  # Words already quoted for the remote shell ($HOME paths) pass through as they are.
  run_line=""
  for w in "${run[@]}"; do
    if [[ $w == *'"$HOME'* ]]; then run_line+=" $w"; else run_line+=" $(q "$w")"; fi
  done
  run_line="${run_line# } $(quote_all "$image" --server "$server" "${tls_args[@]}" --device cuda "${worker_args[@]}")"
  remote 'docker rm -f ablate-worker >/dev/null 2>&1 || true'
  remote "$run_line"
  # A worker that cannot reach the server or the GPU exits at once and docker restarts it, so
  # "still running after 15 s" is the check; its log says why when it is not.
  remote 'sleep 15; docker logs --tail 20 ablate-worker; docker ps --filter name=^ablate-worker$ --filter status=running --format "{{.Names}}: {{.Status}}" | grep .'
else
  # remote-service.sh adds ABLATE_TLS_CA for wherever it installs ca.crt.
  if [[ -z $tls_ca && $insecure == 0 ]]; then worker_args=(--tls "${worker_args[@]}"); fi
  args_line=$(quote_all --device "$device" "${worker_args[@]}")
  env_text="ABLATE_SERVER=$server
ABLATE_WORKER_ARGS=\"$args_line\""
  remote_secret "$env_text
ABLATE_TOKEN=$token" "$env_text
ABLATE_TOKEN=<redacted>" 'umask 077 && cat > "$HOME/.ablate/worker.env"'
  if [[ $mode == build ]]; then
    remote "bash \"\$HOME/.ablate/src/deploy/gpu/remote-build.sh\" --device $device"
  else
    remote 'bash "$HOME/.ablate/src/deploy/gpu/remote-install.sh"'
  fi
  remote 'bash "$HOME/.ablate/src/deploy/gpu/remote-service.sh" start'
  remote 'sleep 15; bash "$HOME/.ablate/src/deploy/gpu/remote-service.sh" status'
fi
[[ $dry_run == 1 ]] || echo "attach.sh: worker running on $host; check it with: ablate workers"
