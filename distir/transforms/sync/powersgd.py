"""PowerSGD (Vogels, Karimireddy and Jaggi, 2019) of rank ``r`` with error feedback, as
``synchronize`` emits it for one gradient (``{"sync": "powersgd", "rank": r}``).

Each replica ``j`` views its gradient as an ``a x b`` matrix ``G_j`` (axis 0 by the rest)
and holds two state tensors, new parameters of the program: ``Q_j`` (``b x r``, equal on
every replica: the previous step's all-reduced ``Q``, a warm start) and its error ``E_j``
(``a x b``, zeros at first). One step:

1. ``M_j = G_j + E_j``; ``P_j = M_j Q_j``; ``P = sum_j P_j`` (an all-reduce of ``a x r``);
2. ``P^`` = the columns of ``P`` orthonormalised (classical Gram-Schmidt applied twice, on
   every replica: per column ``k``, ``c -= B (B^T c)`` twice with ``B`` the ``k``
   orthonormal columns before, then ``c / sqrt(c^T c)``; once is not enough in float32);
3. ``Q'_j = M_j^T P^``; ``Q' = sum_j Q'_j`` (an all-reduce of ``b x r``);
4. the summed gradient the optimizer reads is ``P^ Q'^T`` (``a x b``, reshaped back), the
   new error ``E'_j = M_j - P^ Q'^T / D`` (``D`` replicas), the new ``Q_j = Q'``.

So the errors of the replicas add up to what the sum lost (``sum_j E'_j = sum_j M_j - P^
Q'^T``), and with ``r = min(a, b)`` (and a generic ``Q``) ``P^ Q'^T`` is the exact sum.
The two all-reduces carry ``(a + b) r`` elements instead of ``a b``; the matrix products,
the Gram-Schmidt ops (``O(r)`` small kernels per column) and the error update are ordinary
ops, so the simulator charges their compute. The program gains, per compressed gradient,
the parameters ``Q_j`` then ``E_j`` of every replica (in replica order) and returns ``Q'_j``
then ``E'_j`` after its own results: a training loop feeds them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from distir.ir.core import Value
from distir.ir.types import DenseAttr

if TYPE_CHECKING:
    from distir.transforms.sync.plan import Gradient, VarSync
    from distir.transforms.sync.rewrite import Rewrite

__all__ = ["emit_powersgd", "state_names"]


def state_names(gr: Gradient) -> tuple[list[str], list[str]]:
    """The names of ``Q_j`` and ``E_j`` for every replica of ``gr``: the weight's name with
    its replica suffix ``_dp{d}`` replaced, whatever follows it (a tensor-parallel rank's
    ``_tp{t}``) kept, so that every state tensor has a name of its own."""
    head, sep, tail = gr.weight.rpartition("_dp")
    base, rest = (head, tail.lstrip("0123456789")) if sep and tail[:1].isdigit() else \
        (gr.weight, "")
    d = len(gr.devices)
    return ([f"{base}_psgd_q_dp{j}{rest}" for j in range(d)],
            [f"{base}_psgd_e_dp{j}{rest}" for j in range(d)])


def emit_powersgd(rw: Rewrite, gr: Gradient, p: VarSync) -> None:
    """The ops of one PowerSGD step for ``gr`` (module docstring), its results written to
    the values the optimizers read; the state parameters and results appended to ``rw``."""
    from distir.transforms.sync.rewrite import name, state_param

    t = gr.type
    a = t.shape[0]
    b = t.numel // a
    r = p.rank
    n = len(gr.devices)
    xs = rw.sent[gr.index]
    qn, en = state_names(gr)
    qs = [state_param(qn[j], t.dtype, (b, r), d) for j, d in enumerate(gr.devices)]
    es = [state_param(en[j], t.dtype, (a, b), d) for j, d in enumerate(gr.devices)]
    rw.params.extend(qs + es)

    def const(arr: np.ndarray, d: int, nm: str) -> Value:
        return rw.op("Constant", [], {"value": DenseAttr.from_array(arr), "device": d},
                     [nm])[0]

    def tr(x: Value) -> Value:
        return _t(rw, x)

    ms: list[Value] = []
    ps: list[Value] = []
    for j, (x, d) in enumerate(zip(xs, gr.devices)):
        if t.rank != 2:
            shp = const(np.array([a, b], np.int64), d, name(x, "mshape"))
            x = rw.op("Reshape", [x, shp], None, [name(x, "mat")])[0]
        m = rw.op("Add", [x, es[j]], None, [name(x, "ef")])[0]
        ms.append(m)
        ps.append(rw.op("MatMul", [m, qs[j]], None, [name(m, "p")])[0])
    psum = rw.op("MPIAllreduce", ps, None, [name(v, "sum") for v in ps])
    phat = [_orthonormal(rw, v, r) for v in psum]
    qloc = [rw.op("MatMul", [tr(m), ph], None, [name(m, "q")])[0] for m, ph in zip(ms, phat)]
    qnew = rw.op("MPIAllreduce", qloc, None, [f"{nm}_next" for nm in qn])
    inv = np.array(1.0 / n, dtype=t.dtype.np)
    for j, d in enumerate(gr.devices):
        target = gr.targets[j]
        g = target if t.rank == 2 else Value(name(target, "lowrank"))
        rw.op("MatMul", [phat[j], tr(qnew[j])], None, outs=[g])
        share = rw.op("Mul", [g, const(inv, d, name(g, "inv_d"))], None,
                      [name(g, "share")])[0]
        rw.returns.append(qnew[j])
        e_next = rw.op("Sub", [ms[j], share], None, [f"{en[j]}_next"])[0]
        es[j] = e_next
        if t.rank != 2:
            shp = const(np.array(t.shape, np.int64), d, name(target, "shape"))
            rw.op("Reshape", [g, shp], None, outs=[target])
    rw.returns.extend(es)


def _t(rw: Rewrite, x: Value) -> Value:
    from distir.transforms.sync.rewrite import name

    return rw.op("Transpose", [x], {"perm": (1, 0)}, [name(x, "T")])[0]


def _orthonormal(rw: Rewrite, pm: Value, r: int) -> Value:
    """The columns of ``pm`` (``a x r``) orthonormalised by classical Gram-Schmidt with
    one re-orthogonalisation."""
    from distir.transforms.sync.rewrite import name

    cols = [pm] if r == 1 else list(rw.op("Split", [pm], {"axis": 1, "num_outputs": r},
                                          [name(pm, f"c{k}") for k in range(r)]))
    basis: list[Value] = []
    for k, c in enumerate(cols):
        if basis:
            bm = basis[0] if k == 1 else rw.op("Concat", basis, {"axis": 1},
                                               [name(c, "basis")])[0]
            bt = _t(rw, bm)
            for _ in range(2):  # twice: float32 keeps the columns orthogonal
                coef = rw.op("MatMul", [bt, c], None, [name(c, "coef")])[0]
                proj = rw.op("MatMul", [bm, coef], None, [name(c, "proj")])[0]
                c = rw.op("Sub", [c, proj], None, [name(c, "perp")])[0]
        n2 = rw.op("MatMul", [_t(rw, c), c], None, [name(c, "n2")])[0]
        nrm = rw.op("Sqrt", [n2], None, [name(c, "norm")])[0]
        basis.append(rw.op("Div", [c, nrm], None, [name(c, "unit")])[0])
    if r == 1:
        return basis[0]
    return rw.op("Concat", basis, {"axis": 1}, [name(pm, "orth")])[0]
