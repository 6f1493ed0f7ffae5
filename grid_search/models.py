"""The workloads a search can explore: presets of the DistIR paper, custom sizes of its two
model families, and the user's own model (an ONNX file, a DistIR text file or a function).

A ``Workload`` builds the sequential function of one batch size (``build(batch)``); the
search transforms and simulates it in worker processes, possibly on other machines.
A user's model travels to them as built functions: ``prepared(batches)`` builds every batch
size where the search starts (importing the file there, once per batch size) and keeps the
functions, which are pickled with the workload. Only the initializers that type propagation
reads as known values (``CONCRETE_LIMIT`` elements or fewer: shapes, axes, small constants)
are kept; the weights' values change no type or cost, so they do not travel.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from distir.cli._train import TrainOptions
from distir.errors import ConfigError
from distir.ir.core import Function, Module

__all__ = ["Workload", "PRESETS", "TrainOptions", "workload", "DEFAULT_BATCHES",
           "default_batches", "TRANSFORMS", "PASSES_MAX_DEVICES", "transform_of"]

# GPT-2 presets made into training steps: cross-entropy over the vocabulary, Adam.
_GPT2_TRAIN = TrainOptions("cross_entropy", "adam", 1e-4)


@dataclass(frozen=True)
class UserModel:
    """Where a user's model comes from. ``path`` is an ``.onnx`` or ``.dir`` file (None for
    a function given in memory); ``dims`` bind the ONNX model's symbolic dimensions;
    ``batch_dim`` is the symbolic dimension at axis 0 of the batch input (None when that
    axis has a fixed size: then only ``own_batch`` can be searched); ``batch_input`` is the
    parameter that carries the batch, ``named`` whether the user named it. ``weights`` are
    the parameters whose initializers the search's functions leave out (``_for_search``):
    the transform is told they are weights, as the initializers told it before."""

    path: str | None
    dims: tuple[tuple[str, int], ...]
    batch_dim: str | None
    batch_input: str
    own_batch: int
    named: bool = False
    weights: tuple[str, ...] = ()


@dataclass(frozen=True)
class Workload:
    """A model and its sizes; ``build(batch)`` gives the sequential function.

    ``family`` is ``"mlp"`` (the paper's MLP training step), ``"gpt2"`` (the GPT-2 builder;
    inference, or a training step with ``train``) or ``"user"`` (``source``; a training
    step with ``train``). ``functions`` holds built functions by batch size (a user's
    model, see ``prepared``)."""

    name: str
    family: str
    sizes: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    dtype: str = "Float32"
    train: TrainOptions | None = None
    source: UserModel | None = None
    functions: dict[int, Function] = field(default_factory=dict, hash=False, compare=False,
                                           repr=False)
    sync: str = ""
    """How the data-parallel gradients travel: ``""`` as ``dtp`` writes them (one
    all-reduce each), ``"searched"`` as ``grid_search.sync_search.searched_step`` finds."""
    transform: str = "passes"
    """What writes each configuration's program: ``"passes"`` (``distir.transforms.dtp``,
    the composition of the spmd passes: layout assignment, stage partition, schedule,
    lowering) or ``"tower"`` (``distir.transforms.tower.dtp``, the builder ``dtp`` was
    before, kept to rebuild the programs of studies measured with it); see ``program``."""

    @property
    def training(self) -> bool:
        return self.family == "mlp" or self.train is not None

    @property
    def batch_inputs(self) -> tuple[str, ...]:
        """The parameters the user named as carrying the batch (``--batch-input``)."""
        src = self.source
        return (src.batch_input,) if src is not None and src.named else ()

    def analyze(self, batch_size: int, hardware: Any = None, weights: bool = False) -> Any:
        """``distir.transforms.analyze`` of ``build(batch_size)``, told the batch input the
        user named, the weights whose values the built function leaves out, and the
        hardware profile that weighs pipeline stages balanced by cost (the one simulated;
        default ``h100-sxm``).

        ``weights``: for a run on devices, a user's model keeps every value its file binds
        (its own initial weights), so that each configuration's program (the same program:
        ``program`` places those values on its parameters) runs on them rather than on
        random draws: a random model can overflow to NaN (24 layers of MobileBERT's
        un-normalized blocks do), and kernels run NaN at other speeds than training's
        values (``grid_search/results/adam_step/``)."""
        from distir.transforms import analyze

        src = self.source
        # (A function given in memory has no file to read its weights from again.)
        fn = self._build_user(batch_size, every_weight=True) \
            if weights and src is not None and src.path is not None else self.build(batch_size)
        return analyze(fn, batch_inputs=list(self.batch_inputs) or None,
                       weights=src.weights if src is not None else (), hardware=hardware)

    def synchronized(self, fn: Function, cfg: Any, hardware: Any,
                     simulator: Any = None) -> tuple[Function, str]:
        """``fn`` (``program``'s for ``cfg``) with its gradients synchronised as the search
        chooses where ``sync`` is ``"searched"`` and ``cfg`` is data-parallel
        (``grid_search.sync_search.searched_step``, simulated on ``hardware``), and the
        choice's note; else ``fn`` and ``""``. The search and the runs of its top rows
        both call it, so that the program run is the one simulated."""
        if not self.sync or cfg.dp <= 1:
            return fn, ""
        from grid_search.sync_search import searched_step

        return searched_step(fn, hardware, simulator)

    def program(self, analysis: Any, cfg: Any) -> Function:
        """The whole distributed program of ``cfg`` (a ``grid_search.space.Config``) for
        ``analysis`` (``analyze(cfg.batch_size, hardware)``), written by ``transform``: the
        one simulated and the one ``grid_search.real`` runs. Both transforms take the same
        analysis (its batch inputs, the weights whose initializers the function leaves out,
        the stage cuts weighed by ``hardware``), computed once per batch size."""
        if self.transform == "tower":
            from distir.transforms.tower import dtp

            return dtp(analysis, dp=cfg.dp, tp=cfg.tp, pp=cfg.pp,
                       microbatches=cfg.microbatches, schedule=cfg.schedule)
        from distir.transforms.spmd.compose import compose_dtp

        _passes_fit(cfg.devices, "")
        return compose_dtp(analysis, cfg.dp, cfg.tp, cfg.pp, cfg.microbatches, cfg.schedule)

    def replica_program(self, analysis: Any, cfg: Any, fold_tp: bool = False) -> Any:
        """The program of data-parallel replica 0 of ``cfg``, written by ``transform``: a
        ``ReplicaProgram``, which simulates as ``program``'s of every replica where the
        replicas run alike (``dtp_replica``, or the passes' ``compose_dtp_replica``); with
        ``fold_tp``, of its tensor-parallel rank 0 alone where the ranks run alike (for the
        passes, ``Composed.folds``: then ``pp`` devices are written, not ``tp·pp``)."""
        if self.transform == "tower":
            from distir.transforms.tower import dtp_replica

            return dtp_replica(analysis, dp=cfg.dp, tp=cfg.tp, pp=cfg.pp,
                               microbatches=cfg.microbatches, schedule=cfg.schedule,
                               fold_tp=fold_tp)
        from distir.transforms.spmd.compose import plan_dtp

        _passes_fit(cfg.pp, " of one replica's tensor-parallel rank")  # written anyway
        plan = plan_dtp(analysis, cfg.dp, cfg.tp, cfg.pp, cfg.microbatches, cfg.schedule)
        fold = fold_tp and cfg.tp > 1 and plan.folds()
        if not fold:
            _passes_fit(cfg.tp * cfg.pp, " of one replica")
        return plan.lower_replica(fold_tp=fold)

    def build(self, batch_size: int) -> Function:
        built = self.functions.get(batch_size)
        if built is not None:
            return built
        if self.family == "user":
            return self._build_user(batch_size)
        import distir
        from distir.ir.types import DType

        dt = DType[self.dtype]
        s = self.sizes
        if self.family == "mlp":
            return distir.models.mlp(batch_size=batch_size, input_dim=s["width"],
                                     hidden_dim=s["width"], output_dim=s["width"],
                                     num_layers=s["num_layers"], dtype=dt)
        from distir.models.gpt2 import GPT2Config

        cfg = GPT2Config(n_layer=s["n_layer"], d_model=s["d_model"], n_head=s["n_head"],
                         vocab_size=s.get("vocab_size", 50257), seq_len=s.get("seq_len", 1024),
                         batch_size=batch_size, dtype=dt)
        if self.train is None:
            return cfg.build()
        from distir.models.presets import TrainingConfig

        t = self.train
        return TrainingConfig(cfg, t.loss, t.optimizer, t.lr).build()

    def prepared(self, batch_sizes: list[int] | tuple[int, ...]) -> Workload:
        """This workload with the functions of ``batch_sizes`` built (a user's model; the
        builders build where they are used). Raises ``ConfigError`` for a batch size the
        model cannot take."""
        if self.family != "user":
            return self
        missing = sorted({b for b in batch_sizes} - set(self.functions))
        if not missing:
            return self
        return dataclasses.replace(self, functions={
            **self.functions, **{b: self._build_user(b) for b in missing}})

    def _build_user(self, batch: int, every_weight: bool = False) -> Function:
        src = self.source
        assert src is not None
        if src.path is None:
            raise ConfigError(f"{self.name}: a function given in memory is searched at its "
                              f"own batch size {src.own_batch} only, not {batch}")
        if batch != src.own_batch and src.batch_dim is None:
            raise ConfigError(f"{self.name}: its batch size is fixed at {src.own_batch} (the "
                              f"batch input %{src.batch_input} has no symbolic first "
                              f"dimension); it cannot be searched at batch {batch}")
        if src.path.endswith(".onnx"):
            from distir.importers.onnx import import_onnx

            dims = dict(src.dims)
            if src.batch_dim is not None:
                dims[src.batch_dim] = batch
            fn = import_onnx(src.path, dims=dims).entry
        else:
            import distir

            fn = distir.load(src.path).entry
        step = _trained(fn, self.train, src.path)
        return step if every_weight else _for_search(step)

    def parameters(self) -> int:
        """The number of weights (for labels and memory sanity checks)."""
        s = self.sizes
        if self.family == "user":
            return int(s.get("weights", 0))
        if self.family == "mlp":
            return int(s["num_layers"] * s["width"] ** 2)
        d, n = s["d_model"], s["n_layer"]
        return int(12 * n * d * d + s.get("vocab_size", 50257) * d
                   + s.get("seq_len", 1024) * d)


TRANSFORMS = ("passes", "tower")
"""The transforms a search can write its programs with (``Workload.transform``)."""


def transform_of(row: dict[str, Any]) -> str:
    """The transform that wrote a search or study row's program: its ``transform`` column;
    rows written before ``dtp`` became the passes' composition (2026-11-27) say ``dtp`` or
    nothing, and were written by the tower."""
    t = (row.get("transform") or "").strip()
    return "tower" if t in ("", "dtp") else t

PASSES_MAX_DEVICES = 256
"""The most devices a program written by the passes spans in a search: the whole
configuration's, or one replica's (``tp·pp``) where replica 0's program is simulated for
all, or ``pp`` where its tensor-parallel rank 0's is (``Workload.replica_program``); see
docs/grid-search.md, "Through the passes". At 256, the GPT-3 175B training space on
1,024 GPUs simulates 146 of its 242 configurations in 185 s on 2 cores (at 64: 98 in
76 s), its largest worker at 2.8 GiB."""


def _passes_fit(devices: int, what: str) -> None:
    """Refuse a program of the passes over more than ``PASSES_MAX_DEVICES`` devices."""
    if devices > PASSES_MAX_DEVICES:
        from distir.errors import TransformError

        raise TransformError(
            f"{devices} devices{what}: the passes write and simulate every device's ops "
            f"(one replica's where the replicas run alike), which is searched up to "
            f"{PASSES_MAX_DEVICES} devices; use --transform tower")


def _trained(fn: Function, train: TrainOptions | None, where: str) -> Function:
    if train is None:
        return fn
    from distir.cli._train import train as make_step

    return make_step(fn, train, where)


KEEP_ELEMENTS: int | None = None
"""The largest initializer (elements) the search's functions keep; ``None``:
``CONCRETE_LIMIT``, the most type propagation reads as a known value."""


def _for_search(fn: Function) -> Function:
    """``fn`` with only the initializers type propagation reads as known values (see the
    module docstring); shares its parameters and ops."""
    import numpy as np

    from distir.analysis.values import CONCRETE_LIMIT

    limit = CONCRETE_LIMIT if KEEP_ELEMENTS is None else KEEP_ELEMENTS
    typed = {p.name for p in fn.params if p.type is not None}
    keep = {k: a for k, a in fn.initializers.items()
            if np.asarray(a).size <= limit or k not in typed}
    if len(keep) == len(fn.initializers):
        return fn
    out = Function(fn.name, fn.params, fn.ops, fn.returns, fn.return_types, fn.loc,
                   fn.end_loc)
    out.initializers = keep
    return out


PRESETS: dict[str, Workload] = {
    "mlp-1b": Workload("mlp-1b", "mlp", {"num_layers": 16, "width": 8192}),
    "mlp-17b": Workload("mlp-17b", "mlp", {"num_layers": 64, "width": 16384}),
    "mlp-103b": Workload("mlp-103b", "mlp", {"num_layers": 96, "width": 32768}),
    "gpt2-350m": Workload("gpt2-350m", "gpt2", {"n_layer": 24, "d_model": 1024, "n_head": 16}),
    "gpt2-1.6b": Workload("gpt2-1.6b", "gpt2", {"n_layer": 24, "d_model": 2048, "n_head": 16}),
    "gpt2-13b": Workload("gpt2-13b", "gpt2", {"n_layer": 40, "d_model": 5120, "n_head": 40}),
    "gpt2-175b": Workload("gpt2-175b", "gpt2", {"n_layer": 96, "d_model": 12288,
                                                 "n_head": 96}),
}
for _name in ("gpt2-350m", "gpt2-1.6b", "gpt2-13b", "gpt2-175b"):
    PRESETS[f"{_name}-train"] = dataclasses.replace(PRESETS[_name], name=f"{_name}-train",
                                                    train=_GPT2_TRAIN)
# GPT-3 175B (Brown et al. 2020, table 2.1): 96 layers, d 12288, 96 heads, sequence 2048,
# trained with Adam on 1,536 sequences per step (3.2M tokens).
PRESETS["gpt3-175b"] = Workload("gpt3-175b", "gpt2", {
    "n_layer": 96, "d_model": 12288, "n_head": 96, "seq_len": 2048})
PRESETS["gpt3-175b-train"] = dataclasses.replace(PRESETS["gpt3-175b"], name="gpt3-175b-train",
                                                 train=_GPT2_TRAIN)

# The paper's batch sizes: training uses one global batch per run; inference explores 2^7..2^20.
DEFAULT_BATCHES = {
    "mlp": [8192],
    "gpt2": [2 ** k for k in range(7, 21)],
}

DEFAULT_GPT2_TRAIN_BATCH = 64
"""Sequences per step of a GPT-2 training search unless ``--batch-sizes`` says otherwise
(``distir.models.presets.DEFAULT_GPT2_BATCH``)."""


PRESET_TRAIN_BATCHES = {"gpt3-175b-train": 1536}
"""Sequences per step of presets trained at their own published batch."""


def default_batches(w: Workload) -> list[int]:
    """The batch sizes a search of ``w`` explores by default: the paper's for the MLP and
    GPT-2 inference, one batch of 64 sequences for GPT-2 training (a preset's published
    batch, ``PRESET_TRAIN_BATCHES``), a user's model's own."""
    if w.name in PRESET_TRAIN_BATCHES and w.train is not None:
        return [PRESET_TRAIN_BATCHES[w.name]]
    if w.source is not None:
        return [w.source.own_batch]
    if w.family == "gpt2" and w.train is not None:
        return [DEFAULT_GPT2_TRAIN_BATCH]
    return list(DEFAULT_BATCHES[w.family])


def _train_suffix(name: str) -> tuple[str, TrainOptions | None]:
    """``gpt2-1.6b-train`` -> (``gpt2-1.6b``, Adam/cross-entropy);
    ``...-train-LOSS-OPTIMIZER`` -> those."""
    base, sep, rest = name.partition("-train")
    if not sep or not base:
        return name, None
    if not rest:
        return base, _GPT2_TRAIN
    parts = rest.split("-")
    if len(parts) == 3 and parts[0] == "":
        return base, TrainOptions(parts[1], parts[2], _GPT2_TRAIN.lr)
    return name, None


def _is_file(model: str) -> bool:
    return model.endswith((".onnx", ".dir"))


def workload(model: str | Function | Module, preset: str | None = None, *,
             train: TrainOptions | None = None, dims: dict[str, int] | None = None,
             batch_input: str | None = None, name: str | None = None,
             batch_sizes: list[int] | None = None, **sizes: Any) -> Workload:
    """A workload by what the user names:

    - a preset (``mlp-1b`` ... ``gpt2-175b``, ``gpt2-350m-train`` ...; ``preset=`` or
      ``model``), or a family with sizes (``mlp`` with ``num_layers``, ``width``; ``gpt2``
      with ``n_layer``, ``d_model``, ``n_head``, ``vocab_size``, ``seq_len``), or the label
      of one as result files write it (``mlp-4-64``, ``gpt2-2-64-4-train``);
    - a file: ``FILE.onnx`` (its symbolic dimensions bound by ``dims``) or ``FILE.dir``;
    - a ``Function`` or ``Module`` (its entry), searched at its own batch size.

    ``train`` makes a forward model (GPT-2 or the user's) into one training step.
    ``batch_input`` names the parameter that carries the batch (default: the first one not
    bound to an initializer); its first dimension is the batch size. An ONNX model whose
    batch dimension is symbolic and not bound by ``dims`` is imported at ``batch_sizes[0]``
    (the search re-binds it to each of ``batch_sizes``). Errors are one-line
    ``ConfigError``/``ImportError_``s.
    """
    if isinstance(model, Function | Module):
        fn = model.entry if isinstance(model, Module) else model
        if dims:
            raise ConfigError("dims bind an ONNX model's symbolic dimensions; a function's "
                              "are already sizes")
        label = name or f"@{fn.name}"
        return _user(label, fn, None, (), None, batch_input, train)
    if not isinstance(model, str):
        raise ConfigError(f"workload takes a model name, a file or a function, not "
                          f"{type(model).__name__}")
    if _is_file(model):
        return _file_workload(model, dims or {}, batch_input, train, name, batch_sizes, sizes)
    if dims or batch_input:
        raise ConfigError(f"--dim and --batch-input go with a model file (FILE.onnx or "
                          f"FILE.dir), not --model {model}")
    base, named_train = _train_suffix(preset or model)
    if named_train is not None and train is not None and \
            (named_train.loss, named_train.optimizer) != (train.loss, train.optimizer):
        raise ConfigError(f"--model {preset or model} is already a training step "
                          f"({named_train.label}); drop --train or name the forward model")
    train = train or named_train
    w = _builder_workload(base if named_train else model, None if named_train else preset,
                          sizes, shown=preset or model)
    if train is None:
        return w
    if w.family == "mlp":
        raise ConfigError(f"--model {w.name} is already a training step (the MLP's, SGD); "
                          "--train applies to forward models (gpt2, a model file)")
    # The learning rate changes no cost, so the label names only the loss and optimizer.
    same = (train.loss, train.optimizer) == (_GPT2_TRAIN.loss, _GPT2_TRAIN.optimizer)
    suffix = "train" if same else train.label
    return dataclasses.replace(w, name=f"{w.name}-{suffix}", train=train)


def _builder_workload(model: str, preset: str | None, sizes: dict[str, Any], *,
                      shown: str) -> Workload:
    """A forward preset, or the MLP/GPT-2 builder with sizes (no training suffix);
    ``shown`` is the name as the user gave it, for messages."""
    name = preset or model
    if name in PRESETS and PRESETS[name].train is None:
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
        raise ConfigError(f"unknown model '{shown}': use mlp, gpt2, a preset "
                          f"({', '.join(PRESETS)}) or a model file (FILE.onnx, FILE.dir)")
    missing = [k for k in need if k not in given]
    if missing:
        raise ConfigError(f"--model {model} needs --preset or the sizes "
                          + ", ".join("--" + k.replace("_", "-") for k in missing))
    label = f"{model}-" + "-".join(f"{given[k]}" for k in need)
    return Workload(label, model, given, dtype)


def _file_workload(path: str, dims: dict[str, int], batch_input: str | None,
                   train: TrainOptions | None, name: str | None,
                   batch_sizes: list[int] | None, sizes: dict[str, Any]) -> Workload:
    given = sorted(k for k, v in sizes.items() if v is not None)
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ConfigError(f"{flags}: sizes and --dtype go with the mlp and gpt2 builders; "
                          f"{path} has its own")
    label = name or os.path.basename(path)
    if path.endswith(".dir"):
        import distir

        if dims:
            raise ConfigError(f"{path}: --dim binds an ONNX model's symbolic dimensions; a "
                              ".dir file has sizes only")
        return _user(label, distir.load(path).entry, path, (), None, batch_input, train)
    from distir.importers.onnx import import_onnx

    batch_dim = _onnx_batch_dim(path, batch_input)
    bound = dict(dims)
    if batch_dim is not None and batch_dim not in bound and batch_sizes:
        bound[batch_dim] = batch_sizes[0]
    fn = import_onnx(path, dims=bound).entry
    return _user(label, fn, path, tuple(sorted(bound.items())), batch_dim, batch_input, train)


def _onnx_batch_dim(path: str, batch_input: str | None) -> str | None:
    """The symbolic dimension at axis 0 of the ONNX model's batch input (the named one, or
    its first graph input that is not an initializer), or None when it has a fixed size."""
    from distir.importers.onnx import load_model

    proto = load_model(path)[0]
    inits = {t.name for t in proto.graph.initializer}
    inputs = [vi for vi in proto.graph.input if vi.name not in inits]
    chosen = [vi for vi in inputs if batch_input is None or vi.name == batch_input][:1]
    if not chosen:
        return None  # reported by _user, which knows the parameters
    dims = chosen[0].type.tensor_type.shape.dim
    if dims and dims[0].WhichOneof("value") == "dim_param":
        return str(dims[0].dim_param)
    return None


def _user(label: str, fn: Function, path: str | None, dims: tuple[tuple[str, int], ...],
          batch_dim: str | None, batch_input: str | None,
          train: TrainOptions | None) -> Workload:
    """The workload of a user's function as imported at its own batch size."""
    import numpy as np

    from distir.ir.types import TensorType

    free = [p for p in fn.params if p.name not in fn.initializers]
    where = path or label
    if batch_input is not None:
        chosen = [p for p in fn.params if p.name == batch_input]
        if not chosen:
            names = ", ".join(str(p.name) for p in free) or "none"
            raise ConfigError(f"{where}: --batch-input {batch_input} is not an input of the "
                              f"model (its inputs: {names})")
    else:
        chosen = free[:1]
        if not chosen:
            raise ConfigError(f"{where}: every parameter is bound to an initializer; the "
                              "model has no input to carry a batch")
    x = chosen[0]
    t = x.type
    own = t.shape[0] if isinstance(t, TensorType) and t.rank >= 1 else 1
    weights = sum(int(np.asarray(a).size) for a in fn.initializers.values()
                  if np.issubdtype(np.asarray(a).dtype, np.floating))
    full = _trained(fn, train, where)
    step = _for_search(full)
    left_out = tuple(sorted(set(full.initializers) - set(step.initializers)))
    source = UserModel(path, dims, batch_dim, str(x.name), own, batch_input is not None,
                       left_out)
    name = label if train is None else f"{label}+{train.label}"
    return Workload(name, "user", {"weights": weights}, train=train, source=source,
                    functions={own: step})
