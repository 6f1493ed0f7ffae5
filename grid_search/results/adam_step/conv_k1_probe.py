"""SqueezeBERT's 1-D convolutions of kernel 1 as cuDNN runs them and as grouped matrix
products (see README.md): for x of [16, C, 512] (contiguous, and the transposed view of a
[16, 512, C] token tensor, as SqueezeBERT hands it), the forward and both gradients, each
timed as a replayed CUDA graph of 10 calls (us per call, median of 5 replays), float32 with
PyTorch's defaults (cuDNN may use TF32, cuBLAS not).

    python conv_k1_probe.py
"""

from __future__ import annotations

import torch
from tile_probe import timed  # (this folder: the same replayed timing)


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(" cin  cout g  input       conv  conv_dx  conv_dw     mm    mm_dx    mm_dw")
    n, length = 16, 512
    cb = torch.ops.aten.convolution_backward
    for cin, cout, g in ((768, 768, 4), (768, 768, 1), (768, 3072, 4), (3072, 768, 4)):
        w = torch.randn(cout, cin // g, 1, device="cuda")
        for kind in ("contiguous", "transposed"):
            if kind == "contiguous":
                x = torch.randn(n, cin, length, device="cuda")
            else:
                x = torch.randn(n, length, cin, device="cuda").transpose(1, 2)
            dy = torch.randn(n, cout, length, device="cuda")
            wg = w.reshape(g, cout // g, cin // g)

            def conv(x=x, w=w, g=g):  # noqa: ANN001, ANN202
                return torch.nn.functional.conv1d(x, w, groups=g)

            def dgrad(x=x, w=w, dy=dy, g=g):  # noqa: ANN001, ANN202
                return cb(dy, x, w, None, [1], [0], [1], False, [0], g, [True, False, False])

            def wgrad(x=x, w=w, dy=dy, g=g):  # noqa: ANN001, ANN202
                return cb(dy, x, w, None, [1], [0], [1], False, [0], g, [False, True, False])

            xg = x.reshape(n, g, cin // g, length)  # (views, the transposed one too)
            dyg = dy.reshape(n, g, cout // g, length)

            def mm(xg=xg, wg=wg, shape=(n, cout, length)):  # noqa: ANN001, ANN202
                return torch.matmul(wg, xg).reshape(shape)

            def mm_dx(dyg=dyg, wg=wg):  # noqa: ANN001, ANN202
                return torch.matmul(wg.transpose(1, 2), dyg)

            def mm_dw(xg=xg, dyg=dyg):  # noqa: ANN001, ANN202
                return torch.matmul(dyg, xg.transpose(2, 3)).sum(0)

            ts = [timed(f, 10) for f in (conv, dgrad, wgrad, mm, mm_dx, mm_dw)]
            print(f"{cin:4d} {cout:5d} {g:1d}  {kind:10s} " + " ".join(f"{t:8.1f}" for t in ts),
                  flush=True)


if __name__ == "__main__":
    main()
