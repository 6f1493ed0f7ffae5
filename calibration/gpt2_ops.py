"""Per-op GPU times of one GPT-2 layer and the LM head, written with the torch calls the
PyTorch backend's lowerings make (``distir/backend/ops_*.py``), to compare with the
simulator's per-op predictions and see which kernels a profile mis-costs.

    python -m calibration.gpt2_ops [--batch 4] [--seq 1024] [--width 2048] [--heads 16]
                                   [--vocab 50257] [--dtype float16]

Each op is timed alone (its inputs made beforehand) by ``bench.Timer``; the ``matmul``
of a permuted 4-D operand is timed as the backend runs it (``torch.matmul`` of the views,
which copies them) and also on contiguous operands, so the difference is the copy. Prints
one line per op: name, shape, microseconds. A diagnostic, not part of the calibration.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from calibration.bench import Timer

__all__ = ["layer_ops", "main"]


def layer_ops(b: int, t: int, c: int, h: int, vocab: int, dtype: Any, device: Any,
              ) -> list[tuple[str, Any]]:
    """``(name, callable)`` of the ops of one layer and the LM head, inputs prepared."""
    import torch
    import torch.nn.functional as F

    hd = c // h

    def r(*shape: int) -> Any:
        return torch.randn(*shape, device=device, dtype=dtype) * 0.02

    x, w_qkv, w_proj = r(b, t, c), r(c, 3 * c), r(c, c)
    w_fc, w_fc2, wte = r(c, 4 * c), r(4 * c, c), r(vocab, c)
    wte_pad = r(-(-vocab // 64) * 64, c)
    ln_w, ln_b, b_qkv, b_fc = r(c), r(c), r(3 * c), r(4 * c)
    qkv = torch.matmul(x, w_qkv) + b_qkv
    q, k, v = torch.split(qkv, [c, c, c], dim=2)
    qh = q.reshape(b, t, h, hd).permute(0, 2, 1, 3)
    kh = k.reshape(b, t, h, hd).permute(0, 2, 3, 1)
    vh = v.reshape(b, t, h, hd).permute(0, 2, 1, 3)
    qc, kc, vc = qh.contiguous(), kh.contiguous(), vh.contiguous()
    scores = torch.matmul(qc, kc)
    mask = torch.arange(t, device=device)[:, None] < torch.arange(t, device=device)[None, :]
    neg = torch.tensor(torch.finfo(dtype).min, device=device, dtype=dtype)
    probs = F.softmax(scores, dim=-1)
    ctx = torch.matmul(probs, vc)
    ctx_t = ctx.permute(0, 2, 1, 3)
    merged = ctx_t.reshape(b, t, c)
    fc = torch.matmul(x, w_fc) + b_fc
    scale = math.sqrt(hd)
    return [
        ("layernorm", lambda: F.layer_norm(x, (c,), ln_w, ln_b, 1e-5)),
        ("matmul c_attn", lambda: torch.matmul(x, w_qkv)),
        ("add bias qkv", lambda: qkv + b_qkv),
        ("matmul scores (views, as run)", lambda: torch.matmul(qh, kh)),
        ("matmul scores (contiguous)", lambda: torch.matmul(qc, kc)),
        ("copy q (0,2,1,3)", lambda: qh.contiguous()),
        ("copy k (0,2,3,1)", lambda: kh.contiguous()),
        ("div scale", lambda: torch.div(scores, scale)),
        ("where mask", lambda: torch.where(mask, neg, scores)),
        ("softmax", lambda: F.softmax(scores, dim=-1)),
        ("matmul ctx (views, as run)", lambda: torch.matmul(probs, vh)),
        ("matmul ctx (contiguous)", lambda: torch.matmul(probs, vc)),
        ("reshape merged heads (copy)", lambda: ctx_t.reshape(b, t, c)),
        ("matmul c_proj", lambda: torch.matmul(merged, w_proj)),
        ("add residual", lambda: x + x),
        ("matmul c_fc", lambda: torch.matmul(x, w_fc)),
        ("gelu tanh", lambda: F.gelu(fc, approximate="tanh")),
        ("matmul mlp c_proj", lambda: torch.matmul(fc, w_fc2)),
        ("matmul lm_head (wte^T view)", lambda: torch.matmul(x, wte.t())),
        ("matmul lm_head (vocab padded to 64)",
         lambda: torch.matmul(x, wte_pad.t())),
    ]


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(prog="python -m calibration.gpt2_ops", description=__doc__)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--dtype", default="float16")
    a = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    timer = Timer(device, target_s=0.02 if cuda else 0.002, trials=3)
    dtype = getattr(torch, a.dtype)
    ops = layer_ops(a.batch, a.seq, a.width, a.heads, a.vocab, dtype, device)
    print(f"# {torch.cuda.get_device_name(0) if cuda else 'cpu'}, batch {a.batch}, seq "
          f"{a.seq}, width {a.width}, heads {a.heads}, vocab {a.vocab}, {a.dtype}")
    for name, fn in ops:
        secs, _ = timer.time(fn)
        print(f"{name:40s} {secs * 1e6:10.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
