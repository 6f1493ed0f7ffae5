"""Cluster-scale spaces (issue 20): the GPT-3 175B training preset and Megatron-style
spaces whose tensor parallelism stays within a node."""

from __future__ import annotations

from grid_search import enumerate_space, workload
from grid_search.models import default_batches


def test_gpt3_preset_trains_at_its_published_batch() -> None:
    w = workload("gpt3-175b-train")
    assert w.training and default_batches(w) == [1536]
    assert w.sizes == {"n_layer": 96, "d_model": 12288, "n_head": 96, "seq_len": 2048}
    assert 174e9 < w.parameters() < 176e9
    assert default_batches(workload("gpt3-175b")) == [2 ** k for k in range(7, 21)]


def test_max_tp_keeps_tensor_parallelism_within_a_node() -> None:
    full = list(enumerate_space("m", 64, [512]))
    node = list(enumerate_space("m", 64, [512], max_tp=8))
    assert max(c.tp for c in full) == 64 and max(c.tp for c in node) == 8
    assert node == [c for c in full if c.tp <= 8]
    assert all(c.devices == 64 for c in node)
