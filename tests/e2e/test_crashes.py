#!/usr/bin/env python3
"""Crashes and cuts during a sweep: the server, PostgreSQL or a worker killed, the network cut
(also past a lease), a full disk; no run is lost or trained twice, and every metric series
stays whole."""
import hashlib
import os
import resource
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import E2E, Stack, assert_series_whole, sweep_file, wait_for  # noqa: E402


class CrashFaults(E2E):
    """Crashes, not polite stops, in the middle of a sweep that two workers share. Whatever
    dies, every run ends succeeded and every run's series has each step exactly once."""
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
              if r["state"] == "running" and int(r.get("step", 0)) >= step]
        return rs if len(rs) >= n else None

    def assert_sweep_whole(self, runs):
        self.assertEqual([r["state"] for r in runs], ["succeeded"] * 3, runs)
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
        self.stack = Stack(lease_seconds=self.lease_seconds, own_postgres=True, pace_ms=self.pace_ms)

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


class WorkerKilledAndRestarted(E2E):
    """SIGKILL in training (what the kernel's OOM killer sends) and a restart on the same work dir,
    as a supervisor does it: the new process reports how the old one ended, so the attempt is a
    worker fault with its cause rather than a preemption, and the run is taken again at once
    instead of when its lease expires (the third hostile round, item 3)."""
    lease_seconds = 30  # far longer than the restart: only the report can requeue the run now

    def test_the_restart_reports_the_kill_and_takes_the_run_again(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-killed", {"seed": "[0]"}, steps=600, ckpt=100,
                                            eval_every=300))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 150, 300, "the run to pass step 150")
        s.stop("w1", signal.SIGKILL)
        s.start_worker("w1")
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(runs[0]["state"], "succeeded")
        self.assertEqual(int(runs[0]["attempt"]), 2)
        ended = s.sql(f"SELECT kind || '|' || fault || '|' || message FROM run_events WHERE run_id = "
                      f"{run_id} AND attempt = 1 AND kind IN ('faulted', 'preempted')")
        self.assertRegex(ended, r"^faulted\|worker\|the worker process ended without a trace: killed "
                                r"by SIGKILL", "a worker fault with its cause, not a preemption")
        log = s.log("w1")
        self.assertIn("died holding 1 run(s)", log)
        self.assertNotIn("already holds", log)
        self.assertRegex(log, r"resuming at step [1-9]00\b")
        self.assertEqual(s.cli_json("workers")[0]["runs_faulted"], 1)


class WorkerAbortsInTraining(E2E):
    """A worker that aborts in training (std::terminate: "terminate called without an active
    exception", as under a tight memory cap) and is restarted each time: every crash is a worker
    fault its next process reports, the crash loop is benched after the usual streak, and its own
    dead lease never refuses the next process (the third hostile round, item 3)."""
    lease_seconds = 30

    def setUp(self):
        # No core dumps of the crashing worker (children inherit this process's limit).
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        super().setUp()

    def test_a_crash_loop_is_reported_and_benched_then_heals(self):
        s = self.stack
        s.start_server(extra=["--bench-seconds", "2"])
        fault = os.path.join(s.dir, "w1.fault")
        with open(fault, "w") as f:
            f.write("crash: terminate called without an active exception\n")
        extra = ["--test-fault-file", fault]
        s.start_worker("w1", extra=extra)
        self.sweep_id = s.submit(sweep_file(s, "e2e-abort", {"seed": "[0]"}, steps=100, ckpt=50,
                                            eval_every=50))
        # A supervisor's loop: every time the worker dies, start it again.
        for i in range(3):
            wait_for(lambda: s.procs["w1"].poll() is not None, 180, f"crash {i + 1}")
            self.assertEqual(s.procs["w1"].returncode, -signal.SIGABRT, s.log("w1")[-2000:])
            s.start_worker("w1", extra=extra)

        def benched():
            w = s.cli_json("workers")
            return w[0] if w and w[0]["state"] == "benched" else None
        w = wait_for(benched, 120, "the crash loop to be benched")
        self.assertGreaterEqual(int(w["runs_faulted"]), 3)
        self.assertIn("SIGABRT", w["bench_reason"])
        self.assertIn("std::terminate", w["bench_reason"])
        os.remove(fault)  # healed: the self-check passes once the bench ends
        runs = s.wait_sweep_done(self.sweep_id, 300)
        self.assertEqual(runs[0]["state"], "succeeded")
        self.assertGreaterEqual(int(runs[0]["worker_faults"]), 3)
        log = s.log("w1")
        self.assertIn("terminate called", log)
        self.assertNotIn("already holds", log)
        self.assertIn("self-check passed", log)


