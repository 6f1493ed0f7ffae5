"""Lowerings of ONNX ``LSTM`` and ``GRU`` (opset 14 semantics, the default cells: sigmoid
gates and tanh elsewhere; LSTM's peepholes when ``P`` is given, GRU's
``linear_before_reset``; the type rule refuses the other cells).

Per direction the input projection of every step is one product, then each step one
recurrent product and the gate arithmetic; a reverse direction walks the steps backwards
and writes each output at its own step. Gates are ONNX's order: LSTM input, output,
forget, cell; GRU update (z), reset (r), hidden (h).
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


@LOWERINGS.register("GRU")
def _gru(s: Static) -> Kernel:
    layout = int(s.attrs.get("layout", 0))
    direction = s.attrs.get("direction", "forward")
    dirs = [False, True] if direction == "bidirectional" else [direction == "reverse"]
    h = s.inp(2).shape[-1]
    n_out = len(s.out_types)
    lbr = bool(s.attrs.get("linear_before_reset", 0))

    def k(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: Any = None, _lens: Any = None,
          h0: Any = None) -> tuple:
        if layout:
            x = x.transpose(0, 1)
            h0 = None if h0 is None else h0.transpose(0, 1)
        t_len, batch = x.shape[0], x.shape[1]
        ys, hs = [], []
        for j, backward in enumerate(dirs):
            proj = torch.matmul(x, w[j].t())  # (T, N, 3H): z, r, h
            rb: Any = None
            if b is not None:  # the recurrent bias of z and r joins the input side's
                wb, rb = b[j, :3 * h], b[j, 3 * h:]
                proj = proj + torch.cat([wb[:2 * h] + rb[:2 * h], wb[2 * h:]])
                rb = rb[2 * h:]
            rzr, rh = r[j, :2 * h].t(), r[j, 2 * h:].t()
            ht = x.new_zeros((batch, h)) if h0 is None else h0[j]
            out: list[Any] = [None] * t_len
            for t in (range(t_len - 1, -1, -1) if backward else range(t_len)):
                pz, pr, ph = proj[t].split(h, dim=-1)
                rz, rr = (ht @ rzr).split(h, dim=-1)
                z, reset = torch.sigmoid(pz + rz), torch.sigmoid(pr + rr)
                if lbr:
                    rec = ht @ rh if rb is None else ht @ rh + rb
                    cand = torch.tanh(ph + reset * rec)
                else:
                    rec = (reset * ht) @ rh
                    cand = torch.tanh(ph + (rec if rb is None else rec + rb))
                ht = (1 - z) * cand + z * ht
                out[t] = ht
            ys.append(torch.stack(out))
            hs.append(ht)
        y, yh = torch.stack(ys, dim=1), torch.stack(hs)
        if layout:
            y, yh = y.permute(2, 0, 1, 3), yh.transpose(0, 1)
        return (y, yh)[:n_out]

    return k
