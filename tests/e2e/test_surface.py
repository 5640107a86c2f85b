#!/usr/bin/env python3
"""The everyday surface as a new user meets it at 80x24 (issue #39): `watch` names each run's cell
by the axes that vary, `status` ends with its summary, the text report fits the terminal, and
`ablate estimate`'s wall time holds against a measured sweep."""
import os
import re
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import CLI, CSI, E2E, run, sweep_file, wait_for, watch_on_a_pty  # noqa: E402


class CellsAt80Columns(E2E):
    """Item 4: watch cut the cell to `lr=0.0316228,n_layer=1,~`, hiding qk_norm; status of a
    32-cell sweep scrolled its summary off a 24-line screen."""

    def test_watch_names_the_varied_axes_and_status_ends_with_its_summary(self):
        s = self.stack
        s.start_server()
        # 8 LRs x qk_norm x n_layer = 32 cells; n_embd a one-value axis every row shares.
        grid = {"lr": "{logspace: {min: 1.0e-3, max: 0.1, num: 8}}", "qk_norm": "[none, layernorm]",
                "n_layer": "[1, 2]", "n_embd": "[16]"}
        self.sweep_id = s.submit(sweep_file(s, "e2e-cells-at-80-columns", grid, steps=100000,
                                            ckpt=1000, eval_every=1000))
        sid = str(self.sweep_id)
        # status before any worker: the 32 cells, then the summary, last.
        out = s.cli("status", sid).stdout
        lines = out.rstrip("\n").split("\n")
        self.assertGreaterEqual(len(lines), 34, out)
        self.assertTrue(lines[0].startswith("lr "), lines[0])
        summary = [i for i, l in enumerate(lines) if l.startswith(f"sweep {sid} ")]
        self.assertEqual(len(summary), 1, out)
        self.assertGreater(summary[0], 32, "the summary must follow the 32 cells' rows")
        self.assertIn("0/32 done, 32 queued", lines[summary[0]])
        # On a 24-line screen the last 24 lines are what stays: the summary is among them.
        self.assertIn(lines[summary[0]], lines[-23:])

        # watch on an 80x24 terminal while runs train, then cancel the rest.
        s.start_worker("a-worker-with-a-rather-long-name")
        wait_for(self.first_running, 120, "a run to start")
        timer = threading.Timer(3, lambda: s.cli("cancel", sid))
        timer.start()
        watch = [CLI, "--server", s.server_addr, "--token", s.user_token, "watch", sid,
                 "--interval", "0.2"]
        rc, out, err = watch_on_a_pty(watch, {"NO_COLOR": "1"})
        timer.join()
        self.assertEqual(rc, 1, err + out[-2000:])
        visible = CSI.sub("", out)
        pieces = [p for line in visible.split("\n") for p in line.split("\r")]
        self.assertEqual([p for p in pieces if len(p) > 80], [], "lines wider than 80 columns")
        runs = [p for p in pieces if re.match(r"^ +\d+ (running|leased) ", p)]
        self.assertTrue(runs, visible[-2000:])
        for line in runs:
            # Every varied axis, whole, the LR at 3 significant digits; n_embd (shared) and the
            # seed axis (seed= already) left out of the label.
            self.assertRegex(line, r" lr=0\.0*[1-9]\d{0,2},qk_norm=(none|layernorm),n_layer=[12]"
                                   r"[ ~]", line)
            self.assertNotIn("n_embd", line)


class EstimateAgainstMeasured(E2E):
    """Item 9: `ablate estimate` said 34 s of wall time for a sweep that took 14 s. Once runs of
    the same size have finished on the fleet, the estimate prices a new sweep from their measured
    speed; the sweep then takes within 2x of the estimate (either way), and the estimate says
    what it assumed. The same sweep's text report fits the terminal (item 6)."""

    GRID = {"qk_norm": "[none, layernorm]", "lr": "[1.0e-3, 1.0e-2]", "seed": "[0, 1]"}

    def test_the_estimate_from_measured_speed_is_within_2x_of_the_sweep(self):
        s = self.stack
        s.start_server()
        for name in ("w1", "w2"):
            s.start_worker(name)
        wait_for(lambda: len(s.cli_json("workers")) == 2, 60, "both workers to register")
        # Runs of the same size finish first (the data prepared, the speed measured).
        pilot = s.submit(sweep_file(s, "e2e-estimate-pilot", {"qk_norm": "[none, layernorm]",
                                                              "seed": "[0, 1]"}, steps=150,
                                    ckpt=100, eval_every=50))
        s.wait_sweep_done(pilot, 300)
        path = sweep_file(s, "e2e-estimate-measured", self.GRID, steps=150, ckpt=100, eval_every=50)
        # The server's speed model is reused for a few seconds: ask until it has the runs.
        est = wait_for(lambda: next((e for e in s.cli_json("estimate", path)
                                     if "finished run" in e["classes"][0]["source"]), None),
                       30, "the estimate to use the finished runs' speed")
        [line] = est["classes"]
        self.assertEqual(line["source"], "4 finished runs of similar size", line)
        estimate = float(est["wall_seconds_base"])
        self.assertGreater(estimate, 0)
        # The text names what the figure assumes: the speed's source, full-length runs, the whole
        # live fleet on this sweep.
        text = s.cli("estimate", path).stdout
        self.assertIn("finished run", text)
        self.assertIn("assumes every run trains all its steps", text)
        self.assertIn("the whole live fleet works on this sweep", text)

        started = time.time()
        self.sweep_id = s.submit(path)
        runs = s.wait_sweep_done(self.sweep_id, 300)
        self.assertEqual({r["state"] for r in runs}, {"succeeded"})
        sweep = s.sweep(self.sweep_id)["sweep"]
        measured = float(sweep.get("finished_at", 0)) - float(sweep["created_at"])
        if measured <= 0:  # not stamped: the client's own clock, an upper bound
            measured = time.time() - started
        ratio = estimate / measured
        print(f"estimate {estimate:.1f} s, measured {measured:.1f} s, ratio {ratio:.2f}",
              file=sys.stderr)
        self.assertGreaterEqual(ratio, 0.5, f"estimate {estimate:.1f} s, measured {measured:.1f} s")
        self.assertLessEqual(ratio, 2.0, f"estimate {estimate:.1f} s, measured {measured:.1f} s")

        # Item 6: the text report at 80 columns (COLUMNS, as a shell exports it) fits them; piped
        # with no width given, each row stays on one line.
        env = dict(os.environ, COLUMNS="80")
        conn = ["--server", s.server_addr, "--token", s.user_token]
        p = run([CLI, *conn, "report", str(self.sweep_id)], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        wide = [l for l in p.stdout.splitlines() if len(l) > 80]
        self.assertEqual(wide, [], p.stdout)
        self.assertIn("eta*", p.stdout)
        env.pop("COLUMNS")
        p = run([CLI, *conn, "report", str(self.sweep_id)], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(any(len(l) > 80 for l in p.stdout.splitlines()), p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
