#!/usr/bin/env python3
"""What users and operators see of a running sweep: every dashboard query returns data from a
real Prometheus, `ablate logs -f` streams progress, final weights come back with `ablate
artifacts get`, and `ablate watch` redraws an 80-column terminal in place."""
import hashlib
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import CLI, CSI, E2E, SMALLEST, SRC, sweep_file, wait_for, watch_on_a_pty  # noqa: E402
from harness import free_port as harness_free_port  # noqa: E402


class Observability(E2E):
    """A real Prometheus scrapes the real server and worker during a sweep; every dashboard
    query (template variables filled in) must return data."""

    def test_every_dashboard_query_returns_data_during_a_sweep(self):
        s = self.stack
        s.start_server()
        worker_metrics = harness_free_port()
        # A price and a budget, so the cost panels have data too.
        s.start_worker("w1", extra=["--metrics-listen", f"127.0.0.1:{worker_metrics}",
                                    "--price-per-hour", "0.35"])
        self.sweep_id = s.submit(sweep_file(s, "e2e-obs", {"qk_norm": "[none, layernorm]",
                                                           "lr": "[1.0e-3, 1.0e-2]"},
                                            steps=1500, ckpt=500, eval_every=100,
                                            extra="budget: {gpu_hours: 100}\n"))
        run = wait_for(self.first_running, 120, "a run to start")
        # Some validation loss and a probe must exist before the panels can show them.
        wait_for(lambda: self.run_step(int(run["id"]))[0] >= 250, 300, "the first run to pass step 250")
        live = subprocess.run(
            [sys.executable, os.path.join(SRC, "tests", "deploy", "dashboards_live_test.py"),
             f"127.0.0.1:{s.metrics_port}", f"127.0.0.1:{worker_metrics}", "--",
             "--sweep", "e2e-obs", "--run", str(run["id"]), "--var", "qk_norm=none",
             "--lookback", "600",
             # This sweep has no refine: (e2e.Refinement covers it), so no cell has a round.
             "--optional", "ablate_cell_refine_round"],
            capture_output=True, text=True, timeout=600)
        self.assertEqual(live.returncode, 0, live.stdout + live.stderr)
        s.cli("cancel", str(self.sweep_id))


