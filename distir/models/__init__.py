"""Builders of the reference workloads: the MLP training step and GPT-2 inference.

``mlp(...)`` writes an MLP training step directly in DistIR; ``gpt2(...)`` builds a GPT-2
inference graph as ONNX and imports it. ``presets`` names the configurations of the DistIR
paper (``mlp-1b``, ``gpt2-175b``, ...). ``onnx`` is imported only when a GPT-2 is built.
"""

from __future__ import annotations

from distir.models.mlp import MLPConfig, mlp

__all__ = ["MLPConfig", "mlp"]
