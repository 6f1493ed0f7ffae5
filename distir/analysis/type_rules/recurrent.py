"""Type rules of ONNX ``LSTM`` and ``GRU`` (opset 14, the version in force at 21).

Shapes, with ``D`` directions (2 for ``bidirectional``), ``H = hidden_size``, ``G`` gates
(4 for LSTM, 3 for GRU), ``layout=0`` (``layout=1`` swaps the sequence and batch axes of X,
Y, initial_h/c, Y_h and Y_c): X is ``(T, N, I)``, W ``(D, G*H, I)``, R ``(D, G*H, H)``, B
``(D, 2*G*H)``, initial_h/c ``(D, N, H)``, LSTM's P ``(D, 3H)``; results Y ``(T, D, N, H)``,
Y_h (and LSTM's Y_c) ``(D, N, H)``.

DistIR runs the cells of the ONNX default: sigmoid gates and tanh elsewhere, no clip, no
coupled input/forget gate, every sequence the full length (``onnx.reference`` ignores the
attributes and ``sequence_lens`` that would say otherwise, so a model that sets them is
refused here rather than computed wrongly). GRU's ``linear_before_reset`` is honoured.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distir.analysis.rules import TYPE_RULES
from distir.analysis.type_rules._util import fail, int_tensor, same_dtype, tensor
from distir.analysis.values import Concrete
from distir.ir.types import TensorType

_DEFAULT_ACTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh")}
_GATES = {"LSTM": 4, "GRU": 3}


def _check_default_cell(op_type: str, attrs: dict[str, Any], n_dir: int) -> None:
    acts = attrs.get("activations")
    default = _DEFAULT_ACTS[op_type]
    if acts is not None and tuple(acts) != default * n_dir:
        raise fail(f"activations {list(acts)} are not supported: DistIR runs the default "
                   f"{', '.join(default)} cell")
    if attrs.get("clip") is not None:
        raise fail("clip is not supported: DistIR runs the unclipped cell")
    if attrs.get("input_forget", 0):
        raise fail("input_forget=1 is not supported: DistIR runs separate input and forget "
                   "gates")


@TYPE_RULES.register("LSTM", "GRU")
def recurrent(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    direction = attrs.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise fail(f"direction must be forward, reverse or bidirectional, got {direction!r}")
    d = 2 if direction == "bidirectional" else 1
    _check_default_cell(op_type, attrs, d)
    g = _GATES[op_type]
    layout = attrs.get("layout", 0)
    x, r = tensor(args[0], "X"), tensor(args[2], "R")
    if x.rank != 3:
        raise fail(f"X must be 3-D ({'(N, T, I)' if layout else '(T, N, I)'}), got {x.shape}")
    t_len, batch = (x.shape[1], x.shape[0]) if layout else x.shape[:2]
    h = r.shape[-1] if r.rank == 3 else -1
    hs = attrs.get("hidden_size")
    if hs is not None and hs != h:
        raise fail(f"hidden_size={hs} differs from R {r.shape}")
    want = {"W": (d, g * h, x.shape[2]), "R": (d, g * h, h), "B": (d, 2 * g * h),
            "P": (d, 3 * h),
            "initial_h": (batch, d, h) if layout else (d, batch, h)}
    want["initial_c"] = want["initial_h"]
    names: tuple[str, ...] = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c",
                              "P") if op_type == "LSTM" else ("X", "W", "R", "B",
                                                               "sequence_lens", "initial_h")
    ts = [x]
    for i, name in enumerate(names[1:], start=1):
        if i >= len(args) or args[i] is None:
            continue
        if name == "sequence_lens":
            _check_full_lengths(args[i], t_len, batch)
            continue
        t = tensor(args[i], name)
        if t.shape != want[name]:
            raise fail(f"{name} must have shape {want[name]} (direction={direction}, hidden "
                       f"size {h}, X {x.shape}), got {t.shape}")
        ts.append(t)
    dt = same_dtype(ts, op_type)
    y = (batch, t_len, d, h) if layout else (t_len, d, batch, h)
    state = want["initial_h"]
    outs = (TensorType(dt, y, x.device), TensorType(dt, state, x.device),
            TensorType(dt, state, x.device))
    if n_out > (3 if op_type == "LSTM" else 2):
        raise fail(f"has at most {3 if op_type == 'LSTM' else 2} results, {n_out} named")
    return outs[:n_out]


def _check_full_lengths(a: Any, t_len: int, batch: int) -> None:
    """``sequence_lens`` is accepted when it is known and every length is the full one."""
    t = int_tensor(a, "sequence_lens")
    if t.shape != (batch,):
        raise fail(f"sequence_lens must have shape {(batch,)}, got {t.shape}")
    if not isinstance(a, Concrete) or not bool(np.all(np.asarray(a.value) == t_len)):
        raise fail(f"sequence_lens must be known and all {t_len} (the full length): DistIR "
                   "runs every sequence to the end; omit sequence_lens")
