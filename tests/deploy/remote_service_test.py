#!/usr/bin/env python3
"""deploy/gpu/remote-service.sh in its restart-loop mode (the one rented GPU containers get),
run here for real with HOME in a temporary directory and a stand-in ~/.ablate/bin/ablate-worker:
the worker gets its settings from the env files (and the libraries shipped with it through
LD_LIBRARY_PATH), is restarted after it fails, and on stop receives SIGTERM (to hand its lease
back) and the loop ends."""

import os
import signal
import stat
import subprocess
import tempfile
import time
import unittest

REPO = os.environ.get("ABLATE_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVICE = os.path.join(REPO, "deploy", "gpu", "remote-service.sh")

# Records each start (args and the settings it sees); the first start fails, later ones run
# until SIGTERM, which they record before exiting.
FAKE_WORKER = """#!/usr/bin/env bash
log="$HOME/fake-worker.log"
n=$(grep -c '^start' "$log" 2>/dev/null || true)
echo "start $* server=$ABLATE_SERVER token=$ABLATE_TOKEN ca=${ABLATE_TLS_CA:-} ld=${LD_LIBRARY_PATH:-}" >>"$log"
[[ $n -eq 0 ]] && exit 3
trap 'echo term >>"$log"; exit 0' TERM
while true; do sleep 0.1; done
"""


def wait_for(predicate, what, deadline_s=30):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")


class RemoteServiceLoopTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.home = os.path.join(self.tmp.name, "home")
        self.state = os.path.join(self.home, ".ablate")
        bin_dir = os.path.join(self.state, "bin")
        os.makedirs(bin_dir)
        self.worker = os.path.join(bin_dir, "ablate-worker")
        worker = self.worker
        with open(worker, "w") as f:
            f.write(FAKE_WORKER)
        os.chmod(worker, os.stat(worker).st_mode | stat.S_IXUSR)
        with open(os.path.join(self.state, "worker.env"), "w") as f:
            f.write('ABLATE_SERVER=203.0.113.10:7070\nABLATE_WORKER_ARGS="--device cuda --name a100"\n'
                    "ABLATE_TOKEN=ablt_00ff\n")
        with open(os.path.join(self.state, "ca.crt"), "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\n")
        self.env = {**os.environ, "HOME": self.home, "ABLATE_SERVICE_MANAGER": "loop", "ABLATE_RESTART_DELAY": "1"}
        self.env.pop("LD_LIBRARY_PATH", None)
        self.addCleanup(self.kill_leftovers)

    def kill_leftovers(self):
        pid_file = os.path.join(self.state, "worker.pid")
        if os.path.exists(pid_file):
            with open(pid_file) as f:
                pid = int(f.read())
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def service(self, command):
        return subprocess.run(["bash", SERVICE, command], env=self.env, capture_output=True, text=True,
                              timeout=150)

    def worker_log(self):
        try:
            with open(os.path.join(self.home, "fake-worker.log")) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def test_start_restart_on_failure_status_stop(self):
        result = self.service("start")
        self.assertEqual(result.returncode, 0, result.stderr)
        # The first run exits 3; the loop starts it again.
        wait_for(lambda: len([l for l in self.worker_log() if l.startswith("start")]) >= 2, "a restart")
        starts = [l for l in self.worker_log() if l.startswith("start")]
        ca = os.path.join(self.state, "ca.crt")
        self.assertEqual(starts[0], f"start --device cuda --name a100 server=203.0.113.10:7070 "
                                    f"token=ablt_00ff ca={ca} ld=")
        with open(os.path.join(self.state, "worker.log")) as f:
            self.assertIn("ablate-worker exited with 3; restarting in 1 s", f.read())
        self.assertEqual(os.stat(os.path.join(self.state, "worker.run.env")).st_mode & 0o077, 0)

        status = self.service("status")
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn("running (restart loop", status.stdout)

        stop = self.service("stop")
        self.assertEqual(stop.returncode, 0, stop.stderr)
        self.assertEqual(self.worker_log()[-1], "term")
        self.assertFalse(os.path.exists(os.path.join(self.state, "worker.pid")))
        after = self.service("status")
        self.assertEqual(after.returncode, 1)
        self.assertIn("not running", after.stderr)

    def test_libraries_shipped_with_the_binary_are_found(self):
        lib = os.path.join(self.state, "lib")
        os.makedirs(lib)
        with open(os.path.join(lib, "libtorch.so"), "w") as f:
            f.write("")
        result = self.service("start")
        self.assertEqual(result.returncode, 0, result.stderr)
        wait_for(lambda: self.worker_log(), "the first start")
        self.assertTrue(self.worker_log()[0].endswith(f" ld={lib}"), self.worker_log())
        self.assertEqual(self.service("stop").returncode, 0)

    def test_start_without_worker_binary_fails(self):
        os.unlink(self.worker)
        result = self.service("start")
        self.assertEqual(result.returncode, 1)
        self.assertIn("ablate-worker missing", result.stderr)

    def test_start_without_env_file_fails(self):
        os.unlink(os.path.join(self.state, "worker.env"))
        result = self.service("start")
        self.assertEqual(result.returncode, 1)
        self.assertIn("worker.env missing", result.stderr)

    def test_unknown_command(self):
        result = self.service("restart-everything")
        self.assertEqual(result.returncode, 2)
        self.assertIn("usage", result.stderr)


if __name__ == "__main__":
    unittest.main()
