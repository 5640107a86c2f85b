#!/usr/bin/env python3
"""The CLI as a user meets it: errors and their exit codes, usage lines and did-you-mean,
`ablate login` and where tokens come from, impossible requests refused, and `ablate runs`
pages."""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (CLI, E2E, SERVER, SMALLEST, SRC, WORKER, project_version, run,  # noqa: E402
                     sweep_file, wait_for, write_sweep)


class CliErrors(E2E):
    def test_bad_sweep_file_names_file_line_and_field(self):
        s = self.stack
        path = write_sweep(s.dir, "bad", "name: bad\nfixed: {n_embd: 64, n_head: 2}\ngrid:\n  qk_nrom: [none]\n")
        p = s.cli("submit", path, server="127.0.0.1:1", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("bad.yaml:4", p.stderr)
        self.assertIn("qk_nrom", p.stderr)
        self.assertIn("qk_norm", p.stderr, "should suggest the setting meant")

    def test_a_vocab_the_worker_refuses_is_refused_at_submit(self):
        # Issue #24 item 12: every run of this sweep used to fail on the workers with
        # "tokenizer vocab 256 out of range"; the worker's rules are checked at submit.
        s = self.stack
        path = write_sweep(s.dir, "vocab", 'name: vocab\n'
                           'data: {train: "synthetic:30", val: "synthetic:10", tokenizer: {vocab: 256}}\n'
                           'grid:\n  lr: [0.001]\n')
        for args in (["submit", path], ["submit", "--dry-run", path]):
            p = s.cli(*args, server="127.0.0.1:1", check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("vocab.yaml:2: data.tokenizer.vocab: must be between 260 and 65535, got 256",
                          p.stderr)

    def test_dry_run_refuses_what_submit_refuses_with_the_same_message_and_line(self):
        # Issue #39 item 5: a missing val file passed the dry run (exit 0, "(no estimate: ...)")
        # and submit's refusal had no line number. The dry run checks what submit checks.
        s = self.stack
        s.start_server()
        model = ", ".join(f"{k}: {v}" for k, v in SMALLEST.items())
        path = write_sweep(s.dir, "noval", "name: noval\n"
                           "data:\n"
                           "  train: \"synthetic:300\"\n"
                           "  val: missing-val.txt\n"
                           f"fixed: {{{model}, steps: 10, warmup: 2}}\n"
                           "grid:\n  lr: [0.001, 0.01]\n")
        want = f'noval.yaml:4: data.val: file "missing-val.txt" not found under --data-dir'
        sub = s.cli("submit", path, check=False)
        self.assertEqual(sub.returncode, 2, sub.stderr)
        self.assertIn(want, sub.stderr)
        for args in (["submit", "--dry-run", path], ["-o", "json", "submit", "--dry-run", path]):
            p = s.cli(*args, check=False)
            self.assertEqual(p.returncode, sub.returncode, f"{args}: {p.stdout}{p.stderr}")
            self.assertEqual(p.stderr, sub.stderr, args)
            self.assertEqual(p.stdout, "", f"{args}: nothing printed as if it would pass")
        self.assertEqual(s.cli_json("ls"), [], "nothing was queued")
        # Once the file is there, both pass.
        with open(os.path.join(s.dir, "missing-val.txt"), "w") as f:
            f.write("some validation text\n" * 20)
        p = s.cli("submit", "--dry-run", path)
        self.assertIn("sweep 'noval': 2 runs", p.stdout)
        self.assertEqual(s.cli_json("ls"), [], "a dry run queues nothing")

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
                               "--threads 2 cannot give each of --slots 3 a thread"),
                              (["--price-per-hour", "-0.5"], "--price-per-hour must be a finite number"),
                              (["--price-per-hour", "inf"], "--price-per-hour must be a finite number"),
                              ({"ABLATE_PRICE_PER_HOUR": "cheap"},
                               "ABLATE_PRICE_PER_HOUR must be a finite number of US dollars >= 0 (got \"cheap\")")]:
            env = dict(os.environ, **extra) if isinstance(extra, dict) else None
            flags = [] if isinstance(extra, dict) else extra
            p = subprocess.run([WORKER, "--server", "127.0.0.1:9", "--device", "cpu",
                                "--work-dir", os.path.join(s.dir, "flags"), *flags],
                               capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            # A usage error, as CLI11's own: the reason, then the usage line (issue #24, item 7).
            self.assertTrue(p.stderr.startswith("ablate-worker: "), p.stderr)
            self.assertIn(needle, p.stderr)
            self.assertIn("Usage: ablate-worker", p.stderr)

    def test_worker_without_a_gpu_refuses_cuda_and_says_auto_means_cpu(self):
        s = self.stack
        # No GPU on this machine (and, with Debian 12's LibTorch, no CUDA in the build either):
        # --device cuda stops at start with one sentence, before it touches the server.
        p = subprocess.run([WORKER, "--server", "127.0.0.1:9", "--device", "cuda",
                            "--work-dir", os.path.join(s.dir, "cuda")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        out = (p.stdout + p.stderr).strip()
        self.assertIn("device cuda requested, but", out)
        self.assertEqual(len(out.splitlines()), 1, f"one line, no trace: {out!r}")
        # --device auto says it picked the CPU, then keeps trying to reach the (absent) server.
        w = subprocess.Popen([WORKER, "--server", "127.0.0.1:9", "--device", "auto",
                              "--work-dir", os.path.join(s.dir, "auto")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = []
        try:
            deadline = time.time() + 60
            while time.time() < deadline:
                line = w.stdout.readline()
                if not line:
                    break
                seen.append(line)
                if "training on the CPU" in line:
                    break
        finally:
            w.terminate()
            w.wait(timeout=30)
        self.assertTrue(any("--device auto: no CUDA or MPS device here, training on the CPU" in l
                            for l in seen), "".join(seen))

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


class CliUsage(E2E):
    """Issue #15: every usage error exits 2 with the command's usage line; unknown commands get
    a did-you-mean; --version/version and shell completion on the binaries."""

    def assert_usage_error(self, argv, *needles):
        p = run(argv)
        self.assertEqual(p.returncode, 2, f"{argv}: {p.stdout}{p.stderr}")
        for n in needles:
            self.assertIn(n, p.stderr, argv)
        return p

    def test_usage_errors_exit_2_with_the_usage_line(self):
        self.assert_usage_error([CLI, "submit"], "ablate submit: ", "Usage: ablate submit", "file")
        self.assert_usage_error([CLI, "ls", "--bogus"], "--bogus", "Usage: ablate ls")
        self.assert_usage_error([CLI, "-o", "yaml", "ls"], "Usage: ablate")
        self.assert_usage_error([CLI, "stauts", "1"], "unknown command 'stauts'",
                                "did you mean 'status'?", "Usage: ablate")
        p = self.assert_usage_error([CLI], "a command is required", "Usage: ablate")
        self.assertIn("submit", p.stderr, "the commands are listed")
        self.assertNotIn("A subcommand is required", p.stderr)
        self.assert_usage_error([CLI, "config"], "ablate config: a command is required")
        self.assert_usage_error([CLI, "completion", "tcsh"], "tcsh not in {bash,zsh,fish}",
                                "Usage: ablate completion")
        self.assert_usage_error([CLI, "report"], "ablate report: give a sweep", "Usage: ablate report")
        self.assert_usage_error([CLI, "report", "1", "--from", "dir"], "Usage: ablate report")
        self.assert_usage_error([WORKER, "--device", "quantum"], "--device", "Usage: ablate-worker")
        self.assert_usage_error([WORKER, "trian"], "unknown command 'trian'", "did you mean 'train'?")
        self.assert_usage_error([SERVER, "tokn"], "unknown command 'tokn'", "did you mean 'token'?")
        self.assert_usage_error([SERVER, "serve", "--bogus"], "Usage: ablate-server serve")
        # --help is no error.
        p = run([CLI, "submit", "--help"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--dry-run", p.stdout)

    def test_errors_are_consistent_nested_typos_report_flags_and_fetch_urls(self):
        # Issue #24 item 7. A typo under a nested command gets the same did-you-mean as a top one.
        self.assert_usage_error([CLI, "artifacts", "gte", "1"], "ablate artifacts: unknown command 'gte'",
                                "did you mean 'get'?", "Usage: ablate artifacts")
        p = self.assert_usage_error([CLI, "config", "shw"], "ablate config: unknown command 'shw'",
                                    "Commands: init")
        self.assertNotIn("a command is required", p.stderr)
        self.assert_usage_error([CLI, "data", "fecth"], "unknown command 'fecth'", "did you mean 'fetch'?")
        # A report option that does not fit the sweep: exit 2 with report's usage line.
        exp = os.path.join(self.stack.dir, "export")
        os.makedirs(exp)
        with open(os.path.join(exp, "sweep.json"), "w") as f:
            json.dump({"id": "1", "name": "tiny", "axes": ["qk_norm", "lr"]}, f)
        with open(os.path.join(exp, "runs.jsonl"), "w") as f:
            for i, (v, lr) in enumerate([("none", "0.001"), ("layernorm", "0.001")]):
                f.write(json.dumps({"id": str(i + 1), "sweepId": "1", "cell": f"c{i}", "state": "succeeded",
                                    "gridValues": {"qk_norm": v, "lr": lr}}) + "\n")
        self.assert_usage_error([CLI, "report", "--from", exp, "--variant", "qk_nrom"],
                                "ablate report: --variant qk_nrom", "did you mean 'qk_norm'?",
                                "Usage: ablate report")
        self.assert_usage_error([CLI, "report", "--from", exp, "--lr-range", "1:0"],
                                "--lr-range 1:0", "Usage: ablate report")
        # data fetch takes http(s) only: a file:// URL is a usage error and creates nothing.
        cwd = os.path.join(self.stack.dir, "fetch-cwd")
        os.makedirs(cwd)
        for url in ("file:///etc/hostname", "ftp://example.com/a.txt"):
            p = subprocess.run([CLI, "data", "fetch", "--url", url], cwd=cwd, capture_output=True,
                               text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                           if k != "ABLATE_DATA_DIR"})
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("http:// or https://", p.stderr)
            self.assertIn("Usage: ablate data fetch", p.stderr)
            self.assertEqual(os.listdir(cwd), [], "nothing is created")
        # A download that fails before a byte arrives leaves no empty data directory either.
        p = subprocess.run([CLI, "data", "fetch", "-q", "--url", "http://127.0.0.1:9/a.txt", "--to",
                            os.path.join(cwd, "data", "sub")], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertEqual(os.listdir(cwd), [], "the directories it made are removed again")

    def test_version_on_all_three_binaries(self):
        version = project_version()
        line = re.compile(r"^(ablate|ablate-worker|ablate-server) (\S+) \(commit (\S+)\)$")
        for argv in ([CLI, "--version"], [CLI, "version"], [WORKER, "--version"], [WORKER, "version"],
                     [SERVER, "--version"], [SERVER, "version"]):
            p = run(argv)
            self.assertEqual(p.returncode, 0, f"{argv}: {p.stderr}")
            first = p.stdout.splitlines()[0]
            m = line.match(first)
            self.assertIsNotNone(m, f"{argv}: {p.stdout!r}")
            self.assertEqual(m.group(1), os.path.basename(argv[0]))
            self.assertEqual(m.group(2), version)
            commit = m.group(3)
            if commit != "unknown":
                sha = commit.rsplit("-g", 1)[-1].removesuffix("-dirty")
                self.assertRegex(sha, r"^[0-9a-f]{7,40}$")
                self.assertEqual(subprocess.call(["git", "-C", SRC, "cat-file", "-e", sha + "^{commit}"],
                                                 stderr=subprocess.DEVNULL), 0,
                                 f"{commit} is no commit of this repository")
            if argv[0] == WORKER:
                self.assertRegex(p.stdout, r"\ntorch \d+\.\d+\S*, (CPU build \(no CUDA\)|CUDA build)",
                                 "the worker names its torch and whether it was built with CUDA")

    def complete(self, script, *words):
        """What bash completes for the command line `words` (the last one being typed)."""
        prog = (f"source {script}\nCOMP_WORDS=({' '.join(words)})\nCOMP_CWORD={len(words) - 1}\n"
                "_ablate\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
        p = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.split()

    def bash_script(self, shell="bash"):
        """`ablate completion SHELL` written to a file; returns its path."""
        p = run([CLI, "completion", shell])
        self.assertEqual(p.returncode, 0, p.stderr)
        script = os.path.join(self.stack.dir, "ablate." + shell)
        with open(script, "w") as f:
            f.write(p.stdout)
        return script

    def test_bash_completion_is_valid_and_completes_commands_and_flags(self):
        script = self.bash_script()
        check = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertEqual(self.complete(script, "ablate", "sta"), ["status"])
        self.assertIn("submit", self.complete(script, "ablate", ""))
        self.assertIn("completion", self.complete(script, "ablate", ""))
        self.assertEqual(self.complete(script, "ablate", "submit", "--dry"), ["--dry-run"])
        self.assertEqual(self.complete(script, "ablate", "--server", "h:1", "ls", "--act"), ["--active"])
        self.assertEqual(self.complete(script, "ablate", "config", "in"), ["init"])
        self.assertIn("--token-file", self.complete(script, "ablate", "login", "--tok"))
        z = run([CLI, "completion", "zsh"])
        self.assertEqual(z.returncode, 0, z.stderr)
        self.assertTrue(z.stdout.startswith("#compdef ablate\n"), z.stdout[:40])
        self.assertIn("'status:", z.stdout)
        zsh = shutil.which("zsh")
        self.assertIsNotNone(zsh, "zsh is needed to check the zsh script (scripts/install-deps installs it)")
        zpath = os.path.join(self.stack.dir, "_ablate")
        with open(zpath, "w") as f:
            f.write(z.stdout)
        zc = subprocess.run([zsh, "-n", zpath], capture_output=True, text=True)
        self.assertEqual(zc.returncode, 0, zc.stderr)
        # Sourced after compinit, it registers itself for ablate.
        zc = subprocess.run([zsh, "-f", "-c", f"autoload -Uz compinit && compinit -u -D; source {zpath}; "
                             "print -r -- ${_comps[ablate]}"], capture_output=True, text=True)
        self.assertEqual(zc.stdout.strip(), "_ablate", zc.stderr)

    def test_completion_offers_each_option_once_and_values_for_choices(self):
        # Issue #24 item 13: --help/--help-all were offered twice, and -o completed file names.
        script = self.bash_script()
        for words in (("ablate", "--he"), ("ablate", "ls", "--he"), ("ablate", "config", "init", "--he")):
            got = self.complete(script, *words)
            self.assertEqual(sorted(got), ["--help", "--help-all"], words)
        # (ctest runs this in the build directory, full of files that would show up.)
        self.assertEqual(self.complete(script, "ablate", "-o", ""), ["table", "json"])
        self.assertEqual(self.complete(script, "ablate", "runs", "-o", ""), ["table", "json"])
        self.assertEqual(self.complete(script, "ablate", "ls", "-o", ""), ["table", "json", "wide"])
        self.assertEqual(self.complete(script, "ablate", "report", "1", "--format", ""),
                         ["table", "md", "json"])
        self.assertEqual([w for w in self.complete(script, "ablate", "completion", "") if w[0] != "-"],
                         ["bash", "zsh", "fish"], "the shells, no file names")
        # An option whose value is free still completes file names.
        with open(os.path.join(self.stack.dir, "table-not-a-value"), "w"):
            pass
        self.assertIn(os.path.join(self.stack.dir, "table-not-a-value"),
                      self.complete(script, "ablate", "export", "1", "--out",
                                    os.path.join(self.stack.dir, "table-")))
        z = run([CLI, "completion", "zsh"])
        self.assertEqual(z.returncode, 0, z.stderr)
        self.assertIn(":value:(table json)", z.stdout)
        self.assertIn(":value:(table json wide)", z.stdout)
        self.assertNotRegex(z.stdout, r"'-o\[[^]]*\]:value:_files'")


    def test_retry_help_lists_exactly_the_states_retry_accepts(self):
        # Issue #39 item 8: the help offered diverged and succeeded, which retry refuses.
        p = run([CLI, "retry", "--help"])
        self.assertEqual(p.returncode, 0, p.stderr)
        m = re.search(r"--state.*?(?=\n  -|\Z)", p.stdout, re.S)
        self.assertIsNotNone(m, p.stdout)
        every = ["queued", "leased", "running", "succeeded", "diverged", "failed", "cancelled", "skipped"]
        named = {st for st in every if re.search(rf"\b{st}\b", m.group(0))}
        accepted = set()
        for st in every:
            # Retry checks the states before it asks the server: a refused one exits 2 naming it,
            # an accepted one gets as far as the (unreachable) server.
            q = run([CLI, "--server", "127.0.0.1:1", "--token", "x", "retry", "1", "--state", st])
            if q.returncode == 5:
                accepted.add(st)
            else:
                self.assertEqual(q.returncode, 2, f"{st}: {q.stderr}")
                self.assertIn(f"--state {st}:", q.stderr)
        self.assertEqual(named, accepted, m.group(0))
        self.assertIn("default failed,cancelled", " ".join(m.group(0).split()))
        self.assertNotIn("diverged", p.stdout)
        script = self.bash_script()
        self.assertEqual(sorted(self.complete(script, "ablate", "retry", "1", "--state", "")), sorted(accepted))

    def fish(self):
        fish = shutil.which("fish")
        self.assertIsNotNone(fish, "fish is needed to check the fish script (scripts/install-deps installs it)")
        return fish

    def fish_script(self):
        return self.bash_script("fish")

    def fish_complete(self, script, line):
        """The candidates fish offers for `line` (words without their descriptions)."""
        p = subprocess.run([self.fish(), "--no-config", "-c", f"source {script}; complete -C {shlex.quote(line)}"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "", line)
        return [l.split("\t")[0] for l in p.stdout.splitlines()]

    def test_fish_completion_is_valid_and_completes_commands_flags_and_values(self):
        # Issue #39 item 8: `ablate completion fish` exited 2.
        script = self.fish_script()
        check = subprocess.run([self.fish(), "--no-config", "-n", script], capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertEqual(self.fish_complete(script, "ablate sta"), ["status"])
        self.assertIn("submit", self.fish_complete(script, "ablate "))
        self.assertEqual(self.fish_complete(script, "ablate submit --dry"), ["--dry-run"])
        self.assertEqual(sorted(self.fish_complete(script, "ablate ls -o ")), ["json", "table", "wide"])
        self.assertEqual(sorted(self.fish_complete(script, "ablate -o ")), ["json", "table"])
        self.assertEqual(sorted(self.fish_complete(script, "ablate artifacts ")), ["get", "ls"])
        self.assertEqual(sorted(self.fish_complete(script, "ablate config init --he")), ["--help", "--help-all"])
        self.assertEqual(sorted(self.fish_complete(script, "ablate completion ")), ["bash", "fish", "zsh"])
        # No server configured, none reachable: no ids, no error.
        self.assertEqual(self.fish_complete(script, f"{CLI} --server 127.0.0.1:1 status "), [])

    def test_sweep_and_run_ids_complete_from_the_server(self):
        # Issue #39 item 8: completion never offered sweep or run ids.
        s = self.stack
        s.start_server()
        sid = s.submit(sweep_file(s, "e2e-complete", {"lr": "[0.001, 0.01]"}))
        rids = sorted(r["id"] for r in s.runs(sid))
        conn = ["--server", s.server_addr, "--token", s.user_token]
        p = run([CLI, *conn, "__complete", "sweeps"])
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        rows = [l.split("\t") for l in p.stdout.splitlines()]
        self.assertIn([str(sid), "e2e-complete (active)"], rows)
        self.assertIn("e2e-complete", [r[0] for r in rows], "names complete too")
        p = run([CLI, *conn, "__complete", "runs"])
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        self.assertEqual(sorted(l.split("\t")[0] for l in p.stdout.splitlines()), rids)
        # Nothing, silently and at once, without a server or with one that does not answer.
        env = {"HOME": s.dir, "XDG_CONFIG_HOME": os.path.join(s.dir, "no-config")}
        for argv in ([CLI, "__complete", "sweeps"], [CLI, "--server", "127.0.0.1:1", "__complete", "runs"],
                     [CLI, "--server", s.server_addr, "--token", "wrong", "__complete", "sweeps"]):
            p = run(argv, env=env, timeout=20)
            self.assertEqual((p.returncode, p.stdout, p.stderr), (0, "", ""), argv)
        self.assertEqual(run([CLI, "--help"]).stdout.count("__complete"), 0, "the helper is hidden")
        # Through the scripts: the line's own --server and --token reach the helper.
        script = self.bash_script()
        self.assertIn(str(sid), self.complete(script, CLI, *conn, "status", ""))
        self.assertIn("e2e-complete", self.complete(script, CLI, *conn, "watch", "e2e-"))
        self.assertEqual(sorted(self.complete(script, CLI, *conn, "retry", str(sid), "--run", "")), rids)
        self.assertEqual(sorted(w for w in self.complete(script, CLI, *conn, "metrics", "") if w[0] != "-"), rids)
        fish = self.fish_script()
        self.assertIn(str(sid), self.fish_complete(fish, f"{CLI} {' '.join(conn)} status "))
        self.assertEqual(sorted(self.fish_complete(fish, f"{CLI} {' '.join(conn)} logs ")), rids)


class FirstRunSetup(E2E):
    """Issue #15: login writes a 0600 config file; tokens come from files or the environment."""

    def test_login_writes_a_private_config_and_tokens_come_from_files(self):
        s = self.stack
        s.start_server()
        created = subprocess.run([SERVER, "token", "create", "--role", "user", "--name", "setup",
                                  "--database-url", s.db_url], capture_output=True, text=True, timeout=60)
        self.assertEqual(created.returncode, 0, created.stderr)
        self.assertIn("--token-file", created.stderr, "token create says where the token goes")
        self.assertIn("ablate login", created.stderr)
        token_file = os.path.join(s.dir, "user.token")
        with open(token_file, "w") as f:
            f.write(created.stdout)
        bad_file = os.path.join(s.dir, "bad.token")
        with open(bad_file, "w") as f:
            f.write("not-a-token\n")
        config = os.path.join(s.dir, "cfg", "ablate", "config.yaml")

        # A wrong token: refused (exit 3) and nothing written.
        p = run([CLI, "--config", config, "login", "--server", s.server_addr, "--token-file", bad_file])
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertFalse(os.path.exists(config))
        p = run([CLI, "--config", config, "login", "--server", s.server_addr])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--token-file", p.stderr)

        p = run([CLI, "--config", config, "login", "--server", s.server_addr, "--token-file", token_file])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(os.stat(config).st_mode & 0o777, 0o600)
        with open(config) as f:
            text = f.read()
        self.assertIn(s.server_addr, text)
        self.assertIn(created.stdout.strip(), text)
        # Later commands need neither flag (the XDG location is the default one).
        xdg = {"XDG_CONFIG_HOME": os.path.join(s.dir, "cfg")}
        p = run([CLI, "ls"], env=xdg)
        self.assertEqual(p.returncode, 0, p.stderr)
        # Precedence: flag > environment > file.
        p = run([CLI, "ls"], env=dict(xdg, ABLATE_TOKEN="not-a-token"))
        self.assertEqual(p.returncode, 3, "ABLATE_TOKEN beats the file")
        p = run([CLI, "--token-file", token_file, "ls"], env=dict(xdg, ABLATE_TOKEN="not-a-token"))
        self.assertEqual(p.returncode, 0, "--token-file beats ABLATE_TOKEN: " + p.stderr)
        p = run([CLI, "ls"], env=dict(xdg, ABLATE_TOKEN_FILE=bad_file))
        self.assertEqual(p.returncode, 3, "ABLATE_TOKEN_FILE beats the file")
        p = run([CLI, "--server", s.server_addr, "--token-file", os.path.join(s.dir, "missing"), "ls"])
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("--token-file", p.stderr)

        # A token_file in a config file is found next to it, wherever ablate runs.
        rel = os.path.join(s.dir, "rel.yaml")
        with open(rel, "w") as f:
            f.write(f"server: {s.server_addr}\ntoken_file: user.token\n")
        p = run([CLI, "--config", rel, "ls"])
        self.assertEqual(p.returncode, 0, p.stderr)
        # config init writes without asking the server.
        other = os.path.join(s.dir, "other.yaml")
        p = run([CLI, "--config", other, "config", "init", "--server", "127.0.0.1:9", "--token-file", token_file])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(os.stat(other).st_mode & 0o777, 0o600)

        # The worker reads its token from a file too (flag or environment).
        worker_token = os.path.join(s.dir, "worker.token")
        with open(worker_token, "w") as f:
            f.write(s.worker_token + "\n")
        s._spawn("wf", [WORKER, "--server", s.server_addr, "--token-file", worker_token, "--device", "cpu",
                        "--work-dir", os.path.join(s.dir, "wf"), "--name", "wf", "--lease-wait", "1"])
        s._spawn("we", [WORKER, "--server", s.server_addr, "--device", "cpu",
                        "--work-dir", os.path.join(s.dir, "we"), "--name", "we", "--lease-wait", "1"],
                 env={"ABLATE_TOKEN_FILE": worker_token, "ABLATE_TOKEN": ""})
        wait_for(lambda: {w["info"]["name"] for w in s.cli_json("workers")} >= {"wf", "we"}, 60,
                 "both workers to register")


    def test_first_run_without_a_configured_server_says_how_to_configure_one(self):
        # Issue #24 item 8: before any login, `ablate ls` only said it could not connect to
        # 127.0.0.1:7070. Nothing configured anywhere: it says how to configure a server.
        home = os.path.join(self.stack.dir, "fresh-home")
        os.makedirs(home)
        fresh = {"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config")}
        p = run([CLI, "ls"], env=fresh, timeout=60)
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertIn("127.0.0.1:7070", p.stderr)
        self.assertIn("no server is configured", p.stderr)
        for needle in ("ablate login --server", "--server HOST:PORT", "ABLATE_SERVER"):
            self.assertIn(needle, p.stderr)
        # A server configured anywhere (flag, environment, file) but down: no first-run advice.
        cfg = os.path.join(home, "cfg.yaml")
        with open(cfg, "w") as f:
            f.write("server: 127.0.0.1:9\n")
        for argv, env in (([CLI, "--server", "127.0.0.1:9", "ls"], fresh),
                          ([CLI, "ls"], dict(fresh, ABLATE_SERVER="127.0.0.1:9")),
                          ([CLI, "--config", cfg, "ls"], fresh)):
            p = run(argv, env=env, timeout=60)
            self.assertEqual(p.returncode, 5, p.stderr)
            self.assertIn("127.0.0.1:9", p.stderr)
            self.assertNotIn("no server is configured", p.stderr, argv)


class NoSilentNoOps(E2E):
    """Issue #15: asking for what cannot be done is an error with the documented exit code."""

    def test_impossible_requests_are_errors_and_finished_results_are_kept(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-noop", {"seed": "[0, 1]"}, steps=20, ckpt=20,
                                            eval_every=10))
        runs = s.wait_sweep_done(self.sweep_id, 300)
        done = int(runs[0]["id"])
        sid = str(self.sweep_id)

        def expect(rc, *args, needles=()):
            p = s.cli(*args, check=False)
            self.assertEqual(p.returncode, rc, f"ablate {' '.join(args)}: {p.stdout}{p.stderr}")
            for n in needles:
                self.assertIn(n, p.stderr)
            return p

        expect(4, "cancel", sid, "--run", "999", needles=["run 999"])
        expect(6, "cancel", sid, "--run", str(done), needles=["finished"])
        expect(6, "cancel", sid, needles=["no unfinished runs"])
        expect(4, "cancel", "no-such-sweep")
        # Run ids are global: --run needs no sweep; with neither it is a usage error.
        expect(6, "cancel", "--run", str(done), needles=["nothing was cancelled"])
        expect(4, "cancel", "--run", "999", needles=["no run with id 999"])
        expect(2, "cancel", needles=["give a sweep, or --run"])
        expect(4, "logs", "999", needles=["run 999"])
        expect(2, "report", sid, "--variant", "seeds", needles=["no axis 'seeds'", "did you mean 'seed'?"])
        expect(2, "report", sid, "--by", "foo", needles=["no axis 'foo'"])
        # retry: a finished result is kept.
        expect(6, "retry", sid, "--run", str(done), needles=["kept"])
        expect(2, "retry", sid, "--state", "succeeded", needles=["kept"])
        expect(2, "retry", sid, "--state", "diverged", needles=["kept"])
        expect(4, "retry", sid, "--run", "999")
        # Nothing to retry is refused as nothing to cancel is (issue #24 item 7).
        expect(6, "retry", sid, needles=["nothing to retry"])
        # A metric name that matches nothing names what there is; an unbench that lifts nothing
        # and a raise of 0 say so (the third hostile round, item 15).
        expect(4, "metrics", str(done), "--name", "val_los",
               needles=['has no metric "val_los"', "did you mean 'val_loss'?", "train_loss"])
        self.assertIn("val_loss", expect(0, "metrics", str(done), "--name", "val_loss").stdout)
        expect(6, "workers", "unbench", "w1", needles=['"w1" is not benched'])
        expect(2, "budget", sid, "--raise", "0", needles=["raising by 0 changes nothing"])
        self.assertEqual({r["state"] for r in s.runs(self.sweep_id)}, {"succeeded"}, "nothing was requeued")

        # Output: report -o json and --format json are one document, the same (issue #24 item 6);
        # no "0" for "no run"; ls --active says so.
        p = expect(0, "-o", "json", "report", sid)
        self.assertEqual(p.stdout, expect(0, "report", sid, "--format", "json").stdout)
        doc = json.loads(p.stdout)
        self.assertIsInstance(doc, dict)
        for key in ("options", "runs", "curves", "necessity", "verdicts", "mixed", "notes"):
            self.assertIn(key, doc)
        workers = s.cli_json("workers")
        self.assertEqual([w["info"]["name"] for w in workers], ["w1"])
        self.assertNotIn("current_run_id", workers[0], "an idle worker has no run, not run \"0\"")
        # One casing for states: JSON prints them as the tables do, like sweep states.
        raw = [json.loads(l) for l in expect(0, "-o", "json", "runs", sid).stdout.splitlines()]
        self.assertEqual({r["state"] for r in raw}, {"succeeded"})
        self.assertIn(" succeeded ", expect(0, "runs", sid).stdout)
        status = json.loads(expect(0, "-o", "json", "status", sid).stdout)
        self.assertEqual(status["sweep"]["state"], "finished")
        p = expect(0, "ls", "--active")
        self.assertIn("no active sweeps", p.stdout)
        # export: --help names the files, --no-metrics writes no metrics file.
        p = expect(0, "export", "--help")
        for f in ("sweep.json", "runs.jsonl", "metrics.csv"):
            self.assertIn(f, p.stdout)
        out = os.path.join(s.dir, "exp")
        expect(0, "export", sid, "--out", out)
        self.assertTrue(os.path.exists(os.path.join(out, "metrics.csv")))
        expect(0, "export", sid, "--out", out, "--no-metrics")
        self.assertEqual(sorted(os.listdir(out)), ["runs.jsonl", "sweep.json"])
        # One casing in files too (issue #24 item 9): runs.jsonl says "succeeded" as status does;
        # an export written before (the proto's "SUCCEEDED") still reports, to the same document.
        with open(os.path.join(out, "runs.jsonl")) as f:
            exported = [json.loads(l) for l in f if l.strip()]
        self.assertEqual({r["state"] for r in exported}, {"succeeded"})
        report = expect(0, "report", "--from", out, "--format", "json").stdout
        with open(os.path.join(out, "runs.jsonl"), "w") as f:
            for r in exported:
                f.write(json.dumps(dict(r, state=r["state"].upper())) + "\n")
        self.assertEqual(expect(0, "report", "--from", out, "--format", "json").stdout, report)


class FollowThroughRestarts(E2E):
    """`ablate watch` and `ablate logs -f` outlive a server restart: they say on stderr that the
    server went away, reconnect with back-off, and end as they would have (the third hostile
    round, item 5; before, watch exited 5 with "Socket closed")."""
    lease_seconds = 30  # the run keeps its lease through the restart: one attempt to follow

    def test_watch_and_logs_follow_reconnect_through_a_server_restart(self):
        s = self.stack
        s.start_server()
        s.start_worker("w1")
        self.sweep_id = s.submit(sweep_file(s, "e2e-follow", {"seed": "[0]"}, steps=1000, ckpt=250,
                                            eval_every=500))
        run_id = int(wait_for(self.first_running, 120, "the run to start")["id"])
        argv = [CLI, "--server", s.server_addr, "--token", s.user_token]
        files = {}
        procs = {}
        for name, args in (("watch", ["watch", str(self.sweep_id), "--interval", "0.5"]),
                           ("logs", ["logs", str(run_id), "-f"])):
            out = open(os.path.join(s.dir, f"{name}.out"), "w")
            err = open(os.path.join(s.dir, f"{name}.err"), "w")
            files[name] = (out.name, err.name)
            procs[name] = subprocess.Popen(argv + args, stdout=out, stderr=err, text=True)
            out.close()
            err.close()

        def read(name, which):
            with open(files[name][which]) as f:
                return f.read()

        wait_for(lambda: read("watch", 0) and read("logs", 0), 60, "watch and logs to print")
        s.stop("server", signal.SIGKILL)
        for name in procs:
            wait_for(lambda: "lost the server" in read(name, 1), 60, f"{name} to say so")
            self.assertIsNone(procs[name].poll(), f"{name} gave up: {read(name, 1)}")
        s.start_server()
        runs = s.wait_sweep_done(self.sweep_id, 600)
        self.assertEqual(runs[0]["state"], "succeeded")
        for name in procs:
            self.assertEqual(procs[name].wait(120), 0, read(name, 1))
            self.assertIn("reconnected", read(name, 1))
        self.assertIn("sweep finished", read("watch", 0))
        logs = read("logs", 0)
        self.assertTrue(logs.rstrip().endswith(f"run {run_id}: succeeded"), logs[-300:])
        # What was printed before the restart is not printed again.
        self.assertEqual(len(re.findall(r"(?m)^-- \S+ leased  try 1 ", logs)), 1, logs[:2000])


class RunsPages(E2E):
    """Issue #24: `ablate runs` shows a page, newest first as `ablate ls`, and says on stderr what
    it left out (--all or --limit N for more), so JSON on stdout stays one run a line."""

    def test_runs_says_what_it_did_not_show_and_all_shows_everything(self):
        s = self.stack
        s.start_server()  # no worker: the runs stay queued
        older = s.submit(sweep_file(s, "e2e-older", {"seed": "[0, 1]"}))
        sid = s.submit(sweep_file(s, "e2e-pages", {"seed": "[" + ", ".join(map(str, range(58))) + "]"}))
        p = s.cli("runs", str(sid))
        rows = p.stdout.splitlines()[1:]
        self.assertEqual(len(rows), 50, p.stdout)
        self.assertEqual(p.stderr, "50 of 58 runs shown (newest first); --all or --limit N for more\n")
        ids = [int(l.split()[0]) for l in rows]
        self.assertEqual(ids, sorted(ids, reverse=True), "newest first")
        everything = s.cli("-o", "json", "runs", str(sid), "--all")
        self.assertEqual(everything.stderr, "")
        all_ids = [int(json.loads(l)["id"]) for l in everything.stdout.splitlines()]
        self.assertEqual(len(all_ids), 58)
        self.assertEqual(all_ids[:50], ids)
        # JSON: the runs on stdout, the note on stderr.
        p = s.cli("-o", "json", "runs", str(sid), "--limit", "5")
        self.assertEqual([int(json.loads(l)["id"]) for l in p.stdout.splitlines()], ids[:5])
        self.assertIn("5 of 58 runs shown", p.stderr)
        # Filters count what matches: nothing failed, so nothing is hidden.
        p = s.cli("runs", str(sid), "--state", "failed")
        self.assertEqual((p.stdout.count("\n"), p.stderr), (1, ""))
        # Every sweep: the newest sweep's runs first, as `ablate ls` lists sweeps.
        p = s.cli("-o", "json", "runs", "--limit", "60")
        sweeps = [int(json.loads(l)["sweep_id"]) for l in p.stdout.splitlines()]
        self.assertEqual(sweeps, [sid] * 58 + [older] * 2)
        self.assertEqual(p.stderr, "")
        self.assertEqual(s.cli_json("ls")[0]["id"], str(sid))


if __name__ == "__main__":
    unittest.main(verbosity=2)
