#!/usr/bin/env python3
"""deploy/gpu/attach.sh and stop.sh without a remote host: argument handling, the commands a dry
run prints, and — with a fake `ssh` on PATH that records its argv and stdin — that a real run
executes exactly those commands and never puts the token on a command line."""

import io
import os
import shlex
import shutil
import stat
import subprocess
import tarfile
import tempfile
import unittest

REPO = os.environ.get("ABLATE_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ATTACH = os.path.join(REPO, "deploy", "gpu", "attach.sh")
STOP = os.path.join(REPO, "deploy", "gpu", "stop.sh")
TOKEN = "ablt_" + "5f" * 32  # the server's format: prefix + 64 hex digits
HOST = "root@203.0.113.9"
SERVER = "198.51.100.1:7070"

FAKE_SSH = """#!/usr/bin/env bash
n=$(find "$FAKE_SSH_DIR" -name 'call*.argv' | wc -l)
i=$(printf '%03d' $((n + 1)))
printf '%s\\0' "$@" > "$FAKE_SSH_DIR/call$i.argv"
cat > "$FAKE_SSH_DIR/call$i.stdin"
"""


def run(script, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "ABLATE_TOKEN"}
    env.update(env_extra or {})
    return subprocess.run([script, *args], capture_output=True, text=True, env=env, timeout=60)


def dry_commands(stdout):
    """Each printed command as argv, heredoc bodies and redirections dropped; plus the bodies."""
    commands, bodies, lines = [], [], stdout.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.endswith("<<'EOF'"):
            end = lines.index("EOF", i + 1)
            bodies.append("\n".join(lines[i + 1:end]))
            commands.append(shlex.split(line[: -len("<<'EOF'")]))
            i = end + 1
            continue
        commands.append(shlex.split(line))
        i += 1
    return commands, bodies


def ssh_part(argv):
    """The ssh invocation inside a printed command (after a pipe, before a redirection)."""
    start = argv.index("ssh")
    end = argv.index("<") if "<" in argv else len(argv)
    return argv[start:end]


class AttachArgumentsTest(unittest.TestCase):
    def assert_usage_error(self, result, fragment):
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn(fragment, result.stderr)
        self.assertEqual(result.stdout, "")

    def test_no_arguments(self):
        self.assert_usage_error(run(ATTACH), "give the box as USER@HOST")

    def test_help_prints_usage(self):
        result = run(ATTACH, "--help")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--server ADDR:PORT", result.stderr)

    def test_server_required(self):
        self.assert_usage_error(run(ATTACH, HOST, "--token", TOKEN), "--server PUBLIC_ADDR:PORT is required")

    def test_server_needs_port(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", "198.51.100.1", "--token", TOKEN),
                                "is not HOST:PORT")

    def test_token_required(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER), "a worker token is required")

    def test_token_with_shell_characters_refused(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", "a'b; rm -rf ~"),
                                "characters a token cannot have")

    def test_option_missing_value(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server"), "--server needs a value")

    def test_unknown_option(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN, "--gpus", "2"),
                                "unknown option --gpus")

    def test_two_hosts(self):
        self.assert_usage_error(run(ATTACH, HOST, "root@other", "--server", SERVER, "--token", TOKEN),
                                "one host only")

    def test_bad_mode(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN, "--mode", "k8s"),
                                "--mode must be docker, build or binary")

    def test_binary_mode_needs_worker_bin(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN, "--mode", "binary"),
                                "--mode binary needs --worker-bin FILE")

    def test_worker_bin_must_be_executable(self):
        with tempfile.NamedTemporaryFile("w") as f:
            self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN, "--mode", "binary",
                                        "--worker-bin", f.name), "is not an executable file")

    def test_worker_bin_only_with_binary_mode(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN, "--mode", "build",
                                    "--worker-bin", "/bin/true"), "--worker-bin applies to --mode binary only")

    def test_bad_device(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN, "--mode", "build",
                                    "--device", "tpu"), "--device must be cuda or cpu")

    def test_docker_mode_is_cuda_only(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN, "--device", "cpu"),
                                "--device cuda only")

    def test_missing_ca_file(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN,
                                    "--tls-ca", "/nonexistent/ca.crt"), "is not readable")

    def test_ca_file_without_certificate(self):
        with tempfile.NamedTemporaryFile("w", suffix=".crt") as f:
            f.write("not a certificate\n")
            f.flush()
            self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN,
                                        "--tls-ca", f.name), "holds no PEM certificate")

    def test_ca_and_insecure_contradict(self):
        with tempfile.NamedTemporaryFile("w", suffix=".crt") as f:
            f.write("-----BEGIN CERTIFICATE-----\n")
            f.flush()
            self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN,
                                        "--tls-ca", f.name, "--insecure"), "contradict")

    def test_price_must_be_a_number(self):
        for bad in ["abc", "-1", "1e3", "0.35$", "1.2.3"]:
            self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN,
                                        "--price-per-hour", bad), "--price-per-hour must be a number")

    def test_image_only_with_docker_mode(self):
        self.assert_usage_error(run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN,
                                    "--mode", "build", "--image", "ghcr.io/x/ablate:1"),
                                "--image applies to --mode docker only")


class AttachDryRunTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.ca = os.path.join(self.tmp.name, "ca.crt")
        with open(self.ca, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

    def dry(self, *extra):
        result = run(ATTACH, HOST, "--server", SERVER, "--token", TOKEN, "--dry-run", *extra)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn(TOKEN, result.stdout + result.stderr)
        return result

    def docker_run(self, stdout):
        commands, _ = dry_commands(stdout)
        runs = [ssh_part(c)[-1] for c in commands if ssh_part(c)[-1].startswith("docker run")]
        self.assertEqual(len(runs), 1, stdout)
        return shlex.split(runs[0])

    def test_docker_run_has_gpus_restart_env_file_and_ca(self):
        result = self.dry("--tls-ca", self.ca, "--name", "rtx-1", "--price-per-hour", "0.35")
        argv = self.docker_run(result.stdout)
        joined = " ".join(argv)
        self.assertIn("--gpus all", joined)
        self.assertIn("--restart unless-stopped", joined)
        self.assertIn("--env-file $HOME/.ablate/worker.env", joined)
        self.assertIn("$HOME/.ablate/ca.crt:/etc/ablate/ca.crt:ro", joined)
        self.assertIn("--tls-ca /etc/ablate/ca.crt", joined)
        self.assertIn(f"--server {SERVER}", joined)
        self.assertIn("--device cuda", joined)
        self.assertIn("--name rtx-1", joined)
        self.assertIn("--price-per-hour 0.35", joined)
        self.assertNotIn("--token", joined)
        self.assertNotIn("ABLATE_TOKEN", joined)

    def test_token_goes_to_env_file_redacted(self):
        result = self.dry("--tls-ca", self.ca)
        commands, bodies = dry_commands(result.stdout)
        self.assertEqual(bodies, ["ABLATE_TOKEN=<redacted>"])
        writer = [c for c in commands if "worker.env" in ssh_part(c)[-1] and "cat >" in ssh_part(c)[-1]]
        self.assertEqual(len(writer), 1)
        self.assertIn("umask 077", ssh_part(writer[0])[-1])

    def test_ca_is_copied_from_the_given_file(self):
        result = self.dry("--tls-ca", self.ca)
        self.assertIn(f"'cat > \"$HOME/.ablate/ca.crt\"' < {self.ca}", result.stdout)

    def test_without_ca_uses_system_roots(self):
        argv = self.docker_run(self.dry().stdout)
        self.assertIn("--tls", argv)
        self.assertNotIn("--tls-ca", argv)

    def test_insecure_warns_and_drops_tls(self):
        result = self.dry("--insecure")
        argv = self.docker_run(result.stdout)
        self.assertNotIn("--tls", argv)
        self.assertNotIn("--tls-ca", argv)
        self.assertIn("plaintext", result.stderr)

    def test_default_builds_image_on_the_box_from_head(self):
        result = self.dry()
        self.assertIn("archive --format=tar HEAD | ssh", result.stdout)
        self.assertIn("docker build -f \"$HOME/.ablate/src/deploy/docker/worker-cuda.Dockerfile\"",
                      result.stdout)
        argv = self.docker_run(result.stdout)
        self.assertEqual(argv[argv.index("--server") - 1], "ablate-worker-cuda:local")

    def test_image_is_pulled_not_built(self):
        result = self.dry("--image", "ghcr.io/acme/ablate-worker-cuda:0.1")
        self.assertIn("docker pull ghcr.io/acme/ablate-worker-cuda:0.1", result.stdout)
        self.assertNotIn("docker build", result.stdout)
        self.assertNotIn("archive", result.stdout)
        self.assertIn("ghcr.io/acme/ablate-worker-cuda:0.1", self.docker_run(result.stdout))

    def test_ssh_options(self):
        result = self.dry("--ssh-port", "2222")
        for c in dry_commands(result.stdout)[0]:
            ssh = ssh_part(c)
            self.assertEqual(ssh[ssh.index("-p") + 1], "2222")
            self.assertIn("BatchMode=yes", ssh)
            self.assertEqual(ssh[-2], HOST)

    def test_old_container_replaced_and_checked(self):
        remote_cmds = [ssh_part(c)[-1] for c in dry_commands(self.dry().stdout)[0]]
        rm = remote_cmds.index("docker rm -f ablate-worker >/dev/null 2>&1 || true")
        self.assertTrue(remote_cmds[rm + 1].startswith("docker run"))
        self.assertIn("docker logs", remote_cmds[-1])

    def test_build_mode(self):
        result = self.dry("--mode", "build", "--tls-ca", self.ca, "--name", "a100", "--price-per-hour", "1.2")
        commands, bodies = dry_commands(result.stdout)
        remote_cmds = [ssh_part(c)[-1] for c in commands]
        self.assertFalse(any("docker" in c for c in remote_cmds), remote_cmds)
        self.assertEqual(bodies, [f'ABLATE_SERVER={SERVER}\nABLATE_WORKER_ARGS="--device cuda --name a100 --price-per-hour 1.2"\n'
                                  "ABLATE_TOKEN=<redacted>"])
        self.assertIn('bash "$HOME/.ablate/src/deploy/gpu/remote-build.sh" --device cuda', remote_cmds)
        self.assertIn('bash "$HOME/.ablate/src/deploy/gpu/remote-service.sh" start', remote_cmds)

    def test_build_mode_without_ca_uses_system_roots(self):
        _, bodies = dry_commands(self.dry("--mode", "build").stdout)
        self.assertIn('ABLATE_WORKER_ARGS="--device cuda --tls"', bodies[0])

    @unittest.skipUnless(shutil.which("dpkg"), "binary mode names the binary's packages with dpkg")
    def test_binary_mode(self):
        result = self.dry("--mode", "binary", "--worker-bin", "/bin/true", "--device", "cpu", "--tls-ca", self.ca,
                          "--price-per-hour", ".5")
        commands, bodies = dry_commands(result.stdout)
        remote_cmds = [ssh_part(c)[-1] for c in commands]
        self.assertEqual(bodies, [f'ABLATE_SERVER={SERVER}\nABLATE_WORKER_ARGS="--device cpu --price-per-hour .5"\n'
                                  "ABLATE_TOKEN=<redacted>"])
        # Only the scripts travel as source; nothing is built or run in docker on the box.
        self.assertIn("archive --format=tar HEAD deploy/gpu deploy/systemd | ssh", result.stdout)
        self.assertFalse(any("docker" in c or "remote-build" in c for c in remote_cmds), remote_cmds)
        install = remote_cmds.index('bash "$HOME/.ablate/src/deploy/gpu/remote-install.sh"')
        self.assertEqual(remote_cmds[install + 1], 'bash "$HOME/.ablate/src/deploy/gpu/remote-service.sh" start')
        self.assertIn("runtime-packages.txt: ca-certificates libblis4-pthread libc6 sentencepiece", result.stderr)


class AttachExecutionTest(unittest.TestCase):
    """Runs the scripts for real against a fake ssh."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.bin = os.path.join(self.tmp.name, "bin")
        self.calls = os.path.join(self.tmp.name, "calls")
        os.makedirs(self.bin)
        os.makedirs(self.calls)
        ssh = os.path.join(self.bin, "ssh")
        with open(ssh, "w") as f:
            f.write(FAKE_SSH)
        os.chmod(ssh, os.stat(ssh).st_mode | stat.S_IXUSR)
        self.env = {"PATH": self.bin + os.pathsep + os.environ["PATH"], "FAKE_SSH_DIR": self.calls}
        self.ca = os.path.join(self.tmp.name, "ca.crt")
        with open(self.ca, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
        self.token_file = os.path.join(self.tmp.name, "token")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")

    def recorded(self):
        out = []
        for name in sorted(os.listdir(self.calls)):
            if name.endswith(".argv"):
                with open(os.path.join(self.calls, name), "rb") as f:
                    argv = f.read().decode().split("\0")[:-1]
                with open(os.path.join(self.calls, name[:-5] + ".stdin"), "rb") as f:
                    out.append((argv, f.read()))
        return out

    def run_both(self, *args):
        dry = run(ATTACH, *args, "--dry-run", env_extra=self.env)
        self.assertEqual(dry.returncode, 0, dry.stderr)
        self.assertEqual(self.recorded(), [], "a dry run must not call ssh")
        real = run(ATTACH, *args, env_extra=self.env)
        self.assertEqual(real.returncode, 0, real.stderr)
        return dry, self.recorded()

    def check_same_commands_and_secret(self, dry, calls):
        printed = [ssh_part(c)[1:] for c in dry_commands(dry.stdout)[0]]
        self.assertEqual([argv for argv, _ in calls], printed)
        for argv, stdin in calls:
            self.assertFalse(any(TOKEN in a for a in argv), argv)
        env_writes = [stdin for argv, stdin in calls if argv[-1].endswith('cat > "$HOME/.ablate/worker.env"')]
        self.assertEqual(len(env_writes), 1)
        self.assertIn(f"ABLATE_TOKEN={TOKEN}\n".encode(), env_writes[0])
        ca_writes = [stdin for argv, stdin in calls if argv[-1] == 'cat > "$HOME/.ablate/ca.crt"']
        with open(self.ca, "rb") as f:
            self.assertEqual(ca_writes, [f.read()])

    def test_docker_mode_with_image(self):
        dry, calls = self.run_both(HOST, "--server", SERVER, "--token-file", self.token_file,
                                   "--tls-ca", self.ca, "--image", "ghcr.io/acme/w:1")
        self.check_same_commands_and_secret(dry, calls)

    def test_build_mode_ships_committed_source(self):
        if subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True).returncode != 0:
            self.skipTest("source tree is not a git checkout")
        dry, calls = self.run_both(HOST, "--server", SERVER, "--mode", "build", "--tls-ca", self.ca,
                                   "--token-file", self.token_file)
        self.check_same_commands_and_secret(dry, calls)
        uploads = [stdin for argv, stdin in calls if argv[-1].endswith('tar -x -C "$HOME/.ablate/src"')]
        self.assertEqual(len(uploads), 1)
        self.assertIn(b"CMakeLists.txt", uploads[0][:1 << 20])

    @unittest.skipUnless(shutil.which("dpkg"), "binary mode names the binary's packages with dpkg")
    def test_binary_mode_ships_the_binary_and_what_it_needs(self):
        worker = os.path.join(self.tmp.name, "ablate-worker")
        shutil.copy("/bin/true", worker)
        dry, calls = self.run_both(HOST, "--server", SERVER, "--mode", "binary", "--worker-bin", worker,
                                   "--tls-ca", self.ca, "--token-file", self.token_file)
        self.check_same_commands_and_secret(dry, calls)
        bundles = [stdin for argv, stdin in calls if argv[-1].endswith('tar -x --no-same-owner -C "$HOME/.ablate"')]
        self.assertEqual(len(bundles), 1)
        with tarfile.open(fileobj=io.BytesIO(bundles[0])) as tar:
            shipped = tar.extractfile("./bin/ablate-worker").read()
            packages = tar.extractfile("./runtime-packages.txt").read().decode().split()
            build_os = tar.extractfile("./build-os").read().decode().strip()
            self.assertTrue(tar.getmember("./bin/ablate-worker").mode & 0o100)
        with open(worker, "rb") as f:
            self.assertEqual(shipped, f.read())
        self.assertIn("libc6", packages)
        self.assertIn("sentencepiece", packages)
        self.assertRegex(build_os, r"^[a-z]+:[0-9.]+$")

    def test_token_from_environment(self):
        dry = run(ATTACH, HOST, "--server", SERVER, "--image", "ghcr.io/acme/w:1", "--dry-run",
                  env_extra={**self.env, "ABLATE_TOKEN": TOKEN})
        self.assertEqual(dry.returncode, 0, dry.stderr)
        self.assertIn("ABLATE_TOKEN=<redacted>", dry.stdout)


class StopTest(unittest.TestCase):
    def test_host_required(self):
        result = run(STOP)
        self.assertEqual(result.returncode, 2)
        self.assertIn("give the box as USER@HOST", result.stderr)

    def test_stops_container_and_service_gracefully(self):
        result = run(STOP, HOST, "--dry-run")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("docker stop -t 120 ablate-worker", result.stdout)
        self.assertIn('remote-service.sh" stop', result.stdout)
        self.assertNotIn("rm -rf", result.stdout)

    def test_purge_removes_state(self):
        result = run(STOP, HOST, "--purge", "--ssh-port", "2222", "--dry-run")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn('rm -rf "$HOME/.ablate"', result.stdout)
        self.assertIn("docker volume rm -f ablate-worker-work", result.stdout)
        self.assertIn("-p 2222", result.stdout)


if __name__ == "__main__":
    unittest.main()
