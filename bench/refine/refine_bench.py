"""Refinement benchmark: does a coarse grid with refine + prune give the dense grid's answer (the
same verdicts, every boundary inside the dense bracket or one dense step away, LR sensitivity
within 0.05) for a fraction of its compute?

Starts a throwaway PostgreSQL, one ablate-server and N ablate-workers (one CPU thread each), and
runs one study shape twice, side by side on the same server:
  (a) dense:   a log grid at the resolution refinement reaches, LR ratio <= until_ratio
               (per_decade = ceil(1 / log10(until_ratio)))
  (b) refined: a coarse grid, `refine:` (optimum, max_stable, max_good, eta_dagger, until_ratio,
               max_new_runs = --budget, seeds: {max: --seeds-max} when > 0) and
               `prune: {above_divergence: true}`, coarse_to_fine
Cases (--case):
  study      the mini-study where QK-norm matters at CPU scale (eta-dagger finite): TinyStories
             sample (examples/data), n_embd 64, 300 steps, QK-norm none/layernorm, n_layer 2 and
             4, 2 seeds, LR 3e-4..3; (a) 6 LRs per decade, (b) 1 per decade, until_ratio 1.5,
             max_new_runs 32, seeds up to 3.
             ~1 hour on 2 cores.
  synthetic  a one-minute smoke of the same comparison: n_embd 32, 60 steps on the generated
             corpus, n_layer 1 and 2, LR 1e-3..3.2; (a) 9 per decade, (b) 2, until_ratio 1.3.
Prints runs executed (skipped runs were not executed), compute (training FLOPs: each executed
run's steps times nanoGPT's estimate per step, 6N + 12 L d T per token; the same on any machine
and at any load, so it is the cost the target is checked on), CPU-hours (sum of the runs' wall
time, each worker on one thread: on a shared VM it moves up to 2x with the load), every boundary from both reports with its bracket and how
many of (a)'s grid steps (b)'s lies from (a)'s bracket (0: inside it), eta* / loss* / LR
sensitivity per curve, each verdict from both, and the targets met or missed.

  /usr/bin/python3 bench/refine/refine_bench.py [--case study|synthetic] [--build DIR]
      [--workers 2] [--budget N] [--seeds-max N] [--only dense|refined]
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

CASES = {
    "synthetic": dict(
        data='{train: "synthetic:4000", val: "synthetic:400", tokenizer: {type: bpe, vocab: 512}}',
        fixed="n_embd: 32, n_head: 2, block_size: 32, batch_size: 8, steps: 60, warmup: 10, "
              "eval_every: 60, eval_batches: 2, probe_every: 60, log_every: 10, checkpoint_every: 100000",
        depths="[1, 2]", lr_min=1e-3, lr_max=3.2, coarse_per_decade=2, until_ratio=1.3, budget=40, seeds_max=0,
        divergence="{loss_above_init_by: 0.5, patience: 5}", data_dir=None, vocab=512),
    "study": dict(
        data="{train: tinystories_train.txt, val: tinystories_valid.txt, tokenizer: {type: bpe, vocab: 1024}}",
        fixed="n_embd: 64, n_head: 2, block_size: 64, batch_size: 16, steps: 300, warmup: 30, "
              "weight_decay: 0.1, grad_clip: 1.0, eval_every: 300, eval_batches: 4, probe_every: 100, "
              "log_every: 10, checkpoint_every: 100000",
        depths="[2, 4]", lr_min=3e-4, lr_max=3.0, coarse_per_decade=1, until_ratio=1.5, budget=32, seeds_max=3,
        divergence="{loss_above_init_by: 1.0, patience: 20}",
        data_dir=os.path.join(SRC, "examples", "data"), vocab=1024),
}

STUDY = """name: {name}
data: {data}
fixed: {{{fixed}}}
grid:
  qk_norm: [none, layernorm]
  lr: {{logspace: {{min: {lr_min}, max: {lr_max}, per_decade: {per_decade}}}}}
  n_layer: {depths}
  seed: [0, 1]
