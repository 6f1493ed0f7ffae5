"""Builders of the reference workloads: the MLP training step and GPT-2 inference.

``mlp(...)`` writes an MLP training step directly in DistIR; ``gpt2(...)`` builds a GPT-2
inference graph as ONNX and imports it. Both are thin wrappers of frozen configurations
(``MLPConfig``, ``GPT2Config``) whose ``build()`` returns the function and whose fields and
helpers describe the model's structure for transforms. ``presets`` names the configurations
of the DistIR paper (``mlp-1b`` ... ``gpt2-175b``). ``onnx`` is imported only when a GPT-2
is built, ``torch`` only by ``distir.models.torch_gpt2``.
"""

from __future__ import annotations

from distir.models import presets
from distir.models.gpt2 import GPT2Config, gpt2, gpt2_onnx
from distir.models.mlp import MLPConfig, mlp

__all__ = ["GPT2Config", "MLPConfig", "gpt2", "gpt2_onnx", "mlp", "presets"]
