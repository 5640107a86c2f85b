#!/usr/bin/env python3
"""`ablate delete` and `ablate-server gc`: a finished sweep's runs, metrics and checkpoint
files go; data prepared for the fleet stays."""
import hashlib
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CLI, E2E, SERVER, run, sweep_file  # noqa: E402


class Retention(E2E):
    """`ablate delete` (confirmation, --yes, exit codes) and `ablate-server gc`: a finished
    sweep's runs, metrics and checkpoint files go; data prepared for the fleet stays."""

    def delete(self, *args, stdin=subprocess.DEVNULL):
        s = self.stack
        return subprocess.run([CLI, "--server", s.server_addr, "--token", s.user_token, "delete", *args],
                              stdin=stdin, capture_output=True, text=True, timeout=120)

    def blob(self, sha):
        return os.path.join(self.stack.store_dir, sha[:2], sha)

    def test_delete_asks_or_needs_yes_refuses_live_sweeps_and_gc_removes_orphans(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-doomed", {"seed": "[0, 1]"}, steps=20, ckpt=10,
                                            eval_every=10))
        s.wait_sweep_done(self.sweep_id, 300)
        sid = str(self.sweep_id)
        shas = s.sql(f"SELECT DISTINCT c.sha256 FROM checkpoints c JOIN runs r ON r.id = c.run_id "
                     f"WHERE r.sweep_id = {sid}").split()
        self.assertGreater(len(shas), 0, "the runs stored checkpoints")
        self.assertTrue(all(os.path.exists(self.blob(h)) for h in shas))
        stored = s.sql(f"SELECT count(*) FROM checkpoints c JOIN runs r ON r.id = c.run_id "
                       f"WHERE r.sweep_id = {sid}")
        prepared = s.sql("SELECT sha256 FROM prepared_files").split()

        # A live sweep (its runs queued or running) is refused, --yes or not: exit 6.
        live = s.submit(sweep_file(s, "e2e-live", {"seed": "[0]"}, steps=100000, ckpt=100000,
                                   eval_every=100000))
        p = self.delete(str(live), "--yes")
        self.assertEqual(p.returncode, 6, p.stderr)
        self.assertIn("unfinished run", p.stderr)
        self.assertIn(f"ablate cancel {live}", p.stderr)
        # Unknown: exit 4.
        self.assertEqual(self.delete("no-such-sweep", "--yes").returncode, 4)
        # No terminal and no --yes: refused (exit 2), nothing deleted.
        p = self.delete(sid)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--yes", p.stderr)
        # A terminal: asks, and anything but yes keeps the sweep.
        master, slave = os.openpty()
        os.write(master, b"n\n")
        p = self.delete(sid, stdin=slave)
        os.close(slave)
        os.close(master)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(f"delete sweep {sid} 'e2e-doomed': 2 runs, their metrics and {stored} "
                      f"stored checkpoints? [y/N]", p.stderr)
        self.assertEqual(s.sweep(self.sweep_id)["sweep"]["state"], "finished")

        p = self.delete("e2e-doomed", "--yes")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"deleted sweep {sid} 'e2e-doomed': 2 runs", p.stdout)
        self.assertEqual(s.cli("status", sid, check=False).returncode, 4)
        self.assertEqual(s.sql(f"SELECT count(*) FROM runs WHERE sweep_id = {sid}"), "0")
        self.assertFalse(any(os.path.exists(self.blob(h)) for h in shas), "checkpoint files removed")
        self.assertTrue(all(os.path.exists(self.blob(h)) for h in prepared), "prepared data kept")

        # The live one, once cancelled, can go too; the worker carries on.
        s.cli("cancel", str(live))
        s.wait_sweep_done(live, 60)
        self.assertEqual(self.delete(str(live), "-y").returncode, 0)
        self.assertIsNone(s.procs["w1"].poll(), "the worker survives its sweep's deletion")

        # gc: an orphan (as an interrupted upload leaves) goes once old enough; nothing a row
        # references does.
        orphan = hashlib.sha256(b"orphan").hexdigest()
        os.makedirs(os.path.dirname(self.blob(orphan)), exist_ok=True)
        with open(self.blob(orphan), "wb") as f:
            f.write(b"orphan")
        gc = [SERVER, "gc", "--database-url", s.db_url, "--store-dir", s.store_dir]
        p = run(gc)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("removed 0 file(s)", p.stdout)
        self.assertTrue(os.path.exists(self.blob(orphan)), "younger than the default hour")
        p = run(gc + ["--min-age-seconds", "0", "--dry-run"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"would remove {self.blob(orphan)}", p.stdout)
        self.assertTrue(os.path.exists(self.blob(orphan)))
        p = run(gc + ["--min-age-seconds", "0"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("removed 1 file(s), 6 bytes", p.stdout)
        self.assertFalse(os.path.exists(self.blob(orphan)))
        self.assertTrue(all(os.path.exists(self.blob(h)) for h in prepared), "prepared data kept")


if __name__ == "__main__":
    unittest.main(verbosity=2)
