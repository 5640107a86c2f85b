"""Numerical parity of the C++ trainer's numerics (worker/train) with the PyTorch reference.

For each qk_norm, pos and init setting (and bias/untied/softcap/z_loss/dropout/grad-accumulation
variants), the C++ dump tool runs the trainer's own step code on a tiny model and writes its
weights, micro-batches and results; this script loads the weights into reference_model.GPT and
recomputes, requiring agreement to 1e-5 relative (per tensor, in L2 norm):
  - the eval-mode loss (dropout off) and every probe, computed from the reference's tensors in
    float64;
  - the train-mode loss and gradients accumulated over grad_accum micro-batches. Dropout masks
    match bit for bit: both sides call the same ATen dropout kernel on the CPU generator, seeded
    identically, in the same order, so with dropout > 0 this is an exact shared-seed comparison,
    not a statistical one;
  - the global gradient norm, torch.nn.utils.clip_grad_norm_, and one torch.optim.AdamW step
    with nanoGPT's decay groups (rank >= 2 decays) at the LR of an independently written
    warmup + cosine schedule.
It also checks the init distributions the C++ model drew.

usage: /usr/bin/python3 parity.py PATH/TO/train_parity_dump
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_model  # noqa: E402

TOL = 1e-5
CASES = [
    ("none", "learned", "nanogpt", []),
    ("layernorm", "learned", "nanogpt", []),
    ("rmsnorm", "learned", "nanogpt", []),
    ("none", "rope", "nanogpt", []),
    ("none", "none", "nanogpt", []),
    ("none", "learned", "wortsman", []),
    ("layernorm", "rope", "wortsman", ["bias=1", "untied"]),
    ("rmsnorm", "none", "nanogpt", ["softcap=5", "zloss=1e-3"]),
    ("none", "learned", "nanogpt", ["dropout=0.1", "accum=2", "clip=0.05", "wd=0.1"]),
    ("rmsnorm", "rope", "wortsman",
     ["dropout=0.2", "accum=2", "clip=0.05", "wd=0.1", "independent", "bias=1"]),
]


def load(path, manifest):
    flat = np.fromfile(path, dtype=np.float32)
    out, offset = {}, 0
    for t in manifest["tensors"]:
        n = int(np.prod(t["shape"]))
        out[t["name"]] = torch.from_numpy(flat[offset:offset + n].copy()).view(t["shape"])
        offset += n
    assert offset == flat.size, "tensor files and manifest disagree"
    return out


def rel(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-12)


def close(a, b):
    return abs(a - b) <= TOL * max(abs(b), 1e-3)


def learning_rate(o, step):
    """nanoGPT's schedule, written from its description: linear warmup, cosine to min_lr."""
    peak, warmup, steps = o["peak_lr"], o["warmup"], o["steps"]
    min_lr = 0.1 * peak
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    if step >= steps:
        return min_lr
    ratio = (step - warmup) / (steps - warmup)
    return min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (peak - min_lr)


def reference_probes(model, x, y):
    """Every probe of worker/train/probes.h, from the reference's own tensors, in float64."""
    records = []
    with torch.no_grad():
        logits, _ = model(x, y, records)
    out = {}
    for i, r in enumerate(records):
        q, k = r["q"].double(), r["k"].double()
        p = r["probs"].double()
        res = r["residual"].double()
        out[f"q_rms.l{i}"] = q.pow(2).mean().sqrt().item()
        out[f"k_rms.l{i}"] = k.pow(2).mean().sqrt().item()
        out[f"q_rms_pre.l{i}"] = r["q_pre"].double().pow(2).mean().sqrt().item()
        out[f"k_rms_pre.l{i}"] = r["k_pre"].double().pow(2).mean().sqrt().item()
        out[f"max_attn_logit.l{i}"] = (
            r["logits"].double().masked_fill(r["mask"], float("-inf")).max().item())
        # Query t sees t + 1 keys: its entropy over log(t + 1); query 0 (one key) is left out.
        t = p.size(-1)
        entropy = -torch.xlogy(p, p).sum(-1)[:, :, 1:]
        normalised = entropy / torch.log(torch.arange(2, t + 1, dtype=torch.float64))
        out[f"attn_entropy.l{i}"] = normalised.mean().item()
        for h, value in enumerate(normalised.mean(dim=(0, 2)).tolist()):
            out[f"attn_entropy.l{i}.h{h}"] = value
        out[f"kurtosis.l{i}"] = (res.pow(4).mean(-1) / res.pow(2).mean(-1).pow(2)).mean().item()
        # He et al. 2024: kurtosis of the per-channel RMS over every token.
        channel_ms = res.reshape(-1, res.size(-1)).pow(2).mean(0)
        out[f"kurtosis_channel.l{i}"] = (
            channel_ms.pow(2).mean() / channel_ms.mean().pow(2)).item()
    n = len(records)
    out["attn_entropy"] = sum(out[f"attn_entropy.l{i}"] for i in range(n)) / n
    out["attn_entropy_min_head"] = min(
        v for name, v in out.items() if name.startswith("attn_entropy.l") and ".h" in name)
    out["kurtosis"] = sum(out[f"kurtosis.l{i}"] for i in range(n)) / n
    out["kurtosis_channel"] = sum(out[f"kurtosis_channel.l{i}"] for i in range(n)) / n
    out["max_attn_logit"] = max(out[f"max_attn_logit.l{i}"] for i in range(n))
    out["param_norm"] = math.sqrt(sum(p.double().pow(2).sum().item() for p in model.parameters()))
    out["output_logit_max"] = logits.max().item()
    return out