order: coarse_to_fine
divergence: {divergence}
"""


def flops_per_step(config, vocab):
    """Training FLOPs of one optimizer step as nanoGPT's estimate_mfu counts them: 6N per token
    for the parameters (N without position embeddings, the tied embedding once) plus 12 L d T
    for attention, times the tokens of a step."""
    layers, d, t, b = config["n_layer"], config["n_embd"], config["block_size"], config["batch_size"]
    n = vocab * d + layers * 12 * d * d
    return (6 * n + 12 * layers * d * t) * b * t * int(config.get("grad_accum", 1) or 1)


def state(run):
    """A run's state in lower case, as `ablate` prints it and exports write it; exports saved by
    older builds (--reuse) say "SUCCEEDED"."""
    return run["state"].lower()


def summarise(name, runs, report, elapsed, vocab):
    executed = [r for r in runs if state(r) in ("succeeded", "diverged", "failed")]
    failed = [r for r in runs if state(r) == "failed"]
    if failed:
        # A failed run is a broken setup, not a result: the comparison would be meaningless.
        raise SystemExit(f"{name}: {len(failed)} runs failed, e.g.: {failed[0].get('error', '')[:300]}")
    cpu_s = sum(float(r.get("result", {}).get("wall_seconds", 0) or 0) for r in executed)
    flops = sum(int(r.get("result", {}).get("steps_done", 0) or 0) * flops_per_step(r["config"], vocab)
                for r in executed)
    return {"runs": runs, "executed": len(executed), "skipped": sum(state(r) == "skipped" for r in runs),
            "refined": sum(int(r.get("refine_round", 0)) > 0 for r in runs), "cpu_h": cpu_s / 3600,
            "pflop": flops / 1e15,
            "elapsed_s": elapsed, "report": report}


def run_sweep(stack, name, text, timeout, save, vocab):
    path = os.path.join(stack.dir, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    started = time.time()
    sweep_id = stack.submit(path)
    runs = stack.wait_sweep_done(sweep_id, timeout)
    elapsed = time.time() - started
    report = json.loads(stack.cli("report", str(sweep_id), "--format", "json").stdout)
    if save:
        # The runs as `ablate export` writes them: --reuse reports on them again, offline, with
        # the analysis of the build it is given (no training).
        stack.cli("export", str(sweep_id), "--out", os.path.join(save, name), "--no-metrics")
        with open(os.path.join(save, name, "elapsed_s"), "w") as f:
            f.write(f"{elapsed}\n")
    return summarise(name, runs, report, elapsed, vocab)


def reuse_sweep(build, directory, name, vocab):
    """The saved export of sweep `name`, reported on by this build's `ablate report --from`."""
    d = os.path.join(directory, name)
    if not os.path.exists(os.path.join(d, "runs.jsonl")):
        return None
    with open(os.path.join(d, "runs.jsonl")) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    out = subprocess.run([os.path.join(build, "client", "ablate"), "report", "--from", d, "--format", "json"],
                         check=True, capture_output=True, text=True).stdout
    with open(os.path.join(d, "elapsed_s")) as f:
        elapsed = float(f.read())
    return summarise(name, runs, json.loads(out), elapsed, vocab)


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
        if n["eta_dagger"] is not None and lo is None:  # at a compared LR, not interpolated
            lo = hi = n["eta_dagger"]
        out[("eta-dagger", where)] = (n["eta_dagger"], lo, hi)
    return out


def curve_figures(report):
    return {f"qk_norm={c['variant']} n_layer={c['moderator']}": c for c in report["curves"]}


