#!/usr/bin/env python3
"""deploy/docker/runtime-packages.sh, which decides what the runtime images install: it names the
packages owning a binary's libraries, refuses a binary with an unresolved library unless that
library is declared as provided at run time (the CUDA driver), lists the libraries no package
owns when asked, and needs an argument."""

import os
import shutil
import subprocess
import tempfile
import unittest

REPO = os.environ.get("ABLATE_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "deploy", "docker", "runtime-packages.sh")


def run(*args, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, timeout=300)


@unittest.skipUnless(shutil.which("dpkg") and shutil.which("ldd"), "needs a Debian-style system")
class RuntimePackagesTest(unittest.TestCase):
    def test_names_the_c_library_package(self):
        result = run("/bin/ls")
        self.assertEqual(result.returncode, 0, result.stderr)
        packages = result.stdout.split()
        self.assertIn("libc6", packages)
        self.assertEqual(packages, sorted(set(packages)))
        self.assertFalse(any(":" in p for p in packages), packages)  # no ":amd64" suffixes

    def test_usage(self):
        result = run()
        self.assertEqual(result.returncode, 2)
        self.assertIn("usage", result.stderr)

    @unittest.skipUnless(shutil.which("cc"), "needs a C compiler")
    def test_unresolved_library(self):
        with tempfile.TemporaryDirectory() as tmp:
            lib_c, main_c = os.path.join(tmp, "f.c"), os.path.join(tmp, "main.c")
            with open(lib_c, "w") as f:
                f.write("void f(void) {}\n")
            with open(main_c, "w") as f:
                f.write("void f(void);\nint main(void) { f(); return 0; }\n")
            lib = os.path.join(tmp, "libablatefake.so.1")
            subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, "-Wl,-soname,libablatefake.so.1", lib_c],
                           check=True)
            binary = os.path.join(tmp, "main")
            subprocess.run(["cc", "-o", binary, main_c, lib], check=True)
            unowned_out = os.path.join(tmp, "unowned.txt")
            found = run(binary, env_extra={"UNOWNED_OUT": unowned_out, "LD_LIBRARY_PATH": tmp})
            self.assertEqual(found.returncode, 0, found.stderr)
            with open(unowned_out) as f:
                self.assertEqual(f.read().split(), [lib])  # attach.sh --mode binary ships these
            self.assertIn("libc6", found.stdout.split())
            os.unlink(lib)
            refused = run(binary)
            self.assertEqual(refused.returncode, 1)
            self.assertIn("needs libablatefake.so.1", refused.stderr)
            allowed = run(binary, env_extra={"ALLOW_MISSING": "libcuda.so.1 libablatefake.so.1"})
            self.assertEqual(allowed.returncode, 0, allowed.stderr)
            self.assertIn("libc6", allowed.stdout.split())


if __name__ == "__main__":
    unittest.main()
