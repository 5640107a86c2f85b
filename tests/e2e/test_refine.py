#!/usr/bin/env python3
"""Sweeps that plan their own runs: refinement adds LRs between the ones that bracket a
boundary, and `ablate estimate` plans seeds per cell from a pilot sweep's noise."""
import collections
import json
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CLI, E2E, LEARNS, run, sweep_file  # noqa: E402


class Refinement(E2E):
    pace_ms = 0  # 40-step runs: the learning, not the wall time, is what this test needs

    def test_a_refined_sweep_on_a_replica_pair_bisects_the_max_stable_bracket_once(self):
        """Two replicas, a worker on each: the base grid finds a decade-wide max-stable bracket,
        the servers add its geometric midpoint once per seed (round 1), and then stop, since
        sqrt(10) = 3.16 is within until_ratio 3.5. The report gives the narrowed bracket."""
        s = self.stack
        s.start_server()
        replica = s.start_replica("server2")
        s.start_worker("w1")
        s.start_worker("w2", server=replica)
        extra = ("order: coarse_to_fine\n"
                 "divergence: {loss_above_init_by: 0.5, patience: 3}\n"
                 "refine: {axis: lr, boundaries: [max_stable], until_ratio: 3.5, max_new_runs: 6}\n"
                 "prune: {above_divergence: true}\n")
        path = sweep_file(s, "e2e-refine", {"lr": "{logspace: {min: 1.0e-3, max: 10, per_decade: 1}}",
                                            "seed": "[0, 1]"}, steps=40, extra=extra, model=LEARNS)
        self.sweep_id = s.submit(path)
        runs = s.wait_sweep_done(self.sweep_id, 600)
        base = [r for r in runs if int(r.get("refine_round", 0)) == 0]
        added = [r for r in runs if int(r.get("refine_round", 0)) > 0]
        self.assertEqual(len(base), 10)
        # The base grid's max-stable bracket: the first LR where a seed diverged (or was skipped
        # above a divergence) and the LR below it.
        by_lr = collections.defaultdict(list)
        for r in base:
            by_lr[float(r["grid_values"]["lr"])].append(r["state"])
        lrs = sorted(by_lr)
        hi = next((lr for lr in lrs if {"diverged", "skipped"} & set(by_lr[lr])), None)
        self.assertIsNotNone(hi, f"no LR diverged on the base grid: {dict(by_lr)}")
        self.assertGreater(lrs.index(hi), 0, f"the smallest LR diverged: {dict(by_lr)}")
        lo = lrs[lrs.index(hi) - 1]
        mid = "%.6g" % math.sqrt(lo * hi)
        self.assertEqual(sorted((r["grid_values"]["lr"], r["grid_values"]["seed"], int(r["refine_round"]))
                                for r in added),
                         [(mid, "0", 1), (mid, "1", 1)])
        self.assertEqual(len({(r["cell"], r["seed"]) for r in runs}), len(runs))
        for r in runs:
            if r["state"] == "skipped":
                self.assertIn("diverged at lr=", r["error"])
        sweep = s.sweep(self.sweep_id)["sweep"]
        self.assertEqual(sweep["state"], "finished")
        self.assertEqual(int(sweep["refine"]["new_runs"]), 2)
        self.assertEqual(int(sweep["refine"]["rounds"]), 1)
        status = s.cli("status", str(self.sweep_id), server=replica).stdout
        self.assertIn("refine lr (max_stable) until ratio 3.5: 2 of 6 new runs, round 1", status)
        self.assertIn("refine r1", status)
        # The report: the bracket is now half a decade wide and names the refined points.
        rep = json.loads(s.cli("report", str(self.sweep_id), "--format", "json").stdout)
        curve = rep["curves"][0]
        lo2, hi2 = curve["max_stable_bracket"]
        self.assertLessEqual(hi2 / lo2, 3.5, curve["max_stable_bracket"])
        self.assertEqual(rep["refined"], 2)
        text = s.cli("report", str(self.sweep_id)).stdout
        self.assertIn("max stable LR", text)
        self.assertIn("bracket (lo, hi)", text)


