"""PyTorch reference of worker/train/model.cc, written independently in nanoGPT's style.

Used by parity.py (same weights and batch -> same loss and gradients) and by the trainer
benchmark (tokens/s of Python on the same config). Parameter names match the C++ model's
NamedTensors(). Runs under Debian's /usr/bin/python3 with python3-torch (1.13: no SDPA, so
attention is matmul + masked softmax, as in nanoGPT's fallback path).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Norm(nn.Module):
    def __init__(self, dim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x, eps):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, eps)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, self.h = cfg["n_embd"], cfg["n_head"]
        self.cfg = cfg
        self.c_attn = nn.Linear(c, 3 * c, bias=cfg["bias"])
        self.c_proj = nn.Linear(c, c, bias=cfg["bias"])
        hd = c // self.h
        if cfg["qk_norm"] != "none":
            shift = cfg["bias"] and cfg["qk_norm"] == "layernorm"
            self.q_norm = Norm(hd, shift)
            self.k_norm = Norm(hd, shift)
        t = cfg["block_size"]
        self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).triu(1), persistent=False)
        if cfg["pos"] == "rope":
            inv = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
            ang = torch.outer(torch.arange(t, dtype=torch.float64), inv)
            self.register_buffer("cos", ang.cos().float(), persistent=False)
            self.register_buffer("sin", ang.sin().float(), persistent=False)

    def norm(self, mod, x):
        eps = self.cfg["qk_norm_eps"]
        if self.cfg["qk_norm"] == "layernorm":
            return mod(x, eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * mod.weight

    def rope(self, x):
        t, half = x.size(-2), x.size(-1) // 2
        cos, sin = self.cos[:t], self.sin[:t]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, x, record=None):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        if record is not None:
            record.update(q_pre=q, k_pre=k)
        if self.cfg["qk_norm"] != "none":
            q, k = self.norm(self.q_norm, q), self.norm(self.k_norm, k)
        if self.cfg["pos"] == "rope":
            q, k = self.rope(q), self.rope(k)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if record is not None:
            record.update(q=q, k=k, logits=att, mask=self.mask[:t, :t])
        cap = self.cfg["attn_softcap"]
        if cap > 0:
            att = torch.tanh(att / cap) * cap
        att = F.softmax(att.masked_fill(self.mask[:t, :t], float("-inf")), dim=-1)
        if record is not None:
            record["probs"] = att
        att = F.dropout(att, self.cfg["dropout"], self.training)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return F.dropout(self.c_proj(y), self.cfg["dropout"], self.training)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.c_fc = nn.Linear(c, 4 * c, bias=cfg["bias"])
        self.c_proj = nn.Linear(4 * c, c, bias=cfg["bias"])

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = Norm(cfg["n_embd"], cfg["bias"])
        self.attn = Attention(cfg)
        self.ln_2 = Norm(cfg["n_embd"], cfg["bias"])
        self.mlp = MLP(cfg)
        self.cfg = cfg

    def forward(self, x, record=None):
        eps = self.cfg["norm_eps"]
        x = x + self.attn(self.ln_1(x, eps), record)
        x = x + F.dropout(self.mlp(self.ln_2(x, eps)), self.cfg["dropout"], self.training)
        if record is not None:
            record["residual"] = x
        return x


class GPT(nn.Module):
    def __init__(self, cfg, vocab):
        super().__init__()
        self.cfg = cfg
        c = cfg["n_embd"]
        self.wte = nn.Embedding(vocab, c)
        if cfg["pos"] == "learned":
            self.wpe = nn.Embedding(cfg["block_size"], c)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = Norm(c, cfg["bias"])
        if not cfg["tie_embeddings"]:
            self.lm_head = nn.Linear(c, vocab, bias=False)

    def forward(self, idx, targets, records=None):
        """records: a list that receives, per layer, a dict of the tensors the probes read (q, k
        as projected, before qk_norm and rope; q, k as they enter the dot product, pre-softcap logits, causal mask, attention probabilities,
        the residual stream after the block)."""
        t = idx.size(1)
        x = self.wte(idx)
        if self.cfg["pos"] == "learned":
            x = x + self.wpe.weight[:t]
        x = F.dropout(x, self.cfg["dropout"], self.training)
        for block in self.h:
            record = None
            if records is not None:
                record = {}
                records.append(record)
            x = block(x, record)
        x = self.ln_f(x, self.cfg["norm_eps"])
        w = self.wte.weight if self.cfg["tie_embeddings"] else self.lm_head.weight
        logits = F.linear(x, w)
        flat = logits.view(-1, logits.size(-1))
        loss = F.cross_entropy(flat, targets.reshape(-1))
        if self.cfg["z_loss"] > 0:
            loss = loss + self.cfg["z_loss"] * flat.logsumexp(-1).pow(2).mean()
        return logits, loss
