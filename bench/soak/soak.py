#!/usr/bin/env python3
"""Soak: the whole system under random faults for a while, then checks that nothing was lost.

Two ablate-server replicas on one PostgreSQL of the soak's own, workers with slots (each behind a
TCP proxy of its own, so its network can be cut), and a stream of sweeps: plain ones, refined
ones (refine: optimum), and ones whose runs the soak cancels mid-run and retries. Every
--fault-every seconds (at random within the range) one fault, chosen at random:

  kill_server   SIGKILL of a server replica; restarted on the same port after a delay
  kill_worker   SIGKILL of a worker in training (as the kernel's OOM killer does); restarted with
                the same name and work dir after a short delay, its new process reports how the
                old one died, and the attempts it held count as worker faults with that cause
  pg_crash      PostgreSQL stopped in immediate mode (a crash), started again after a delay
  net_cut       a worker's proxy cut (connections dropped, no new ones), restored after a delay
  worker_full   a worker's work dir (a small tmpfs) filled to the last byte, emptied after a delay
  store_full    the servers' --store-dir (a small tmpfs) filled likewise
  worker_breaks a worker that breaks (every attempt it starts fails with a device runtime error,
                through ablate-worker's hidden --test-fault-file) and heals after a delay: its
                failures are requeued on the others, it is benched, and once healed it passes its
                self-check and leases again

The schedule is drawn from --seed before the soak starts (kinds, targets, delays, gaps), so a
failing seed replays the same faults; the first six faults are the six kinds in a random order, so
a short soak sees each of them. The disk faults need root (tmpfs); without it they are left out,
and the soak says so. The servers bench a worker for 5 s at first (--bench-seconds 5), so a worker
that broke is back within the soak.

At the end, with every fault healed and every run ended, it asserts:
  runs        every run succeeded or diverged (none failed, none left cancelled or unfinished)
  metrics     each run's train_loss, lr and val_loss series has every step it should exactly once,
              up to the step the run reported, and no point lies beyond it
  checkpoints every checkpoint row names a file in the store of that size and SHA-256, and every
              run's final checkpoint downloads (ablate artifacts get) with its SHA-256
  leases      every run a killed worker held was re-leased or ended within a lease period (plus
              the reaper's) of the kill, and at the end no lease is held
  crashes     every killed worker's restart reported the attempts it held, and each one still
              held when it registered became a worker fault naming SIGKILL
  rss         each server replica that lived 600 s past its warm-up grew its RSS by <= 10 % (a
              soak too short for any to qualify prints the figure as N/A, not asserted)
  tables      PostgreSQL's table sizes per row are within bounds and no table holds rows it
              should not (points of steps never reached, more checkpoints than steps allow)
  faults      every fault kind available occurred
and prints a table of figures. Exit 0 only if every assertion holds.

  bench/soak/soak.py [--seed N] [--minutes M] [--fault-every LO-HI] [--workers N] [--runs N]
                     [--run-seconds S] [--keep]
"""
import argparse
import collections
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
import harness  # noqa: E402
from harness import Proxy, Stack, wait_for, write_sweep  # noqa: E402

KINDS = ["kill_server", "kill_worker", "pg_crash", "net_cut", "worker_full", "store_full",
         "worker_breaks"]
# Every replica's flags: a short first bench, so a worker that broke and healed leases again
# within the soak; and runs that may fault on every worker of the small fleet (a killed worker's
# attempts count as worker faults now), since the faults here are injected, not the runs'.
SERVER_EXTRA = ["--bench-seconds", "5", "--run-fault-workers", "8"]
DISK_KINDS = {"worker_full", "store_full"}
# The smallest model the trainer takes (tests/e2e/harness.py's SMALLEST): ~2 ms a step on one
# core, paced to PACE_MS a step so a run lasts in wall time while costing little CPU.
MODEL = "n_embd: 16, n_head: 2, n_layer: 1, block_size: 16, batch_size: 2"
PACE_MS = 20
LOG_EVERY = 5
EVAL_EVERY = 100
LEASE_SECONDS = 10
WORKER_TMPFS_MB = 64
STORE_TMPFS_MB = 512


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Mounts:
    """The small tmpfs mounts (root only) whose disks the soak fills; unmounted at the end."""

    def __init__(self):
        self.mounted = []

    def mount(self, path, mb):
        harness.mount_tmpfs(path, mb)
        self.mounted.append(path)

    def unmount_all(self):
        for path in reversed(self.mounted):
            subprocess.call(["umount", "-l", path], stderr=subprocess.DEVNULL)
        self.mounted = []