class SeedPlan(E2E):
    """`ablate estimate FILE --sigma S | --pilot SWEEP`: how many seeds per cell the hypotheses'
    tests need, and what the sweep costs with that many; with --sigma it needs no server."""

    # 3 LRs x 2 depths: H1/eta-dagger's Holm family is 6 points. Seed noise 0.03 nats, effect 0.1,
    # alpha 0.05, power 0.8, from t tables: alpha/6 needs 5 seeds (n = 4: power 0.79), H2's
    # alpha/3 and H3's alpha/2 need 4 (n = 3: 0.55 and 0.71).
    GRID = {"qk_norm": "[none, layernorm]", "lr": "[1.0e-3, 3.0e-3, 1.0e-2]", "n_layer": "[1, 2]",
            "seed": "[0, 1]"}

    def fresh_env(self):
        home = os.path.join(self.stack.dir, "fresh-home")
        os.makedirs(home, exist_ok=True)
        return {"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config")}

    def test_sigma_gives_the_seed_counts_without_a_server_and_bad_values_are_usage_errors(self):
        s = self.stack
        env = self.fresh_env()  # no server configured anywhere
        path = sweep_file(s, "e2e-plan", self.GRID)
        p = run([CLI, "estimate", path, "--sigma", "0.03"], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("seed plan (sigma 0.03 nats, effect 0.1, power 80%, alpha 0.05): "
                      "H1/eta-dagger 5 seeds (Holm over 6 comparisons), H2 4 (Holm over 3 "
                      "comparisons), H3 4 (Holm over 2 comparisons)", p.stdout)
        self.assertIn("-> 5 seeds per cell (the file has 2)", p.stdout)
        self.assertIn("no server configured, so no cost", p.stdout)
        self.assertNotIn("GPU-h", p.stdout)
        p = run([CLI, "-o", "json", "estimate", path, "--sigma", "0.03"], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        plan = json.loads(p.stdout)["seed_plan"]
        self.assertEqual(plan["seeds"], 5)
        self.assertEqual([(f["name"], f["comparisons"], f["seeds"]) for f in plan["families"]],
                         [("H1/eta-dagger", 6, 5), ("H2", 3, 4), ("H3", 2, 4)])
        self.assertEqual(plan["file_seeds"], 2)
        self.assertAlmostEqual(plan["cost_scale"], 2.5)
        self.assertNotIn("device_hours_base", plan)
        # The textbook case: one comparison, n ~ 2 (z_.975 + z_.8)^2 sigma^2 / effect^2 = 1.41 by
        # the normal formula, 3 with t's critical value (n = 2: power 0.22; n = 3: 0.87).
        single = sweep_file(s, "e2e-plan-one", {"qk_norm": "[none, layernorm]"})
        p = run([CLI, "estimate", single, "--sigma", "0.03"], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("H1/eta-dagger 3 seeds (1 comparison)", p.stdout)
        self.assertIn("H3 n/a (one n_layer value)", p.stdout)
        # A bigger effect needs fewer seeds, a smaller one more.
        p = run([CLI, "-o", "json", "estimate", path, "--sigma", "0.03", "--effect", "0.05"], env=env)
        self.assertGreater(json.loads(p.stdout)["seed_plan"]["seeds"], 5)
        for flag, value in [("--effect", "0"), ("--effect", "-0.1"), ("--power", "1"),
                            ("--power", "0"), ("--alpha", "0.5"), ("--alpha", "0"),
                            ("--sigma", "0"), ("--sigma", "-1"), ("--sigma", "nan")]:
            noise = [] if flag == "--sigma" else ["--sigma", "0.03"]
            p = run([CLI, "estimate", path, *noise, flag, value], env=env)
            self.assertEqual(p.returncode, 2, f"{flag} {value}: {p.stdout}{p.stderr}")
            self.assertIn(f"ablate estimate: {flag} {value}: must be", p.stderr)
            self.assertIn("Usage: ablate estimate", p.stderr)
        p = run([CLI, "estimate", path, "--sigma", "0.03", "--pilot", "1"], env=env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--sigma and --pilot", p.stderr)

    def test_a_pilot_sweep_gives_the_noise_and_the_cost_scales_with_the_seeds(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        pilot = s.submit(sweep_file(s, "e2e-pilot", {"lr": "[1.0e-2, 3.0e-2]", "seed": "[0, 1, 2]"},
                                    steps=40))
        lone = s.submit(sweep_file(s, "e2e-lone", {"lr": "[1.0e-2]"}, steps=40))
        runs = s.wait_sweep_done(pilot, 300)
        s.wait_sweep_done(lone, 300)
        self.assertEqual({r["state"] for r in runs}, {"succeeded"})
        # The seed noise by hand: each LR's seeds about their mean, pooled over the LRs.
        by_lr = collections.defaultdict(list)
        for r in runs:
            by_lr[r["grid_values"]["lr"]].append(float(r["result"]["final_val_loss"]))
        ss = sum(sum((x - sum(xs) / len(xs)) ** 2 for x in xs) for xs in by_lr.values())
        dof = sum(len(xs) - 1 for xs in by_lr.values())
        sigma = math.sqrt(ss / dof)

        path = sweep_file(s, "e2e-plan", self.GRID)
        est = s.cli_json("estimate", path, "--pilot", str(pilot))[0]
        plan = est["seed_plan"]
        self.assertEqual(plan["pilot_sweep"], pilot)
        self.assertEqual(plan["pilot_dof"], dof)
        self.assertAlmostEqual(plan["sigma"], sigma, delta=1e-9 + 1e-6 * sigma)
        # The same plan as the noise given by hand, and the estimate x seeds / the file's 2.
        by_hand = s.cli_json("estimate", path, "--sigma", repr(plan["sigma"]))[0]["seed_plan"]
        self.assertEqual(by_hand["seeds"], plan["seeds"])
        self.assertGreaterEqual(plan["seeds"], 2)
        scale = plan["seeds"] / 2
        self.assertAlmostEqual(plan["cost_scale"], scale)
        self.assertGreater(float(est["device_seconds_base"]), 0)
        self.assertAlmostEqual(plan["device_hours_base"],
                               float(est["device_seconds_base"]) / 3600 * scale, places=9)
        self.assertAlmostEqual(plan["wall_seconds_base"], float(est["wall_seconds_base"]) * scale,
                               places=6)
        text = s.cli("estimate", path, "--pilot", "e2e-pilot").stdout  # by name too
        self.assertIn(f"pilot sweep {pilot}: sigma ", text)
        self.assertIn(f"nats from {dof} dof", text)
        self.assertIn(f"-> {plan['seeds']} seeds per cell (the file has 2): ", text)
        self.assertIn("wall on the live fleet", text)
        self.assertIn("startup benchmark", text, "the estimate's table comes first")
        # Without a seed noise: the estimate, and one line on how to get a plan.
        text = s.cli("estimate", path).stdout
        self.assertIn("seed plan: add --sigma S", text)
        self.assertNotIn("seeds per cell (the file", text)
        self.assertNotIn("seed_plan", s.cli_json("estimate", path)[0])
        # A pilot with one seed has no spread to plan from: a usage error naming the flag.
        p = s.cli("estimate", path, "--pilot", str(lone), check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(f"--pilot {lone}: sweep {lone} 'e2e-lone' has no cell with 2 or more", p.stderr)
        self.assertIn("Usage: ablate estimate", p.stderr)
        p = s.cli("estimate", path, "--pilot", "no-such-sweep", check=False)
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("--pilot no-such-sweep", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
