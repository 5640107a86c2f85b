"""End-to-end harness: real binaries, a real PostgreSQL, real gRPC on loopback.

A Stack owns a temp directory, a fresh database inside the PostgreSQL that ctest started
(ABLATE_TEST_PG_DIR) or ABLATE_TEST_DATABASE_URL, an ablate-server, workers, and optionally a
TCP proxy between workers and server (to cut the network) and a Prometheus server. A Stack made
with own_postgres=True runs a PostgreSQL of its own instead, so a test may crash it without
touching the tests that share ctest's.
Everything it starts it stops, even when a test fails.

The test_<concern>.py files share the rest from here: E2E, the base class of their tests (a Stack
per test, its logs printed when the test fails), the sweep files they submit (sweep_file,
SMALLEST, LEARNS), and run / watch_on_a_pty for the CLI with and without a terminal.
"""
import collections
import fcntl
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import string
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import unittest

SRC = os.environ.get("ABLATE_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BIN = os.environ.get("ABLATE_BINARY_DIR", os.path.join(SRC, "build"))
SERVER = os.path.join(BIN, "server", "ablate-server")
WORKER = os.path.join(BIN, "worker", "ablate-worker")
CLI = os.path.join(BIN, "client", "ablate")


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_handed_out = set()


def free_port():
    """A loopback port free now, for a process this test starts next. Taken below the kernel's
    ephemeral range: a port the kernel picked (bind to 0) may be handed to any outgoing connection
    before our process binds it, which with tests running side by side happens; a port outside the
    range is only ever taken by someone asking for it by number."""
    low = min(_ephemeral_low(), 65536)
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(10000, low) if low > 11000 else rng.randrange(1024, 65536)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


def wait_for(pred, timeout, what, interval=0.1):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


DEV_POSTGRES = os.path.join(SRC, "scripts", "dev-postgres")


def admin_url():
    url = os.environ.get("ABLATE_TEST_DATABASE_URL")
    if url:
        return url
    pg_dir = os.environ.get("ABLATE_TEST_PG_DIR")
    if not pg_dir:
        raise unittest.SkipTest("no database: run through ctest (it starts PostgreSQL) or set ABLATE_TEST_DATABASE_URL")
    return subprocess.check_output([DEV_POSTGRES, "url", pg_dir], text=True).strip()


# -- full disks (root: tmpfs) --------------------------------------------------------------------
FILLER = "disk-filler"


def mount_tmpfs(path, mb):
    """A tmpfs of `mb` MiB at `path` (root only): a disk small enough to fill."""
    os.makedirs(path, exist_ok=True)
    subprocess.check_call(["mount", "-t", "tmpfs", "-o", f"size={mb}m,mode=0755", "tmpfs", path])


def fill_disk(path):
    """Fills the file system under `path` to the last byte (ENOSPC) with one file; returns the
    bytes written. empty_disk(path) gives them back."""
    written = 0
    with open(os.path.join(path, FILLER), "wb", buffering=0) as f:
        for size in (1 << 20, 1 << 12, 1):
            block = b"\0" * size
            while True:
                try:
                    f.write(block)
                except OSError:
                    break
                written += size
    return written


def empty_disk(path):
    try:
        os.remove(os.path.join(path, FILLER))
    except FileNotFoundError:
        pass


class Proxy:
    """A TCP relay that can be cut (listener closed, connections dropped) and restored."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self._lock = threading.Lock()
        self._conns = []
        self._listener = None
        self._stop = threading.Event()
        self.restore()

    def _accept_loop(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                # The timeout is for the connect only: left on the socket, it would cut any
                # connection the server leaves quiet for 5 s, which is no network fault.
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self._lock:
            if self._listener:
                # close() alone does not wake a thread blocked in accept(); shutdown() does.
                try:
                    self._listener.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self._listener.close()
                self._listener = None
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self._conns = []

    def restore(self):
        with self._lock:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(64)
            self._listener = listener
        threading.Thread(target=self._accept_loop, args=(listener,), daemon=True).start()


class Stack:
    def __init__(self, lease_seconds=3, data_dir=None, own_postgres=False, pace_ms=0):
        self.dir = tempfile.mkdtemp(prefix="ablate-e2e-")
        self.lease_seconds = lease_seconds
        self.pace_ms = pace_ms
        self.data_dir = data_dir or self.dir
        self.procs = {}
        self.logs = {}
        self.pg_dir = None
        if own_postgres:
            self.pg_dir = os.path.join(self.dir, "pg")
            base = self.start_postgres()
        else:
            base = admin_url()
        self.db_name = "e2e_" + "".join(random.choices(string.ascii_lowercase, k=10))
        subprocess.check_call(["psql", base, "-qAt", "-c", f"CREATE DATABASE {self.db_name}"],
                              stdout=subprocess.DEVNULL)
        self.admin = base
        self.db_url = base.rsplit("/", 1)[0] + "/" + self.db_name
        self.port = free_port()
        self.metrics_port = free_port()
        self.server_addr = f"127.0.0.1:{self.port}"
        self.store_dir = os.path.join(self.dir, "store")
        self.proxy = None
        self.worker_token = None
        self.user_token = None
        self.workers = set()

    # -- processes ---------------------------------------------------------------------------
    def _spawn(self, name, argv, env=None):
        log = open(os.path.join(self.dir, name + ".log"), "ab")
        self.logs[name] = log.name
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=e, start_new_session=True)
        log.close()  # the child holds its own descriptor
        self.procs[name] = p
        return p

    def log(self, name):
        with open(self.logs[name], errors="replace") as f:
            return f.read()

    def token(self, role):
        out = subprocess.check_output([SERVER, "token", "create", "--role", role, "--name", f"e2e-{role}",
                                       "--database-url", self.db_url], text=True, stderr=subprocess.STDOUT)
        lines = [l.strip() for l in out.splitlines() if l.strip()]
        # The token is the only whitespace-free line of 20+ characters.
        cands = [l for l in lines if " " not in l and len(l) >= 20]
        assert cands, f"no token in output of token create: {out!r}"
        return cands[-1]

    def start_server(self, name="server", extra=()):
        argv = [SERVER, "serve", "--database-url", self.db_url, "--listen", self.server_addr,
                "--metrics-listen", f"127.0.0.1:{self.metrics_port}", "--lease-seconds",
                str(self.lease_seconds), "--data-dir", self.data_dir, "--store-dir", self.store_dir, *extra]
        self._spawn(name, argv)
        wait_for(lambda: self._port_open(self.port), 20, f"{name} to listen")
        if self.worker_token is None:
            self.worker_token = self.token("worker")
            self.user_token = self.token("user")

    def start_replica(self, name, port=None, metrics=None, extra=()):
        """A second ablate-server on the same database (its own gRPC and metrics ports); returns
        its address for workers and the CLI. Given the ports of a replica that died, it restarts
        that replica where its workers look for it."""
        port, metrics = port or free_port(), metrics or free_port()
        argv = [SERVER, "serve", "--database-url", self.db_url, "--listen", f"127.0.0.1:{port}",
                "--metrics-listen", f"127.0.0.1:{metrics}", "--lease-seconds", str(self.lease_seconds),
                "--data-dir", self.data_dir, "--store-dir", self.store_dir, *extra]
        self._spawn(name, argv)
        wait_for(lambda: self._port_open(port), 20, f"{name} to listen")
        return f"127.0.0.1:{port}"

    def stop(self, name, sig=signal.SIGTERM, timeout=30):
        p = self.procs.get(name)
        if p is None or p.poll() is not None:
            return p.returncode if p else None
        p.send_signal(sig)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()

    def start_worker(self, name, via_proxy=False, extra=(), threads=1, server=None):
        addr = f"127.0.0.1:{self.proxy.port}" if via_proxy else (server or self.server_addr)
        work = os.path.join(self.dir, name)
        argv = [WORKER, "--server", addr, "--token", self.worker_token, "--device", "cpu", "--work-dir", work,
                "--name", name, "--threads", str(threads), "--lease-wait", "5", *extra]
        if self.pace_ms:
            argv += ["--test-min-step-ms", str(self.pace_ms)]
        self.workers.add(name)
        return self._spawn(name, argv)

    # -- a PostgreSQL of our own (own_postgres=True) -------------------------------------------
    def start_postgres(self):
        """Starts (or, after crash_postgres, restarts and recovers) this stack's PostgreSQL on the
        same port. synchronous_commit is on, as in production: with it off a crash may lose commits
        PostgreSQL already acknowledged, which no client can make up for."""
        env = dict(os.environ, DEV_POSTGRES_OPTIONS="-c synchronous_commit=on")
        url = subprocess.check_output([DEV_POSTGRES, "start", self.pg_dir], text=True, env=env).strip()
        cluster_file = os.path.join(self.pg_dir, "cluster")  # where it lives when run as root
        cluster = self.pg_dir
        if os.path.exists(cluster_file):
            with open(cluster_file) as f:
                cluster = f.read().strip()
        self.logs["postgres"] = os.path.join(cluster, "postgres.log")
        return url

    def crash_postgres(self):
        """Immediate-mode stop: every backend dies at once, nothing is checkpointed."""
        subprocess.check_call([DEV_POSTGRES, "crash", self.pg_dir])

    def start_proxy(self):
        self.proxy = Proxy(self.port)
        return self.proxy

    @staticmethod
    def _port_open(port):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    # -- CLI ---------------------------------------------------------------------------------
    def cli(self, *args, token=None, server=None, check=True, timeout=120):
        argv = [CLI, "--server", server or self.server_addr, "--token",
                (self.user_token or "") if token is None else token, *args]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {p.returncode}\nstdout:{p.stdout}\nstderr:{p.stderr}")
        return p

    def cli_json(self, *args, **kw):
        out = self.cli("--output", "json", *args, **kw).stdout
        return [json.loads(l) for l in out.splitlines() if l.strip()]

    def submit(self, path):
        rec = self.cli_json("submit", path)[0]
        return int(rec["sweep"]["id"])

    def runs(self, sweep):
        return self.cli_json("runs", str(sweep), "--limit", "10000")

    def sweep(self, sweep):
        return self.cli_json("status", str(sweep))[0]

    def wait_sweep_done(self, sweep, timeout):
        terminal = {"succeeded", "diverged", "failed", "cancelled", "skipped"}

        def done():
            if self.workers and all(self.procs[w].poll() is not None for w in self.workers):
                raise AssertionError("every worker has exited:\n" + self.dump_logs())
            rs = self.runs(sweep)
            return rs if rs and all(r["state"] in terminal for r in rs) else None
        return wait_for(done, timeout, f"sweep {sweep} to finish", interval=0.5)

    def metrics(self, run, names=()):
        args = ["metrics", str(run)]
        if names:
            args += ["--name", ",".join(names)]
        return self.cli_json(*args)

    def sql(self, query):
        return subprocess.check_output(["psql", self.db_url, "-qAt", "-c", query], text=True).strip()

    # -- teardown ----------------------------------------------------------------------------
    def close(self, keep_logs_on_failure=True):
        for name in list(self.procs):
            self.stop(name, signal.SIGKILL if name.startswith("prometheus") else signal.SIGTERM, timeout=10)
        if self.proxy:
            self.proxy.cut()
        try:
            subprocess.call(["psql", self.admin, "-qAt", "-c", f"DROP DATABASE IF EXISTS {self.db_name} WITH (FORCE)"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            pass
        if self.pg_dir:
            subprocess.call([DEV_POSTGRES, "stop", self.pg_dir], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def dump_logs(self):
        out = []
        for name, path in self.logs.items():
            try:
                with open(path, errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            out.append(f"===== {name} (last 60 lines) =====\n" + "\n".join(text.splitlines()[-60:]))
        return "\n".join(out)


def write_sweep(directory, name, body):
    path = os.path.join(directory, name + ".yaml")
    with open(path, "w") as f:
        f.write(body)
    return path


# ---- What the test_*.py files share: the sweep files they submit, the base class of every
# e2e test (a Stack per test, its logs printed when the test fails), running the CLI and reading a
# terminal.

# A tiny model on the generated corpus, so the test needs no downloaded data.
TINY = """
data: {{train: "synthetic:3000", val: "synthetic:300", tokenizer: {{type: bpe, vocab: 512}}}}
fixed: {{{model}, steps: {steps}, warmup: 10,
        eval_every: {eval_every}, eval_batches: 2, probe_every: 20, log_every: 1,
        checkpoint_every: {ckpt}}}
"""
# The smallest model the trainer takes (~2 ms a step on one core): what the plumbing tests train.
# Paced by the worker (E2E.pace_ms), a run lasts as long as its assertions need in wall time while
# costing little CPU, so the e2e tests can run side by side without slowing each other down.
SMALLEST = {"n_embd": 16, "n_head": 2, "n_layer": 1, "block_size": 16, "batch_size": 2}
# One that learns, and diverges at a high learning rate, in 40 steps (e2e.Refinement).
LEARNS = {"n_embd": 48, "n_head": 2, "block_size": 48, "batch_size": 8}


def sweep_file(stack, name, grid, steps=60, ckpt=20, eval_every=20, extra="", model=SMALLEST):
    # A grid axis (n_layer, say) overrides the model's fixed value.
    fixed = ", ".join(f"{k}: {v}" for k, v in model.items() if k not in grid)
    body = (f"name: {name}\n" + TINY.format(model=fixed, steps=steps, ckpt=ckpt, eval_every=eval_every)
            + "grid:\n")
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
    # Every training step of the stack's workers lasts at least this long (ablate-worker's hidden
    # --test-min-step-ms): 100 steps a second, whatever else the machine runs.
    pace_ms = 10

    def setUp(self):
        self.stack = Stack(lease_seconds=self.lease_seconds, pace_ms=self.pace_ms)

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
        """One worker, a long sweep: cancel it once a run trains; every run ends cancelled, the
        worker says why it stopped and lives on."""
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, name, {"seed": seeds}, steps=100000, ckpt=1000,
                                            eval_every=1000))
        wait_for(self.first_running, 120, "a run to start")
        s.cli("cancel", str(self.sweep_id))
        runs = s.wait_sweep_done(self.sweep_id, 30)
        self.assertEqual({r["state"] for r in runs}, {"cancelled"})
        wait_for(lambda: "cancelled by the server" in s.log("w1"), 30, "the worker to stop the run")
        self.assertIsNone(s.procs["w1"].poll(), "the worker must survive a cancel")

    def first_running(self):
        for r in self.stack.runs(self.sweep_id):
            if r["state"] == "running" and int(r.get("step", 0)) > 0:
                return r
        return None


def run(argv, env=None, timeout=120):
    e = dict(os.environ)
    for k in ("ABLATE_TOKEN", "ABLATE_TOKEN_FILE", "ABLATE_SERVER", "ABLATE_CONFIG", "NO_COLOR"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=e)


def project_version():
    with open(os.path.join(SRC, "CMakeLists.txt")) as f:
        return re.search(r"project\(ablate VERSION (\S+)", f.read()).group(1)


CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def watch_on_a_pty(argv, env, cols=80, rows=24, timeout=300):
    """Runs argv with stdout on a pseudo-terminal of cols x rows; returns (exit code, output)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    e = dict(os.environ)
    for k in ("NO_COLOR", "COLUMNS", "LINES"):
        e.pop(k, None)
    e.update(env)
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=e)
    os.close(slave)
    out = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    try:
        rc = p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    return rc, out.decode("utf-8", "replace"), p.stderr.read().decode()
