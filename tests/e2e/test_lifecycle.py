#!/usr/bin/env python3
"""A sweep from submit to its end with the real binaries: runs leased, trained and finished,
cancelled (also while the sender sees it first), failed and retried, two runs on one worker's
slots, a worker stopping cleanly, and what `ablate-worker train` prints."""
import collections
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import E2E, WORKER, assert_series_whole, run, sweep_file, wait_for, write_sweep  # noqa: E402


class SweepLifecycle(E2E):
    def test_two_workers_finish_a_sweep_and_report_on_it(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        s.start_worker("w2")
        path = sweep_file(s, "e2e-grid", {"qk_norm": "[none, layernorm]", "lr": "[1.0e-3, 3.0e-2]",
                                          "n_layer": "[1, 2]"}, steps=40)
        self.sweep_id = s.submit(path)
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(len(runs), 8)
        states = collections.Counter(r["state"] for r in runs)
        self.assertEqual(set(states) - {"succeeded", "diverged"}, set(), states)
        workers = {r.get("worker") for r in runs}
        self.assertEqual(workers, {"w1", "w2"}, "both workers should have taken runs")
        for r in runs:
            if r["state"] == "succeeded":
                assert_series_whole(self, s, int(r["id"]), first=1, last=40)
                self.assertGreater(float(r["result"]["final_val_loss"]), 0)
        # The report: files exist, PNGs are images, CSV rows match the runs.
        out = os.path.join(s.dir, "report")
        p = s.cli("report", str(self.sweep_id), "--out", out)
        self.assertIn("qk_norm", p.stdout)
        for f in ("report.md", "runs.csv", "cells.csv"):
            self.assertTrue(os.path.exists(os.path.join(out, f)), f)
        with open(os.path.join(out, "runs.csv")) as f:
            rows = [l for l in f.read().splitlines() if l.strip()]
        self.assertEqual(len(rows) - 1, len(runs))
        pngs = [f for f in os.listdir(out) if f.endswith(".png")]
        if pngs or os.path.exists("/usr/bin/gnuplot"):
            self.assertTrue(pngs, "gnuplot is installed but no PNG was written")
        for f in pngs:
            with open(os.path.join(out, f), "rb") as fh:
                self.assertEqual(fh.read(8), b"\x89PNG\r\n\x1a\n", f)
        # Offline: the same report from an export.
        exp = os.path.join(s.dir, "export")
        s.cli("export", str(self.sweep_id), "--out", exp)
        p = s.cli("report", "--from", exp, "--format", "json")
        self.assertIn("qk_norm", p.stdout)

    def test_cancel_stops_running_runs(self):
        self.cancel_a_running_sweep("e2e-cancel", "[0, 1, 2]")


class CancelSeenFirstByTheSender(E2E):
    # Heartbeats every 15 s: the metrics sender (every 0.5 s) meets the fenced answer for the
    # cancelled run long before a heartbeat would report the cancel. It must still end as a cancel,
    # not as a lost lease.
    lease_seconds = 60

    def test_a_cancel_learned_from_a_fenced_metrics_call_is_a_cancel(self):
        self.cancel_a_running_sweep("e2e-cancel-sender", "[0]")
        self.assertNotIn("lease lost", self.stack.log("w1"))


class Failures(E2E):
    def test_worker_killed_midrun_resumes_elsewhere_without_gaps(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-kill", {"seed": "[0]"}, steps=800, ckpt=100,
                                            eval_every=250))
        run = wait_for(self.first_running, 120, "the run to start")
        run_id = int(run["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 250, 300, "the run to pass step 250")
        s.stop("w1", signal.SIGKILL)
        s.start_worker("w2")
        runs = s.wait_sweep_done(self.sweep_id, 600)
        r = runs[0]
        self.assertEqual(r["state"], "succeeded")
        self.assertEqual(int(r["attempt"]), 2)
        self.assertEqual(r["worker"], "w2")
        self.assertRegex(s.log("w2"), r"resuming at step [1-9]\d*00\b")
        assert_series_whole(self, s, run_id, first=1, last=800)

    def test_sigterm_hands_the_run_back_at_once(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-term", {"seed": "[0]"}, steps=400, ckpt=200,
                                            eval_every=400))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 50, 300, "the run to pass step 50")
        rc = s.stop("w1", signal.SIGTERM)
        self.assertEqual(rc, 0)
        self.assertIn("handed back", s.log("w1"))
        _, r = self.run_step(run_id)
        self.assertEqual(r["state"], "queued", "a handed-back run is queued at once, not after the lease")
        s.start_worker("w2")
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(runs[0]["state"], "succeeded")
        assert_series_whole(self, s, run_id, first=1, last=400)

    def test_server_restart_loses_no_run_and_no_metric(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-restart", {"seed": "[0, 1]"}, steps=300, ckpt=100,
                                            eval_every=200))
        run_id = int(wait_for(self.first_running, 120, "a run to start")["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 100, 300, "the run to pass step 100")
        s.stop("server", signal.SIGTERM)
        time.sleep(2)
        s.start_server(name="server2")
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual([r["state"] for r in runs], ["succeeded", "succeeded"])
        for r in runs:
            assert_series_whole(self, s, int(r["id"]), first=1, last=300)


class Slots(E2E):
    """One worker with --slots 2: two leases held at once, each run its own session."""

    def both_running_on(self, worker):
        rs = [r for r in self.stack.runs(self.sweep_id)
              if r["state"] == "running" and r.get("worker") == worker and int(r.get("step", 0)) > 0]
        return rs if len(rs) == 2 else None

    def start_two_slots(self, name, steps, ckpt):
        s = self.stack
        s.start_server()
        s.start_worker("w1", threads=2, extra=("--slots", "2", "--price-per-hour", "0.35"))
        self.sweep_id = s.submit(sweep_file(s, name, {"seed": "[0, 1]"}, steps=steps, ckpt=ckpt,
                                            eval_every=100))
        both = wait_for(lambda: self.both_running_on("w1"), 180, "both runs to train on w1 at once")
        return sorted(int(r["id"]) for r in both)

    def test_one_worker_trains_two_runs_at_once_and_stores_each_once(self):
        s = self.stack
        ids = self.start_two_slots("e2e-slots", steps=600, ckpt=500)
        held = s.sql("SELECT string_agg(id::text, ',' ORDER BY id) FROM runs "
                     "WHERE state IN ('leased', 'running') AND worker_id = "
                     "(SELECT id FROM workers WHERE name = 'w1')")
        self.assertEqual(held, ",".join(map(str, ids)))
        # `ablate workers` shows both; neither lease fenced the other.
        w = [w for w in s.cli_json("workers") if w["info"]["name"] == "w1"][0]
        self.assertEqual(w["state"], "busy")
        self.assertEqual([int(i) for i in w["held_run_ids"]], ids)
        self.assertIn(",".join(map(str, ids)), s.cli("workers").stdout)
        # What the server's estimates and budgets start from: the declared price, and the startup
        # benchmark measured on one slot's thread before the worker registered.
        self.assertEqual(w["info"]["price_per_hour"], 0.35)
        bench = w["info"]["benchmarks"]
        self.assertEqual([b["dtype"] for b in bench], ["float32"], bench)
        self.assertGreater(bench[0]["flops_per_second"], 0)
        self.assertGreater(bench[0]["tokens_per_second"], 0)
        self.assertIn("n_layer 2", bench[0]["model"])
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual([r["state"] for r in runs], ["succeeded", "succeeded"])
        for r in runs:
            self.assertEqual(int(r["attempt"]), 1, "a slot's lease must not fence the other's")
            self.assertEqual(r["worker"], "w1")
            assert_series_whole(self, s, int(r["id"]), first=1, last=600)
        log = s.log("w1")
        self.assertIn("2 slots of 1 thread(s)", log)
        self.assertIn("price $0.35/h, split over 2 slots", log)
        self.assertRegex(log, r"startup benchmark: [0-9.]+ [GMT]FLOP/s fp32 \(n_layer 2, .*\), [0-9.]+ s\n")
        self.assertIn("[slot 0]", log)
        self.assertIn("[slot 1]", log)
        self.assertEqual(s.cli_json("workers")[0].get("held_run_ids", []), [])

    def test_sigterm_hands_back_every_run_held(self):
        s = self.stack
        ids = self.start_two_slots("e2e-slots-term", steps=100000, ckpt=1000)
        self.assertEqual(s.stop("w1", signal.SIGTERM), 0)
        self.assertEqual(s.log("w1").count("handed back"), 2, s.log("w1"))
        states = {int(r["id"]): r["state"] for r in s.runs(self.sweep_id)}
        self.assertEqual(states, {i: "queued" for i in ids},
                         "both runs are queued at once, not after their leases expire")


class CleanStop(E2E):
    # Offline by silence would take two lease periods (120 s): "offline" at once is the worker's word.
    lease_seconds = 60

    def test_a_worker_stopped_cleanly_is_offline_at_once_and_its_handback_is_not_counted(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-stop", {"seed": "[0]"}, steps=100000, ckpt=1000,
                                            eval_every=1000))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        self.assertEqual([w["state"] for w in s.cli_json("workers")], ["busy"])
        self.assertEqual(s.stop("w1", signal.SIGTERM), 0)
        # Listed as offline (not dropped) for the next 10 minutes, SEEN saying since when.
        listed = s.cli_json("workers")
        self.assertEqual([(w["info"]["name"], w["state"]) for w in listed], [("w1", "offline")])
        self.assertRegex(s.cli("workers").stdout, r"\bw1 +offline .* \d+s ago\n")
        everyone = s.cli_json("workers", "--all")
        self.assertEqual([(w["info"]["name"], w["state"]) for w in everyone], [("w1", "offline")])
        _, r = self.run_step(run_id)
        self.assertEqual(r["state"], "queued")
        table = s.cli("runs", str(self.sweep_id)).stdout
        row = [l for l in table.splitlines() if l.split()[:1] == [str(run_id)]][0]
        # Attempt 1 was handed back, so no counted attempt is used yet (the raw numbers: 1 of 4).
        self.assertIn("0/3 +1 handed back", row, table)
        # Registering again brings it back; stopped while idle (in its Lease long-poll), it says
        # so too.
        s.start_worker("w1")
        wait_for(lambda: [w["state"] for w in s.cli_json("workers")] == ["busy"], 60, "w1 to be busy again")
        # The restarted daemon read its startup benchmark from the work dir instead of measuring.
        self.assertEqual(s.log("w1").count("startup benchmark:"), 2, s.log("w1"))
        self.assertEqual(s.log("w1").count(" (cached)"), 1, s.log("w1"))
        self.assertIn("price not declared", s.log("w1"))
        s.cli("cancel", str(self.sweep_id))
        wait_for(lambda: [w["state"] for w in s.cli_json("workers")] == ["idle"], 60, "w1 to be idle")
        self.assertEqual(s.stop("w1", signal.SIGTERM), 0)
        self.assertEqual([w["state"] for w in s.cli_json("workers")], ["offline"])
        # Ten minutes on, only --all lists it.
        s.sql("UPDATE workers SET stopped_at = now() - interval '11 minutes', "
              "last_seen_at = now() - interval '11 minutes'")
        self.assertEqual(s.cli_json("workers"), [])
        self.assertIn("no workers online", s.cli("workers").stdout)
        self.assertEqual([w["state"] for w in s.cli_json("workers", "--all")], ["offline"])


class TrainOutput(E2E):
    """Issue #15: `ablate-worker train` prints steps-to-threshold only when a threshold is set."""

    def test_steps_to_threshold_only_with_a_threshold(self):
        base = ('data: {train: "synthetic:3000", val: "synthetic:300", tokenizer: {type: bpe, vocab: 512}}\n'
                "n_layer: 1\nn_embd: 48\nn_head: 2\nblock_size: 48\nbatch_size: 8\nsteps: 5\n"
                "warmup: 1\neval_every: 5\neval_batches: 1\n")
        cache = os.path.join(self.stack.dir, "cache")
        outputs = {}
        for name, extra in (("none", ""), ("easy", "threshold: {train_loss: 100}\n"),
                            ("hard", "threshold: {train_loss: 0.5}\n")):
            path = write_sweep(self.stack.dir, "run-" + name, base + extra)
            p = run([WORKER, "train", path, "--out", os.path.join(self.stack.dir, "out-" + name),
                     "--threads", "1", "--quiet", "--cache-dir", cache], timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            outputs[name] = p.stdout
        self.assertNotIn("threshold", outputs["none"])
        self.assertIn("tok/s", outputs["none"])
        self.assertIn("steps to threshold 100: ", outputs["easy"])
        self.assertIn("threshold 0.5 never reached", outputs["hard"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
