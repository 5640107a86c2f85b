"""Worker overhead benchmark: dispatch gap and the worker's own share of a run's wall time.

Starts a throwaway PostgreSQL, ablate-server and one ablate-worker, runs a sweep (default: the
smoke sweep) and reads the worker's per-run log lines:
  run N: SUCCEEDED — train 4.21s, worker overhead 0.012s (0.28%), dispatch gap 3.1 ms
Prints the median and p90 dispatch gap (idle time between finishing one run and starting the
next) and the worker's overhead (everything outside the trainer) as a share of total wall time.

  /usr/bin/python3 bench/worker/worker_bench.py [--sweep FILE] [--build DIR] [--data-dir DIR]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", default=os.path.join(SRC, "examples", "smoke.yaml"))
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--data-dir", default=os.path.join(SRC, "..", "shared", "data"))
    ap.add_argument("--threads", type=int, default=0, help="worker training threads (0: all cores)")
    args = ap.parse_args()
    os.environ["ABLATE_BINARY_DIR"] = os.path.abspath(args.build)
    os.environ["ABLATE_SOURCE_DIR"] = SRC
    pg = tempfile.mkdtemp(prefix="ablate-bench-pg-")
    os.chmod(pg, 0o755)
    pg_dir = os.path.join(pg, "pg")
    subprocess.check_call([os.path.join(SRC, "scripts", "dev-postgres"), "start", pg_dir], stdout=subprocess.DEVNULL)
    os.environ["ABLATE_TEST_PG_DIR"] = pg_dir
    import harness  # noqa: E402  (reads the environment set above)
    stack = harness.Stack(lease_seconds=30, data_dir=os.path.abspath(args.data_dir))
    try:
        sweep = args.sweep
        if not os.path.exists(os.path.join(stack.data_dir, "tinystories_train.txt")):
            with open(args.sweep) as f:
                text = f.read()
            text = text.replace("train: tinystories_train.txt", 'train: "synthetic:20000"')
            text = text.replace("val: tinystories_valid.txt", 'val: "synthetic:2000"')
            sweep = harness.write_sweep(stack.dir, "bench-sweep", text)
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
        states[r["state"]] = states.get(r["state"], 0) + 1
    print(f"worker_bench: {len(runs)} runs of {os.path.basename(args.sweep)} on {os.cpu_count()} CPU cores, one worker ({args.threads or 'all'} threads); states {states}")
    if gaps:
        gaps.sort()
        print(f"  dispatch gap: median {statistics.median(gaps):.1f} ms, p90 {gaps[int(0.9 * (len(gaps) - 1))]:.1f} ms, max {gaps[-1]:.1f} ms (target: median <= 50 ms)")
    total = train + overhead
    if total > 0:
        print(f"  worker overhead: {overhead:.2f} s of {total:.1f} s wall = {100 * overhead / total:.2f}% (target <= 1%)")
        print("  (overhead = data-set/checkpoint fetch, metric drain before Complete, Complete itself;"
              " the trainer's own start-up counts as training)")


if __name__ == "__main__":
    main()
