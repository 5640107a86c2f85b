#!/usr/bin/env python3
"""deploy/gpu/attach.sh and stop.sh for real, over ssh, against a throwaway OpenSSH server on
127.0.0.1 that stands in for the rented box (this machine, with HOME in a temporary directory).

attach.sh --mode binary ships the ablate-worker built here, remote-service.sh runs it in its
restart loop (the box has no systemd), the worker registers with a local ablate-server over TLS
(certificates from deploy/tls/make-certs.sh) and trains a tiny CPU sweep to succeeded; stop.sh
then ends it and no worker process is left.

Run through ctest (tests/deploy/CMakeLists.txt), which starts PostgreSQL and sets the build
paths. ATTACH_E2E_MODE=build runs --mode build instead, compiling the worker on the "box" with
remote-build.sh: far too slow for the suite (see tests/deploy/attach_build_mode.sh).
"""

import getpass
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from harness import SRC, WORKER, Stack, free_port, wait_for  # noqa: E402
from harness import sweep_file  # noqa: E402

ATTACH = os.path.join(SRC, "deploy", "gpu", "attach.sh")
STOP = os.path.join(SRC, "deploy", "gpu", "stop.sh")
MAKE_CERTS = os.path.join(SRC, "deploy", "tls", "make-certs.sh")
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
MODE = os.environ.get("ATTACH_E2E_MODE", "binary")
# remote-build.sh compiles the whole worker; on a shared 2-core machine that takes most of an hour.
ATTACH_TIMEOUT = 3600 if MODE == "build" else 300

# attach.sh and stop.sh call `ssh` from PATH; this one adds what a throwaway host key needs.
SSH_WRAPPER = """#!/bin/sh
exec /usr/bin/ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "$@"
"""


def processes_running(exe):
    """Pids of live processes whose executable is exe (by /proc/PID/exe)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/exe") == exe:
                with open(f"/proc/{entry}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        pids.append(int(entry))
        except OSError:
            continue
    return pids


@unittest.skipUnless(os.path.exists(SSHD), "needs OpenSSH's sshd (scripts/install-deps installs openssh-server)")
class AttachOverRealSsh(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ablate-attach-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.home = os.path.join(self.tmp, "box-home")
        os.makedirs(self.home)
        self.box_worker = os.path.join(self.home, ".ablate", "bin", "ablate-worker")
        self.start_sshd()
        self.bin = os.path.join(self.tmp, "bin")
        os.makedirs(self.bin)
        ssh = os.path.join(self.bin, "ssh")
        with open(ssh, "w") as f:
            f.write(SSH_WRAPPER)
        os.chmod(ssh, 0o755)
        self.env = {**os.environ, "PATH": self.bin + os.pathsep + os.environ["PATH"]}
        self.env.pop("ABLATE_TOKEN", None)

        certs = os.path.join(self.tmp, "tls")
        subprocess.run([MAKE_CERTS, "--out", certs, "127.0.0.1"], check=True, capture_output=True, timeout=60)
        self.ca = os.path.join(certs, "ca.crt")
        self.stack = Stack(lease_seconds=10)
        self.addCleanup(self.stack.close)
        self.stack.start_server(extra=("--tls-cert", os.path.join(certs, "server.crt"),
                                       "--tls-key", os.path.join(certs, "server.key")))
        # The CLI reads the CA from the environment: the server now speaks TLS only.
        patcher = mock.patch.dict(os.environ, {"ABLATE_TLS_CA": self.ca})
        patcher.start()
        self.addCleanup(patcher.stop)
        self.addCleanup(self.kill_box_leftovers)

    def start_sshd(self):
        keys = os.path.join(self.tmp, "ssh")
        os.makedirs(keys)
        for name in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(keys, name)],
                           check=True, timeout=60)
        shutil.copy(os.path.join(keys, "client_key.pub"), os.path.join(keys, "authorized_keys"))
        self.identity = os.path.join(keys, "client_key")
        self.ssh_port = free_port()
        self.user = getpass.getuser()
        # SetEnv HOME puts everything the scripts leave on the "box" (~/.ablate) in the temp dir.
        config = os.path.join(keys, "sshd_config")
        with open(config, "w") as f:
            f.write(f"""ListenAddress 127.0.0.1
