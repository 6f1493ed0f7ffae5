"""Substitutions on views and element-wise ops: pushing an element-wise op through a
concatenation (the middle step of Megatron's pair), cancelling a Split of a Concat (and the
reverse), composing two Transposes, and writing a Gemm as a product and a bias Add so that
the product rules apply to Gemm models."""

from __future__ import annotations

from distir.ir.builder import FunctionBuilder
from distir.ir.core import Function, Value
from distir.transforms.spmd.subst_core import Emitter, Graph, Site, Substitution
from distir.transforms.spmd.subst_rules import example_fn

__all__ = ["VIEW_RULES", "ELEMENTWISE"]

ELEMENTWISE = frozenset({"Relu", "Gelu", "Tanh", "Sigmoid", "Neg", "Abs", "Exp", "Erf",
                         "LeakyRelu", "Elu", "Softplus", "HardSigmoid", "HardSwish", "Sqrt",
                         "Identity", "Reciprocal", "Softsign", "Selu", "Celu", "Mish", "Sin",
                         "Cos", "Floor", "Ceil", "Sign", "Round", "Log"})
"""Unary ops applied to every element on its own (their attributes are scalars)."""


def _axis(a: object, rank: int) -> int:
    return int(a) % rank if rank else 0  # type: ignore[call-overload]


# -- an element-wise op through a concatenation -----------------------------------------------

def _find_unary(g: Graph) -> list[Site]:
    return [Site((i,)) for i, op in enumerate(g.ops)
            if op.op_type in ELEMENTWISE and len(op.inputs) == 1
            and (c := g.made_by(op.inputs[0], "Concat")) is not None and len(c.inputs) >= 2]


