"""Tokens/s of the PyTorch reference model (tests/train/reference_model.py) on the benchmark
config, trained the way nanoGPT's train.py does (AdamW with decay groups, clip_grad_norm_).
Prints one line: `python_tokens_per_second <value>`.

usage: /usr/bin/python3 python_reference_bench.py THREADS STEPS [n_layer n_head n_embd block batch vocab]
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "train"))
import reference_model  # noqa: E402


def main():
    threads, steps = int(sys.argv[1]), int(sys.argv[2])
    n_layer, n_head, n_embd, block, batch, vocab = (int(a) for a in (sys.argv[3:9] or
                                                                     [4, 4, 256, 256, 16, 4096]))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block, bias=False,
               tie_embeddings=True, qk_norm="none", pos="learned", attn_softcap=0.0,
               z_loss=0.0, qk_norm_eps=1e-6, norm_eps=1e-5, dropout=0.0)
    model = reference_model.GPT(cfg, vocab)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95))
    x = torch.randint(vocab, (batch, block))
    y = torch.randint(vocab, (batch, block))

    def step():
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    best = float("inf")
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    print(f"python_tokens_per_second {batch * block / best:.1f}")


if __name__ == "__main__":
    main()
