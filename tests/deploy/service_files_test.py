#!/usr/bin/env python3
"""The systemd units, the launchd plist and the TLS script: units parse and restart the
worker/server with the token kept out of argv; the plist is a valid property list for an MPS
worker that launchd keeps alive; make-certs.sh issues a server certificate that chains to its
CA with the requested names (checked with openssl)."""

import os
import plistlib
import shutil
import subprocess
import tempfile
import unittest

REPO = os.environ.get("ABLATE_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_unit(path):
    """systemd's format: [Section] headers, KEY=VALUE lines (keys may repeat), backslash
    continuations, # and ; comments. Returns {section: {key: [values]}}."""
    sections, current, pending = {}, None, ""
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = pending + raw.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                current = sections.setdefault(line[1:-1], {})
                continue
            if current is None or "=" not in line:
                raise ValueError(f"{path}:{n}: not KEY=VALUE inside a section: {line!r}")
            key, value = line.split("=", 1)
            current.setdefault(key.strip(), []).append(value.strip())
    return sections


class SystemdUnitsTest(unittest.TestCase):
    def unit(self, name):
        return parse_unit(os.path.join(REPO, "deploy", "systemd", name))

    def check_common(self, unit):
        self.assertIn("Description", unit["Unit"])
        service = unit["Service"]
        self.assertTrue(service["ExecStart"][0].startswith("/usr/local/bin/ablate-"))
        self.assertNotIn(service["User"][0], ("root", "0"))
        self.assertIn(service["Restart"][0], ("always", "on-failure"))
        self.assertTrue(service["EnvironmentFile"][0].startswith("/etc/ablate/"))
        self.assertEqual(unit["Install"]["WantedBy"], ["multi-user.target"])

    def test_worker_unit(self):
        unit = self.unit("ablate-worker.service")
        self.check_common(unit)
        service = unit["Service"]
        self.assertEqual(service["Restart"], ["always"])
        self.assertEqual(service["KillSignal"], ["SIGTERM"])
        exec_start = service["ExecStart"][0]
        self.assertNotIn("--token", exec_start)
        self.assertNotIn("ABLATE_TOKEN", exec_start)
        self.assertEqual(unit["Unit"]["StartLimitIntervalSec"], ["0"])

    def test_server_unit_uses_tls(self):
        unit = self.unit("ablate-server.service")
        self.check_common(unit)
        exec_start = unit["Service"]["ExecStart"][0]
        self.assertIn("--tls-cert /etc/ablate/tls/server.crt", exec_start)
        self.assertIn("--tls-key /etc/ablate/tls/server.key", exec_start)
        self.assertNotIn("--insecure", exec_start)
        self.assertNotIn("--database-url", exec_start)  # from the 0600 env file

    def test_parser_rejects_garbage(self):
        with tempfile.NamedTemporaryFile("w", suffix=".service", delete=False) as f:
            f.write("[Service]\nExecStart /bin/true\n")
        self.addCleanup(os.unlink, f.name)
        with self.assertRaises(ValueError):
            parse_unit(f.name)


class LaunchdPlistTest(unittest.TestCase):
    def test_mps_worker_kept_alive(self):
        with open(os.path.join(REPO, "deploy", "launchd", "dev.ablate.worker.plist"), "rb") as f:
            plist = plistlib.load(f)
        self.assertEqual(plist["Label"], "dev.ablate.worker")
        self.assertIs(plist["KeepAlive"], True)
        self.assertIs(plist["RunAtLoad"], True)
        command = plist["ProgramArguments"][-1]
        self.assertIn("--device mps", command)
        self.assertIn('. "$HOME/.config/ablate/worker.env"', command)
        self.assertNotIn("--token", command)
        self.assertNotIn("ABLATE_TOKEN", str(plist))


@unittest.skipUnless(shutil.which("openssl"), "openssl not installed")
class MakeCertsTest(unittest.TestCase):
    script = os.path.join(REPO, "deploy", "tls", "make-certs.sh")

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.out = os.path.join(self.tmp.name, "tls")

    def make(self, *names):
        return subprocess.run([self.script, "--out", self.out, *names], capture_output=True, text=True,
                              timeout=60)

    def openssl(self, *args):
        return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout

    def test_certificate_chains_to_ca_with_requested_names(self):
        result = self.make("203.0.113.7", "gpu.example.org")
        self.assertEqual(result.returncode, 0, result.stderr)
        crt, ca = os.path.join(self.out, "server.crt"), os.path.join(self.out, "ca.crt")
        self.assertIn("OK", self.openssl("verify", "-CAfile", ca, crt))
        text = self.openssl("x509", "-in", crt, "-noout", "-text")
        for name in ("IP Address:203.0.113.7", "DNS:gpu.example.org", "DNS:localhost",
                     "IP Address:127.0.0.1", "DNS:ablate-server"):
            self.assertIn(name, text)
        self.assertIn("TLS Web Server Authentication", text)
        self.assertEqual(os.stat(os.path.join(self.out, "server.key")).st_mode & 0o077, 0)
        self.assertEqual(os.stat(os.path.join(self.out, "ca.key")).st_mode & 0o077, 0)

    def test_reissue_keeps_the_ca(self):
        self.assertEqual(self.make("203.0.113.7").returncode, 0)
        with open(os.path.join(self.out, "ca.crt")) as f:
            first_ca = f.read()
        result = self.make("203.0.113.8")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(self.out, "ca.crt")) as f:
            self.assertEqual(f.read(), first_ca)
        text = self.openssl("x509", "-in", os.path.join(self.out, "server.crt"), "-noout", "-text")
        self.assertIn("IP Address:203.0.113.8", text)
        self.assertNotIn("IP Address:203.0.113.7", text)

    def test_names_required(self):
        result = self.make()
        self.assertEqual(result.returncode, 2)
        self.assertIn("at least one public name or IP", result.stderr)

    def test_bad_name_refused(self):
        result = self.make("not a name")
        self.assertEqual(result.returncode, 2)
        self.assertIn("neither an IP address nor a DNS name", result.stderr)


if __name__ == "__main__":
    unittest.main()