def _build_unary(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    op = g.ops[site.ops[0]]
    cat = g.made_by(op.inputs[0], "Concat")
    assert cat is not None
    parts = [em.like(op, (v,), "part") for v in cat.inputs]
    return {op.outputs[0]: em.like(cat, parts, "y")}


def _ex_unary(d: tuple[int, ...]) -> Function:
    b_, n1, n2 = d
    return example_fn({"a": (b_, n1), "c": (b_, n2)},
                      lambda b, p: [b.op("Relu", b.op("Concat", p["a"], p["c"], axis=1)),
                                    b.op("Tanh", b.op("Concat", p["c"], p["a"], axis=-1))])


# -- Split of a Concat, Concat of a Split -----------------------------------------------------

def _find_split_concat(g: Graph) -> list[Site]:
    sites = []
    for i, op in enumerate(g.ops):
        if op.op_type != "Split":
            continue
        cat = g.made_by(op.inputs[0], "Concat")
        sh = g.shape(op.inputs[0])
        if cat is None or sh is None or len(cat.inputs) != len(op.outputs):
            continue
        ax = _axis(op.attr("axis", 0), len(sh))
        if _axis(cat.attr("axis"), len(sh)) != ax:
            continue
        if all(g.shape(a) == g.shape(o) for a, o in zip(cat.inputs, op.outputs, strict=True)):
            sites.append(Site((i,)))
    return sites


def _build_split_concat(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    op = g.ops[site.ops[0]]
    cat = g.made_by(op.inputs[0], "Concat")
    assert cat is not None
    return {o: a for o, a in zip(op.outputs, cat.inputs, strict=True)  # type: ignore[misc]
            if a is not None}


def _ex_split_concat(d: tuple[int, ...]) -> Function:
    b_, n1, n2 = d

    def body(b: FunctionBuilder, p: dict[str, Value]) -> list[Value]:
        c = b.op("Concat", p["a"], p["c"], axis=1)
        em = Emitter(0)
        outs = em.split(c, [n1, n2], -1, "part")
        b.ops.extend(em.ops)
        return [b.op("Relu", outs[0]), outs[1]]
    return example_fn({"a": (b_, n1), "c": (b_, n2)}, body)


def _find_concat_split(g: Graph) -> list[Site]:
    sites = []
    for i, op in enumerate(g.ops):
        if op.op_type != "Concat" or not op.inputs or op.inputs[0] is None:
            continue
        sp = g.made_by(op.inputs[0], "Split")
        sh = g.shape(op.outputs[0])
        if sp is None or sh is None or tuple(op.inputs) != tuple(sp.outputs):
            continue
        if _axis(sp.attr("axis", 0), len(sh)) == _axis(op.attr("axis"), len(sh)):
            sites.append(Site((i,)))
    return sites


def _build_concat_split(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    op = g.ops[site.ops[0]]
    sp = g.made_by(op.inputs[0], "Split")
    assert sp is not None and sp.inputs[0] is not None
    return {op.outputs[0]: sp.inputs[0]}


def _ex_concat_split(d: tuple[int, ...]) -> Function:
    b_, n = d

    def body(b: FunctionBuilder, p: dict[str, Value]) -> list[Value]:
        q, r = b.op("Split", p["x"], axis=1, num_outputs=2)
        return [b.op("Relu", b.op("Concat", q, r, axis=-1)), b.op("Neg", q)]
    return example_fn({"x": (b_, 2 * n)}, body)


# -- a Split through an element-wise binary op --------------------------------------------------

BINARY = frozenset({"Add", "Sub", "Mul", "Div"})


def _find_split_binary(g: Graph) -> list[Site]:
    """``Split(y ∘ c)`` along the last axis, ``c`` of ``y``'s shape or a vector of its last
    dimension (a bias), ``y ∘ c`` read only by the Split."""
    sites = []
    for i, op in enumerate(g.ops):
        if op.op_type != "Split" or len(op.outputs) < 2:
            continue
        b = g.made_by(op.inputs[0], *BINARY)
        sh = g.shape(op.inputs[0])
        if b is None or sh is None or not sh or not g.sole_reader(op.inputs[0], i):  # type: ignore[arg-type]
            continue
        if _axis(op.attr("axis", 0), len(sh)) != len(sh) - 1:
            continue
        shapes = [g.shape(v) for v in b.inputs]
        if shapes[0] == sh and shapes[1] in (sh, (sh[-1],)):
            sites.append(Site((g.index(b), i)))
    return sites


def _build_split_binary(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    b, sp = (g.ops[i] for i in site.ops)
    y, c = b.inputs
    assert y is not None and c is not None
    sizes = [(g.shape(o) or (0,))[-1] for o in sp.outputs]
    ys = em.split(y, sizes, len(g.shape(y) or ()) - 1, "y_part")
    cs = em.split(c, sizes, len(g.shape(c) or ()) - 1, "c_part")
    return {o: em.op(b.op_type, yi, ci, hint="part")
            for o, yi, ci in zip(sp.outputs, ys, cs, strict=True)}


def _ex_split_binary(d: tuple[int, ...]) -> Function:
    b_, s_, n = d

    def body(b: FunctionBuilder, p: dict[str, Value]) -> list[Value]:
        q, k, v = b.op("Split", b.op("Add", p["y"], p["c"]), axis=-1, num_outputs=3)
        u, w = b.op("Split", b.op("Mul", p["y"], p["z"]), axis=2, num_outputs=2) \
            if (3 * n) % 2 == 0 else (q, k)
        return [q, k, b.op("Relu", v), u, w]
    return example_fn({"y": (b_, s_, 3 * n), "c": (3 * n,), "z": (b_, s_, 3 * n)}, body)


# -- Transpose of a Transpose -----------------------------------------------------------------

def _perm(g: Graph, op: object) -> tuple[int, ...] | None:
    sh = g.shape(op.inputs[0])  # type: ignore[attr-defined]
    if sh is None:
        return None
    p = op.attr("perm")  # type: ignore[attr-defined]
    return tuple(range(len(sh)))[::-1] if p is None else tuple(int(x) for x in p)


def _find_transposes(g: Graph) -> list[Site]:
    return [Site((i,)) for i, op in enumerate(g.ops)
            if op.op_type == "Transpose" and (t := g.made_by(op.inputs[0], "Transpose"))
            is not None and _perm(g, t) is not None and _perm(g, op) is not None]


def _build_transposes(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    outer = g.ops[site.ops[0]]
    inner = g.made_by(outer.inputs[0], "Transpose")
    assert inner is not None and inner.inputs[0] is not None
    p1, p2 = _perm(g, inner), _perm(g, outer)
    assert p1 is not None and p2 is not None
    q = tuple(p1[k] for k in p2)
    if q == tuple(range(len(q))):
        return {outer.outputs[0]: inner.inputs[0]}
    return {outer.outputs[0]: em.op("Transpose", inner.inputs[0], hint="t", perm=list(q))}


def _ex_transposes(d: tuple[int, ...]) -> Function:
    def body(b: FunctionBuilder, p: dict[str, Value]) -> list[Value]:
        t = b.op("Transpose", p["x"], perm=[1, 2, 0])
        return [b.op("Relu", b.op("Transpose", t, perm=[2, 0, 1])),
                b.op("Transpose", t, perm=[1, 0, 2]), b.op("Transpose", b.op("Transpose", t))]
    return example_fn({"x": d}, body)


# -- Gemm as a product and a bias -------------------------------------------------------------

def _find_gemm(g: Graph) -> list[Site]:
    return [Site((i,)) for i, op in enumerate(g.ops)
            if op.op_type == "Gemm" and float(op.attr("alpha", 1.0)) == 1.0
            and float(op.attr("beta", 1.0)) == 1.0 and not op.attr("transA", 0)]


def _build_gemm(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    op = g.ops[site.ops[0]]
    a, b = op.inputs[0], op.inputs[1]
    if op.attr("transB", 0):
        b = em.op("Transpose", b, hint="wt", perm=[1, 0])
    y = em.op("MatMul", a, b, hint="y")
    c = op.inputs[2] if len(op.inputs) > 2 else None
    return {op.outputs[0]: y if c is None else em.op("Add", y, c, hint="y")}


def _ex_gemm(d: tuple[int, ...]) -> Function:
    m, k, n = d
    return example_fn({"a": (m, k), "b": (n, k), "c": (n,), "e": (k, n)},
                      lambda b, p: [b.op("Gemm", p["a"], p["b"], p["c"], transB=1),
                                    b.op("Gemm", p["a"], p["e"])])


VIEW_RULES: tuple[Substitution, ...] = (
    Substitution(
        "elementwise_through_concat", "an element-wise unary op of a concatenation becomes "
        "the concatenation of the op on each block (Megatron's middle step)",
        _find_unary, _build_unary, _ex_unary, ((3, 2, 5), (2, 4, 4)), (2, 1, 2)),
    Substitution(
        "split_of_concat", "a Split of a Concat along the same axis into the same blocks is "
        "the blocks", _find_split_concat, _build_split_concat, _ex_split_concat,
        ((3, 2, 5), (2, 4, 4)), (2, 1, 2)),
    Substitution(
        "concat_of_split", "a Concat of all of one Split's results, in order, along the "
        "same axis is the Split's input", _find_concat_split, _build_concat_split,
        _ex_concat_split, ((3, 2), (2, 5)), (2, 1)),
    Substitution(
        "split_through_binary", "a Split (by the last axis) of an element-wise Add, Sub, Mul "
        "or Div with a bias vector or a same-shape operand becomes the op on each piece: "
        "a fused projection's bias no longer stands between its product and the Split",
        _find_split_binary, _build_split_binary, _ex_split_binary, ((2, 3, 2), (1, 2, 3)),
        (1, 1, 2)),
    Substitution(
        "transpose_pair", "two Transposes compose into one (or none)",
        _find_transposes, _build_transposes, _ex_transposes, ((2, 3, 4), (5, 2, 3)),
        (2, 1, 2)),
    Substitution(
        "gemm_as_product", "Gemm (alpha = beta = 1, A not transposed) becomes MatMul (of the "
        "transposed weight where transB) and an Add of the bias, so the product rules apply",
        _find_gemm, _build_gemm, _ex_gemm, ((3, 4, 5), (2, 6, 2)), (2, 2, 2)),
)
