# shellcheck shell=bash
# Shared by attach.sh and stop.sh (sourced, not run): argument checks, and running commands on
# the box over ssh — or, in a dry run, printing them exactly, quoted as a reader would type them.
# The caller sets: prog (its name, for messages), a usage function, and ssh_cmd via
# make_ssh_cmd; common_arg sets host, ssh_port, identity and dry_run.
# prog, host, dry_run, ssh_port, identity, consumed and ssh_cmd belong to the sourcing script:
# shellcheck disable=SC2154,SC2034

die_usage() {
  echo "$prog: $*" >&2
  echo "run deploy/gpu/$prog --help for usage" >&2
  exit 2
}
need_value() { [[ $# -ge 2 && -n $2 ]] || die_usage "$1 needs a value"; }

# common_arg ARGS...: takes the options every script here accepts, and the host. Sets consumed
# to the number of words used: 0 when $1 is an option this function does not know.
common_arg() {
  consumed=0
  case $1 in
    --ssh-port) need_value "$@"; ssh_port=$2; consumed=2 ;;
    --identity) need_value "$@"; identity=$2; consumed=2 ;;
    --dry-run) dry_run=1; consumed=1 ;;
    -h|--help) usage ;;
    -*) ;;
    *) [[ -z $host ]] || die_usage "one host only (got '$host' and '$1')"; host=$1; consumed=1 ;;
  esac
}

check_ssh_args() {  # HOST SSH_PORT IDENTITY
  [[ -n $1 ]] || die_usage "give the box as USER@HOST"
  [[ $1 =~ ^([A-Za-z0-9._-]+@)?[A-Za-z0-9._:-]+$ ]] || die_usage "'$1' is not USER@HOST"
  [[ -z $2 || $2 =~ ^[0-9]{1,5}$ ]] || die_usage "--ssh-port must be a number"
  [[ -z $3 || -r $3 ]] || die_usage "--identity $3 is not readable"
}

make_ssh_cmd() {  # HOST SSH_PORT IDENTITY
  ssh_cmd=(ssh -o BatchMode=yes -o ConnectTimeout=20 -o ServerAliveInterval=30)
  if [[ -n $2 ]]; then ssh_cmd+=(-p "$2"); fi
  if [[ -n $3 ]]; then ssh_cmd+=(-i "$3"); fi
  ssh_cmd+=("$1")
}

# Shell-quotes one word: bare when safe, else in single quotes.
q() {
  if [[ $1 =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}
quote_all() {
  local out="" w
  for w in "$@"; do out+="${out:+ }$(q "$w")"; done
  printf '%s' "$out"
}

# remote CMD: runs CMD in the box's login shell, stdin closed.
remote() {
  if [[ $dry_run == 1 ]]; then
    echo "$(quote_all "${ssh_cmd[@]}") $(q "$1")"
  else
    "${ssh_cmd[@]}" "$1" </dev/null
  fi
}
# remote_file FILE CMD: CMD reads FILE on stdin.
remote_file() {
  if [[ $dry_run == 1 ]]; then
    echo "$(quote_all "${ssh_cmd[@]}") $(q "$2") < $(q "$1")"
  else
    "${ssh_cmd[@]}" "$2" <"$1"
  fi
}
# remote_secret TEXT SHOWN CMD: CMD reads TEXT on stdin; a dry run shows SHOWN instead.
remote_secret() {
  if [[ $dry_run == 1 ]]; then
    printf "%s <<'EOF'\n%s\nEOF\n" "$(quote_all "${ssh_cmd[@]}") $(q "$3")" "$2"
  else
    printf '%s\n' "$1" | "${ssh_cmd[@]}" "$3"
  fi
}