def make_schedule(rng, kinds, start, end, lo, hi, workers, replicas):
    """The faults, drawn before the soak starts: (offset, kind, target, heal delay). Each fault is
    healed before the next one starts; the first len(kinds) faults are every kind once."""
    # Heal delays: a kill is restarted after a few seconds; a cut may outlast the lease (the run is
    # then requeued and resumed elsewhere); a full disk stays full long enough for writes to fail.
    # A killed worker comes back within its lease (10 s), as a supervisor restarts it, so its new
    # process's report finds the attempts still held.
    delays = {"kill_server": (2, 8), "kill_worker": (0.5, 2), "pg_crash": (3, 10),
              "net_cut": (3, 2 * LEASE_SECONDS), "worker_full": (8, 30), "store_full": (8, 30),
              # A break outlasts the runs its slots hold (24 s in e2e.soak), so it fails the
              # attempts it starts next and is benched.
              "worker_breaks": (30, 40)}
    # One replica is the one killed (the first draw picks which): the other lives through the whole
    # soak, so its RSS after warm-up is measured over the longest life there is.
    victim = rng.choice(replicas)
    order = list(kinds)
    rng.shuffle(order)
    out = []
    t = start + rng.uniform(lo, hi)
    while True:
        kind = order[len(out)] if len(out) < len(order) else rng.choice(kinds)
        dlo, dhi = delays[kind]
        dhi = max(dlo, min(dhi, lo - 3))
        delay = rng.uniform(dlo, dhi)
        if t + delay > end:
            break
        if kind == "kill_server":
            target = victim
        elif kind == "store_full":
            target = "store"
        elif kind == "pg_crash":
            target = "postgres"
        else:
            target = rng.choice(workers)
        out.append((t, kind, target, delay))
        t = max(t + rng.uniform(lo, hi), t + delay + 3)
    return out


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.root = os.geteuid() == 0
        self.kinds = [k for k in KINDS if self.root or k not in DISK_KINDS]
        self.window = args.minutes * 60.0
        self.slots_total = args.workers * args.slots
        # Each run lasts about this long, so --runs of them fit in 60 % of the window on the
        # fleet's slots (faults and restarts take the rest); the soak keeps submitting until one
        # run before the window ends.
        self.run_seconds = args.run_seconds or max(15.0, 0.6 * self.window * self.slots_total / args.runs)
        steps = int(self.run_seconds / (PACE_MS / 1000.0 + 0.004))
        self.steps = max(500, steps - steps % 100)
        self.ckpt_every = max(100, (self.steps // 4) - (self.steps // 4) % 100)
        self.mounts = Mounts()
        self.stack = None
        self.proxies = {}
        self.worker_server = {}
        self.replica_ports = {}
        self.sweeps = []  # (id, kind)
        self.cancelled = {}  # run id -> (sweep id, time cancelled)
        self.retried = set()
        self.faults = []  # printed rows
        self.fault_counts = collections.Counter()
        self.lease_checks = []  # (deadline, worker, [(run, attempt)])
        self.lease_failures = []
        self.lease_checks_done = []
        self.kills = []  # (worker, time killed, [(run, attempt)] held in training)
        self.rss = collections.defaultdict(list)  # (name, pid) -> [(t, kB)]
        self.started = {}  # (name, pid) -> start time
        self.errors = []

    # -- setup ---------------------------------------------------------------------------------
    def start(self):
        a = self.args
        self.stack = s = Stack(lease_seconds=LEASE_SECONDS, own_postgres=True, pace_ms=PACE_MS)
        log(f"soak dir {s.dir}; database {s.db_url}")
        if self.root:
            self.mounts.mount(s.store_dir, STORE_TMPFS_MB)
            for i in range(a.workers):
                self.mounts.mount(os.path.join(s.dir, f"w{i + 1}"), WORKER_TMPFS_MB)
        else:
            log("not root: no tmpfs, so the worker_full and store_full faults are LEFT OUT")
        s.start_server(name="server", extra=SERVER_EXTRA)
        self.replica_ports["server"] = (s.port, s.metrics_port)
        p2, m2 = harness.free_port(), harness.free_port()
        s.start_replica("server2", port=p2, metrics=m2, extra=SERVER_EXTRA)
        self.replica_ports["server2"] = (p2, m2)
        for name in ("server", "server2"):
            self.note_process(name)
        for i in range(a.workers):
            name = f"w{i + 1}"
            replica = ("server", "server2")[i % 2]
            self.worker_server[name] = replica
            self.proxies[name] = Proxy(self.replica_ports[replica][0])
            self.start_worker(name)

    def fault_file(self, name):
        return os.path.join(self.stack.dir, f"{name}.fault")

    def start_worker(self, name):
        extra = ["--slots", str(self.args.slots), "--test-fault-file", self.fault_file(name)]
        self.stack.start_worker(name, extra=extra, threads=self.args.slots,
                                server=f"127.0.0.1:{self.proxies[name].port}")

    def restart_server(self, name):
        port, metrics = self.replica_ports[name]
        if name == "server":
            self.stack.start_server(name="server", extra=SERVER_EXTRA)
        else:
            self.stack.start_replica(name, port=port, metrics=metrics, extra=SERVER_EXTRA)
        self.note_process(name)

    def note_process(self, name):
        self.started[(name, self.stack.procs[name].pid)] = time.time()

    # -- the CLI and SQL, through whichever replica answers ---------------------------------------
    def cli(self, *args, check=True):
        last = None
        for name in ("server", "server2"):
            addr = f"127.0.0.1:{self.replica_ports[name][0]}"
            try:
                p = self.stack.cli(*args, server=addr, check=False, timeout=60)
            except subprocess.TimeoutExpired as e:
                last = e
                continue
            if p.returncode == 0 or p.returncode not in (1, 5, 7):  # not a transport failure
                if check and p.returncode != 0:
                    raise AssertionError(f"ablate {' '.join(args)}: exit {p.returncode}: {p.stderr}")
                return p
            last = p.stderr
        if check:
            raise AssertionError(f"ablate {' '.join(args)}: no replica answered: {last}")
        return None

    def sql(self, query, retries=60):
        for _ in range(retries):
            try:
                return self.stack.sql(query)
            except subprocess.CalledProcessError:
                time.sleep(1)
        raise AssertionError(f"PostgreSQL did not answer: {query}")

    def try_sql(self, query):
        try:
            return self.stack.sql(query)
        except subprocess.CalledProcessError:
            return None

    # -- the workload --------------------------------------------------------------------------
    def sweep_body(self, name, kind):
        seeds = "[0, 1]"
        head = (f"name: {name}\n"
                'data: {train: "synthetic:3000", val: "synthetic:300", tokenizer: {type: bpe, vocab: 512}}\n'
                f"fixed: {{{MODEL}, steps: {self.steps}, warmup: 20, eval_every: {EVAL_EVERY}, "
                f"eval_batches: 2, probe_every: {EVAL_EVERY}, log_every: {LOG_EVERY}, "
                f"checkpoint_every: {self.ckpt_every}}}\n"
                "max_attempts: 50\n"
                "divergence: {loss_above_init_by: 5.0, patience: 1000}\n")
        if kind == "refine" and self.window > 600:
            # The hour's runs are long enough that three LRs' losses end within the optimum's
            # noise floor and its bracket stops at once; LRs up to 10 diverge, so max_stable's
            # bracket (last stable, first diverged) is a decade wide and gets midpoints.
            return head + ("grid:\n  lr: {logspace: {min: 1.0e-3, max: 1.0e+1, per_decade: 1}}\n"
                           "  seed: [0]\n"
                           "refine: {axis: lr, boundaries: [optimum, max_stable], until_ratio: 2.0, "
                           "max_new_runs: 3}\n")
        if kind == "refine":
            # Three LRs a decade apart, one seed: the optimum's bracket is a decade wide, so the
            # server adds midpoints once the curve is done (up to two).
            return head + ("grid:\n  lr: {logspace: {min: 1.0e-3, max: 1.0e-1, per_decade: 1}}\n"
                           "  seed: [0]\n"
                           "refine: {axis: lr, boundaries: [optimum], until_ratio: 2.0, max_new_runs: 2}\n")
        return head + f"grid:\n  lr: [1.0e-3, 3.0e-3]\n  seed: {seeds}\n"

    def submit(self, kind):
        i = len(self.sweeps) + 1
        name = f"soak-{i}-{kind}"
        path = write_sweep(self.stack.dir, name, self.sweep_body(name, kind))
        p = self.cli("--output", "json", "submit", path, check=False)
        if p is None or p.returncode != 0:
            return False
        sid = int(json.loads(p.stdout.splitlines()[0])["sweep"]["id"])
        self.sweeps.append((sid, kind))
        return True

    def feed(self, now, submit_until):
        if now > submit_until:
            return
        unfinished = self.try_sql("SELECT count(*) FROM runs WHERE state IN ('queued','leased','running')")
        if unfinished is None or int(unfinished) >= self.slots_total + 4:
            return
        kinds = ["plain", "refine", "cancel"]
        self.submit(kinds[len(self.sweeps) % len(kinds)])

    def cancel_and_retry(self, now, cancel=True):
        """Cancels one running run of each 'cancel' sweep mid-run; retries it a few seconds later."""
        for rid, (sid, when) in list(self.cancelled.items()):
            if rid not in self.retried and now - when > 3:
                p = self.cli("retry", str(sid), "--run", str(rid), check=False)
                if p is not None and p.returncode == 0:
                    self.retried.add(rid)
        if not cancel:
            return
        done = {sid for sid, _ in self.cancelled.values()}
        for sid, kind in self.sweeps:
            if kind != "cancel" or sid in done:
                continue
            row = self.try_sql(f"SELECT id FROM runs WHERE sweep_id = {sid} AND state = 'running' "
                               f"AND step >= {self.ckpt_every // 2} ORDER BY id LIMIT 1")
            if not row:
                continue
            p = self.cli("cancel", "--run", row, check=False)
            if p is not None and p.returncode == 0:
                self.cancelled[int(row)] = (sid, now)

    # -- faults --------------------------------------------------------------------------------
    def inject(self, kind, target):
        s = self.stack
        if kind == "kill_server":
            s.stop(target, signal.SIGKILL)
        elif kind == "kill_worker":
            # One in training, when one is: what the OOM killer picks.
            training = self.try_sql(
                "SELECT w.name FROM runs r JOIN workers w ON w.id = r.worker_id WHERE "
                "r.state = 'running' AND r.step > 0 AND w.name LIKE 'w%' ORDER BY random() LIMIT 1")
            if training:
                target = training
            held = self.try_sql(
                "SELECT r.id || ':' || r.attempt FROM runs r JOIN workers w ON w.id = r.worker_id "
                f"WHERE w.name = '{target}' AND r.state IN ('leased','running')")
            s.stop(target, signal.SIGKILL)
            runs = [tuple(int(x) for x in l.split(":")) for l in (held or "").splitlines() if l]
            self.kills.append((target, time.time(), runs))
            self.killed_target = target
            # The reaper runs every min(5 s, lease/4) in each replica; a lease lasts LEASE_SECONDS
            # from the last heartbeat. Past that (and a margin for a loaded machine) no run may
            # still be held by the dead process's attempt.
            self.lease_checks.append((time.time() + LEASE_SECONDS + 30, target, runs))
        elif kind == "pg_crash":
            s.crash_postgres()
        elif kind == "net_cut":
            self.proxies[target].cut()
        elif kind == "worker_full":
            return f"{harness.fill_disk(os.path.join(s.dir, target)) >> 20} MiB filler"
        elif kind == "store_full":
            return f"{harness.fill_disk(s.store_dir) >> 20} MiB filler"
        elif kind == "worker_breaks":
            with open(self.fault_file(target), "w") as f:
                f.write("CUDA error: an illegal memory access was encountered (soak)\n")
        return ""

    def heal(self, kind, target):
        s = self.stack
        if kind == "kill_server":
            self.restart_server(target)
        elif kind == "kill_worker":
            self.start_worker(getattr(self, "killed_target", target))
        elif kind == "pg_crash":
            s.start_postgres()
        elif kind == "net_cut":
            self.proxies[target].restore()
        elif kind == "worker_full":
            harness.empty_disk(os.path.join(s.dir, target))
        elif kind == "store_full":
            harness.empty_disk(s.store_dir)
        elif kind == "worker_breaks":
            os.remove(self.fault_file(target))

    def check_leases(self, now, force=False):
        keep = []
        for deadline, worker, runs in self.lease_checks:
            if now < deadline and not force:
                keep.append((deadline, worker, runs))
                continue
            query = ("SELECT id || ':' || state || ':' || attempt FROM runs WHERE id = ANY("
                     f"ARRAY[{','.join(str(r) for r, _ in runs) or '0'}]::bigint[])")
            rows = self.try_sql(query)
            if rows is None:
                if not force:  # PostgreSQL is down (a fault): ask again next time round
                    keep.append((deadline, worker, runs))
                    continue
                rows = self.sql(query)
            now_state = {}
            for line in rows.splitlines():
                rid, state, att = line.split(":")
                now_state[int(rid)] = (state, int(att))
            for run, attempt in runs:
                state, att = now_state[run]
                if state in ("leased", "running") and att == attempt:
                    self.lease_failures.append(
                        f"run {run} attempt {attempt} still {state} {LEASE_SECONDS + 30}s after "
                        f"its worker {worker} was killed")
        self.lease_checks_done += [c for c in self.lease_checks if c not in keep]
        self.lease_checks = keep

    # -- RSS -----------------------------------------------------------------------------------
    def sample_rss(self, now):
        for name in ("server", "server2"):
            p = self.stack.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    kb = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
            except (OSError, StopIteration):
                continue
            self.rss[(name, p.pid)].append((now, kb))

    # -- the soak ------------------------------------------------------------------------------
    def run(self):
        a = self.args
        log(f"seed {a.seed}; {a.minutes} min of faults every {a.fault_every[0]:g}-{a.fault_every[1]:g} s; "
            f"{a.workers} workers x {a.slots} slots; runs of {self.steps} steps paced {PACE_MS} ms "
            f"(~{self.run_seconds:.0f} s), checkpoint every {self.ckpt_every}; lease {LEASE_SECONDS} s")
        log(f"fault kinds: {', '.join(self.kinds)}")
        self.start()
        t0 = time.time()
        # Warm-up: faults begin once every worker has trained (so each has its data prepared).
        self.submit("plain")
        self.submit("refine")
        self.submit("cancel")
        wait_for(lambda: self.try_sql("SELECT count(DISTINCT worker_id) FROM runs WHERE step > 0")
                 == str(a.workers), 180, "every worker to train", interval=1)
        warm = time.time() - t0
        end = t0 + self.window
        schedule = make_schedule(self.rng, self.kinds, time.time(), end - 10, a.fault_every[0],
                                 a.fault_every[1], [f"w{i + 1}" for i in range(a.workers)],
                                 ["server", "server2"])
        self.rss_warm_after = 120 if self.window <= 600 else 300
        log(f"warm after {warm:.0f} s; {len(schedule)} faults scheduled")
        print(f"{'time':>7}  {'kind':<12} {'target':<9} {'heal after':>10}  note", flush=True)
        pending = list(schedule)
        active = None  # (heal time, kind, target)
        heal_failures = 0
        submit_until = end - self.run_seconds
        last_rss = 0
        while True:
            now = time.time()
            if active and now >= active[0]:
                try:
                    self.heal(active[1], active[2])
                    active = None
                except (OSError, AssertionError) as e:
                    # A restart that did not come up (a loaded machine, a binary being rebuilt):
                    # try again shortly; a fault that cannot be healed at all ends the soak.
                    heal_failures += 1
                    if heal_failures > 10:
                        raise
                    log(f"healing {active[1]} {active[2]} failed ({e}); again in 5 s")
                    active = (now + 5, active[1], active[2])
            if not active and pending and now >= pending[0][0]:
                at, kind, target, delay = pending.pop(0)
                note = self.inject(kind, target)
                active = (now + delay, kind, target)
                self.fault_counts[kind] += 1
                self.faults.append((now - t0, kind, target, delay))
                print(f"{now - t0:7.1f}  {kind:<12} {target:<9} {delay:9.1f}s  {note}", flush=True)
            if now - last_rss >= 5:
                self.sample_rss(now)
                last_rss = now
            if not active:
                self.feed(now, submit_until)
                self.cancel_and_retry(now)
            self.check_leases(now)
            if now >= end and not active and not pending:
                break
            time.sleep(1)
        log(f"faults over after {time.time() - t0:.0f} s; draining")
        # Cancelled runs not yet retried are retried now: every run must end finished.
        retry_deadline = time.time() + 120
        while any(r not in self.retried for r in self.cancelled) and time.time() < retry_deadline:
            self.cancel_and_retry(time.time() + 10, cancel=False)
            time.sleep(1)
        drain_deadline = time.time() + max(180, 4 * self.run_seconds)
        while time.time() < drain_deadline:
            left = self.try_sql("SELECT count(*) FROM runs WHERE state NOT IN "
                                "('succeeded','diverged','failed','cancelled','skipped')")
            if left == "0":
                break
            self.sample_rss(time.time())
            self.check_leases(time.time())
            time.sleep(2)
        self.sample_rss(time.time())
        self.check_leases(time.time(), force=True)
        self.duration = time.time() - t0
        log(f"drained after {self.duration:.0f} s; checking")
        return self.check()

    # -- the checks ----------------------------------------------------------------------------
    def check(self):
        results = []  # (name, ok, detail)
        figures = []

        def record(name, ok, detail):
            results.append((name, bool(ok), detail))

        s = self.stack
        rows = [l.split("|") for l in self.sql(
            "SELECT id, state, attempt, COALESCE(result->>'steps_done', ''), error, total_steps, "
            "refine_round FROM runs ORDER BY id").splitlines()]
        states = collections.Counter(r[1] for r in rows)
        bad = [f"run {r[0]} {r[1]} ({r[4][:80]})" for r in rows if r[1] not in ("succeeded", "diverged")]
        record("runs", not bad and len(rows) >= self.args.runs,
               f"{len(rows)} runs (wanted >= {self.args.runs}): " + ", ".join(f"{k} {v}" for k, v in
                                                                        sorted(states.items()))
               + ("; " + "; ".join(bad[:10]) if bad else ""))
        figures.append(("runs", f"{len(rows)} ({', '.join(f'{k} {v}' for k, v in sorted(states.items()))})"))
        figures.append(("runs refined in", str(sum(1 for r in rows if int(r[6]) > 0))))
        figures.append(("runs cancelled and retried", str(len(self.retried))))
        figures.append(("runs with > 1 attempt", str(sum(1 for r in rows if int(r[2]) > 1))))
        figures.append(("sweeps", str(len(self.sweeps))))

        # Metrics: every step each series should have, exactly once, up to the reported last step.
        last, diverged = {}, set()
        for r in rows:
            if r[1] in ("succeeded", "diverged") and r[3]:
                last[int(r[0])] = int(r[3])
                if r[1] == "diverged":
                    diverged.add(int(r[0]))
        series = collections.defaultdict(dict)
        for line in self.sql("SELECT run_id, name, array_agg(step ORDER BY step) FROM metric_points "
                             "WHERE name IN ('train_loss', 'lr', 'val_loss') GROUP BY 1, 2").splitlines():
            run, name, steps = line.split("|")
            series[int(run)][name] = [int(x) for x in steps.strip("{}").split(",") if x]
        problems, checked = [], 0
        for run, end in sorted(last.items()):
            for name, every in (("train_loss", LOG_EVERY), ("lr", LOG_EVERY), ("val_loss", EVAL_EVERY)):
                got = series[run].get(name, [])
                # The last step is logged however the run ended; validation runs there only
                # when the run finished (a run stops at the step it diverged without evaluating).
                ends = set() if name == "val_loss" and run in diverged else {end}
                want = sorted(set(range(0, end + 1, every)) | ends)
                checked += len(got)
                if got != want:
                    dup = sorted(x for x, n in collections.Counter(got).items() if n > 1)
                    missing = sorted(set(want) - set(got))
                    extra = sorted(set(got) - set(want))
                    problems.append(f"run {run} {name}: missing {missing[:5]} ({len(missing)}), "
                                    f"duplicated {dup[:5]}, unexpected {extra[:5]}")
        beyond = self.sql("SELECT count(*) FROM metric_points m JOIN runs r ON r.id = m.run_id "
                          "WHERE r.result IS NOT NULL AND m.step > (r.result->>'steps_done')::bigint")
        dups = self.sql("SELECT count(*) FROM (SELECT 1 FROM metric_points GROUP BY run_id, name, step "
                        "HAVING count(*) > 1) d")
        record("metrics", not problems and beyond == "0" and dups == "0" and checked > 0,
               f"{checked} points of {len(last)} runs checked; {len(problems)} series wrong; "
               f"{beyond} points beyond a run's last step; {dups} duplicated (run, name, step)"
               + ("; " + "; ".join(problems[:5]) if problems else ""))
        total_points = int(self.sql("SELECT count(*) FROM metric_points"))
        figures.append(("metric points stored / checked", f"{total_points} / {checked}"))

        # Checkpoints: every recorded one is in the store, whole; every final one downloads.
        ck = [l.split("|") for l in self.sql("SELECT run_id, step, sha256, size_bytes FROM checkpoints").splitlines()]
        bad_ck = []
        for run, step, sha, size in ck:
            path = os.path.join(s.store_dir, sha[:2], sha)
            try:
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
                if os.path.getsize(path) != int(size) or h.hexdigest() != sha:
                    bad_ck.append(f"run {run} step {step}: size or digest differs")
            except OSError as e:
                bad_ck.append(f"run {run} step {step}: {e}")
        finals = [l.split("|") for l in self.sql(
            "SELECT id, result->'final_checkpoint'->>'sha256' FROM runs "
            "WHERE result ? 'final_checkpoint' ORDER BY id").splitlines()]
        out_dir = tempfile.mkdtemp(prefix="soak-artifacts-")
        bad_final = []
        for run, sha in finals:
            p = self.cli("artifacts", "get", run, "--out", out_dir, check=False)
            path = os.path.join(out_dir, f"run-{run}-final.pt")
            if p is None or p.returncode != 0 or not os.path.exists(path):
                bad_final.append(f"run {run}: artifacts get failed: {p.stderr if p else 'no replica'}")
                continue
            with open(path, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != sha:
                    bad_final.append(f"run {run}: final checkpoint digest differs")
            os.remove(path)
        shutil.rmtree(out_dir, ignore_errors=True)
        no_final = sum(1 for r in rows if r[1] in ("succeeded", "diverged")) - len(finals)
        tmp_left = len(os.listdir(os.path.join(s.store_dir, "tmp"))) if os.path.isdir(
            os.path.join(s.store_dir, "tmp")) else 0
        record("checkpoints", not bad_ck and not bad_final and no_final == 0 and ck,
               f"{len(ck)} checkpoints verified in the store, {len(finals)} final ones downloaded; "
               f"{no_final} finished runs without a final checkpoint"
               + ("; " + "; ".join((bad_ck + bad_final)[:5]) if bad_ck or bad_final else ""))
        figures.append(("checkpoints verified / finals downloaded", f"{len(ck)} / {len(finals)}"))
        figures.append(("upload temp files left in the store (killed servers' uploads; gc's)", str(tmp_left)))

        # Leases.
        held = self.sql("SELECT count(*) FROM runs WHERE state IN ('leased','running') "
                        "OR lease_expires_at IS NOT NULL")
        record("leases", not self.lease_failures and held == "0",
               f"{sum(len(c[2]) for c in self.lease_checks_done)} runs of killed workers followed, "
               f"{len(self.lease_failures)} runs held by a killed worker past the lease; {held} leases left"
               + ("; " + "; ".join(self.lease_failures[:5]) if self.lease_failures else ""))

        # Crashes: a killed worker's next process found what it held and the server counted each
        # attempt as a worker fault with the cause, unless the reaper had requeued it first (the
        # restart outlived the lease on a loaded machine: a preemption, as before the report).
        crash_bad, reported, late = [], 0, 0
        for worker, _, runs in self.kills:
            if runs and "died holding" not in s.log(worker):
                crash_bad.append(f"{worker}'s restart did not find the {len(runs)} run(s) it held")
            for run, attempt in runs:
                events = self.sql(
                    "SELECT kind || ':' || fault || ':' || message FROM run_events WHERE run_id = "
                    f"{run} AND attempt = {attempt} AND kind IN ('faulted', 'preempted') ORDER BY id")
                first = events.splitlines()[0] if events else ""
                if first.startswith("faulted:worker:") and ("SIGKILL" in first or "OOM" in first):
                    reported += 1
                elif first.startswith("preempted:"):
                    late += 1
                else:
                    crash_bad.append(f"run {run} attempt {attempt} (killed {worker}): {first or 'no event'}")
        record("crashes", not crash_bad,
               f"{len(self.kills)} workers killed in training, {reported} attempts reported as worker "
               f"faults naming SIGKILL (or the OOM killer), {late} requeued by lease expiry before the restart registered"
               + ("; " + "; ".join(crash_bad[:5]) if crash_bad else ""))
        figures.append(("killed attempts reported / requeued by expiry first", f"{reported} / {late}"))

        # RSS: per process, from its first sample after warm-up to its last.
        measured, rss_rows = [], []
        # Growth "after warm-up" needs a life long past it: in five minutes the allocator has not
        # reached its plateau (the five-minute soak measured +3 % and +11 % on the same code), so
        # a shorter soak prints the figure but does not assert it.
        min_life = 600
        for (name, pid), samples in sorted(self.rss.items(), key=lambda kv: self.started.get(kv[0], 0)):
            born = self.started.get((name, pid), samples[0][0])
            after = [(t, kb) for t, kb in samples if t - born >= self.rss_warm_after]
            if len(after) < 2:
                rss_rows.append(f"{name} pid {pid}: lived {samples[-1][0] - born:.0f} s, too short to measure")
                continue
            base, final = after[0][1], after[-1][1]
            peak = max(kb for _, kb in after)
            growth = (final - base) / base
            if after[-1][0] - after[0][0] >= min_life:
                measured.append(growth)
            rss_rows.append(f"{name} pid {pid}: {base / 1024:.1f} -> {final / 1024:.1f} MiB "
                            f"(peak {peak / 1024:.1f}) over {after[-1][0] - after[0][0]:.0f} s: {growth:+.1%}")
        if measured:
            record("rss", max(measured) <= 0.10,
                   f"{len(measured)} replica processes measured (after {self.rss_warm_after} s warm-up, "
                   f">= {min_life} s lived): " + "; ".join(rss_rows))
        else:
            results.append(("rss", None, f"NOT ASSERTED: no replica lived {min_life} s after its "
                            f"{self.rss_warm_after} s warm-up (a soak of 15 minutes or more does): "
                            + "; ".join(rss_rows)))
        for r in rss_rows:
            figures.append(("server RSS", r))

        # Table sizes.
        sizes = {}
        for line in self.sql(
                "SELECT c.relname, pg_total_relation_size(c.oid), c.reltuples::bigint FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
                "AND c.relkind = 'r' ORDER BY pg_total_relation_size(c.oid) DESC").splitlines():
            name, size, _ = line.split("|")
            count = int(self.sql(f"SELECT count(*) FROM {name}"))
            sizes[name] = (int(size), count)
        n_runs = len(rows)
        limits = {  # bytes per row, indexes and TOAST included, and what a row count may reach
            "metric_points": (320, None),
            "runs": (16384, n_runs),
            "run_specs": (16384, n_runs),
            "checkpoints": (2048, n_runs * (self.steps // self.ckpt_every + 1)),
            "run_logs": (4096, n_runs * 2000),
        }
        table_bad = []
        for name, (per_row, max_rows) in limits.items():
            size, count = sizes.get(name, (0, 0))
            if count and size / count > per_row:
                table_bad.append(f"{name}: {size / count:.0f} B/row > {per_row}")
            if max_rows is not None and count > max_rows:
                table_bad.append(f"{name}: {count} rows > {max_rows}")
        if sizes.get("run_specs", (0, 0))[1] != n_runs:
            table_bad.append(f"run_specs: {sizes.get('run_specs', (0, 0))[1]} rows for {n_runs} runs")
        if sizes.get("metric_points", (0, 0))[1] != total_points:
            table_bad.append("metric_points changed while checking")
        record("tables", not table_bad, "; ".join(table_bad) or
               ", ".join(f"{n} {c} rows {sz / 1048576:.1f} MiB" for n, (sz, c) in list(sizes.items())[:6]))
        for name, (size, count) in list(sizes.items())[:8]:
            figures.append((f"table {name}", f"{count} rows, {size / 1048576:.1f} MiB"
                            + (f", {size / count:.0f} B/row" if count else "")))

        missing_kinds = [k for k in self.kinds if not self.fault_counts[k]]
        record("faults", not missing_kinds,
               ", ".join(f"{k} {self.fault_counts[k]}" for k in KINDS)
               + (f"; never occurred: {missing_kinds}" if missing_kinds else ""))
        figures.append(("faults", ", ".join(f"{k} {self.fault_counts[k]}" for k in KINDS)))

        # What the disk faults made the code do, from the logs.
        text = "".join(s.log(n) for n in s.logs if n.startswith("w"))
        figures.append(("worker pauses for space (training paused / resumed)",
                        f"{text.count('training paused')} / {text.count('training resumes')}"))
        figures.append(("checkpoints the full store refused (skipped by the worker)",
                        str(text.count("not stored by the server"))))
        figures.append(("attempts failed for worker-side causes (requeued) / preempted",
                        f"{self.sql('SELECT coalesce(sum(worker_faults), 0) FROM runs')} / "
                        f"{self.sql('SELECT coalesce(sum(preemptions), 0) FROM runs')}"))
        figures.append(("benches (worker log: benched until)", str(text.count("benched until"))))
        figures.append(("duration", f"{self.duration:.0f} s"))
        figures.append(("machine", f"{platform.node()}: {os.cpu_count()} CPUs, "
                        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
                        f"load avg {os.getloadavg()[0]:.2f}"))

        print("\nfigures", flush=True)
        for k, v in figures:
            print(f"  {k:<58} {v}")
        print("\nassertions")
        for name, ok, detail in results:
            print(f"  {'N/A ' if ok is None else 'PASS' if ok else 'FAIL'}  {name:<12} {detail}")
        ok = all(r[1] is not False for r in results)
        print(f"\nseed {self.args.seed}: {'PASS' if ok else 'FAIL'}", flush=True)
        return ok

    def close(self, failed):
        if self.stack is None:
            return
        for name in list(self.stack.procs):
            self.stack.stop(name, signal.SIGKILL if name.startswith("w") else signal.SIGTERM, timeout=10)
        for p in self.proxies.values():
            p.cut()
        if self.args.keep or failed:
            kept = tempfile.mkdtemp(prefix=f"ablate-soak-{self.args.seed}-")
            for name, path in self.stack.logs.items():
                try:
                    shutil.copy(path, os.path.join(kept, name + ".log"))
                except OSError:
                    pass
            with open(os.path.join(kept, "rss.csv"), "w") as f:
                f.write("replica,pid,seconds,vmrss_kb\n")
                for (name, pid), samples in self.rss.items():
                    born = self.started.get((name, pid), samples[0][0])
                    for t, kb in samples:
                        f.write(f"{name},{pid},{t - born:.0f},{kb}\n")
            log(f"logs kept in {kept}")
        self.mounts.unmount_all()
        self.stack.close()


def parse_range(text):
    lo, _, hi = text.partition("-")
    lo, hi = float(lo), float(hi or lo)
    if not 0 < lo <= hi:
        raise argparse.ArgumentTypeError("want LO-HI seconds, 0 < LO <= HI")
    return lo, hi


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--fault-every", type=parse_range, default=(60, 180), metavar="LO-HI",
                    help="seconds between faults (default 60-180)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--runs", type=int, default=200, help="at least this many runs (default 200)")
    ap.add_argument("--run-seconds", type=float, default=None,
                    help="a run's length in wall time (default: --runs of them fill 60%% of the window)")
    ap.add_argument("--keep", action="store_true", help="keep the logs (always kept on failure)")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1 << 31)
    soak = Soak(args)
    ok = False
    try:
        ok = soak.run()
    except BaseException as e:  # noqa: B902 - report and clean up on anything, Ctrl-C included
        print(f"soak aborted: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if soak.stack:
            print(soak.stack.dump_logs(), file=sys.stderr)
    finally:
        soak.close(failed=not ok)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
