"""Refinement benchmark (issue #11): does a coarse grid with refine + prune find the study's
boundaries for fewer runs than a dense grid at the resolution refinement reaches?

Starts a throwaway PostgreSQL, one ablate-server and N ablate-workers (one CPU thread each), and
runs the same study shape twice (QK-norm none/layernorm x 2 depths x 2 seeds, tiny CPU models on
the generated corpus, LR over [lr-min, lr-max]):
  (a) dense:   a log grid with LR ratio <= until_ratio (per_decade = ceil(1 / log10(until_ratio)))
  (b) refined: 2 LRs per decade, `refine:` (max_stable, max_good, eta_dagger, until_ratio,
               max_new_runs = --budget) and `prune: {above_divergence: true}`, coarse_to_fine
Prints runs executed (skipped runs were not executed), CPU-hours (sum of the runs' wall time;
each worker trains on one thread), and every boundary from both reports with its bracket, and
for (b) how many of (a)'s grid steps it lies from (a)'s bracket (0: inside it).

  /usr/bin/python3 bench/refine/refine_bench.py [--build DIR] [--workers 2] [--steps 60]
      [--budget 40] [--until-ratio 1.3] [--lr-min 1e-3] [--lr-max 3.2] [--keep]
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))

STUDY = """name: {name}
data: {{train: "synthetic:4000", val: "synthetic:400", tokenizer: {{type: bpe, vocab: 512}}}}
fixed: {{n_embd: 32, n_head: 2, block_size: 32, batch_size: 8, steps: {steps}, warmup: {warmup},
        eval_every: {steps}, eval_batches: 2, probe_every: {steps}, log_every: 10,
        checkpoint_every: 100000}}
grid:
  qk_norm: [none, layernorm]
  lr: {{logspace: {{min: {lr_min}, max: {lr_max}, per_decade: {per_decade}}}}}
  n_layer: [1, 2]
  seed: [0, 1]
