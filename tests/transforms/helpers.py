"""Shared helpers of the transform tests: small models, configurations, device checks."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np

import distir
from distir.analysis import random_inputs, type_env
from distir.analysis.values import type_of
from distir.ir.core import Function
from distir.transforms import Analysis, analyze, dtp

DEGREES = (1, 2, 4)
MICROBATCHES = (1, 2, 4, 8)


def grid() -> list[tuple[int, int, int, int]]:
    """Every (dp, tp, pp, K) with dp, tp, pp in {1, 2, 4}, dp·tp·pp <= 16, K in {1, 2, 4, 8}."""
    return [(d, t, p, k) for d, t, p in itertools.product(DEGREES, DEGREES, DEGREES)
            if d * t * p <= 16 for k in MICROBATCHES]


def cfg_id(c: tuple) -> str:
    return "D{}T{}P{}K{}".format(*c[:4]) + (f"-{c[4]}" if len(c) > 4 else "")


@cache
def small_mlp(batch: int) -> tuple[Function, Analysis, tuple, tuple]:
    """A 4-layer MLP step (widths divisible by 4), its analysis, inputs and sequential
    results."""
    fn = distir.models.mlp(batch_size=batch, input_dim=4, hidden_dim=8, output_dim=4,
                           num_layers=4)
    ins = tuple(random_inputs(fn, seed=1))
    return fn, analyze(fn), ins, tuple(distir.execute(fn, list(ins)))


@cache
def small_gpt2(batch: int) -> tuple[Function, Analysis, tuple, tuple]:
    """A 4-layer GPT-2 (4 heads of 4) with its analysis, inputs and sequential logits."""
    from distir.models.gpt2 import GPT2Config

    cfg = GPT2Config(n_layer=4, d_model=16, n_head=4, vocab_size=11, seq_len=4,
                     batch_size=batch)
    fn = cfg.build()
    ins = tuple(cfg.example_inputs(seed=2))
    return fn, analyze(fn), ins, tuple(distir.execute(fn, list(ins)))


def devices_of(fn: Function) -> set[int]:
    """Every device a value of ``fn`` (or of a function it calls) lives on."""
    env = type_env(fn)
    return {d for a in env.values() if a is not None for d in type_of(a).devices}


def check_equivalent(model: tuple, cfg: tuple[int, int, int, int], schedule: str) -> None:
    """The self-contained program computes the sequential results; the default program
    type-checks on exactly devices 0..dp·tp·pp-1."""
    fn, an, ins, want = model
    dp, tp, pp, k = cfg
    sc = dtp(an, dp, tp, pp, k, schedule=schedule, self_contained=True)
    distir.verify(sc, num_devices=dp * tp * pp)
    got = distir.execute(sc, list(ins), check_types=False)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    step = dtp(an, dp, tp, pp, k, schedule=schedule)
    distir.verify(step, num_devices=dp * tp * pp)
    assert devices_of(step) == set(range(dp * tp * pp))


def check_every_writer(step: Function, ins: list[np.ndarray],
                       configs: list[tuple[int, int, int, int]], tower_configs: int) -> None:
    """Every ``(dp, tp, pp, microbatches)`` of ``configs`` written by ``dtp`` (the spmd
    passes), and the first ``tower_configs`` of them by the builder tower, as
    self-contained programs, computes ``step``'s results on ``ins``; only tensor
    parallelism may be refused, in one line."""
    from distir.errors import TransformError
    from distir.transforms import tower

    want = distir.execute(step, ins)
    an = analyze(step)
    for (dp, tp, pp, k), write in zip([*configs, *configs[:tower_configs]],
                                      [dtp] * len(configs) + [tower.dtp] * tower_configs):
        try:
            sc = write(an, dp=dp, tp=tp, pp=pp, microbatches=k, self_contained=True)
        except TransformError as e:
            assert tp > 1 and "\n" not in str(e), str(e)
            continue
        got = distir.execute(sc, ins, check_types=False)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
