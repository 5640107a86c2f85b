"""End to end with the real binaries: PostgreSQL + ablate-server + ablate-worker(s) + the CLI.

Run through ctest (tests/e2e/CMakeLists.txt), which provides the PostgreSQL and the build paths.
"""
import collections
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import SERVER, SRC, WORKER, Stack, wait_for, write_sweep  # noqa: E402
from harness import free_port as harness_free_port  # noqa: E402

# A tiny model on the generated corpus, so the test needs no downloaded data.
TINY = """
data: {{train: "synthetic:3000", val: "synthetic:300", tokenizer: {{type: bpe, vocab: 512}}}}
fixed: {{n_embd: 48, n_head: 2, block_size: 48, batch_size: 8, steps: {steps}, warmup: 10,
        eval_every: {eval_every}, eval_batches: 2, probe_every: 20, log_every: 1,
        checkpoint_every: {ckpt}}}
"""


def sweep_file(stack, name, grid, steps=60, ckpt=20, eval_every=20, extra=""):
    body = f"name: {name}\n" + TINY.format(steps=steps, ckpt=ckpt, eval_every=eval_every) + "grid:\n"
    for k, v in grid.items():
        body += f"  {k}: {v}\n"
    return write_sweep(stack.dir, name, body + extra)


def assert_series_whole(test, stack, run, name="train_loss", first=1, last=None):
    """A run's series has every step exactly once: no gap, no duplicate, whatever happened."""
    pts = stack.metrics(run, [name])
    steps = [int(p["step"]) for p in pts]
    dup = [s for s, n in collections.Counter(steps).items() if n > 1]
    test.assertEqual(dup, [], f"run {run}: duplicate {name} steps")
    if last is None:
        last = max(steps)
    missing = sorted(set(range(first, last + 1)) - set(steps))
    test.assertEqual(missing, [], f"run {run}: missing {name} steps")
    return steps


