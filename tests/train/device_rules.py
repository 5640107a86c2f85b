"""Source rules for worker/train that CPU-only tests cannot catch (docs/trainer.md, "Devices").

1. No float64 on a device: MPS has no float64, so any kDouble / kFloat64 / .double() tensor that
   can live on the training device fails the run there. A line may use float64 only when it is
   provably on the CPU: it names the CPU itself (kCPU or is_cpu()) and carries the comment
   `float64-ok:` saying why.
2. Autocast is switched only inside worker/train/autocast.cc (the per-pass ScopedAutocast): a
   run-long autocast cached bf16 weights without grad history and froze them.

usage: python3 device_rules.py WORKER_TRAIN_DIR
"""
import os
import re
import sys

FLOAT64 = re.compile(r"\bk(?:Double|Float64)\b|\.double\(\)|ScalarType::Double")
CPU_PROOF = re.compile(r"\bkCPU\b|\bis_cpu\(\)")
ALLOW = "float64-ok:"
AUTOCAST = re.compile(
    r"\b(?:set_enabled|set_cpu_enabled|set_xpu_enabled|set_autocast_\w+)\s*\(")
GUARD_FILE = "autocast.cc"


def violations(filename, lines):
    out = []
    for number, line in enumerate(lines, 1):
        code, _, comment = line.partition("//")
        if FLOAT64.search(code):
            if ALLOW not in comment:
                out.append(f"{filename}:{number}: float64 on the device path (MPS has none); "
                           f"reduce in float32 or copy to the CPU first and mark the line "
                           f"'// {ALLOW} <why>': {line.strip()}")
            elif not CPU_PROOF.search(code):
                out.append(f"{filename}:{number}: '{ALLOW}' line does not name the CPU "
                           f"(kCPU or is_cpu()), so it is not provably CPU-only: {line.strip()}")
        if AUTOCAST.search(code) and os.path.basename(filename) != GUARD_FILE:
            out.append(f"{filename}:{number}: autocast switched outside {GUARD_FILE}; use "
                       f"ScopedAutocast around the forward pass: {line.strip()}")
    return out


def self_test():
    """The rules catch what they are meant to (a regex typo would otherwise pass everything)."""
    bad = [
        ("probes.cc", "  return x.detach().to(torch::kDouble).pow(2);"),
        ("probes.cc", "  auto d = x.double();"),
        ("model.cc", "  auto t = torch::zeros({3}, torch::kFloat64);"),
        ("model.cc", "  auto t = torch::zeros({3}, torch::kDouble);  // float64-ok: trust me"),
        ("trainer.cc", "    at::autocast::set_enabled(true);"),
        ("step.cc", "  at::autocast::set_cpu_enabled(true);"),
        ("step.cc", "  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);"),
    ]
    good = [
        ("probes.cc", "  return x.is_cpu() ? torch::kDouble : torch::kFloat;  // float64-ok: CPU"),
        ("model.cc", "  auto o = opts.dtype(torch::kDouble).device(torch::kCPU);  // float64-ok: x"),
        ("probes.cc", "  return t.pow(2).sum().item<double>();"),
        ("probes.cc", "  // a comment about kDouble is not code"),
        ("autocast.cc", "    at::autocast::set_enabled(on);"),
    ]
    failed = []
    for name, line in bad:
        if not violations(name, [line]):
            failed.append(f"self-test: not caught: {line}")
    for name, line in good:
        if violations(name, [line]):
            failed.append(f"self-test: wrongly flagged: {line}")
    return failed


def main():
    root = sys.argv[1]
    problems = self_test()
    scanned = 0
    for name in sorted(os.listdir(root)):
        if not name.endswith((".cc", ".h")):
            continue
        with open(os.path.join(root, name), encoding="utf-8") as f:
            problems += violations(os.path.join(root, name), f.read().splitlines())
        scanned += 1
    if scanned == 0:
        problems.append(f"no sources found under {root}")
    if problems:
        print("\n".join(["FAILED:"] + problems))
        return 1
    print(f"device rules OK ({scanned} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
