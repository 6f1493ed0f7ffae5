"""The workloads a search can explore: presets of the DistIR paper and custom sizes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distir.errors import ConfigError

__all__ = ["Workload", "PRESETS", "workload", "DEFAULT_BATCHES"]


@dataclass(frozen=True)
class Workload:
    """A model family and its sizes; ``build(batch)`` gives the sequential function."""

    name: str
    family: str  # "mlp" (a training step) or "gpt2" (inference)
    sizes: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    dtype: str = "Float32"

    @property
    def training(self) -> bool:
        return self.family == "mlp"

    def build(self, batch_size: int) -> Any:
        import distir
        from distir.ir.types import DType

        dt = DType[self.dtype]
        if self.family == "mlp":
            s = self.sizes
            return distir.models.mlp(batch_size=batch_size, input_dim=s["width"],
                                     hidden_dim=s["width"], output_dim=s["width"],
                                     num_layers=s["num_layers"], dtype=dt)
        s = self.sizes
        return distir.models.gpt2(n_layer=s["n_layer"], d_model=s["d_model"],
                                  n_head=s["n_head"], vocab_size=s.get("vocab_size", 50257),
                                  seq_len=s.get("seq_len", 1024), batch_size=batch_size,
                                  dtype=dt)

    def parameters(self) -> int:
        """The number of weights (for labels and memory sanity checks)."""
        s = self.sizes
        if self.family == "mlp":
            return int(s["num_layers"] * s["width"] ** 2)
        d, n = s["d_model"], s["n_layer"]
        return int(12 * n * d * d + s.get("vocab_size", 50257) * d
                   + s.get("seq_len", 1024) * d)


PRESETS: dict[str, Workload] = {
    "mlp-1b": Workload("mlp-1b", "mlp", {"num_layers": 16, "width": 8192}),
    "mlp-17b": Workload("mlp-17b", "mlp", {"num_layers": 64, "width": 16384}),
    "mlp-103b": Workload("mlp-103b", "mlp", {"num_layers": 96, "width": 32768}),
    "gpt2-1.6b": Workload("gpt2-1.6b", "gpt2", {"n_layer": 24, "d_model": 2048, "n_head": 16}),
    "gpt2-13b": Workload("gpt2-13b", "gpt2", {"n_layer": 40, "d_model": 5120, "n_head": 40}),
    "gpt2-175b": Workload("gpt2-175b", "gpt2", {"n_layer": 96, "d_model": 12288,
                                                 "n_head": 96}),
}

# The paper's batch sizes: training uses one global batch per run; inference explores 2^7..2^20.
DEFAULT_BATCHES = {
    "mlp": [8192],
    "gpt2": [2 ** k for k in range(7, 21)],
}


def workload(model: str, preset: str | None = None, **sizes: Any) -> Workload:
    """A preset by name (``--preset mlp-1b`` or ``--model mlp-1b``), or a family with sizes."""
    name = preset or model
    if name in PRESETS:
        w = PRESETS[name]
        if sizes.get("dtype"):
            return Workload(w.name, w.family, dict(w.sizes), sizes["dtype"])
        return w
    dtype = sizes.pop("dtype", None) or "Float32"
    given = {k: v for k, v in sizes.items() if v is not None}
    parts = model.split("-")
    if parts[0] in ("mlp", "gpt2") and len(parts) > 1 and all(x.isdigit() for x in parts[1:]):
        # A label of a custom size, as written in result files: mlp-LAYERS-WIDTH,
        # gpt2-LAYERS-DMODEL-HEADS.
        keys: tuple[str, ...] = (("num_layers", "width") if parts[0] == "mlp"
                                 else ("n_layer", "d_model", "n_head"))
        if len(parts) - 1 != len(keys):
            raise ConfigError(f"model '{model}': expected {parts[0]}-" +
                              "-".join(k.upper() for k in keys))
        given = dict(zip(keys, (int(x) for x in parts[1:]))) | given
        model = parts[0]
    need: tuple[str, ...]
    if model == "mlp":
        need = ("num_layers", "width")
    elif model == "gpt2":
        need = ("n_layer", "d_model", "n_head")
    else:
        raise ConfigError(f"unknown model '{model}': use mlp, gpt2 or a preset "
                          f"({', '.join(PRESETS)})")
    missing = [k for k in need if k not in given]
    if missing:
        raise ConfigError(f"--model {model} needs --preset or the sizes "
                          + ", ".join("--" + k.replace("_", "-") for k in missing))
    label = f"{model}-" + "-".join(f"{given[k]}" for k in need)
    return Workload(label, model, given, dtype)
