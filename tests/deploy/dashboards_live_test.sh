#!/usr/bin/env bash
# Evaluates every dashboard query through a real Prometheus (Debian's, with our recording rules).
#
#   dashboards_live_test.sh [TARGET...] [-- CHECK_DASHBOARDS_ARGS...]
#
# With no TARGET it scrapes fake_exporter.py, which serves the metric names and labels of
# DESIGN.md §7: that catches a misspelt metric, a wrong label or a broken recording rule without
# the C++ services. With TARGETs (host:port of a real ablate-server's and workers' /metrics,
# e.g. from the end-to-end test while a sweep runs) it scrapes those instead. Arguments after
# -- go to check_dashboards.py (e.g. --sweep S, --optional 'ablate_worker_').
set -euo pipefail

targets=() check_args=()
while [[ $# -gt 0 ]]; do
  if [[ $1 == -- ]]; then shift; check_args=("$@"); break; fi
  [[ $1 =~ ^[A-Za-z0-9.-]+:[0-9]+$ ]] || { echo "dashboards_live_test.sh: '$1' is not host:port" >&2; exit 2; }
  targets+=("\"$1\""); shift
done

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
command -v prometheus >/dev/null || { echo "prometheus not installed (scripts/install-deps)" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

if [[ ${#targets[@]} -eq 0 ]]; then
  python3 "$here/fake_exporter.py" "$tmp/exporter.port" &
  pids+=($!)
  for _ in $(seq 50); do [[ -s "$tmp/exporter.port" ]] && break; sleep 0.1; done
  [[ -s "$tmp/exporter.port" ]] || { echo "fake exporter did not start" >&2; exit 1; }
  targets=("\"127.0.0.1:$(cat "$tmp/exporter.port")\"")
fi
prom_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# Same rules file as production; only the targets differ. 1 s scrapes so that rate() windows
# fill within seconds.
cat >"$tmp/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [$repo/deploy/prometheus/rules.yml]
scrape_configs:
  - job_name: ablate-server
    static_configs: [{targets: [$(IFS=,; echo "${targets[*]}")]}]
EOF
promtool check config "$tmp/prometheus.yml" >/dev/null
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
pids+=($!)

if ! python3 "$here/check_dashboards.py" "http://127.0.0.1:$prom_port" --wait 90 "${check_args[@]}"; then
  echo "--- prometheus log" >&2; tail -n 20 "$tmp/prometheus.log" >&2
  exit 1
fi