class LogsAndArtifacts(E2E):
    """Issue #15: `ablate logs RUN -f` streams the trainer's progress lines of a running run, and a
    finished run's final weights come back with `ablate artifacts get` (unless keep_final: false)."""

    def test_logs_follow_shows_progress_lines_while_the_run_trains(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-logs", {"seed": "[0]"}, steps=1000, ckpt=500,
                                            eval_every=500))
        run = wait_for(self.first_running, 120, "a run to start")
        run_id = int(run["id"])
        argv = [harness.CLI, "--server", s.server_addr, "--token", s.user_token, "logs", str(run_id),
                "-f"]
        follower = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line_re = re.compile(r"^step +(\d+)  loss \d+\.\d{4}  ema \d+\.\d{4}  lr \S+.* tok/s")
            seen_while_running = []
            for line in follower.stdout:
                m = line_re.match(line)
                if not m:
                    continue
                step, row = self.run_step(run_id)
                if row is not None and row["state"] == "running" and int(m.group(1)) < 1000:
                    seen_while_running.append(line.strip())
                if len(seen_while_running) >= 3:
                    break
            self.assertGreaterEqual(len(seen_while_running), 3,
                                    "no step/loss/tok/s lines while the run was running")
            # Left to itself the follower ends with the run, printing its final state.
            rest, err = follower.communicate(timeout=300)
        finally:
            if follower.poll() is None:
                follower.kill()
        self.assertEqual(follower.returncode, 0, err)
        self.assertRegex(rest, r"step +1000  loss ")
        self.assertIn(f"run {run_id}: succeeded", rest)
        # Not following: the events, then every stored line.
        out = s.cli("logs", str(run_id)).stdout
        self.assertIn("completed", out)
        self.assertRegex(out, r"step +999  loss ")
        # The worker printed the same lines.
        self.assertRegex(s.log("w1"), rf"run {run_id}: step +999  loss ")

    def test_logs_follow_streams_lifecycle_events_and_lines_in_order(self):
        s = self.stack
        s.start_server()
        self.sweep_id = s.submit(sweep_file(s, "e2e-events", {"seed": "[0]"}, steps=200, ckpt=100,
                                            eval_every=100))
        run_id = int(s.runs(self.sweep_id)[0]["id"])
        argv = [harness.CLI, "--server", s.server_addr, "--token", s.user_token, "logs", str(run_id),
                "-f"]
        # Followed from before it is leased: the first thing printed is its lease, no header.
        follower = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            s.start_worker("w1")
            out, err = follower.communicate(timeout=300)
        finally:
            if follower.poll() is None:
                follower.kill()
        self.assertEqual(follower.returncode, 0, err)
        lines = out.splitlines()
        self.assertRegex(lines[0], r"^-- \d\d:\d\d:\d\d leased  try 1  w1", out)

        def where(pattern):
            found = [i for i, l in enumerate(lines) if re.search(pattern, l)]
            self.assertTrue(found, f"{pattern!r} not in:\n{out}")
            return found[0]
        first_step, last_step = where(r"^step +\d+  loss "), where(r"^step +200  loss ")
        completed = where(r"^-- \d\d:\d\d:\d\d completed  try 1  w1")
        self.assertLess(first_step, last_step)
        self.assertLess(last_step, completed)
        self.assertEqual(lines[-1], f"run {run_id}: succeeded")
        stored = [e["kind"] for e in s.cli_json("logs", str(run_id)) if "kind" in e]
        self.assertEqual([l.split()[2] for l in lines if l.startswith("-- ")], stored,
                         "every event exactly once, in order")
        # Not following: the same events and lines.
        again = s.cli("logs", str(run_id)).stdout.splitlines()
        self.assertEqual(sorted(again), sorted(lines[:-1]))
        self.assertEqual((again[0], again[-1]), (lines[0], lines[-2]))

    def test_artifacts_ls_lists_checkpoints_and_the_documented_snippet_loads_the_weights(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        sid = s.submit(sweep_file(s, "e2e-weights", {"seed": "[0]"}, steps=30, ckpt=10))
        run = s.wait_sweep_done(sid, 300)[0]
        self.assertEqual(run["state"], "succeeded")
        final = run["result"]["final_checkpoint"]
        listed = s.cli_json("artifacts", "ls", run["id"])
        self.assertEqual([(a["name"], int(a["ref"]["step"])) for a in listed],
                         [("checkpoint", 10), ("checkpoint", 20), ("final", 30)])
        self.assertEqual(listed[-1]["ref"]["sha256"], final["sha256"])
        table = s.cli("artifacts", "ls", run["id"]).stdout
        self.assertRegex(table, rf"final +30 +{final['size_bytes']} +{final['sha256']} +1 ")
        self.assertIn(f"ablate artifacts get {run['id']} --out DIR", table)
        self.assertEqual(s.cli("artifacts", "ls", "99999", check=False).returncode, 4)

        out_dir = os.path.join(s.dir, "weights")
        s.cli("artifacts", "get", run["id"], "--out", out_dir)
        path = os.path.join(out_dir, f"run-{run['id']}-final.pt")
        # The loader exactly as docs/trainer.md prints it, on the downloaded file.
        with open(os.path.join(SRC, "docs", "trainer.md")) as f:
            doc = f.read()
        section = doc[doc.index("### Loading the weights in Python"):]
        snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        script = snippet + (
            "\nimport json, sys\n"
            "sd = load_ablate_weights(sys.argv[1], json.loads(sys.argv[2]))\n"
            "print(json.dumps({k: [list(v.shape), float(v.float().abs().sum())] for k, v in sd.items()}))\n")
        p = subprocess.run(["/usr/bin/python3", "-c", script, path, json.dumps(run["config"])],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = json.loads(p.stdout)
        c, v = SMALLEST["n_embd"], 512
        self.assertEqual({k: shape for k, (shape, _) in got.items()}, {
            "wte.weight": [v, c], "wpe.weight": [SMALLEST["block_size"], c],
            "h.0.ln_1.weight": [c], "h.0.attn.c_attn.weight": [3 * c, c],
            "h.0.attn.c_proj.weight": [c, c], "h.0.ln_2.weight": [c],
            "h.0.mlp.c_fc.weight": [4 * c, c], "h.0.mlp.c_proj.weight": [c, 4 * c],
            "ln_f.weight": [c]})
        # Trained weights, not the initial ones: the layer-norm gains moved off 1.
        self.assertNotAlmostEqual(got["h.0.ln_1.weight"][1], float(c), places=3)
        # A config naming another architecture is refused, not silently mis-mapped.
        wrong = dict(run["config"], n_layer=2)
        p = subprocess.run(["/usr/bin/python3", "-c", script, path, json.dumps(wrong)],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("model tensors, but this config has", p.stderr)

    def test_artifacts_get_downloads_the_verified_final_checkpoint(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        keep = s.submit(sweep_file(s, "e2e-keep", {"seed": "[0]"}, steps=30, ckpt=20))
        drop = s.submit(sweep_file(s, "e2e-drop", {"seed": "[0]"}, steps=30, ckpt=20,
                                   extra="keep_final: false\n"))
        kept = s.wait_sweep_done(keep, 300)[0]
        dropped = s.wait_sweep_done(drop, 300)[0]
        self.assertEqual(kept["state"], "succeeded")
        ref = kept["result"]["final_checkpoint"]
        self.assertEqual(int(ref["step"]), 30)

        out_dir = os.path.join(s.dir, "weights")
        p = s.cli("artifacts", "get", kept["id"], "--out", out_dir)
        path = os.path.join(out_dir, f"run-{kept['id']}-final.pt")
        self.assertIn(path, p.stdout)
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(len(data), int(ref["size_bytes"]))
        self.assertEqual(hashlib.sha256(data).hexdigest(), ref["sha256"])
        self.assertEqual(sorted(os.listdir(out_dir)), [os.path.basename(path)])  # no temp left

        # keep_final: false keeps nothing: not found (exit 4), nothing written.
        self.assertEqual(dropped["state"], "succeeded")
        self.assertNotIn("final_checkpoint", dropped.get("result", {}))
        empty = os.path.join(s.dir, "none")
        p = s.cli("artifacts", "get", dropped["id"], "--out", empty, check=False)
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("keep_final: false", p.stderr)
        self.assertEqual(os.listdir(empty), [])
        n = s.sql(f"SELECT count(*) FROM checkpoints WHERE run_id = {int(dropped['id'])} AND step = 30")
        self.assertEqual(n, "0")


class WatchTerminal(E2E):
    """Issue #15: `ablate watch` on an 80-column terminal redraws in place, cut to the width,
    coloured unless NO_COLOR, with an ETA before the first run ends."""

    def test_watch_fits_80_columns_redraws_in_place_and_honours_no_color(self):
        s = self.stack
        s.start_server()
        s.start_worker("a-worker-with-a-rather-long-name")
        self.sweep_id = s.submit(sweep_file(s, "e2e-watch-with-a-long-sweep-name",
                                            {"qk_norm": "[none]", "lr": "[1.0e-3, 2.0e-3]",
                                             "n_layer": "[1]"}, steps=800, ckpt=400,
                                            eval_every=1000))
        watch = [CLI, "--server", s.server_addr, "--token", s.user_token, "watch", str(self.sweep_id),
                 "--interval", "0.2"]
        rc, out, err = watch_on_a_pty(watch, {})
        self.assertEqual(rc, 0, err + out[-2000:])
        # Redrawn in place: the cursor goes back up over the previous frame.
        self.assertRegex(out, r"\x1b\[\d+A", "no cursor movement: the frames were appended")
        # No line, escapes removed, is wider than the terminal (the runs' lines are ~95 columns).
        visible = CSI.sub("", out)
        pieces = [p for line in visible.split("\n") for p in line.split("\r")]
        self.assertGreater(len(pieces), 3)
        too_wide = [p for p in pieces if len(p) > 80]
        self.assertEqual(too_wide, [], "lines wider than 80 columns")
        self.assertIn("~", visible, "the long run lines should have been cut")
        self.assertRegex(out, r"\x1b\[3\dm", "states are coloured on a terminal")
        # An ETA while nothing has finished yet, from the running runs' progress.
        self.assertTrue(any("ETA " in l and "0/2 done" in l for l in visible.split("\n")),
                        "no ETA before the first run ended")
        self.assertIn("sweep finished", visible)
        # NO_COLOR: the same finished sweep, no colour escapes at all.
        rc, out, err = watch_on_a_pty(watch, {"NO_COLOR": "1"})
        self.assertEqual(rc, 0, err)
        self.assertIn("2/2 done", out)
        self.assertNotRegex(out, r"\x1b\[[0-9;]*m", "NO_COLOR must remove colour")
        rc, out, err = watch_on_a_pty(watch, {})
        self.assertRegex(out, r"\x1b\[3\dm", "without NO_COLOR the same frame is coloured")


    def test_watch_at_80_columns_wraps_every_count_and_ls_fits_80(self):
        # Issue #24 items 2 and 3: at 80 columns watch cut its summary ("13 queued, 1 succeed~"),
        # lost the runs' seeds and shifted its ID column at two-digit ids; ls was ~140 wide.
        import threading
        s = self.stack
        s.start_server()
        s.start_worker("a-worker-with-a-rather-long-name")
        name = "e2e-watch-every-count-with-a-rather-long-sweep-name"
        self.sweep_id = s.submit(sweep_file(s, name, {"seed": "[" + ", ".join(map(str, range(12))) + "]"},
                                            steps=100000, ckpt=1000, eval_every=1000))
        wait_for(self.first_running, 120, "a run to start")
        queued = [int(r["id"]) for r in s.runs(self.sweep_id) if r["state"] == "queued"]
        s.cli("cancel", "--run", str(max(queued)))  # run ids are global: no sweep needed
        sid = str(self.sweep_id)
        # ls while the sweep runs: 80 columns, the name cut; -o wide: every count, the whole name.
        ls = s.cli("ls").stdout
        self.assertTrue(all(len(l) <= 80 for l in ls.splitlines()), ls)
        self.assertIn("1/12", ls)
        self.assertIn("~", ls)
        wide = s.cli("ls", "-o", "wide").stdout
        for needle in (name, "1 running", "10 queued", "1 cancelled"):
            self.assertIn(needle, wide)
        self.assertTrue(any(len(l) > 80 for l in wide.splitlines()), wide)
        self.assertEqual(json.loads(s.cli("ls", "-o", "json").stdout.splitlines()[0])["name"], name)
        # Watch for a few frames, then cancel the rest: it ends (exit 1, runs were cancelled).
        timer = threading.Timer(3, lambda: s.cli("cancel", sid))
        timer.start()
        watch = [CLI, "--server", s.server_addr, "--token", s.user_token, "watch", sid, "--interval", "0.2"]
        rc, out, err = watch_on_a_pty(watch, {"NO_COLOR": "1"})
        timer.join()
        self.assertEqual(rc, 1, err + out[-2000:])
        visible = CSI.sub("", out)
        pieces = [p for line in visible.split("\n") for p in line.split("\r")]
        self.assertEqual([p for p in pieces if len(p) > 80], [], "lines wider than 80 columns")
        # The summary wraps instead of being cut: every count shows, no summary line ends in "~".
        summary = [p for p in pieces if re.search(r"\d+ (queued|running|leased|cancelled|done)", p)]
        self.assertTrue(summary, visible[-2000:])
        self.assertEqual([p for p in summary if p.endswith("~")], [], "a summary line was cut")
        self.assertIn("10 queued", visible)
        self.assertIn("1 cancelled", visible)
        self.assertIn("12 cancelled", visible, "the last frame counts every run")
        # Run lines: the id right-aligned in a column as wide as the sweep's largest id (12), the
        # state after it, the seed shown although the line is cut.
        runs = [p for p in pieces if re.match(r"^ +\d+ (running|leased) ", p)]
        self.assertTrue(runs, visible[-2000:])
        for line in runs:
            self.assertRegex(line, r"^  [ 1]\d (running|leased) ", line)
            self.assertRegex(line, r" seed=\d+ ", line)


if __name__ == "__main__":
    unittest.main(verbosity=2)
