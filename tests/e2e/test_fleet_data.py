#!/usr/bin/env python3
"""Data prepared once per fleet: one worker trains the tokenizer and encodes the text, the
others download what it published or find it in their own cache."""
import os
import re
import shutil
import sys
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import E2E, SRC, Stack, wait_for, write_sweep  # noqa: E402
from harness import free_port as harness_free_port  # noqa: E402


class FleetData(E2E):
    """Prepared once per fleet: of two fresh workers that lease runs on the same text at once,
    exactly one trains the tokenizer and encodes the text; the other downloads what it published
    (after waiting for it, if it asked while the first was preparing). A third sweep on the same
    data finds it in each worker's own cache."""

    def setUp(self):
        data = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ablate-e2e-data-{os.getpid()}")
        os.makedirs(data, exist_ok=True)
        for name in ("tinystories_train.txt", "tinystories_valid.txt"):
            shutil.copy(os.path.join(SRC, "examples", "data", name), data)
        self.data_dir = data
        self.stack = Stack(lease_seconds=self.lease_seconds, data_dir=data, pace_ms=self.pace_ms)

    def tearDown(self):
        super().tearDown()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def sweep(self, name, seeds):
        body = (f"name: {name}\n"
                "data: {train: tinystories_train.txt, val: tinystories_valid.txt,"
                " tokenizer: {type: bpe, vocab: 512}}\n"
                "fixed: {n_embd: 32, n_head: 2, n_layer: 1, block_size: 32, batch_size: 4, steps: 5,"
                " warmup: 1, eval_every: 5, eval_batches: 1, probe_every: 5, log_every: 1,"
                " checkpoint_every: 100}\n"
                f"grid:\n  seed: {seeds}\n")
        return write_sweep(self.stack.dir, name, body)

    def data_sets(self, port):
        """The worker's ablate_worker_data_sets_total by source."""
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {m.group(1): float(m.group(2)) for m in re.finditer(
            r'^ablate_worker_data_sets_total\{[^}]*source="(\w+)"[^}]*\} (\S+)$', text, re.M)}

    def test_second_worker_downloads_what_the_first_prepared(self):
        s = self.stack
        s.start_server()
        ports = {w: harness_free_port() for w in ("w1", "w2")}
        for w, port in ports.items():
            s.start_worker(w, extra=("--metrics-listen", f"127.0.0.1:{port}"))
        wait_for(lambda: len(s.cli_json("workers")) == 2, 60, "both workers to register")
        self.sweep_id = s.submit(self.sweep("fleet-data", "[1, 2]"))
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual({r["state"] for r in runs}, {"succeeded"}, runs)
        self.assertEqual({r.get("worker") for r in runs}, {"w1", "w2"}, "each worker takes a run")
        logs = {w: s.log(w) for w in ("w1", "w2")}
        preparers = [w for w, log in logs.items() if "preparing it for the fleet" in log]
        self.assertEqual(len(preparers), 1, "exactly one worker prepares:\n" + s.dump_logs())
        preparer = preparers[0]
        other = "w2" if preparer == "w1" else "w1"
        self.assertIn("published to the fleet (4 files", logs[preparer])
        self.assertIn("downloaded prepared data from the fleet (4 files", logs[other])
        self.assertNotIn("prepared in", logs[other])
        # The workers' /metrics say the same. Each worker samples once a second on its own
        # clock, so wait for both counters before reading either.
        wait_for(lambda: self.data_sets(ports[other]).get("downloaded") == 1, 30,
                 "the downloader's data_sets counter")
        wait_for(lambda: self.data_sets(ports[preparer]).get("prepared") == 1, 30,
                 "the preparer's data_sets counter")
        self.assertEqual(self.data_sets(ports[other]).get("prepared"), 0)
        self.assertEqual(self.data_sets(ports[preparer]).get("prepared"), 1)
        self.assertEqual(self.data_sets(ports[preparer]).get("downloaded"), 0)
        # Both trained with the same tokenizer (the downloaded one is byte-identical).
        self.assertEqual(len({r["result"]["tokenizer_sha256"] for r in runs}), 1)
        # The server keeps the published files in its store; nothing else was claimed.
        self.assertEqual(s.sql("SELECT state, claims FROM prepared_data"), "ready|1")
        self.assertEqual(s.sql("SELECT count(*) FROM prepared_files"), "4")

        # Again on the same data: each worker's own cache comes first, the server is not asked.
        self.sweep_id = s.submit(self.sweep("fleet-data-again", "[3, 4]"))
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual({r["state"] for r in runs}, {"succeeded"}, runs)
        for r in runs:
            self.assertIn("in the local cache", s.log(r["worker"]))
        for w in ("w1", "w2"):
            self.assertEqual(s.log(w).count("preparing it for the fleet"), logs[w].count(
                "preparing it for the fleet"), "nothing is prepared twice")


if __name__ == "__main__":
    unittest.main(verbosity=2)