class E2E(unittest.TestCase):
    lease_seconds = 3

    def setUp(self):
        self.stack = Stack(lease_seconds=self.lease_seconds)

    def tearDown(self):
        failed = any(err for _, err in (self._outcome.result.errors + self._outcome.result.failures)
                     if err) if hasattr(self._outcome, "result") else False
        if failed:
            print(self.stack.dump_logs(), file=sys.stderr)
        self.stack.close()

    def run_step(self, run_id):
        for r in self.stack.runs(self.sweep_id):
            if int(r["id"]) == run_id:
                return int(r.get("step", 0)), r
        return 0, None

    def cancel_a_running_sweep(self, name, seeds):
        """One worker, a long sweep: cancel it once a run trains; every run ends CANCELLED, the
        worker says why it stopped and lives on."""
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, name, {"seed": seeds}, steps=100000, ckpt=1000,
                                            eval_every=1000))
        wait_for(self.first_running, 120, "a run to start")
        s.cli("cancel", str(self.sweep_id))
        runs = s.wait_sweep_done(self.sweep_id, 30)
        self.assertEqual({r["state"] for r in runs}, {"CANCELLED"})
        wait_for(lambda: "cancelled by the server" in s.log("w1"), 30, "the worker to stop the run")
        self.assertIsNone(s.procs["w1"].poll(), "the worker must survive a cancel")

    def first_running(self):
        for r in self.stack.runs(self.sweep_id):
            if r["state"] == "RUNNING" and int(r.get("step", 0)) > 0:
                return r
        return None


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
        self.assertEqual(set(states) - {"SUCCEEDED", "DIVERGED"}, set(), states)
        workers = {r.get("worker") for r in runs}
        self.assertEqual(workers, {"w1", "w2"}, "both workers should have taken runs")
        for r in runs:
            if r["state"] == "SUCCEEDED":
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
        self.sweep_id = s.submit(sweep_file(s, "e2e-kill", {"seed": "[0]"}, steps=1500, ckpt=100,
                                            eval_every=250))
        run = wait_for(self.first_running, 120, "the run to start")
        run_id = int(run["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 350, 300, "the run to pass step 350")
        s.stop("w1", signal.SIGKILL)
        s.start_worker("w2")
        runs = s.wait_sweep_done(self.sweep_id, 600)
        r = runs[0]
        self.assertEqual(r["state"], "SUCCEEDED")
        self.assertEqual(int(r["attempt"]), 2)
        self.assertEqual(r["worker"], "w2")
        self.assertRegex(s.log("w2"), r"resuming at step [1-9]\d*00\b")
        assert_series_whole(self, s, run_id, first=1, last=1500)

    def test_sigterm_hands_the_run_back_at_once(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-term", {"seed": "[0]"}, steps=1200, ckpt=400,
                                            eval_every=400))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 50, 300, "the run to pass step 50")
        rc = s.stop("w1", signal.SIGTERM)
        self.assertEqual(rc, 0)
        self.assertIn("handed back", s.log("w1"))
        _, r = self.run_step(run_id)
        self.assertEqual(r["state"], "QUEUED", "a handed-back run is queued at once, not after the lease")
        s.start_worker("w2")
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(runs[0]["state"], "SUCCEEDED")
        assert_series_whole(self, s, run_id, first=1, last=1200)

    def test_server_restart_loses_no_run_and_no_metric(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-restart", {"seed": "[0, 1]"}, steps=600, ckpt=100,
                                            eval_every=200))
        run_id = int(wait_for(self.first_running, 120, "a run to start")["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 100, 300, "the run to pass step 100")
        s.stop("server", signal.SIGTERM)
        time.sleep(2)
        s.start_server(name="server2")
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual([r["state"] for r in runs], ["SUCCEEDED", "SUCCEEDED"])
        for r in runs:
            assert_series_whole(self, s, int(r["id"]), first=1, last=600)


class CrashFaults(E2E):
    """Crashes, not polite stops, in the middle of a sweep that two workers share. Whatever
    dies, every run ends SUCCEEDED and every run's series has each step exactly once."""
    steps = 300

    def submit_pair_sweep(self, name):
        s = self.stack
        s.start_worker("w1")
        s.start_worker("w2")
        self.sweep_id = s.submit(sweep_file(s, name, {"seed": "[0, 1, 2]"}, steps=self.steps, ckpt=100,
                                            eval_every=100))
        # Both workers mid-run, so the crash hits two live leases and their in-flight reports.
        return wait_for(lambda: self.running_past(2, 30), 300, "both workers to be training")

    def running_past(self, n, step):
        rs = [r for r in self.stack.runs(self.sweep_id)
              if r["state"] == "RUNNING" and int(r.get("step", 0)) >= step]
        return rs if len(rs) >= n else None

    def assert_sweep_whole(self, runs):
        self.assertEqual([r["state"] for r in runs], ["SUCCEEDED"] * 3, runs)
        for r in runs:
            assert_series_whole(self, self.stack, int(r["id"]), first=1, last=self.steps)


class ServerKilled(CrashFaults):
    def test_server_sigkill_then_restart_on_the_same_database(self):
        s = self.stack
        s.start_server()
        self.submit_pair_sweep("e2e-server-kill")
        s.stop("server", signal.SIGKILL)
        s.start_server(name="server2")
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assert_sweep_whole(runs)


class PostgresCrash(CrashFaults):
    # Longer than the outage, so the workers keep their leases and replay their spools; were it
    # shorter the runs would be requeued and resumed from checkpoints, which the other tests cover.
    lease_seconds = 30

    def setUp(self):
        self.stack = Stack(lease_seconds=self.lease_seconds, own_postgres=True)

    def test_postgres_immediate_stop_and_recovery_under_a_live_sweep(self):
        s = self.stack
        s.start_server()
        before = self.submit_pair_sweep("e2e-pg-crash")
        s.crash_postgres()
        # Down until both the server and a worker have seen calls fail, so recovery is exercised.
        wait_for(lambda: "notify listener" in s.log("server"), 60, "the server to lose the database")
        wait_for(lambda: any(m in s.log(w) for w in ("w1", "w2")
                             for m in ("training continues", "spooling to disk", "retrying")),
                 60, "a worker's call to fail")
        s.start_postgres()
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertIsNone(s.procs["server"].poll(), "the server must survive a database crash")
        self.assert_sweep_whole(runs)
        leased = {int(r["id"]): int(r["attempt"]) for r in before}
        for r in runs:
            if int(r["id"]) in leased:
                self.assertEqual(int(r["attempt"]), leased[int(r["id"])],
                                 "the lease outlived the outage: no run should have been redone")


class WorkerKilled(CrashFaults):
    def test_worker_sigkill_while_the_other_keeps_working(self):
        s = self.stack
        s.start_server()
        self.submit_pair_sweep("e2e-worker-kill")
        victim = wait_for(lambda: [r for r in self.running_past(1, 150) or [] if r.get("worker") == "w1"],
                          300, "w1 to pass its first checkpoint")[0]
        s.stop("w1", signal.SIGKILL)
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assert_sweep_whole(runs)
        r = [r for r in runs if r["id"] == victim["id"]][0]
        self.assertEqual(r["worker"], "w2")
        self.assertGreaterEqual(int(r["attempt"]), 2)
        self.assertRegex(s.log("w2"), r"resuming at step [1-9]00\b")


class NetworkCut(E2E):
    lease_seconds = 15  # longer than the cut: the worker keeps its lease and replays its spool

    def test_worker_cut_off_replays_its_spool(self):
        s = self.stack
        s.start_server()
        s.start_proxy()
        s.start_worker("w1", via_proxy=True)
        self.sweep_id = s.submit(sweep_file(s, "e2e-cut", {"seed": "[0]"}, steps=1500, ckpt=500,
                                            eval_every=500))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 100, 300, "the run to pass step 100")
        s.proxy.cut()
        time.sleep(5)
        s.proxy.restore()
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(runs[0]["state"], "SUCCEEDED")
        self.assertEqual(int(runs[0]["attempt"]), 1, "the lease outlived the cut")
        # The data decides: every step stored exactly once, although the worker spooled through
        # the cut. Whether the sender or the end-of-run drain replayed the spool depends on when
        # the run ended; both say so, so the log lines hold either way.
        assert_series_whole(self, s, run_id, first=1, last=1500)
        log = s.log("w1")
        self.assertIn("spooling to disk", log)
        self.assertIn("replaying", log)


class LeaseLostWhileCutOff(E2E):
    lease_seconds = 3  # shorter than the cut: the server requeues the run meanwhile

    def test_worker_drops_a_run_whose_lease_expired_while_cut_off(self):
        s = self.stack
        s.start_server()
        s.start_proxy()
        s.start_worker("w1", via_proxy=True)
        self.sweep_id = s.submit(sweep_file(s, "e2e-lost", {"seed": "[0]"}, steps=2000, ckpt=100,
                                            eval_every=500))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 250, 300, "the run to pass step 250")
        s.proxy.cut()
        wait_for(lambda: self.run_step(run_id)[1]["state"] == "QUEUED", 60,
                 "the server to requeue the run")
        s.proxy.restore()
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(runs[0]["state"], "SUCCEEDED")
        self.assertEqual(int(runs[0]["attempt"]), 2)
        self.assertRegex(s.log("w1"), r"lease lost")
        self.assertRegex(s.log("w1"), r"resuming at step [1-9]\d*00\b")
        assert_series_whole(self, s, run_id, first=1, last=2000)