class NetworkCut(E2E):
    # Far longer than the cut: the worker keeps its lease and replays its spool. The lease must
    # cover the time since the last renewal (up to a heartbeat period, a quarter lease), the 5 s
    # cut and the reconnect; at 15 s one run in ~7 with tests side by side lost the lease (no
    # renewal got through in the ~7 s after the restore; the cause is not yet understood).
    lease_seconds = 30

    def test_worker_cut_off_replays_its_spool(self):
        s = self.stack
        s.start_server()
        s.start_proxy()
        s.start_worker("w1", via_proxy=True)
        self.sweep_id = s.submit(sweep_file(s, "e2e-cut", {"seed": "[0]"}, steps=1000, ckpt=500,
                                            eval_every=500))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 100, 300, "the run to pass step 100")
        s.proxy.cut()
        time.sleep(5)
        s.proxy.restore()
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(runs[0]["state"], "succeeded")
        self.assertEqual(int(runs[0]["attempt"]), 1, "the lease outlived the cut")
        # The data decides: every step stored exactly once, although the worker spooled through
        # the cut. Whether the sender or the end-of-run drain replayed the spool depends on when
        # the run ended; both say so, so the log lines hold either way.
        assert_series_whole(self, s, run_id, first=1, last=1000)
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
        self.sweep_id = s.submit(sweep_file(s, "e2e-lost", {"seed": "[0]"}, steps=1200, ckpt=100,
                                            eval_every=500))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 250, 300, "the run to pass step 250")
        s.proxy.cut()
        wait_for(lambda: self.run_step(run_id)[1]["state"] == "queued", 60,
                 "the server to requeue the run")
        s.proxy.restore()
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(runs[0]["state"], "succeeded")
        self.assertEqual(int(runs[0]["attempt"]), 2)
        self.assertRegex(s.log("w1"), r"lease lost")
        self.assertRegex(s.log("w1"), r"resuming at step [1-9]\d*00\b")
        assert_series_whole(self, s, run_id, first=1, last=1200)


class DiskFull(E2E):
    """A full disk corrupts nothing: a worker whose work dir is full pauses the run and resumes it
    when there is space; a server whose store is full refuses checkpoints (RESOURCE_EXHAUSTED) and
    the run trains on. Each disk is a small tmpfs filled to the last byte, which needs root (CI
    runs as root)."""
    lease_seconds = 10

    def setUp(self):
        if os.geteuid() != 0:
            self.fail("e2e.DiskFull mounts a tmpfs to fill: run it as root")
        super().setUp()
        self.mounts = []

    def tearDown(self):
        for name in list(self.stack.procs):
            self.stack.stop(name, signal.SIGKILL)
        for path in self.mounts:
            subprocess.call(["umount", "-l", path])
        super().tearDown()

    def tmpfs(self, path, mb):
        harness.mount_tmpfs(path, mb)
        self.mounts.append(path)

    def test_a_worker_with_a_full_work_dir_pauses_the_run_and_resumes_it(self):
        s = self.stack
        work = os.path.join(s.dir, "w1")
        self.tmpfs(work, 32)
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-worker-full", {"seed": "[0]"}, steps=1500, ckpt=300,
                                            eval_every=300))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        wait_for(lambda: self.run_step(run_id)[0] >= 100, 300, "the run to pass step 100")
        harness.fill_disk(work)
        wait_for(lambda: "training paused" in s.log("w1"), 60, "the worker to pause the run")
        paused_at = self.run_step(run_id)[0]
        # The attempt the pause happened in (a lease may have expired before, while a loaded
        # machine prepared the data: that is not what this test is about).
        paused_attempt = int(s.runs(self.sweep_id)[0]["attempt"])
        harness.empty_disk(work)
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(runs[0]["state"], "succeeded")
        self.assertEqual(int(runs[0]["attempt"]), paused_attempt,
                         "the worker kept its lease while paused")
        self.assertLess(paused_at, 1500)
        log = s.log("w1")
        self.assertIn("no space left", log)
        self.assertIn("training resumes", log)
        self.assertIsNone(s.procs["w1"].poll(), "the worker must survive a full disk")
        # Nothing spooled before or during the pause was lost, nothing stored twice.
        assert_series_whole(self, s, run_id, first=1, last=1500)

    def test_a_server_with_a_full_store_refuses_checkpoints_and_the_run_goes_on(self):
        s = self.stack
        self.tmpfs(s.store_dir, 64)
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-store-full", {"seed": "[0]"}, steps=1500, ckpt=100,
                                            eval_every=300))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        wait_for(lambda: s.sql(f"SELECT count(*) FROM checkpoints WHERE run_id = {run_id}") != "0", 300,
                 "the first checkpoint to be stored")
        harness.fill_disk(s.store_dir)
        wait_for(lambda: "not stored by the server" in s.log("w1"), 120, "a checkpoint to be refused")
        # A refused upload leaves no partial file behind (one may be opening as we look; none stays).
        wait_for(lambda: os.listdir(os.path.join(s.store_dir, "tmp")) == [], 30,
                 "the refused uploads' partial files to be removed")
        harness.empty_disk(s.store_dir)
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(runs[0]["state"], "succeeded")
        self.assertEqual(int(runs[0]["attempt"]), 1)
        self.assertIn("the server's store is full", s.log("w1"))
        # Every checkpoint the server recorded is whole; the refused ones were never recorded.
        rows = [l.split("|") for l in s.sql(
            f"SELECT step, sha256, size_bytes FROM checkpoints WHERE run_id = {run_id}").splitlines()]
        self.assertGreaterEqual(len(rows), 2)
        for step, sha, size in rows:
            with open(os.path.join(s.store_dir, sha[:2], sha), "rb") as f:
                data = f.read()
            self.assertEqual((len(data), hashlib.sha256(data).hexdigest()), (int(size), sha), step)
        assert_series_whole(self, s, run_id, first=1, last=1500)


if __name__ == "__main__":
    unittest.main(verbosity=2)
