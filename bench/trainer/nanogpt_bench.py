"""Tokens/s of karpathy/nanoGPT's own model.py on trainer_bench's config, trained the way its
train.py trains: configure_optimizers (AdamW, decay on tensors of rank >= 2), forward with
targets, backward, clip_grad_norm_(1.0), optimizer step, zero_grad(set_to_none=True).
The model is imported from a nanoGPT checkout (NANOGPT_DIR or the first argument); nothing of it
is copied here. Prints one line: `nanogpt_tokens_per_second <value>` (best step of STEPS).

usage: NANOGPT_DIR=... /usr/bin/python3 nanogpt_bench.py THREADS STEPS [n_layer n_head n_embd block batch vocab]
                                          [--device cpu|cuda] [--dtype float32|bfloat16] [--compile]
--device cuda trains on the GPU as train.py does there: bf16 under torch.autocast when --dtype
bfloat16, the fused AdamW configure_optimizers picks for CUDA, and with --compile the model
wrapped in torch.compile (its compilation happens in the warm-up steps, outside the timing).
"""
import argparse
import contextlib
import io
import os
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("threads", type=int)
    ap.add_argument("steps", type=int)
    ap.add_argument("shape", type=int, nargs="*", help="n_layer n_head n_embd block batch vocab")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    if args.shape and len(args.shape) != 6:
        ap.error("the shape is six numbers: n_layer n_head n_embd block batch vocab")
    threads, steps, device, dtype = args.threads, args.steps, args.device, args.dtype
    compile_model = args.compile
    n_layer, n_head, n_embd, block, batch, vocab = args.shape or [4, 4, 256, 256, 16, 4096]
    nanogpt_dir = os.environ.get("NANOGPT_DIR", "")
    if not os.path.isfile(os.path.join(nanogpt_dir, "model.py")):
        sys.exit(f"nanogpt_bench: NANOGPT_DIR={nanogpt_dir!r} holds no model.py")
    sys.path.insert(0, nanogpt_dir)
    import model as nanogpt  # noqa: E402  (nanoGPT's model.py, from the checkout)

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = nanogpt.GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block,
                               vocab_size=vocab, dropout=0.0, bias=False)
    # model.py prints its parameter count and the slow-attention warning (no flash attention in
    # torch 1.13): keep stdout to the one result line.
    with contextlib.redirect_stdout(io.StringIO()):
        model = nanogpt.GPT(config).to(device)
        optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), device)
    model.train()
    if compile_model:
        model = torch.compile(model)
    x = torch.randint(vocab, (batch, block), device=device)
    y = torch.randint(vocab, (batch, block), device=device)
    autocast = (torch.autocast(device_type=device, dtype=torch.bfloat16) if dtype == "bfloat16"
                else contextlib.nullcontext())

    def step():
        with autocast:
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(3 if compile_model else 2):
        step()
    best = float("inf")
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    print(f"nanogpt_tokens_per_second {batch * block / best:.1f}", flush=True)


if __name__ == "__main__":
    main()
