"""Activation checkpointing by layer: which forward ops ``training_step(checkpoint=
"layers")`` recomputes in the backward pass.

The layers are the D/T/P transforms' (``Structure``: found from op kinds, shapes and
dataflow, never names). Each layer's per-batch forward ops form one group, recomputed by
``differentiate`` from the layer's input right before the layer's backward; so between
the forward and the backward pass only each layer's input (the residual stream, for
GPT-2), the weights and the batch-independent values stay live, instead of every
activation. The ops before the first layer and after the last (embeddings, final norm,
head, loss) are kept as they are.
"""

from __future__ import annotations

from distir.errors import TransformError
from distir.ir.core import Function, Op
from distir.transforms.plan import analyze
from distir.transforms.structure import MB

__all__ = ["layer_groups"]


def layer_groups(fn: Function) -> list[list[Op]]:
    """The per-batch forward ops of each repeated layer of ``fn`` (call-free), in program
    order; an error when ``fn`` has fewer than two layers."""
    if any(op.callee is not None for op in fn.ops):
        raise TransformError("checkpoint: inline the calls first")
    try:
        an = analyze(fn)
    except TransformError as e:
        raise TransformError(f"checkpoint=\"layers\" cannot find the layers of @{fn.name}: "
                             f"{e.message}") from None
    st = an.structure
    if st.num_layers < 2:
        raise TransformError(f"checkpoint=\"layers\" found no repeated layers in @{fn.name} "
                             "(a layer is a run of ops with a matrix product that repeats); "
                             "use checkpoint=\"none\"")
    groups: list[list[Op]] = [[] for _ in range(st.num_layers)]
    ops = an.prog.ops
    for i, a in st.anchor.items():
        if st.kind.get(i) == MB and i not in st.backward and 1 <= a <= st.num_layers:
            groups[a - 1].append(ops[i])
    order = {op: i for i, op in enumerate(ops)}
    return [sorted(g, key=order.__getitem__) for g in groups if g]
