"""Substitutions: verified algebraic rewrites of a sequential program (Unity §4).

Each ``Substitution`` has a name, a matcher that finds its sites structurally (op types,
attributes, wiring and shapes, never value names) and a rewrite that returns a new,
verified function with the same parameters and results (a drop-in replacement: where a
rule concatenates weights, the ``Concat`` is inside the program). The library:

=============================  ==============================================================
``fuse_products``              products sharing their left operand -> one product + Split
``unfuse_product``             its inverse: a product read only by a column Split -> products
``split_columns``              a product -> two column-block products, concatenated
``split_contraction``          reduction parallelism: a product -> sum of two half-K products
``add_of_products``            Unity Fig. 11b: ``x1 w1 + x2 w2`` -> ``[x1 x2] [w1; w2]``
``concat_lhs_product``         its inverse: ``[x1 x2] w`` -> ``x1 w[:k1] + x2 w[k1:]``
``reassociate``                ``(a b) c`` <-> ``a (b c)`` where it does fewer multiply-adds
``elementwise_through_concat`` ``f([a b])`` -> ``[f(a) f(b)]`` for element-wise unary ``f``
``split_of_concat``            ``Split(Concat(a, b))`` into the same blocks -> ``a, b``
``concat_of_split``            ``Concat(Split(x))`` of all the pieces in order -> ``x``
``split_through_binary``       ``Split(y + bias)`` -> ``Split(y) + Split(bias)`` piece by piece
``transpose_pair``             two Transposes -> one (or none)
``gemm_as_product``            ``Gemm`` -> ``MatMul`` + bias ``Add`` (the product rules apply)
=============================  ==============================================================

Megatron's column/row pair (Unity Fig. 10) is the sequence ``MEGATRON``: ``split_columns``
on the first product, ``elementwise_through_concat`` on the activation, then
``concat_lhs_product`` on the second product: two independent halves summed at the end
(``megatron_pair``).

``verify_substitution(sub)`` checks a rule on its examples with the reference executor and
with z3; ``check_all()`` does it for every rule. See ``docs/substitutions.md``.
"""

from __future__ import annotations

from distir.errors import TransformError
from distir.ir.core import Function
from distir.transforms.spmd.subst_core import (
    Graph,
    Site,
    Substitution,
    rewrite,
    rewrite_tracked,
    structural_hash,
)
from distir.transforms.spmd.subst_rules import PRODUCT_RULES, product
from distir.transforms.spmd.subst_verify import Verdict, prove_equal, verify_substitution
from distir.transforms.spmd.subst_views import VIEW_RULES

__all__ = ["SUBSTITUTIONS", "BY_NAME", "MEGATRON", "Substitution", "Site", "Graph",
           "Verdict", "rewrite", "structural_hash", "find_sites", "check_all",
           "verify_substitution", "prove_equal", "megatron_pair", "by_name"]

SUBSTITUTIONS: tuple[Substitution, ...] = PRODUCT_RULES + VIEW_RULES
"""Every substitution, in a fixed order."""

BY_NAME: dict[str, Substitution] = {s.name: s for s in SUBSTITUTIONS}

MEGATRON = ("split_columns", "elementwise_through_concat", "concat_lhs_product")
"""Megatron's column/row pair as a sequence of substitutions (Unity Fig. 10)."""


def by_name(names: list[str] | tuple[str, ...] | None) -> tuple[Substitution, ...]:
    """The substitutions named (all of them for ``None``); an unknown name is refused."""
    if names is None:
        return SUBSTITUTIONS
    bad = [n for n in names if n not in BY_NAME]
    if bad:
        raise TransformError(f"unknown substitution {bad[0]!r}; known: "
                             f"{', '.join(BY_NAME)}")
    return tuple(BY_NAME[n] for n in names)


def find_sites(fn: Function | Graph, subs: tuple[Substitution, ...] | None = None,
               ) -> list[tuple[Substitution, Site]]:
    """Every (substitution, site) pair of ``fn``, in rule order then program order."""
    g = fn if isinstance(fn, Graph) else Graph(fn)
    return [(s, site) for s in (subs or SUBSTITUTIONS) for site in s.find(g)]


def check_all(*, use_z3: bool = True) -> list[Verdict]:
    """``verify_substitution`` of every rule; each ``Verdict`` says whether it held."""
    return [verify_substitution(s, use_z3=use_z3) for s in SUBSTITUTIONS]


def megatron_pair(fn: Function, first: int | None = None) -> Function:
    """``fn`` with ``MEGATRON`` applied to a chain ``MatMul -> element-wise -> MatMul``
    whose first product is op ``first`` (the first such chain when ``None``): the first
    weight split by columns, the second by rows, the halves summed. Refuses a program
    without such a chain."""
    from distir.transforms.spmd.subst_views import ELEMENTWISE

    g = Graph(fn)
    chain = None
    for i, op in enumerate(g.ops):
        if (first is not None and i != first) or product(g, op) is None:
            continue
        if (g.shape(op.inputs[1]) or (0, 1))[1] % 2:
            continue
        acts = [g.ops[j] for j in g.readers.get(op.outputs[0], [])
               if g.ops[j].op_type in ELEMENTWISE and len(g.ops[j].inputs) == 1]
        for a in acts:
            nxt = [j for j in g.readers.get(a.outputs[0], [])
                   if product(g, g.ops[j]) is not None and g.ops[j].inputs[0] is a.outputs[0]]
            if nxt:
                chain = (i, g.index(a), nxt[0])
                break
        if chain:
            break
    if chain is None:
        raise TransformError(f"@{fn.name}: no MatMul -> element-wise -> MatMul chain with "
                             "an even width to split as Megatron's pair")
    cols, unary, rows = by_name(MEGATRON)
    fn, moved = rewrite_tracked(g, Site((chain[0],)), cols)
    act, second = moved[chain[1]], moved[chain[2]]
    g = Graph(fn)
    if Site((act,)) not in unary.find(g):
        raise TransformError(f"@{fn.name}: {unary.name} does not apply after {cols.name}")
    fn, moved = rewrite_tracked(g, Site((act,)), unary)
    g = Graph(fn)
    site = Site((moved[second],))
    if site not in rows.find(g):
        raise TransformError(f"@{fn.name}: {rows.name} does not apply after {unary.name}")
    return rewrite(g, site, rows)
