#!/usr/bin/env python3
"""Cost and budgets end to end: what runs cost on priced workers, a budget that stops a sweep,
and `ablate budget --raise` that lets it go on."""
import collections
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import E2E, sweep_file, wait_for  # noqa: E402


class CostAndBudgets(E2E):
    """Issue #25: two CPU workers declaring different prices; an estimate before submitting; a
    dollar budget that stops the sweep part way; what was spent against the runs' own lease
    times x prices; a raise that lets it finish."""

    # US dollars an hour: a paced run holds its lease for over a second, so the 12 runs cost more
    # than $0.12 even if all went to the cheap worker: the budget must stop the sweep.
    PRICES = {"cheap": 36.0, "dear": 72.0}
    BUDGET = 0.12

    def budget(self):
        return self.stack.cli_json("budget", str(self.sweep_id))[0]

    def stopped_by_budget(self):
        runs = self.stack.runs(self.sweep_id)
        states = collections.Counter(r["state"] for r in runs)
        if states["leased"] or states["running"] or not states["queued"]:
            return None
        b = self.budget()
        return (runs, b) if b.get("reached") else None

    def charged(self, runs):
        """Per attempt, from the run's own events: (completed or ended) - leased, at the price of
        the worker that held it (one slot each, so its whole price)."""
        usd = seconds = 0.0
        for r in runs:
            if int(r.get("attempt", 0)) == 0:
                continue
            events = [e for e in self.stack.cli_json("logs", str(r["id"])) if "kind" in e]
            start = None
            for e in events:
                if e["kind"] == "leased":
                    start = (float(e["time"]), e["worker"])
                elif start and e["kind"] in ("completed", "released", "preempted", "faulted",
                                             "cancelled"):
                    dt = float(e["time"]) - start[0]
                    seconds += dt
                    usd += dt * self.PRICES[start[1]] / 3600
                    start = None
        return seconds, usd

    def test_a_budget_stops_the_sweep_part_way_and_a_raise_lets_it_finish(self):
        s = self.stack
        s.start_server()
        for name, price in self.PRICES.items():
            s.start_worker(name, extra=("--price-per-hour", str(price)))
        wait_for(lambda: len(s.cli_json("workers")) == 2, 60, "both workers to register")
        path = sweep_file(s, "e2e-budget", {"seed": "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]"},
                          steps=100, ckpt=50, eval_every=50,
                          extra=f"budget: {{usd: {self.BUDGET}}}\n")
        # Before: the estimate prices the grid on the fleet from the workers' startup benchmark.
        est = s.cli_json("estimate", path)[0]
        self.assertEqual(int(est["base_runs"]), 12)
        [line] = est["classes"]
        self.assertTrue(line["device_class"].startswith("cpu"), line)
        self.assertEqual(line["workers"], 2)
        self.assertEqual(line["source"], "startup benchmark")
        self.assertGreater(float(line["device_hours_base"]), 0)
        self.assertAlmostEqual(float(line["usd_per_hour"]), 54.0)
        text = s.cli("estimate", path).stdout
        self.assertIn("startup benchmark", text)
        self.assertIn("budget $0.12", text)
        self.assertGreater(float(est["wall_seconds_base"]), 0)

        self.sweep_id = s.submit(path)
        runs, b = wait_for(self.stopped_by_budget, 180, "the budget to stop the sweep")
        states = collections.Counter(r["state"] for r in runs)
        self.assertGreaterEqual(states["succeeded"], 2, states)
        self.assertGreaterEqual(states["queued"], 1, states)
        # No run starts once the budget is reached: the leased set stays put past several keeper
        # rounds and lease long-polls.
        leased = {r["id"] for r in runs if int(r.get("attempt", 0)) > 0}
        time.sleep(4)
        runs = s.runs(self.sweep_id)
        self.assertEqual({r["id"] for r in runs if int(r.get("attempt", 0)) > 0}, leased)
        self.assertTrue(self.budget()["reached"])
        # What the server charged is the runs' own lease times x their workers' prices.
        sweep = s.sweep(self.sweep_id)["sweep"]
        cost = sweep["cost"]
        seconds, usd = self.charged(runs)
        self.assertAlmostEqual(float(cost["usd"]), usd, delta=0.01 * usd)
        self.assertAlmostEqual(float(cost["device_seconds"]), seconds, delta=0.01 * seconds)
        self.assertTrue(cost["priced"])
        # Spending stops near the limit: at most what the runs in flight when it was reached cost.
        dearest_run = max(float(r["usage"]["usd"]) for r in runs if "usage" in r)
        self.assertLessEqual(float(cost["usd"]), self.BUDGET + 2 * dearest_run)
        out = s.cli("status", str(self.sweep_id)).stdout
        self.assertIn("budget reached ($0.12)", out)
        self.assertIn("spent", out)
        self.assertIn("ablate budget", out)
        # A raise lets it finish.
        raised = s.cli_json("budget", str(self.sweep_id), "--raise", "10")[0]
        self.assertAlmostEqual(float(raised["usd"]), self.BUDGET + 10)
        runs = s.wait_sweep_done(self.sweep_id, 300)
        self.assertEqual({r["state"] for r in runs}, {"succeeded"})
        seconds, usd = self.charged(runs)
        cost = s.sweep(self.sweep_id)["sweep"]["cost"]
        self.assertAlmostEqual(float(cost["usd"]), usd, delta=0.01 * usd)
        self.assertEqual({r["worker"] for r in runs}, set(self.PRICES))
        # Each run's own charge adds up to the sweep's.
        self.assertAlmostEqual(sum(float(r["usage"]["usd"]) for r in runs), float(cost["usd"]),
                               delta=0.01 * usd)
        # The report ends with the cost table.
        report = s.cli("report", str(self.sweep_id), "--format", "md").stdout
        self.assertIn("## Cost", report)
        self.assertIn("| all | 12 |", report)


if __name__ == "__main__":
    unittest.main(verbosity=2)
