#!/usr/bin/env python3
"""scripts/check-includes refuses what it is there to catch: run on a sample with one of each
problem (unportable_sample.cc.txt), it fails and names each line, and no other."""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
script = os.path.join(here, "..", "..", "scripts", "check-includes")
sample = os.path.join(here, "unportable_sample.cc.txt")
run = subprocess.run([sys.executable, script, sample], capture_output=True, text=True)
out = run.stderr
expected = [
    ":10: std::from_chars into a floating-point value is not in Apple's libc++",
    ":13: std::jthread is not in Apple's libc++",
    ":14: std::vector needs #include <vector>",
    ":16: pipe2() is Linux's, not in macOS's C library",
    ":19: <sys/epoll.h> is Linux's, not macOS's",
]
failures = [f"exit status {run.returncode}, want 1"] if run.returncode != 1 else []
failures += [f"missing: {e}" for e in expected if e not in out]
named = [l for l in out.splitlines() if l.startswith("  ")]
if len(named) != len(expected):
    failures.append(f"{len(named)} problems named, want {len(expected)} (line 12's integer "
                    "from_chars is fine)")
if failures:
    print("check-includes on the sample:\n" + out, file=sys.stderr)
    for f in failures:
        print("FAIL " + f, file=sys.stderr)
    sys.exit(1)
print(f"check-includes names the sample's {len(expected)} problems and nothing else")
