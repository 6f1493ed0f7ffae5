"""Lowering of ONNX ``LSTM`` (opset 14 semantics, the default cell: sigmoid gates, tanh cell
and hidden activations, peepholes when ``P`` is given; the type rule refuses the others).

Per direction the input projection of every step is one product, then each step one
recurrent product and the gate arithmetic; a reverse direction walks the steps backwards
and writes each output at its own step. Gates are ONNX's order: input, output, forget,
cell.
"""

from __future__ import annotations

from typing import Any

import torch

from distir.backend.lowering import LOWERINGS, Kernel, Static


@LOWERINGS.register("LSTM")
def _lstm(s: Static) -> Kernel:
    layout = int(s.attrs.get("layout", 0))
    direction = s.attrs.get("direction", "forward")
    dirs = [False, True] if direction == "bidirectional" else [direction == "reverse"]
    h = s.inp(2).shape[-1]
    n_out = len(s.out_types)

    def k(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: Any = None, _lens: Any = None,
          h0: Any = None, c0: Any = None, p: Any = None) -> tuple:
        if layout:
            x = x.transpose(0, 1)
            h0 = None if h0 is None else h0.transpose(0, 1)
            c0 = None if c0 is None else c0.transpose(0, 1)
        t_len, batch = x.shape[0], x.shape[1]
        ys, hs, cs = [], [], []
        for j, backward in enumerate(dirs):
            proj = torch.matmul(x, w[j].t())
            if b is not None:
                proj = proj + b[j, :4 * h] + b[j, 4 * h:]
            ht = x.new_zeros((batch, h)) if h0 is None else h0[j]
            ct = x.new_zeros((batch, h)) if c0 is None else c0[j]
            peep: Any = None if p is None else p[j].split(h)
            rt = r[j].t()
            out: list[Any] = [None] * t_len
            for t in (range(t_len - 1, -1, -1) if backward else range(t_len)):
                gi, go, gf, gc = (proj[t] + ht @ rt).split(h, dim=-1)
                if peep is not None:  # input, output, forget peepholes
                    gi, gf = gi + peep[0] * ct, gf + peep[2] * ct
                ct = torch.sigmoid(gf) * ct + torch.sigmoid(gi) * torch.tanh(gc)
                if peep is not None:
                    go = go + peep[1] * ct
                ht = torch.sigmoid(go) * torch.tanh(ct)
                out[t] = ht
            ys.append(torch.stack(out))
            hs.append(ht)
            cs.append(ct)
        y, yh, yc = torch.stack(ys, dim=1), torch.stack(hs), torch.stack(cs)
        if layout:
            y, yh, yc = y.permute(2, 0, 1, 3), yh.transpose(0, 1), yc.transpose(0, 1)
        return (y, yh, yc)[:n_out]

    return k