def check_optimizer_step(label, manifest, model, before, updated, failures):
    """Clipping and one AdamW step with torch's own implementations."""
    o = manifest["optimizer"]
    params = dict(model.named_parameters())
    norm = torch.nn.utils.clip_grad_norm_(list(params.values()), o["grad_clip"]).item()
    if not close(manifest["grad_norm"], norm):
        failures.append(f"{label}: grad norm {manifest['grad_norm']} vs python {norm}")
    if o["grad_clip"] >= norm:
        failures.append(f"{label}: clip {o['grad_clip']} does not bind (norm {norm}); "
                        f"the case would not test clipping")
    lr = learning_rate(o, o["step"])
    if not close(o["lr"], lr):
        failures.append(f"{label}: scheduled lr {o['lr']} vs python {lr}")
    # torch.optim.AdamW decays p *= 1 - lr * wd (coupled). Independent decay is
    # p *= 1 - (lr / peak_lr) * wd, i.e. torch's rule with wd / peak_lr.
    wd = o["weight_decay"]
    if o["weight_decay_mode"] == "independent":
        wd = wd / o["peak_lr"]
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    opt.step()
    worst = 0.0
    for name, p in params.items():
        # The update itself (about lr in size), not just the weights it is added to.
        r = rel(updated[name] - before[name], p.detach() - before[name])
        worst = max(worst, r)
        if r > 10 * TOL:
            failures.append(f"{label}: AdamW update of {name} rel error {r:.2e}")
    return worst


def check_init(cfg, init, failures, label):
    n_layer = cfg["n_layer"]
    for name, t in init.items():
        if t.dim() < 2:
            expected_mean = 1.0 if name.endswith("weight") else 0.0
            if not torch.allclose(t, torch.full_like(t, expected_mean)):
                failures.append(f"{label}: {name} should start at {expected_mean}")
            continue
        if cfg["init"] == "wortsman":
            # truncated at 3 std: the sample std is 0.9866 of the nominal
            std = 0.9866 / math.sqrt(t.shape[1])
            if t.abs().max().item() > 3.0001 / math.sqrt(t.shape[1]):
                failures.append(f"{label}: {name} exceeds the truncation bound")
        elif name.endswith("c_proj.weight"):
            std = 0.02 / math.sqrt(2 * n_layer)
        else:
            std = 0.02
        got = t.std().item()
        # loose enough for the few hundred samples of the tiny model, tight enough to tell the
        # schemes apart (0.02 vs 0.01 vs 1/sqrt(16) = 0.25)
        if abs(got - std) > 0.25 * std:
            failures.append(f"{label}: {name} std {got:.4g}, expected {std:.4g}")


def main():
    tool = sys.argv[1]
    failures = []
    for qk_norm, pos, init, extra in CASES:
        label = " ".join([qk_norm, pos, init] + extra)
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([tool, d, qk_norm, pos, init] + extra, check=True)
            manifest = json.load(open(os.path.join(d, "manifest.json")))
            params = load(os.path.join(d, "params.bin"), manifest)
            grads = load(os.path.join(d, "grads.bin"), manifest)
            updated = load(os.path.join(d, "updated.bin"), manifest)
            init_weights = load(os.path.join(d, "init.bin"), manifest)
        cfg = manifest["config"]
        model = reference_model.GPT(cfg, manifest["vocab"])
        state = dict(model.named_parameters())
        if set(state) != set(params):
            failures.append(f"{label}: parameter names differ: {sorted(set(state) ^ set(params))}")
            continue
        with torch.no_grad():
            for name, p in state.items():
                p.copy_(params[name])
        batches = [(torch.tensor(b["x"]).view(3, 8), torch.tensor(b["y"]).view(3, 8))
                   for b in manifest["micro_batches"]]

        model.eval()
        with torch.no_grad():
            _, eval_loss = model(*batches[0])
        if not close(manifest["eval_loss"], eval_loss.item()):
            failures.append(f"{label}: eval loss {manifest['eval_loss']} vs {eval_loss.item()}")
        for name, value in reference_probes(model, *batches[0]).items():
            got = manifest["probes"].get(name)
            if got is None or not close(got, value):
                failures.append(f"{label}: probe {name} {got} vs python {value}")
        if set(manifest["probes"]) != set(reference_probes(model, *batches[0])):
            failures.append(f"{label}: probe names differ")

        model.train()
        torch.manual_seed(manifest["dropout_seed"])
        total = 0.0
        for x, y in batches:
            _, loss = model(x, y)
            (loss / len(batches)).backward()
            total += loss.item()
        loss = total / len(batches)
        r = abs(loss - manifest["loss"]) / abs(loss)
        worst = ("loss", r)
        if r > TOL:
            failures.append(f"{label}: loss {manifest['loss']} vs python {loss} (rel {r:.2e})")
        for name, p in state.items():
            r = rel(grads[name], p.grad)
            worst = max(worst, (name, r), key=lambda w: w[1])
            if r > TOL:
                failures.append(f"{label}: grad {name} rel error {r:.2e}")
        adamw = check_optimizer_step(label, manifest, model, params, updated, failures)
        check_init(cfg, init_weights, failures, label)
        print(f"{label:60s} loss {loss:.6f}  worst rel error {worst[1]:.2e} ({worst[0]})"
              f"  adamw {adamw:.2e}")
    if failures:
        print("\n".join(["FAILED:"] + failures))
        return 1
    print("parity OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