class Observability(E2E):
    """A real Prometheus scrapes the real server and worker during a sweep; every dashboard
    query (template variables filled in) must return data."""

    def test_every_dashboard_query_returns_data_during_a_sweep(self):
        s = self.stack
        s.start_server()
        worker_metrics = harness_free_port()
        s.start_worker("w1", extra=["--metrics-listen", f"127.0.0.1:{worker_metrics}"])
        self.sweep_id = s.submit(sweep_file(s, "e2e-obs", {"qk_norm": "[none, layernorm]",
                                                           "lr": "[1.0e-3, 1.0e-2]"},
                                            steps=1500, ckpt=500, eval_every=100))
        run = wait_for(self.first_running, 120, "a run to start")
        # Some validation loss and a probe must exist before the panels can show them.
        wait_for(lambda: self.run_step(int(run["id"]))[0] >= 250, 300, "the first run to pass step 250")
        live = subprocess.run(
            [sys.executable, os.path.join(SRC, "tests", "deploy", "dashboards_live_test.py"),
             f"127.0.0.1:{s.metrics_port}", f"127.0.0.1:{worker_metrics}", "--",
             "--sweep", "e2e-obs", "--run", str(run["id"]), "--var", "qk_norm=none",
             "--lookback", "600"],
            capture_output=True, text=True, timeout=600)
        self.assertEqual(live.returncode, 0, live.stdout + live.stderr)
        s.cli("cancel", str(self.sweep_id))


