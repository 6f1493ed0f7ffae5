"""Layout rules of recurrent, grid-sampling, folding (``Col2Im``) and batch-norm gradient
ops: the distributed program (batch split over replicas and microbatches) equals the
sequential one."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.analysis import random_inputs
from distir.transforms import dtp

F = "Float32"
PROGRAMS = {
    "lstm_batch_first": (f"""func @main(%x: Tensor[{F}, (4, 3, 2), 0],
           %w: Tensor[{F}, (1, 12, 2), 0], %r: Tensor[{F}, (1, 12, 3), 0],
           %h0: Tensor[{F}, (4, 1, 3), 0]) {{
  %y, %yh, %yc = LSTM(%x, %w, %r, _, _, %h0, hidden_size=3, layout=1)
  return %y, %yh, %yc
}}""", ["x"]),
    "lstm_after_transpose": (f"""func @main(%x: Tensor[{F}, (4, 3, 2), 0],
           %w: Tensor[{F}, (1, 12, 2), 0], %r: Tensor[{F}, (1, 12, 3), 0]) {{
  %t = Transpose(%x, perm=[1, 0, 2])
  %y, %yh = LSTM(%t, %w, %r, hidden_size=3)
  return %y, %yh
}}""", ["x"]),
    "gru_batch_first": (f"""func @main(%x: Tensor[{F}, (4, 3, 2), 0],
           %w: Tensor[{F}, (2, 9, 2), 0], %r: Tensor[{F}, (2, 9, 3), 0]) {{
  %y, %yh = GRU(%x, %w, %r, hidden_size=3, layout=1, direction="bidirectional")
  return %y, %yh
}}""", ["x"]),
    "grid_sample": (f"""func @main(%x: Tensor[{F}, (4, 2, 5, 5), 0],
           %g: Tensor[{F}, (4, 3, 3, 2), 0]) {{
  %y = GridSample(%x, %g)
  return %y
}}""", ["x", "g"]),
    "col2im": (f"""func @main(%x: Tensor[{F}, (4, 8, 9), 0]) {{
  %i = Constant(value=dense<Int64>[6, 6], device=0)
  %b = Constant(value=dense<Int64>[2, 2], device=0)
  %y = Col2Im(%x, %i, %b, strides=[2, 2])
  return %y
}}""", ["x"]),
    "batch_norm_grad": (f"""func @main(%x: Tensor[{F}, (4, 3, 2, 2), 0],
           %s: Tensor[{F}, (3,), 0], %dy: Tensor[{F}, (4, 3, 2, 2), 0]) {{
  %dx, %ds, %db = BatchNormGrad(%x, %s, %dy)
  return %dx, %ds, %db
}}""", ["x", "dy"]),
}


@pytest.mark.parametrize(("dp", "k"), [(2, 1), (1, 2), (2, 2)])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_batch_split(name: str, dp: int, k: int) -> None:
    text, batch = PROGRAMS[name]
    fn = distir.parse(text).entry
    ins = random_inputs(fn, seed=5)
    want = distir.execute(fn, ins)
    sc = dtp(fn, dp=dp, microbatches=k, self_contained=True, batch_inputs=batch)
    got = distir.execute(sc, ins, check_types=False)
    if name == "batch_norm_grad":  # each shard's statistics, as the forward under D
        shards = [distir.execute(fn, [ins[0][2 * i:2 * i + 2], ins[1],
                                      ins[2][2 * i:2 * i + 2]], check_types=False)
                  for i in range(2)]
        want = [np.concatenate([s[0] for s in shards]), shards[0][1] + shards[1][1],
                shards[0][2] + shards[1][2]]
        if dp * k != 2:
            return
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