def verdicts(report):
    return {(v["hypothesis"], v.get("context", ""), v.get("variant", "")): v for v in report["verdicts"]}


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
    ap.add_argument("--case", choices=sorted(CASES), default="study")
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget", type=int, help="refine.max_new_runs of (b) (default: the case's)")
    ap.add_argument("--seeds-max", type=int, help="refine.seeds.max of (b) (default: the case's); 0: none")
    ap.add_argument("--only", choices=["dense", "refined"], help="run one of the two sweeps")
    ap.add_argument("--timeout", type=int, default=6 * 3600)
    ap.add_argument("--save", help="`ablate export` each sweep into this directory when it finishes")
    ap.add_argument("--reuse", help="a --save directory: a sweep exported there is not run again but "
                    "reported on from its export with this build's analysis")
    args = ap.parse_args()
    case = CASES[args.case]
    budget = args.budget if args.budget is not None else case["budget"]
    if args.seeds_max is None:
        args.seeds_max = case["seeds_max"]
    os.environ["ABLATE_BINARY_DIR"] = os.path.abspath(args.build)
    os.environ["ABLATE_SOURCE_DIR"] = SRC
    until = case["until_ratio"]
    dense_per_decade = math.ceil(1 / math.log10(until))
    common = {k: case[k] for k in ("data", "fixed", "depths", "lr_min", "lr_max", "divergence")}
    seeds = f", seeds: {{max: {args.seeds_max}}}" if args.seeds_max > 0 else ""
    texts = {
        "refined": STUDY.format(name=f"bench-{args.case}-refined", per_decade=case["coarse_per_decade"], **common)
        + (f"refine: {{axis: lr, boundaries: [optimum, max_stable, max_good, eta_dagger], until_ratio: {until}, "
           f"max_new_runs: {budget}{seeds}}}\nprune: {{above_divergence: true}}\n"),
        "dense": STUDY.format(name=f"bench-{args.case}-dense", per_decade=dense_per_decade, **common),
    }
    # The coarse sweep first (the smaller), then the dense one, on one server and the same workers.
    wanted = [k for k in ("refined", "dense") if args.only in (None, k)]
    results = {}
    if args.reuse:
        for key in wanted:
            r = reuse_sweep(os.path.abspath(args.build), args.reuse, f"bench-{args.case}-{key}",
                            case["vocab"])
            if r is not None:
                results[key] = r
    to_run = [k for k in wanted if k not in results]
    if to_run:
        pg = tempfile.mkdtemp(prefix="ablate-bench-pg-")
        os.chmod(pg, 0o755)
        pg_dir = os.path.join(pg, "pg")
        subprocess.check_call([os.path.join(SRC, "scripts", "dev-postgres"), "start", pg_dir],
                              stdout=subprocess.DEVNULL)
        os.environ["ABLATE_TEST_PG_DIR"] = pg_dir
        import harness  # noqa: E402  (reads the environment set above)

        stack = harness.Stack(lease_seconds=30, data_dir=case["data_dir"])
        try:
            stack.start_server()
            for i in range(args.workers):
                stack.start_worker(f"bench-w{i}", threads=1)
            for key in to_run:
                results[key] = run_sweep(stack, f"bench-{args.case}-{key}", texts[key], args.timeout, args.save,
                                         case["vocab"])
        finally:
            stack.close()
            subprocess.call([os.path.join(SRC, "scripts", "dev-postgres"), "stop", pg_dir],
                            stdout=subprocess.DEVNULL)
    report(args, case, budget, dense_per_decade, results)


def report(args, case, budget, dense_per_decade, results):
    until = case["until_ratio"]
    print(f"# refine_bench --case {args.case} on {platform.node()} ({os.cpu_count()} CPUs, "
          f"{platform.processor() or platform.machine()}), {args.workers} workers x 1 thread")
    print(f"# {case['fixed']}; n_layer {case['depths']}; LR [{case['lr_min']}, {case['lr_max']}]")
    print(f"# (a) dense: {dense_per_decade} LRs per decade (ratio {10 ** (1 / dense_per_decade):.3f}); "
          f"(b) refined: {case['coarse_per_decade']} per decade + refine until {until}, max_new_runs {budget}"
          + (f", seeds up to {args.seeds_max}" if args.seeds_max > 0 else "") + ", prune")
    for key, label in (("dense", "(a) dense"), ("refined", "(b) coarse+refine+prune")):
        if key not in results:
            continue
        r = results[key]
        print(f"{label:26s} runs executed {r['executed']:4d} (skipped {r['skipped']}, added by refinement "
              f"{r['refined']}), compute {r['pflop']:.4f} PFLOP, CPU-hours {r['cpu_h']:.3f}, "
              f"wall {r['elapsed_s'] / 60:.1f} min")
    both = len(results) == 2
    if both:
        a, b = results["dense"], results["refined"]
        cpu_share = b["cpu_h"] / max(1e-9, a["cpu_h"])
        compute_share = b["pflop"] / max(1e-12, a["pflop"])
        print(f"(b) / (a): runs {b['executed'] / max(1, a['executed']):.0%}, compute {compute_share:.0%}, "
              f"CPU-hours {cpu_share:.0%} (wall-time based: depends on each sweep's load)")
    dense_lrs = sorted({float(r["grid_values"]["lr"]) for r in results.get("dense", {"runs": []})["runs"]})
    ra = results.get("dense", {}).get("report")
    rb = results.get("refined", {}).get("report")

    def per_sweep(fn):  # fn of (a)'s report and of (b)'s, {} for a sweep not run
        return tuple(fn(r) if r else {} for r in (ra, rb))

    ba, bb = per_sweep(boundaries)
    print(f"\n{'boundary':14s} {'where':34s} {'(a) value':>10s} {'(a) bracket':>22s} {'(b) value':>10s} "
          f"{'(b) bracket':>22s} {'(b) ratio':>9s} {'steps from (a)':>14s}")
    worst_steps = 0
    for k in sorted(set(ba) | set(bb)):
        va, la, ha = ba.get(k, (None, None, None))
        vb, lb, hb = bb.get(k, (None, None, None))
        away = steps_away(vb, la, ha, dense_lrs) if dense_lrs else None
        if va is None and vb is None:
            away = 0  # both say "none": the same answer
        elif (va is None) != (vb is None):
            away = None
        if both:
            worst_steps = max(worst_steps, 99 if away is None else away)
        ratio = "open" if lb is not None and hb is None else ("-" if lb is None or lb == hb else "%.3g" % (hb / lb))
        print(f"{k[0]:14s} {k[1]:34s} {fmt(va):>10s} {'(' + fmt(la) + ', ' + fmt(ha) + ')':>22s} {fmt(vb):>10s} "
              f"{'(' + fmt(lb) + ', ' + fmt(hb) + ')':>22s} {ratio:>9s} {('-' if away is None else str(away)):>14s}")

    ca, cb = per_sweep(curve_figures)
    print(f"\n{'curve':34s} {'(a) eta*':>9s} {'(a) loss*':>9s} {'(a) LRS':>8s} {'(b) eta*':>9s} {'(b) loss*':>9s} "
          f"{'(b) LRS':>8s} {'LRS diff':>8s}")
    worst_lrs = 0.0
    for k in sorted(set(ca) | set(cb)):
        xa, xb = ca.get(k, {}), cb.get(k, {})
        diff = None
        if xa.get("lr_sensitivity") is not None and xb.get("lr_sensitivity") is not None:
            diff = xb["lr_sensitivity"] - xa["lr_sensitivity"]
            worst_lrs = max(worst_lrs, abs(diff))
        print(f"{k:34s} {fmt(xa.get('opt_lr')):>9s} {fmt(xa.get('opt_loss')):>9s} {fmt(xa.get('lr_sensitivity')):>8s} "
              f"{fmt(xb.get('opt_lr')):>9s} {fmt(xb.get('opt_loss')):>9s} {fmt(xb.get('lr_sensitivity')):>8s} "
              f"{('-' if diff is None else '%+.3f' % diff):>8s}")

    va_, vb_ = per_sweep(verdicts)
    print(f"\n{'verdict':14s} {'(a)':16s} {'seeds':>5s}  {'(b)':16s} {'seeds':>5s}")
    same_verdicts = True
    for k in sorted(set(va_) | set(vb_)):
        oa = va_.get(k, {}).get("outcome", "-")
        ob = vb_.get(k, {}).get("outcome", "-")
        same_verdicts &= oa == ob
        print(f"{k[0] + ' ' + k[2]:14s} {oa:16s} {str(va_.get(k, {}).get('seeds', '-')):>5s}  {ob:16s} "
              f"{str(vb_.get(k, {}).get('seeds', '-')):>5s}")
    for key, rep in (("(a)", ra), ("(b)", rb)):
        for n in (rep or {}).get("necessity", []):
            if n.get("seeds") is not None:
                print(f"{key} eta-dagger n_layer={n['moderator']}: decided by {n['seeds']} seeds")
    if both:
        print("\ntargets: same verdicts {}; every boundary within one dense step {} (worst {}); "
              "LRS within 0.05 {} (worst {:.3f}); compute <= 35% {} ({:.0%})".format(
                  "met" if same_verdicts else "MISSED", "met" if worst_steps <= 1 else "MISSED",
                  "-" if worst_steps == 99 else worst_steps, "met" if worst_lrs <= 0.05 else "MISSED",
                  worst_lrs, "met" if compute_share <= 0.35 else "MISSED", compute_share))


if __name__ == "__main__":
    main()
