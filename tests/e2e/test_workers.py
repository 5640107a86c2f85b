#!/usr/bin/env python3
"""`ablate workers` as an operator reads it (issues #38 and #39): DONE counts the runs a worker
completed, a worker whose heartbeats stop shows `lost` within a lease period, a benched worker
shows why and until when, `ablate workers unbench NAME` lifts the bench (and names an unknown
worker), and shell completion offers live workers' names."""

import os
import resource
import re
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import E2E, sweep_file, wait_for  # noqa: E402


def row(table, name):
    """The columns of `name`'s row in `ablate workers` output, by header."""
    lines = [l for l in table.splitlines() if l.strip()]
    header = lines[0].split()
    for line in lines[1:]:
        cols = re.split(r"\s{2,}", line.strip())
        if len(cols) > 1 and cols[1] == name:
            return dict(zip(header, cols))
    return None


class WorkersCli(E2E):
    def workers(self):
        return self.stack.cli("workers").stdout

    def test_done_lost_benched_and_unbench_as_the_cli_shows_them(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "two-runs", {"seed": [1, 2]}, steps=20, ckpt=10,
                                            eval_every=10))
        s.wait_sweep_done(self.sweep_id, 180)
        # DONE: the two runs it trained to their end.
        r = wait_for(lambda: (lambda x: x if x and x["DONE"] == "2" else None)(
            row(self.workers(), "w1")), 20, "w1 to show DONE 2")
        self.assertEqual(r["STATE"], "idle")
        self.assertEqual(r["FAULTS"], "0")

        # Benched (as the server benches it after worker-side failures): the state, the reason,
        # until when, and how to lift it.
        s.sql("UPDATE workers SET benched_until = now() + interval '300 seconds', "
              "bench_reason = '3 attempts in a row failed for worker-side causes; last (run 1): "
              "CUDA error: out of memory', self_check_due = true, fault_streak = 3, "
              "runs_faulted = 3 WHERE name = 'w1'")
        out = self.workers()
        r = row(out, "w1")
        self.assertEqual(r["STATE"], "benched", out)
        self.assertEqual(r["FAULTS"], "3", out)
        self.assertRegex(out, r"w1: benched until \d\d:\d\d:\d\d \(in (4m5\d|5m00)s\), then its "
                              r"self-check: 3 attempts in a row failed for worker-side causes; "
                              r"last \(run 1\): CUDA error: out of memory; lift it with "
                              r"`ablate workers unbench w1`")
        benched = s.cli_json("workers")[0]
        self.assertEqual(benched["state"], "benched")
        self.assertTrue(benched["self_check_due"])
        self.assertIn("CUDA error: out of memory", benched["bench_reason"])

        # Completion offers live workers by name for unbench.
        names = s.cli("__complete", "workers").stdout
        self.assertRegex(names, r"(?m)^w1\tbenched cpu$")

        done = s.cli("workers", "unbench", "w1")
        self.assertIn("worker w1 unbenched: it may lease at once (now idle)", done.stdout)
        r = row(self.workers(), "w1")
        self.assertEqual(r["STATE"], "idle")
        self.assertEqual(s.sql("SELECT benched_until IS NULL, self_check_due, fault_streak "
                               "FROM workers WHERE name = 'w1'"), "t|f|0")
        unknown = s.cli("workers", "unbench", "nobody", check=False)
        self.assertNotEqual(unknown.returncode, 0)
        self.assertIn('no worker named "nobody"', unknown.stderr)

        # Its heartbeats stop (the process frozen) while it trains a run: lost within a lease
        # period (3 s); the sweep, with no other worker, has no ETA and says why; the lease
        # expires (a preemption, which does not use one of the run's attempts).
        self.sweep_id = s.submit(sweep_file(s, "long-run", {"seed": [1]}, steps=3000, ckpt=100,
                                            eval_every=1000))
        run = int(wait_for(self.first_running, 120, "the run to start")["id"])
        os.kill(s.procs["w1"].pid, signal.SIGSTOP)
        try:
            wait_for(lambda: (row(self.workers(), "w1") or {}).get("STATE") == "lost",
                     s.lease_seconds + 3, "w1 to show lost")
            out = self.workers()
            # With a 3 s lease the reaper may already have requeued the run it held (then the
            # line says no more than the silence).
            self.assertRegex(out, r"w1: lost \(no heartbeat for \d[^)]*\)(; the runs it holds are "
                                  r"requeued when their leases expire)?\n")
            sweep = s.sweep(self.sweep_id)["sweep"]
            self.assertEqual(sweep["eta_basis"], "held: no live worker", sweep)
            self.assertEqual(sweep["eta_seconds"], -1)
            wait_for(lambda: self.run_step(run)[1]["state"] == "queued", 30,
                     "the reaper to requeue the run")
        finally:
            os.kill(s.procs["w1"].pid, signal.SIGCONT)
        wait_for(lambda: self.run_step(run)[1]["state"] == "running", 60,
                 "w1 to lease the run again")
        r = self.run_step(run)[1]
        self.assertEqual(int(r.get("preemptions", 0)), 1, r)
        table = s.cli("runs", str(self.sweep_id)).stdout
        line = [l for l in table.splitlines() if l.split()[:1] == [str(run)]][0]
        # Attempt 2 of the raw numbers (2/4): the first was a preemption, not the run's.
        self.assertIn("1/3 +1 preempted", line, table)
        self.assertEqual((row(self.workers(), "w1") or {}).get("STATE"), "busy")
        s.cli("cancel", str(self.sweep_id))

    def test_text_a_worker_sent_is_shown_escaped_never_obeyed(self):
        """A device name or an error text (which becomes a bench reason) with an escape sequence,
        a bell and a newline: `ablate workers` prints them escaped, so no row is forged and the
        terminal is not driven (the third hostile round, item 12)."""
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        wait_for(lambda: row(self.workers(), "w1"), 60, "w1 to register")
        evil = "\x1b]0;owned\x07\x1b[2J\n99  forged  idle"
        s.sql("UPDATE workers SET info = jsonb_set(info, '{device_name}', to_jsonb("
              f"E'{evil.encode('unicode_escape').decode()}'::text)), "
              "benched_until = now() + interval '300 seconds', self_check_due = true, "
              f"bench_reason = E'CUDA error: {evil.encode('unicode_escape').decode()}' "
              "WHERE name = 'w1'")
        out = self.workers()
        for bad in ("\x1b", "\x07"):
            self.assertNotIn(bad, out)
        self.assertNotIn("\n99  forged", out)
        self.assertIn("\\x1b]0;owned\\x07\\x1b[2J\\n99  forged  idle", out)
        self.assertEqual(len([l for l in out.splitlines() if l.strip()]), 3, out)

    def test_a_worker_under_a_memory_limit_registers_the_limit(self):
        """A cpu worker whose memory is capped (here RLIMIT_DATA, as `ulimit -d` sets it; a
        container's cgroup works the same) registers the cap, not the machine's RAM, so the
        server does not hand it runs it can only be killed for (the third hostile round, item 3)."""
        s = self.stack
        s.start_server()
        with open("/proc/meminfo") as f:
            total = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemTotal:"))
        cap = min(total // 2, 3 << 30)
        previous = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA, (cap, previous[1]))
        try:
            s.start_worker("capped")  # inherits the limit
        finally:
            resource.setrlimit(resource.RLIMIT_DATA, previous)
        w = wait_for(lambda: s.cli_json("workers"), 120, "the capped worker to register")[0]
        self.assertLessEqual(int(w["info"]["device_memory_bytes"]), cap)
        self.assertIn("memory limit", s.log("capped"))


if __name__ == "__main__":
    unittest.main()