order: coarse_to_fine
divergence: {{loss_above_init_by: 0.5, patience: 5}}
"""


def run_sweep(stack, name, text, timeout):
    path = os.path.join(stack.dir, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    started = time.time()
    sweep_id = stack.submit(path)
    runs = stack.wait_sweep_done(sweep_id, timeout)
    elapsed = time.time() - started
    report = json.loads(stack.cli("report", str(sweep_id), "--format", "json").stdout)
    executed = [r for r in runs if r["state"] in ("SUCCEEDED", "DIVERGED", "FAILED")]
    failed = [r for r in runs if r["state"] == "FAILED"]
    if failed:
        # A failed run is a broken setup, not a result: the comparison would be meaningless.
        raise SystemExit(f"{name}: {len(failed)} runs failed, e.g.: {failed[0].get('error', '')[:300]}")
    cpu_s = sum(float(r.get("result", {}).get("wall_seconds", 0) or 0) for r in executed)
    return {"runs": runs, "executed": len(executed), "skipped": sum(r["state"] == "SKIPPED" for r in runs),
            "refined": sum(int(r.get("refine_round", 0)) > 0 for r in runs), "cpu_h": cpu_s / 3600,
            "elapsed_s": elapsed, "report": report}


def boundaries(report):
    """{(kind, where): (value, lo, hi)} for max stable / max good LR per curve and eta-dagger."""
    out = {}
    for c in report["curves"]:
        where = f"qk_norm={c['variant']} n_layer={c['moderator']}"
        lo, hi = c["max_stable_bracket"]
        out[("max stable LR", where)] = (c["max_stable_lr"], lo, hi)
        lo, hi = c["max_good_bracket"]
        out[("max good LR", where)] = (c["max_good_lr"], lo, hi)
    for n in report["necessity"]:
        where = f"n_layer={n['moderator']} {n['variant']} vs {n['baseline']}"
        lo, hi = n["bracket"]
        out[("eta-dagger", where)] = (n["eta_dagger"], lo, hi)
    return out


def fmt(x):
    return "none" if x is None else "%.4g" % x


def steps_away(value, lo, hi, dense_lrs):
    """How many of the dense grid's steps `value` lies outside the dense bracket [lo, hi]: 0
    inside it, 1 between the bracket and the next dense LR beyond it, and so on."""
    if value is None or lo is None:
        return None
    top = hi if hi is not None else lo
    if lo * (1 - 1e-9) <= value <= top * (1 + 1e-9):
        return 0
    if value > top:
        return 1 + sum(1 for x in dense_lrs if top * (1 + 1e-9) < x < value * (1 - 1e-9))
    return 1 + sum(1 for x in dense_lrs if value * (1 + 1e-9) < x < lo * (1 - 1e-9))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--budget", type=int, default=40, help="refine.max_new_runs of (b)")
    ap.add_argument("--until-ratio", type=float, default=1.3)
    ap.add_argument("--lr-min", type=float, default=1e-3)
    ap.add_argument("--lr-max", type=float, default=3.2)
    ap.add_argument("--only", choices=["dense", "refined"], help="run one of the two sweeps")
    ap.add_argument("--timeout", type=int, default=6 * 3600)
    args = ap.parse_args()
    os.environ["ABLATE_BINARY_DIR"] = os.path.abspath(args.build)
    os.environ["ABLATE_SOURCE_DIR"] = SRC
    pg = tempfile.mkdtemp(prefix="ablate-bench-pg-")
    os.chmod(pg, 0o755)
    pg_dir = os.path.join(pg, "pg")
    subprocess.check_call([os.path.join(SRC, "scripts", "dev-postgres"), "start", pg_dir], stdout=subprocess.DEVNULL)
    os.environ["ABLATE_TEST_PG_DIR"] = pg_dir
    import harness  # noqa: E402  (reads the environment set above)

    dense_per_decade = math.ceil(1 / math.log10(args.until_ratio))
    common = dict(steps=args.steps, warmup=max(1, args.steps // 6), lr_min=args.lr_min, lr_max=args.lr_max)
    dense_text = STUDY.format(name="bench-dense", per_decade=dense_per_decade, **common)
    refined_text = STUDY.format(name="bench-refined", per_decade=2, **common) + (
        f"refine: {{axis: lr, boundaries: [max_stable, max_good, eta_dagger], until_ratio: {args.until_ratio}, "
        f"max_new_runs: {args.budget}}}\nprune: {{above_divergence: true}}\n")
    stack = harness.Stack(lease_seconds=30)
    results = {}
    try:
        stack.start_server()
        for i in range(args.workers):
            stack.start_worker(f"bench-w{i}", threads=1)
        if args.only != "dense":
            results["refined"] = run_sweep(stack, "bench-refined", refined_text, args.timeout)
        if args.only != "refined":
            results["dense"] = run_sweep(stack, "bench-dense", dense_text, args.timeout)
    finally:
        stack.close()
        subprocess.call([os.path.join(SRC, "scripts", "dev-postgres"), "stop", pg_dir], stdout=subprocess.DEVNULL)

    print(f"# refine_bench on {platform.node()} ({os.cpu_count()} CPUs, {platform.processor() or platform.machine()}), "
          f"{args.workers} workers x 1 thread, {args.steps} steps, n_embd 32, LR [{args.lr_min}, {args.lr_max}]")
    print(f"# (a) dense: {dense_per_decade} LRs per decade (ratio {10 ** (1 / dense_per_decade):.3f}); "
          f"(b) refined: 2 per decade + refine until {args.until_ratio}, max_new_runs {args.budget}, prune")
    for key, label in (("dense", "(a) dense"), ("refined", "(b) coarse+refine+prune")):
        if key not in results:
            continue
        r = results[key]
        print(f"{label:26s} runs executed {r['executed']:4d} (skipped {r['skipped']}, added by refinement "
              f"{r['refined']}), CPU-hours {r['cpu_h']:.3f}, wall {r['elapsed_s'] / 60:.1f} min")
    if len(results) == 2:
        a, b = results["dense"], results["refined"]
        print(f"(b) / (a): runs {b['executed'] / max(1, a['executed']):.0%}, "
              f"CPU-hours {b['cpu_h'] / max(1e-9, a['cpu_h']):.0%}")
    dense_lrs = sorted({float(r["grid_values"]["lr"]) for r in results.get("dense", {"runs": []})["runs"]})
    ba = boundaries(results["dense"]["report"]) if "dense" in results else {}
    bb = boundaries(results["refined"]["report"]) if "refined" in results else {}
    print(f"\n{'boundary':14s} {'where':34s} {'(a) value':>10s} {'(a) bracket':>22s} {'(b) value':>10s} "
          f"{'(b) bracket':>22s} {'(b) ratio':>9s} {'steps from (a)':>14s}")
    for k in sorted(set(ba) | set(bb)):
        va, la, ha = ba.get(k, (None, None, None))
        vb, lb, hb = bb.get(k, (None, None, None))
        away = steps_away(vb, la, ha, dense_lrs) if dense_lrs else None
        ratio = "open" if lb is not None and hb is None else ("-" if lb is None else "%.3g" % (hb / lb))
        print(f"{k[0]:14s} {k[1]:34s} {fmt(va):>10s} {'(' + fmt(la) + ', ' + fmt(ha) + ')':>22s} {fmt(vb):>10s} "
              f"{'(' + fmt(lb) + ', ' + fmt(hb) + ')':>22s} {ratio:>9s} {('-' if away is None else str(away)):>14s}")


if __name__ == "__main__":
    main()
