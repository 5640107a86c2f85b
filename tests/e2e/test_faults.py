#!/usr/bin/env python3
"""A broken box cannot fail a sweep (issue #38, docs/server.md#failures): the real server and
workers, one of them broken through ablate-worker's hidden --test-fault-file (every attempt it
starts fails at step 0 with the file's text; a first line starting `run:` makes it a run-side
failure), beside a healthy one."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import E2E, sweep_file, wait_for  # noqa: E402

CUDA_ERROR = "CUDA error: an illegal memory access was encountered (injected)"


class BrokenWorker(E2E):
    def worker(self, name):
        for w in self.stack.cli_json("workers", "--all"):
            if w["info"]["name"] == name:
                return w
        return None

    def test_a_broken_worker_beside_a_healthy_one_fails_no_run_and_is_benched(self):
        s = self.stack
        s.start_server()
        fault = os.path.join(s.dir, "broken.fault")
        with open(fault, "w") as f:
            f.write(CUDA_ERROR + "\n")
        s.start_worker("broken", extra=["--test-fault-file", fault])
        wait_for(lambda: self.worker("broken"), 60, "the broken worker to register")
        s.start_worker("healthy")
        self.sweep_id = s.submit(sweep_file(s, "e2e-broken", {"seed": "[0, 1, 2, 3, 4, 5]"},
                                            steps=60, extra="max_attempts: 1\n"))
        runs = s.wait_sweep_done(self.sweep_id, 300)
        self.assertEqual({r["state"] for r in runs} - {"succeeded", "diverged"}, set(),
                         "no run may end failed, cancelled or unfinished for a broken box")
        self.assertEqual(len(runs), 6)

        # Benched within a few attempts, and shown so, with the reason.
        broken = self.worker("broken")
        self.assertEqual(broken["state"], "benched")
        self.assertIn("3 attempts in a row failed for worker-side causes", broken["bench_reason"])
        self.assertIn(CUDA_ERROR, broken["bench_reason"])
        self.assertEqual(int(broken.get("runs_faulted", 0)), 3)
        self.assertIn("benched", s.cli("workers").stdout)
        self.assertNotEqual(self.worker("healthy")["state"], "benched")

        # Its failures are events on the runs, naming it, the cause and the class.
        faulted = []
        for r in runs:
            for e in s.cli_json("logs", str(r["id"])):
                if e.get("kind") == "faulted":
                    faulted.append((e.get("worker"), e.get("fault"), e.get("message")))
                    self.assertEqual(r["worker"], "healthy", "a faulted run finished elsewhere")
        self.assertEqual(len(faulted), 3)
        for worker, klass, message in faulted:
            self.assertEqual((worker, klass), ("broken", "worker"))
            self.assertIn(CUDA_ERROR, message)

        # Healed and unbenched, it trains again.
        os.remove(fault)
        s.cli("workers", "unbench", "broken")
        self.assertNotEqual(self.worker("broken")["state"], "benched")
        s.stop("healthy")
        self.sweep_id = s.submit(sweep_file(s, "e2e-healed", {"seed": "[0]"}, steps=60))
        runs = s.wait_sweep_done(self.sweep_id, 120)
        self.assertEqual([(r["state"], r["worker"]) for r in runs], [("succeeded", "broken")])

    def test_a_run_side_failure_fails_the_run_once_with_its_error(self):
        s = self.stack
        s.start_server()
        fault = os.path.join(s.dir, "bad-data.fault")
        with open(fault, "w") as f:
            f.write("run: train.tokens: token 70000 is beyond the vocabulary (injected)\n")
        s.start_worker("w1", extra=["--test-fault-file", fault])
        s.start_worker("w2", extra=["--test-fault-file", fault])
        self.sweep_id = s.submit(sweep_file(s, "e2e-runside", {"seed": "[0]"}, steps=60))
        runs = s.wait_sweep_done(self.sweep_id, 120)
        self.assertEqual(runs[0]["state"], "failed")
        self.assertEqual(int(runs[0]["attempt"]), 1, "a run-side failure is not retried")
        self.assertIn("token 70000 is beyond the vocabulary", runs[0]["error"])
        events = [e for e in s.cli_json("logs", str(runs[0]["id"])) if "kind" in e]
        self.assertEqual([e.get("fault") for e in events if e["kind"] == "completed"], ["run"])
        for name in ("w1", "w2"):
            self.assertNotEqual(self.worker(name)["state"], "benched")


if __name__ == "__main__":
    unittest.main()