Port {self.ssh_port}
HostKey {keys}/host_key
AuthorizedKeysFile {keys}/authorized_keys
PidFile {keys}/sshd.pid
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowUsers {self.user}
SetEnv HOME={self.home}
""")
        if os.geteuid() == 0:
            # sshd's privilege separation directory, made by the package's init script otherwise.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.sshd_log = os.path.join(keys, "sshd.log")
        with open(self.sshd_log, "wb") as log:
            sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", config], stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(self.stop_process, sshd)

        def listening():
            if sshd.poll() is not None:
                raise AssertionError("sshd exited:\n" + self.read(self.sshd_log))
            return Stack._port_open(self.ssh_port)
        wait_for(listening, 20, "sshd to listen")

    @staticmethod
    def stop_process(p):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    @staticmethod
    def read(path):
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def kill_box_leftovers(self):
        """A failed test must not leave its restart loop and worker running on this machine."""
        pid_file = os.path.join(self.home, ".ablate", "worker.pid")
        if os.path.exists(pid_file):
            try:
                os.killpg(int(self.read(pid_file)), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        for pid in processes_running(self.box_worker):
            os.kill(pid, signal.SIGKILL)

    def script(self, *argv, timeout=300):
        p = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            self.fail(f"{os.path.basename(argv[0])} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
                      f"\nbox worker log:\n{self.read(os.path.join(self.home, '.ablate', 'worker.log'))}"
                      f"\nsshd log:\n{self.read(self.sshd_log)}\n{self.stack.dump_logs()}")
        return p

    def test_attach_register_over_tls_run_and_stop(self):
        s = self.stack
        token_file = os.path.join(self.tmp, "worker.token")
        with open(token_file, "w") as f:
            f.write(s.worker_token + "\n")
        box = f"{self.user}@127.0.0.1"
        ssh_args = ("--ssh-port", str(self.ssh_port), "--identity", self.identity)
        mode_args = ("--mode", "binary", "--worker-bin", WORKER) if MODE == "binary" else ("--mode", "build")
        started = time.monotonic()
        attach = self.script(ATTACH, box, *ssh_args, "--server", s.server_addr, "--token-file", token_file,
                             "--tls-ca", self.ca, "--device", "cpu", "--name", "box-1",
                             "--price-per-hour", "0.35", *mode_args,
                             timeout=ATTACH_TIMEOUT)
        print(f"attach.sh --mode {MODE} took {time.monotonic() - started:.0f} s", file=sys.stderr)
        self.assertIn("running (restart loop", attach.stdout)

        # What attach.sh left on the box: the worker it runs, and the token only in 0600 files.
        state = os.path.join(self.home, ".ablate")
        self.assertTrue(os.access(self.box_worker, os.X_OK))
        for name in ("worker.env", "worker.run.env"):
            self.assertEqual(os.stat(os.path.join(state, name)).st_mode & 0o077, 0, name)
        self.assertIn(f"ABLATE_TOKEN={s.worker_token}\n", self.read(os.path.join(state, "worker.env")))
        pids = wait_for(lambda: processes_running(self.box_worker), 30, "the worker process on the box")
        for pid in pids:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace")
            self.assertNotIn(s.worker_token, argv)
            self.assertIn("--device\0cpu", argv)
            self.assertIn("--price-per-hour\x000.35", argv)

        # Registered over TLS: the server knows it by the name attach.sh gave it.
        box1 = wait_for(lambda: [w for w in s.cli_json("workers") if w.get("info", {}).get("name") == "box-1"],
                        60, "box-1 in `ablate workers`")[0]
        # The price attach.sh was given, and the startup benchmark, reached the server.
        self.assertEqual(box1["info"]["price_per_hour"], 0.35)
        self.assertEqual([b["dtype"] for b in box1["info"]["benchmarks"]], ["float32"])
        self.sweep_id = s.submit(sweep_file(s, "attach-e2e", {"n_layer": "[1]"}, steps=30, ckpt=10,
                                            eval_every=10))
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual([(r["state"], r.get("worker")) for r in runs], [("succeeded", "box-1")],
                         self.read(os.path.join(state, "worker.log")))

        stop = self.script(STOP, box, *ssh_args)
        self.assertIn("stopped", stop.stdout)
        self.assertEqual(processes_running(self.box_worker), [])
        self.assertFalse(os.path.exists(os.path.join(state, "worker.pid")))
        # SIGTERM reached the worker through the loop, which then ended rather than restarting it.
        self.assertNotIn("restarting", self.read(os.path.join(state, "worker.log")))


if __name__ == "__main__":
    unittest.main()
