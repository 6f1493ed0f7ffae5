"""The substitutions on matrix products (Unity §4's algebraic rewrites): fusing and
splitting products, reduction parallelism, Unity's Fig. 11b, and the rules that chain into
Megatron's column/row pair (Fig. 10). Views and clean-ups are in ``subst_views.py``.

Products are ``MatMul(x, w)`` with ``w`` a matrix and ``x`` of rank at least 2 (a batch of
rows); every matcher checks shapes and wiring only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from distir.ir.builder import FunctionBuilder
from distir.ir.core import Function, Op, Value
from distir.ir.types import DType, TensorType
from distir.transforms.spmd.subst_core import Emitter, Graph, Site, Substitution

__all__ = ["PRODUCT_RULES", "example_fn", "product"]


def example_fn(shapes: dict[str, tuple[int, ...]],
               body: Callable[[FunctionBuilder, dict[str, Value]], list[Value]]) -> Function:
    """A small float32 function of parameters ``shapes`` returning ``body``'s values."""
    b = FunctionBuilder("main")
    ps = {n: b.param(n, TensorType(DType.Float32, s, 0)) for n, s in shapes.items()}
    return b.ret(*body(b, ps))


def product(g: Graph, op: Op) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(shape of x, shape of w)`` when ``op`` is ``MatMul(x, w)`` of a batch of rows by a
    matrix, else ``None``."""
    if op.op_type != "MatMul" or len(op.inputs) != 2:
        return None
    xs, ws = g.shape(op.inputs[0]), g.shape(op.inputs[1])
    if xs is None or ws is None or len(ws) != 2 or len(xs) < 2 or xs[-1] != ws[0]:
        return None
    if g.dtype(op.inputs[0]) != g.dtype(op.inputs[1]):
        return None
    return xs, ws


def _before(g: Graph, v: Value | None, i: int) -> bool:
    j = g.producer.get(v) if v is not None else None
    return j is None or j < i


# -- fusion of products sharing their left operand, and its inverse -------------------------

def _gemm_key(g: Graph, op: Op) -> tuple | None:
    """What Gemms must share to fuse: their ``A`` (a matrix), ``transB``, whether they have
    a bias (a vector of the output width, when they do); alpha = beta = 1, A as is."""
    if op.op_type != "Gemm" or op.attr("transA", 0) or float(op.attr("alpha", 1.0)) != 1.0 \
            or float(op.attr("beta", 1.0)) != 1.0:
        return None
    t = int(op.attr("transB", 0))
    ws = g.shape(op.inputs[1])
    c = op.inputs[2] if len(op.inputs) > 2 else None
    if ws is None or len(ws) != 2 or g.dtype(op.inputs[0]) != g.dtype(op.inputs[1]):
        return None
    if c is not None and g.shape(c) != (ws[0 if t else 1],):
        return None
    return ("Gemm", op.inputs[0], t, c is not None)


def _find_fuse(g: Graph) -> list[Site]:
    groups: dict[tuple, list[int]] = {}
    for i, op in enumerate(g.ops):
        if product(g, op) is not None:
            groups.setdefault(("MatMul", op.inputs[0]), []).append(i)
        elif (k := _gemm_key(g, op)) is not None:
            groups.setdefault(k, []).append(i)
    sites = []
    for ix in groups.values():
        # a weight computed from another member's product would make a cycle
        ok = [i for i in ix if all(_before(g, v, ix[0]) for v in g.ops[i].inputs[1:])]
        if len(ok) >= 2:
            sites.append(Site(tuple(ok)))
    return sites


def _build_fuse(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    ops = [g.ops[i] for i in site.ops]
    x = ops[0].inputs[0]
    rank = len(g.shape(x) or ())
    if ops[0].op_type == "Gemm":
        t = int(ops[0].attr("transB", 0))
        w = em.op("Concat", *(op.inputs[1] for op in ops), hint="w_fused", axis=0 if t else 1)
        bias = [op.inputs[2] for op in ops if len(op.inputs) > 2 and op.inputs[2] is not None]
        c = em.op("Concat", *bias, hint="c_fused", axis=0) if bias else None
        y = em.op("Gemm", x, w, *([c] if c is not None else []), hint="y_fused", transB=t)
        sizes = [(g.shape(op.inputs[1]) or (0, 0))[0 if t else 1] for op in ops]
    else:
        w = em.op("Concat", *(op.inputs[1] for op in ops), hint="w_fused", axis=1)
        y = em.op("MatMul", x, w, hint="y_fused")
        sizes = [(g.shape(op.inputs[1]) or (0, 0))[1] for op in ops]
    parts = em.split(y, sizes, rank - 1, "y_part")
    return {op.outputs[0]: p for op, p in zip(ops, parts, strict=True)}


def _ex_fuse(d: tuple[int, ...]) -> Function:
    b_, k, n1, n2 = d

    def body(b: FunctionBuilder, p: dict[str, Value]) -> list[Value]:
        mm = [b.op("MatMul", p["x"], p[w]) for w in ("w1", "w2", "w3")]
        gemm = [b.op("Gemm", p["x"], p["v1"], p["c1"], transB=1),
                b.op("Gemm", p["x"], p["v2"], p["c2"], transB=1)]
        return mm + gemm
    return example_fn({"x": (b_, k), "w1": (k, n1), "w2": (k, n2), "w3": (k, n1),
                       "v1": (n1, k), "c1": (n1,), "v2": (n2, k), "c2": (n2,)}, body)


def _find_unfuse(g: Graph) -> list[Site]:
    sites = []
    for i, op in enumerate(g.ops):
        sh = product(g, op)
        y = op.outputs[0]
        rd = g.readers.get(y, [])
        if sh is None or y in g.returned or len(rd) != 1:
            continue
        s = g.ops[rd[0]]
        if s.op_type != "Split" or s.inputs[0] is not y:
            continue
        if int(s.attr("axis", 0)) % len(sh[0]) != len(sh[0]) - 1 or len(s.outputs) < 2:
            continue
        sites.append(Site((i, rd[0])))
    return sites


def _build_unfuse(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    mm, sp = (g.ops[i] for i in site.ops)
    x, w = mm.inputs
    assert x is not None and w is not None
    sizes = [(g.shape(o) or (0,))[-1] for o in sp.outputs]
    ws = em.split(w, sizes, 1, "w_part")
    return {o: em.op("MatMul", x, wi, hint="y_part")
            for o, wi in zip(sp.outputs, ws, strict=True)}


def _ex_unfuse(d: tuple[int, ...]) -> Function:
    b_, k, n1, n2 = d

    def body(b: FunctionBuilder, p: dict[str, Value]) -> list[Value]:
        y = b.op("MatMul", p["x"], p["w"])
        if n1 == n2:
            return list(b.op("Split", y, axis=-1, num_outputs=2))
        s = b.op("Constant", value=np.asarray([n1, n2], np.int64), device=0)
        return list(b.op("Split", y, s, axis=1, num_results=2))
    return example_fn({"x": (b_, k), "w": (k, n1 + n2)}, body)


# -- column blocks and reduction parallelism --------------------------------------------------

def _find_cols(g: Graph) -> list[Site]:
    return [Site((i,)) for i, op in enumerate(g.ops)
            if (sh := product(g, op)) is not None and sh[1][1] % 2 == 0 and sh[1][1] >= 2]


def _build_cols(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    op = g.ops[site.ops[0]]
    x, w = op.inputs
    assert x is not None and w is not None
    rank = len(g.shape(x) or ())
    w1, w2 = em.split(w, [1, 1], 1, "w_cols")
    y1 = em.op("MatMul", x, w1, hint="y_cols")
    y2 = em.op("MatMul", x, w2, hint="y_cols")
    return {op.outputs[0]: em.op("Concat", y1, y2, hint="y", axis=rank - 1)}


def _ex_product(d: tuple[int, ...]) -> Function:
    *bs, k, n = d
    return example_fn({"x": (*bs, k), "w": (k, n)},
                      lambda b, p: [b.op("MatMul", p["x"], p["w"])])


def _find_k(g: Graph) -> list[Site]:
    return [Site((i,)) for i, op in enumerate(g.ops)
            if (sh := product(g, op)) is not None and sh[1][0] % 2 == 0 and sh[1][0] >= 2]


def _build_k(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    op = g.ops[site.ops[0]]
    x, w = op.inputs
    assert x is not None and w is not None
    rank = len(g.shape(x) or ())
    x1, x2 = em.split(x, [1, 1], rank - 1, "x_k")
    w1, w2 = em.split(w, [1, 1], 0, "w_k")
    y1 = em.op("MatMul", x1, w1, hint="y_k")
    y2 = em.op("MatMul", x2, w2, hint="y_k")
    return {op.outputs[0]: em.op("Add", y1, y2, hint="y")}


# -- Unity Fig. 11b and its inverse (Megatron's row step) ------------------------------------

def _find_add_products(g: Graph) -> list[Site]:
    sites = []
    for i, op in enumerate(g.ops):
        if op.op_type != "Add" or op.inputs[0] is op.inputs[1]:
            continue
        mms = [g.made_by(v, "MatMul") for v in op.inputs]
        if any(m is None for m in mms):
            continue
        a, c = mms
        assert a is not None and c is not None
        sa, sc = product(g, a), product(g, c)
        if sa is None or sc is None or len(sa[0]) != len(sc[0]):
            continue
        if sa[0][:-1] != sc[0][:-1] or sa[1][1] != sc[1][1]:
            continue
        if g.dtype(a.inputs[0]) != g.dtype(c.inputs[0]):
            continue
        if not all(g.sole_reader(v, i) for v in op.inputs):  # type: ignore[arg-type]
            continue
        sites.append(Site((g.index(a), g.index(c), i)))
    return sites


def _build_add_products(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    a, c, add = (g.ops[i] for i in site.ops)
    rank = len(g.shape(a.inputs[0]) or ())
    x = em.op("Concat", a.inputs[0], c.inputs[0], hint="x_cat", axis=rank - 1)
    w = em.op("Concat", a.inputs[1], c.inputs[1], hint="w_cat", axis=0)
    return {add.outputs[0]: em.op("MatMul", x, w, hint="y")}


def _ex_add_products(d: tuple[int, ...]) -> Function:
    b_, k1, k2, n = d
    return example_fn(
        {"a": (b_, k1), "b": (k1, n), "c": (b_, k2), "d": (k2, n)},
        lambda b, p: [b.op("Add", b.op("MatMul", p["a"], p["b"]),
                           b.op("MatMul", p["c"], p["d"]))])


def _find_concat_lhs(g: Graph) -> list[Site]:
    sites = []
    for i, op in enumerate(g.ops):
        sh = product(g, op)
        cat = g.made_by(op.inputs[0], "Concat") if sh is not None else None
        if sh is None or cat is None or len(cat.inputs) < 2:
            continue
        if int(cat.attr("axis", 0)) % len(sh[0]) == len(sh[0]) - 1:
            sites.append(Site((i,)))
    return sites


def _build_concat_lhs(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    op = g.ops[site.ops[0]]
    cat = g.made_by(op.inputs[0], "Concat")
    assert cat is not None and op.inputs[1] is not None
    sizes = [(g.shape(v) or (0,))[-1] for v in cat.inputs]
    ws = em.split(op.inputs[1], sizes, 0, "w_rows")
    acc = None
    for a, w in zip(cat.inputs, ws, strict=True):
        y = em.op("MatMul", a, w, hint="y_rows")
        acc = y if acc is None else em.op("Add", acc, y, hint="y")
    assert acc is not None
    return {op.outputs[0]: acc}


def _ex_concat_lhs(d: tuple[int, ...]) -> Function:
    b_, k1, k2, n = d
    return example_fn(
        {"a": (b_, k1), "c": (b_, k2), "w": (k1 + k2, n)},
        lambda b, p: [b.op("MatMul", b.op("Concat", p["a"], p["c"], axis=-1), p["w"])])


# -- reassociation of matrix chains where it saves work ---------------------------------------

def _chain(g: Graph, op: Op) -> tuple[str, Op, tuple[int, int, int, int]] | None:
    """``("left", inner, (m, k, n, p))`` for ``(a b) c`` that is cheaper as ``a (b c)``,
    ``("right", ...)`` for the mirror; shapes a m×k, b k×n, c n×p."""
    if op.op_type != "MatMul":
        return None
    shapes = [g.shape(v) for v in op.inputs]
    if any(s is None or len(s) != 2 for s in shapes):
        return None
    i = g.index(op)
    for side in (0, 1):
        inner = g.made_by(op.inputs[side], "MatMul")
        if inner is None or not g.sole_reader(op.inputs[side], i):  # type: ignore[arg-type]
            continue
        s = [g.shape(v) for v in inner.inputs]
        if any(t is None or len(t) != 2 for t in s):
            continue
        if side == 0:  # (a b) c
            (m, k), (_, n) = s[0], s[1]  # type: ignore[misc]
            p = shapes[1][1]  # type: ignore[index]
            if k * n * p + m * k * p < m * k * n + m * n * p:
                return "left", inner, (m, k, n, p)
        else:  # a (b c)
            m, k = shapes[0]  # type: ignore[misc]
            (_, n), (_, p) = s[0], s[1]  # type: ignore[misc]
            if m * k * n + m * n * p < k * n * p + m * k * p:
                return "right", inner, (m, k, n, p)
    return None


def _find_assoc(g: Graph) -> list[Site]:
    return [Site((g.index(c[1]), i)) for i, op in enumerate(g.ops)
            if (c := _chain(g, op)) is not None]


def _build_assoc(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    inner, outer = (g.ops[i] for i in site.ops)
    c = _chain(g, outer)
    assert c is not None
    if c[0] == "left":
        (a, b), cc = inner.inputs, outer.inputs[1]
        y = em.op("MatMul", a, em.op("MatMul", b, cc, hint="bc"), hint="y")
    else:
        a, (b, cc) = outer.inputs[0], inner.inputs
        y = em.op("MatMul", em.op("MatMul", a, b, hint="ab"), cc, hint="y")
    return {outer.outputs[0]: y}


def _ex_assoc(d: tuple[int, ...]) -> Function:
    big, small = d
    return example_fn(
        {"a": (big, big), "b": (big, big), "c": (big, small),
         "d": (small, big), "e": (big, big), "f": (big, big)},
        lambda b, p: [b.op("MatMul", b.op("MatMul", p["a"], p["b"]), p["c"]),
                      b.op("MatMul", p["d"], b.op("MatMul", p["e"], p["f"]))])


PRODUCT_RULES: tuple[Substitution, ...] = (
    Substitution(
        "fuse_products", "products (MatMul, or Gemm with the same transB and bias or not) "
        "sharing their left operand become one product with the weights (and biases) "
        "concatenated inside the program, then a Split",
        _find_fuse, _build_fuse, _ex_fuse, ((4, 6, 3, 5), (2, 3, 8, 8, )), (2, 2, 1, 2),
        inverse="unfuse_product"),
    Substitution(
        "unfuse_product", "a product whose one reader splits it by columns becomes one "
        "product per column block of the weight (the inverse of fuse_products)",
        _find_unfuse, _build_unfuse, _ex_unfuse, ((4, 6, 3, 5), (3, 2, 4, 4)), (2, 2, 1, 2),
        inverse="fuse_products"),
    Substitution(
        "split_columns", "a product becomes two products of the weight's column halves, "
        "concatenated (Megatron's column step)",
        _find_cols, _build_cols, _ex_product, ((4, 6, 8), (2, 3, 5, 4)), (2, 2, 2)),
    Substitution(
        "split_contraction", "reduction parallelism: a product becomes the sum of the "
        "products of the contracted dimension's halves",
        _find_k, _build_k, _ex_product, ((4, 6, 8), (2, 3, 4, 5)), (2, 2, 2)),
    Substitution(
        "add_of_products", "Unity Fig. 11b: the sum of two products becomes one product of "
        "the concatenated operands",
        _find_add_products, _build_add_products, _ex_add_products,
        ((4, 3, 5, 6), (2, 4, 4, 1)), (2, 1, 2, 2), inverse="concat_lhs_product"),
    Substitution(
        "concat_lhs_product", "a product of a concatenation along the contracted dimension "
        "becomes the sum of the blocks' products with the weight's row blocks (Megatron's "
        "row step; the inverse of add_of_products)",
        _find_concat_lhs, _build_concat_lhs, _ex_concat_lhs, ((4, 3, 5, 6), (2, 4, 4, 1)),
        (2, 1, 2, 2), inverse="add_of_products"),
    Substitution(
        "reassociate", "a chain of two matrix products is reassociated where that does "
        "fewer multiply-adds",
        _find_assoc, _build_assoc, _ex_assoc, ((6, 1), (8, 2)), (3, 1)),
)
