#!/usr/bin/env bash
# Makes a private CA and a server certificate for ablate-server's gRPC port.
#
#   deploy/tls/make-certs.sh [--out DIR] [--days N] NAME_OR_IP...
#
# NAME_OR_IP: every address workers and the CLI will dial (the public IP or DNS name of the
# server). localhost, 127.0.0.1 and ablate-server (the docker compose name) are always added.
# Writes to DIR (default deploy/tls/out): ca.crt (give this to workers: --tls-ca), ca.key (keep
# private; re-run with the same DIR to issue a new server certificate from the same CA, so
# workers need not be touched), server.crt and server.key (for ablate-server --tls-cert/--tls-key).
#
# A private CA rather than a self-signed leaf: workers pin the CA once, and the server
# certificate can be reissued (new IP, expiry) without redistributing anything.
set -euo pipefail

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

out="$(cd "$(dirname "$0")" && pwd)/out"
days=825
names=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) [[ $# -ge 2 ]] || usage; out=$2; shift 2 ;;
    --days) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || usage; days=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "make-certs.sh: unknown option $1" >&2; usage ;;
    *) names+=("$1"); shift ;;
  esac
done
[[ ${#names[@]} -gt 0 ]] || { echo "make-certs.sh: give at least one public name or IP of the server" >&2; usage; }
command -v openssl >/dev/null || { echo "make-certs.sh: openssl not found" >&2; exit 1; }

san=""
declare -A seen=()
for n in "${names[@]}" localhost 127.0.0.1 ablate-server; do
  [[ -n ${seen[$n]:-} ]] && continue
  seen[$n]=1
  if [[ $n =~ ^[0-9]+(\.[0-9]+){3}$ || $n == *:* ]]; then
    san+="${san:+,}IP:$n"
  elif [[ $n =~ ^[A-Za-z0-9*]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]]; then
    san+="${san:+,}DNS:$n"
  else
    echo "make-certs.sh: '$n' is neither an IP address nor a DNS name" >&2; exit 2
  fi
done

mkdir -p "$out"
umask 077
if [[ ! -s "$out/ca.key" ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 3650 \
    -subj "/CN=ablate private CA" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$out/ca.key" -out "$out/ca.crt" 2>/dev/null
  echo "make-certs.sh: new CA in $out/ca.crt"
else
  echo "make-certs.sh: reusing the CA in $out/ca.crt"
fi

openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
  -subj "/CN=${names[0]}" -keyout "$out/server.key" -out "$out/server.csr" 2>/dev/null
cat >"$out/server.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$san
EXT
openssl x509 -req -in "$out/server.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" -CAcreateserial \
  -days "$days" -sha256 -extfile "$out/server.ext" -out "$out/server.crt" 2>/dev/null
rm -f "$out/server.csr" "$out/server.ext"
chmod 0644 "$out/ca.crt" "$out/server.crt"
openssl verify -CAfile "$out/ca.crt" "$out/server.crt" >/dev/null
echo "make-certs.sh: server certificate $out/server.crt for $san (valid $days days)"