class Slots(E2E):
    """One worker with --slots 2: two leases held at once, each run its own session."""

    def both_running_on(self, worker):
        rs = [r for r in self.stack.runs(self.sweep_id)
              if r["state"] == "RUNNING" and r.get("worker") == worker and int(r.get("step", 0)) > 0]
        return rs if len(rs) == 2 else None

    def start_two_slots(self, name, steps, ckpt):
        s = self.stack
        s.start_server()
        s.start_worker("w1", threads=2, extra=("--slots", "2"))
        self.sweep_id = s.submit(sweep_file(s, name, {"seed": "[0, 1]"}, steps=steps, ckpt=ckpt,
                                            eval_every=100))
        both = wait_for(lambda: self.both_running_on("w1"), 180, "both runs to train on w1 at once")
        return sorted(int(r["id"]) for r in both)

    def test_one_worker_trains_two_runs_at_once_and_stores_each_once(self):
        s = self.stack
        ids = self.start_two_slots("e2e-slots", steps=1500, ckpt=500)
        held = s.sql("SELECT string_agg(id::text, ',' ORDER BY id) FROM runs "
                     "WHERE state IN ('leased', 'running') AND worker_id = "
                     "(SELECT id FROM workers WHERE name = 'w1')")
        self.assertEqual(held, ",".join(map(str, ids)))
        # `ablate workers` shows both; neither lease fenced the other.
        w = [w for w in s.cli_json("workers") if w["info"]["name"] == "w1"][0]
        self.assertEqual(w["state"], "busy")
        self.assertEqual([int(i) for i in w["held_run_ids"]], ids)
        self.assertIn(",".join(map(str, ids)), s.cli("workers").stdout)
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual([r["state"] for r in runs], ["SUCCEEDED", "SUCCEEDED"])
        for r in runs:
            self.assertEqual(int(r["attempt"]), 1, "a slot's lease must not fence the other's")
            self.assertEqual(r["worker"], "w1")
            assert_series_whole(self, s, int(r["id"]), first=1, last=1500)
        log = s.log("w1")
        self.assertIn("2 slots of 1 thread(s)", log)
        self.assertIn("[slot 0]", log)
        self.assertIn("[slot 1]", log)
        self.assertEqual(s.cli_json("workers")[0].get("held_run_ids", []), [])

    def test_sigterm_hands_back_every_run_held(self):
        s = self.stack
        ids = self.start_two_slots("e2e-slots-term", steps=100000, ckpt=1000)
        self.assertEqual(s.stop("w1", signal.SIGTERM), 0)
        self.assertEqual(s.log("w1").count("handed back"), 2, s.log("w1"))
        states = {int(r["id"]): r["state"] for r in s.runs(self.sweep_id)}
        self.assertEqual(states, {i: "QUEUED" for i in ids},
                         "both runs are queued at once, not after their leases expire")


class CliErrors(E2E):
    def test_bad_sweep_file_names_file_line_and_field(self):
        s = self.stack
        path = write_sweep(s.dir, "bad", "name: bad\nfixed: {n_embd: 64, n_head: 2}\ngrid:\n  qk_nrom: [none]\n")
        p = s.cli("submit", path, server="127.0.0.1:1", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("bad.yaml:4", p.stderr)
        self.assertIn("qk_nrom", p.stderr)
        self.assertIn("qk_norm", p.stderr, "should suggest the setting meant")

    def test_wrong_token_is_refused_clearly(self):
        s = self.stack
        s.start_server()
        p = s.cli("ls", token="not-a-token", check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("token", p.stderr.lower())

    def test_bad_flags_stop_server_and_worker_naming_the_flag(self):
        s = self.stack
        for extra, needle in [(["--lease-seconds", "nan"], "--lease-seconds must be between"),
                              (["--max-message-bytes", "-1"], "--max-message-bytes must be between"),
                              (["--metrics-listen", "0.0.0.0:0"], "give --metrics-insecure")]:
            p = subprocess.run([SERVER, "serve", "--database-url", s.db_url, "--listen", "127.0.0.1:0", *extra],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(needle, p.stderr)
        for extra, needle in [(["--metrics-listen", "0.0.0.0:9"], "give --metrics-insecure"),
                              (["--lease-wait", "nan"], "--lease-wait must be between"),
                              (["--threads", "-1"], "--threads must be between"),
                              (["--slots", "0"], "--slots must be between 1 and 64"),
                              (["--slots", "3", "--threads", "2"],
                               "--threads 2 cannot give each of --slots 3 a thread")]:
            p = subprocess.run([WORKER, "--server", "127.0.0.1:9", "--device", "cpu",
                                "--work-dir", os.path.join(s.dir, "flags"), *extra],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn(needle, p.stdout + p.stderr)

    def test_worker_with_a_wrong_token_is_told_to_make_a_worker_token(self):
        s = self.stack
        s.start_server()
        p = subprocess.run([WORKER, "--server", s.server_addr, "--token", "not-a-token", "--device", "cpu",
                            "--work-dir", os.path.join(s.dir, "badtoken")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("token create --role worker", p.stdout + p.stderr)

    def test_unreachable_server_is_named(self):
        s = self.stack
        p = s.cli("ls", server="127.0.0.1:9", check=False, timeout=60)
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertIn("127.0.0.1:9", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
