#!/usr/bin/env python3
"""Serves every metric name of docs/architecture.md#observability (server and worker) on
loopback, with values that move.

  fake_exporter.py PORT_FILE

Binds 127.0.0.1 on a free port, writes the port to PORT_FILE, serves /metrics until killed.
GET /end-sweep makes it drop every series of the sweep, as the server does when a sweep ends.
It stands in for ablate-server and ablate-worker when testing the dashboards and recording
rules against a real Prometheus without building or running the C++ services; the end-to-end
test repeats the dashboard check against the real server after a real sweep. The label sets
here must match what the server exports, so a renamed label breaks this test as well as the
dashboards.
"""

import http.server
import itertools
import math
import sys
import time

SWEEP = "smoke"
STATES = ("queued", "leased", "running", "succeeded", "diverged", "failed", "cancelled", "skipped")
# Per-run labels as the server writes them (server/metrics.cc RunLabels): qk_norm, lr, n_layer,
# seed always; every grid axis of the sweep under its own name; `variant`, the run's values of
# the axes other than lr, n_layer and seed. A cell's (CellLabels) are the same without run and
# seed.
RUNS = [
    dict(run=f"r{i:02d}", qk_norm=q, lr=lr, n_layer=L, seed=s, variant=f"qk_norm={q}")
    for i, (q, lr, L, s) in enumerate(
        itertools.product(("none", "layernorm"), ("0.001", "0.01", "0.1"), ("2", "4"), ("0", "1")))
]
# A second live sweep over pos x attn_softcap (qk_norm fixed): its runs differ only in axes the
# first sweep does not have, which the dashboards must tell apart.
AXES_SWEEP = "posgrid"
AXES_RUNS = [
    dict(run=f"p{i:02d}", qk_norm="none", lr=lr, n_layer=L, seed=s, pos=pos, attn_softcap=cap,
         variant=f"attn_softcap={cap},pos={pos}")
    for i, (pos, cap, lr, L, s) in enumerate(
        itertools.product(("learned", "rope"), ("0", "30"), ("0.001", "0.01"), ("2", "4"), ("0", "1")))
]
SWEEP_RUNS = {SWEEP: RUNS, AXES_SWEEP: AXES_RUNS}
START = time.time()
sweep_active = True


def labels(**kv):
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


