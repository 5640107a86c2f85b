"""Worker overhead benchmark: dispatch gap and the worker's own share of a run's wall time.

Starts a throwaway PostgreSQL, ablate-server and one ablate-worker, runs a sweep (default: the
smoke sweep) and reads the worker's per-run log lines:
  run N: succeeded — train 4.21s, worker overhead 0.012s (0.28%), dispatch gap 3.1 ms
Prints the median and p90 dispatch gap (idle time between finishing one run and starting the
next) and the worker's overhead (everything outside the trainer) as a share of total wall time.

  /usr/bin/python3 bench/worker/worker_bench.py [--sweep FILE] [--build DIR] [--data-dir DIR]

With --compare-slots it runs the sweep three times instead, each time on a fresh database: once
on one worker with `--slots 2 --threads 2` (a thread per slot), once on two workers with
`--threads 1`, then once on one worker with `--threads 2` (one run at a time, its steps sharded
over both threads), and prints runs/hour and tokens/s (all tokens trained / the sweep's wall time, submit to last
run finished) side by side, with the load average before and after.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", default=os.path.join(SRC, "examples", "smoke.yaml"))
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--data-dir", default=os.path.join(SRC, "..", "shared", "data"))
    ap.add_argument("--threads", type=int, default=0, help="worker training threads (0: all cores)")
    ap.add_argument("--compare-slots", action="store_true",
                    help="one worker --slots 2 --threads 2 against two workers --threads 1")
    ap.add_argument("--two-workers-first", action="store_true",
                    help="with --compare-slots: run the two-worker configuration first")
    args = ap.parse_args()
    os.environ["ABLATE_BINARY_DIR"] = os.path.abspath(args.build)
    os.environ["ABLATE_SOURCE_DIR"] = SRC
    pg = tempfile.mkdtemp(prefix="ablate-bench-pg-")
    os.chmod(pg, 0o755)
    pg_dir = os.path.join(pg, "pg")
    subprocess.check_call([os.path.join(SRC, "scripts", "dev-postgres"), "start", pg_dir], stdout=subprocess.DEVNULL)
    os.environ["ABLATE_TEST_PG_DIR"] = pg_dir
    import harness  # noqa: E402  (reads the environment set above)
    if args.compare_slots:
        try:
            compare_slots(harness, args)
        finally:
            subprocess.call([os.path.join(SRC, "scripts", "dev-postgres"), "stop", pg_dir])
        return
    stack = harness.Stack(lease_seconds=30, data_dir=os.path.abspath(args.data_dir))
    try:
        sweep = sweep_for(harness, stack, args.sweep)
        stack.start_server()
        stack.start_worker("bench-worker", threads=args.threads)
        sweep_id = stack.submit(sweep)
        runs = stack.wait_sweep_done(sweep_id, 3600)
        log = stack.log("bench-worker")
    finally:
        stack.close()
        subprocess.call([os.path.join(SRC, "scripts", "dev-postgres"), "stop", pg_dir])
    train = overhead = 0.0
    gaps = []
    for m in re.finditer(r"train ([\d.]+)s, worker overhead ([\d.]+)s \([\d.]+%\)(?:, dispatch gap ([\d.]+) ms)?", log):
        train += float(m.group(1))
        overhead += float(m.group(2))
        if m.group(3):
            gaps.append(float(m.group(3)))
    states = {}
    for r in runs:
        states[r["state"].lower()] = states.get(r["state"].lower(), 0) + 1
    print(f"worker_bench: {len(runs)} runs of {os.path.basename(args.sweep)} on {os.cpu_count()} CPU cores, one worker ({args.threads or 'all'} threads); states {states}")
    if gaps:
        gaps.sort()
        print(f"  dispatch gap: median {statistics.median(gaps):.1f} ms, p90 {gaps[int(0.9 * (len(gaps) - 1))]:.1f} ms, max {gaps[-1]:.1f} ms (target: median <= 50 ms)")
    total = train + overhead
    if total > 0:
        print(f"  worker overhead: {overhead:.2f} s of {total:.1f} s wall = {100 * overhead / total:.2f}% (target <= 1%)")
        print("  (overhead = data-set/checkpoint fetch, metric drain before Complete, Complete itself;"
              " the trainer's own start-up counts as training)")


def sweep_for(harness, stack, path):
    """The sweep file, with the generated corpus in place of TinyStories when that is absent."""
    if os.path.exists(os.path.join(stack.data_dir, "tinystories_train.txt")):
        return path
    with open(path) as f:
        text = f.read()
    text = text.replace("train: tinystories_train.txt", 'train: "synthetic:20000"')
    text = text.replace("val: tinystories_valid.txt", 'val: "synthetic:2000"')
    return harness.write_sweep(stack.dir, "bench-sweep", text)


def run_tokens(run):
    c = run.get("config", {})
    steps = int(run.get("result", {}).get("steps_done", 0))
    return steps * int(c.get("batch_size", 0)) * int(c.get("block_size", 0)) * max(1, int(c.get("grad_accum", 1)))


def timed_sweep(harness, args, workers):
    """Runs the sweep on `workers` [(name, threads, extra flags)] once they are registered:
    (wall seconds from submit to the last run finished, runs)."""
    stack = harness.Stack(lease_seconds=30, data_dir=os.path.abspath(args.data_dir))
    try:
        sweep = sweep_for(harness, stack, args.sweep)
        stack.start_server()
        for name, threads, extra in workers:
            stack.start_worker(name, threads=threads, extra=extra)
        harness.wait_for(lambda: len(stack.cli_json("workers")) == len(workers), 60, "the workers to register")
        started = time.monotonic()
        sweep_id = stack.submit(sweep)
        runs = stack.wait_sweep_done(sweep_id, 7200)
        return time.monotonic() - started, runs
    finally:
        stack.close()


def compare_slots(harness, args):
    configs = [("1 worker, --slots 2 --threads 2", [("slots-worker", 2, ("--slots", "2"))]),
               ("2 workers, --threads 1 each", [("worker-a", 1, ()), ("worker-b", 1, ())])]
    if args.two_workers_first:
        configs.reverse()
    # One run at a time, each step's batch sharded over both threads (docs/trainer.md).
    configs.append(("1 worker, --threads 2 (sharded)", [("sharded-worker", 2, ())]))
    load_before = os.getloadavg()
    rows = []
    for label, workers in configs:
        load = os.getloadavg()[0]
        wall, runs = timed_sweep(harness, args, workers)
        tokens = sum(run_tokens(r) for r in runs)
        per_run = sorted(float(r.get("result", {}).get("tokens_per_second", 0)) for r in runs
                         if r["state"].lower() in ("succeeded", "diverged"))
        states = {}
        for r in runs:
            states[r["state"].lower()] = states.get(r["state"].lower(), 0) + 1
        rows.append((label, len(runs), wall, 3600 * len(runs) / wall, tokens / wall,
                     statistics.median(per_run) if per_run else 0, states, load, os.getloadavg()[0]))
    load_after = os.getloadavg()
    print(f"worker_bench --compare-slots: {os.path.basename(args.sweep)} on {os.cpu_count()} CPU cores; "
          f"load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} before, "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after")
    print(f"  {'configuration':34} {'runs':>5} {'wall s':>8} {'runs/hour':>10} {'tokens/s':>10} "
          f"{'median run tok/s':>17} {'load 1m':>13}")
    for label, n, wall, rph, tps, med, states, l0, l1 in rows:
        print(f"  {label:34} {n:5d} {wall:8.1f} {rph:10.1f} {tps:10.0f} {med:17.0f} {l0:5.2f}->{l1:5.2f}  {states}")
    slots, two, sharded = (rows[1], rows[0], rows[2]) if args.two_workers_first else rows
    print(f"  slots / two workers: runs/hour x{slots[3] / two[3]:.3f}, tokens/s x{slots[4] / two[4]:.3f}")
    print(f"  sharded / two workers: runs/hour x{sharded[3] / two[3]:.3f}, "
          f"tokens/s x{sharded[4] / two[4]:.3f}")
    print("  (CPU only: GPU slot figures, one CUDA stream per slot, are not measured here)")


if __name__ == "__main__":
    main()