def render():
    t = time.time() - START
    step = int(t * 10)
    out = []

    def gauge(name, value, **kv):
        out.append(f"{name}{labels(**kv) if kv else ''} {value}")

    for name in ("ablate_runs", "ablate_workers", "ablate_run_step", "ablate_run_train_loss",
                 "ablate_run_val_loss", "ablate_run_tokens_per_second", "ablate_run_max_attn_logit",
                 "ablate_run_probe",
                 "ablate_sweep_progress_ratio", "ablate_sweep_eta_seconds", "ablate_worker_info",
                 "ablate_worker_busy", "ablate_worker_step_seconds", "ablate_worker_tokens_per_second",
                 "ablate_worker_device_memory_used_bytes", "ablate_worker_current_run",
                 "ablate_worker_spooled_points", "ablate_worker_paused_runs", "ablate_sweep_refined_runs",
                 "ablate_cell_val_loss", "ablate_cell_max_attn_logit", "ablate_cell_refine_round"):
        out.append(f"# TYPE {name} gauge")
    counts = dict(queued=10, leased=1, running=1, succeeded=10, diverged=2, failed=0, cancelled=0, skipped=2)
    for sweep in SWEEP_RUNS if sweep_active else ():
        for state in STATES:
            gauge("ablate_runs", counts[state], sweep=sweep, state=state)
    for state, n in (("idle", 1), ("busy", 2), ("benched", 1), ("lost", 1), ("offline", 0)):
        gauge("ablate_workers", n, state=state, device="cpu")
    # A worker benched for worker-side failures (issue #38), and those failures by device kind.
    out.append("# TYPE ablate_worker_benched gauge")
    gauge("ablate_worker_benched", 1, worker="broken-cpu-1", device="cpu")
    out.append("# TYPE ablate_worker_faults_total counter")
    gauge("ablate_worker_faults_total", 3 + step // 20, device="cpu")
    for sweep, runs in SWEEP_RUNS.items() if sweep_active else ():
        cells = {}  # the run's labels without run and seed -> its seeds' (val loss, logit)
        for r in runs:
            lr, depth = float(r["lr"]), int(r["n_layer"])
            loss = 2.0 + 6.0 * math.exp(-step / 200) + (3.0 * lr * depth if r["qk_norm"] == "none" else 0.0)
            loss += 0.1 * (r.get("pos") == "rope") + 0.01 * float(r.get("attn_softcap", 0))
            logit = round(5 + (lr * 1000 * depth if r["qk_norm"] == "none" else 2), 2)
            cell = tuple((k, v) for k, v in r.items() if k not in ("run", "seed"))
            cells.setdefault(cell, []).append((loss + 0.05, logit))
            gauge("ablate_run_step", step, sweep=sweep, **r)
            gauge("ablate_run_train_loss", round(loss, 4), sweep=sweep, **r)
            gauge("ablate_run_val_loss", round(loss + 0.05, 4), sweep=sweep, **r)
            gauge("ablate_run_tokens_per_second", 12000 + 100 * depth, sweep=sweep, **r)
            gauge("ablate_run_max_attn_logit", logit, sweep=sweep, **r)
            for probe, value in (("attn_entropy", 2.5), ("kurtosis", 3.2), ("grad_norm", 0.8),
                                 ("param_norm", 120.0), ("output_logit_max", 9.0), ("lr", lr)):
                gauge("ablate_run_probe", value, sweep=sweep, probe=probe, **r)
        # Cells as the server folds them (server/metrics.cc CellLabels): the seeds' mean loss and
        # highest logit; the last cell stands for one refinement added.
        for i, (cell, seeds) in enumerate(cells.items()):
            gauge("ablate_cell_val_loss", round(sum(v for v, _ in seeds) / len(seeds), 4),
                  sweep=sweep, **dict(cell))
            gauge("ablate_cell_max_attn_logit", max(g for _, g in seeds), sweep=sweep, **dict(cell))
            if i == len(cells) - 1:
                gauge("ablate_cell_refine_round", 1, sweep=sweep, **dict(cell))
    if sweep_active:
        for sweep in SWEEP_RUNS:
            gauge("ablate_sweep_refined_runs", 2, sweep=sweep)
        gauge("ablate_sweep_progress_ratio", round(min(1.0, t / 600), 4), sweep=SWEEP)
        gauge("ablate_sweep_eta_seconds", max(0.0, 600 - t), sweep=SWEEP)
        # No run of this sweep has finished yet: the server exports -1 (unknown).
        gauge("ablate_sweep_progress_ratio", 0, sweep=AXES_SWEEP)
        gauge("ablate_sweep_eta_seconds", -1, sweep=AXES_SWEEP)
    if sweep_active:
        # What the sweep was charged (issue #25): counters per device class, and its budget.
        out.append("# TYPE ablate_sweep_device_seconds_total counter")
        out.append("# TYPE ablate_sweep_cost_usd_total counter")
        out.append("# TYPE ablate_sweep_budget_used_ratio gauge")
        for sweep in SWEEP_RUNS:
            for cls, rate in (("cuda NVIDIA GeForce RTX 4090", 4.0), ("cpu fake", 1.0)):
                gauge("ablate_sweep_device_seconds_total", round(rate * t, 3), sweep=sweep,
                      device_class=cls)
                gauge("ablate_sweep_cost_usd_total", round(rate * t * 0.35 / 3600, 6),
                      sweep=sweep, device_class=cls)
            gauge("ablate_sweep_budget_used_ratio", round(min(1.0, t / 900), 4), sweep=sweep)
    for name, value in (("ablate_leases_granted_total", 14 + step // 10),
                        ("ablate_leases_expired_total", 0),
                        ("ablate_metric_points_total", step * 24)):
        out.append(f"# TYPE {name} counter")
        gauge(name, value)
    out.append("# TYPE ablate_rpc_duration_seconds histogram")
    for method in ("Lease", "Heartbeat", "ReportMetrics", "Complete"):
        calls = step + 1
        cumulative = 0
        for le, share in (("0.001", 0.5), ("0.01", 0.3), ("0.1", 0.15), ("1", 0.05), ("+Inf", 0.0)):
            cumulative += int(calls * share)
            gauge("ablate_rpc_duration_seconds_bucket", calls if le == "+Inf" else cumulative,
                  method=method, le=le)
        gauge("ablate_rpc_duration_seconds_sum", round(calls * 0.01, 4), method=method)
        gauge("ablate_rpc_duration_seconds_count", calls, method=method)
    w = "fake-cpu-0"
    gauge("ablate_worker_info", 1, worker=w, device_kind="cpu", device_name="fake", torch_version="2.1.2")
    gauge("ablate_worker_busy", 1, worker=w)
    gauge("ablate_worker_step_seconds", 0.08, worker=w)
    gauge("ablate_worker_tokens_per_second", 12200, worker=w)
    gauge("ablate_worker_device_memory_used_bytes", 512 * 1024 * 1024, worker=w)
    gauge("ablate_worker_current_run", 1, worker=w, run=RUNS[0]["run"])
    gauge("ablate_worker_spooled_points", 0, worker=w)
    gauge("ablate_worker_paused_runs", 0, worker=w)
    return ("\n".join(out) + "\n").encode()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        global sweep_active
        if self.path == "/end-sweep":
            sweep_active = False
            body = b"ended\n"
        elif self.path == "/metrics":
            body = render()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: fake_exporter.py PORT_FILE")
    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1], "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
