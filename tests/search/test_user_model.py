"""The grid search on the user's own model: an exported torch model (ONNX, symbolic batch),
its training step, a .dir file, a function from Python, and the one-line errors."""

from __future__ import annotations

import csv
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

import distir
from distir.cli import main
from distir.errors import ConfigError
from distir.ir.types import DType, ScalarType, TensorType
from grid_search import enumerate_space, run_search, workload
from grid_search.models import TrainOptions, default_batches

STATUSES = {"ok", "oom", "refused", "error"}


def _export(module: object, example: object, path: Path, dynamic: dict) -> str:
    import torch

    torch.onnx.export(module, (example,), str(path), input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": dynamic}, dynamo=False)
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A two-layer perceptron over (batch, tokens, 16) with a symbolic batch, the same with
    a fixed batch, a model whose output is integer (an argmax), and a perceptron of width 96
    (``wide``)."""
    import torch

    class MLP(torch.nn.Module):
        def __init__(self, d_in: int = 16, hidden: int = 32, d_out: int = 8) -> None:
            super().__init__()
            self.fc1 = torch.nn.Linear(d_in, hidden)
            self.fc2 = torch.nn.Linear(hidden, d_out)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(torch.relu(self.fc1(x)))

    class ArgMax(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).argmax(-1)

    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("models")
    x = torch.zeros(4, 3, 16)
    return {"mlp": _export(MLP(), x, d / "mlp.onnx", {0: "batch"}),
            "fixed": _export(MLP(), x, d / "fixed.onnx", {}),
            "argmax": _export(ArgMax(), x, d / "argmax.onnx", {0: "batch"}),
            # Weights over CONCRETE_LIMIT elements, which the search's functions leave out.
            "wide": _export(MLP(96, 96, 96), torch.zeros(4, 3, 96), d / "wide.onnx",
                            {0: "batch"})}


def _check_rows(rows: list[dict], configs: list) -> None:
    """One row per configuration, in order; every row ok/oom with figures, or refused/error
    with its reason."""
    assert [(int(r["batch_size"]), int(r["dp"]), int(r["tp"]), int(r["pp"]),
             int(r["microbatches"])) for r in rows] == [
        (c.batch_size, c.dp, c.tp, c.pp, c.microbatches) for c in configs]
    for r in rows:
        assert r["status"] in STATUSES
        if r["status"] in ("ok", "oom"):
            assert float(r["latency_s"]) > 0 and int(r["peak_memory_bytes"]) > 0
        else:
            assert r["reason"], r


def test_an_exported_model_is_searched_at_the_batch_sizes_given(models) -> None:
    w = workload(models["mlp"], dims={"batch": 8})
    assert (w.name, w.family, w.training, default_batches(w)) == ("mlp.onnx", "user", False,
                                                                  [8])
    assert w.source is not None and w.source.batch_dim == "batch"
    configs = list(enumerate_space(w.name, 4, [4, 8], max_microbatches=4,
                                   schedules=("gpipe",)))
    res = run_search(w, configs, hardware="h100-sxm", progress=None)
    _check_rows(res.rows, configs)
    assert any(r["status"] == "ok" for r in res.rows)
    # The batch dimension is re-bound per batch size: each batch's function has its own.
    w2 = w.prepared([4, 8])
    assert [w2.build(b).params[0].type.shape for b in (4, 8)] == [(4, 3, 16), (8, 3, 16)]


def test_weights_do_not_travel_to_the_workers(models) -> None:
    from distir.analysis.values import CONCRETE_LIMIT

    w = workload(models["mlp"], dims={"batch": 8})
    full = distir.import_onnx(models["mlp"], dims={"batch": 8}).entry
    kept = w.build(8).initializers
    assert set(kept) <= set(full.initializers)
    assert all(np.asarray(a).size <= CONCRETE_LIMIT for a in kept.values())
    # What travels (pickled, to processes or Ray tasks) is the function without weights,
    # and it simulates as the full one does.
    back = pickle.loads(pickle.dumps(w))
    fn = back.build(8)
    assert distir.dumps(fn) == distir.dumps(full)
    a, b = distir.simulate(fn), distir.simulate(full)
    assert (a.latency_s, a.peak_memory_bytes) == (b.latency_s, b.peak_memory_bytes)


def test_real_runs_bind_the_models_own_weights(models) -> None:
    """For a run on devices (``analyze(weights=True)``), every configuration's program is
    the searched one, its placed parameters bound to the file's values (a split weight's
    shards concatenate back to it), the optimizer's state to its first step's; only the
    data (and the loss's target) is left to random draws."""
    from grid_search.real import program_fingerprint
    from grid_search.space import Config

    w = workload(models["wide"], dims={"batch": 8}, train=TrainOptions("mse", "adam", 0.1))
    full = distir.import_onnx(models["wide"], dims={"batch": 8}).entry.initializers
    big = max(full, key=lambda k: np.asarray(full[k]).size)
    searched, real = w.analyze(8), w.analyze(8, weights=True)
    for dp, tp, pp, k in ((1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 2)):
        cfg = Config(w.name, 8, dp, tp, pp, k, "1f1b")
        fn = w.program(real, cfg)
        assert program_fingerprint(fn) == program_fingerprint(w.program(searched, cfg))
        free = {p.name for p in fn.params if p.name not in fn.initializers}
        assert all(n.startswith(("x", "target")) for n in free), free
        parts = [np.asarray(a) for n, a in fn.initializers.items() if n.startswith(big)
                 and "adam" not in n]
        whole = np.asarray(full[big])
        assert any(np.array_equal(p, whole) for p in parts) or np.array_equal(
            np.sort(np.concatenate([p.ravel() for p in parts])), np.sort(whole.ravel()))


@pytest.mark.parametrize("train", [None, TrainOptions("mse", "sgd", 0.1)])
def test_weights_left_out_are_still_weights_to_the_transform(models, train) -> None:
    """The search's functions lose their large initializers; without being told, the
    transform took the unbound weights for inputs and refused every D and K (the batch
    inputs are the unbound parameters sharing the commonest first dimension: 96 here)."""
    w = workload(models["wide"], dims={"batch": 8}, train=train)
    assert w.source is not None and len(w.source.weights) >= 2
    assert not set(w.source.weights) & set(w.build(8).initializers)
    an = w.analyze(8)
    assert {p.name for p in an.sharding.data} == {"x"} | ({"target"} if train else set())
    configs = list(enumerate_space(w.name, 4, [8], max_microbatches=2, schedules=("gpipe",)))
    rows = run_search(w, configs, hardware="h100-sxm", progress=None).rows
    _check_rows(rows, configs)
    assert {r["status"] for r in rows} == {"ok"}, [r["reason"] for r in rows]


def test_a_weight_named_to_the_transform_must_be_a_parameter(models) -> None:
    from distir.errors import TransformError
    from distir.transforms import analyze

    fn = workload(models["wide"], dims={"batch": 8}).build(8)
    with pytest.raises(TransformError, match="weight %nope is not a parameter"):
        analyze(fn, weights=["nope"])


@pytest.mark.parametrize("loss, optimizer", [("mse", "sgd"), ("cross_entropy", "adam")])
def test_the_training_step_of_an_exported_model_is_searched(models, loss, optimizer) -> None:
    train = TrainOptions(loss, optimizer, 0.1)
    w = workload(models["mlp"], dims={"batch": 8}, train=train)
    assert w.name == f"mlp.onnx+train-{loss}-{optimizer}" and w.training
    step = w.build(8)
    target = next(p for p in step.params if p.name == "target")
    assert target.type == (TensorType(DType.Float32, (8, 3, 8), 0) if loss == "mse"
                           else TensorType(DType.Int64, (8, 3), 0))
    loss_t = distir.infer_types(step)[0]
    assert isinstance(loss_t, ScalarType | TensorType) and (
        isinstance(loss_t, ScalarType) or loss_t.numel == 1)
    assert distir.simulate(step).latency_s > 0
    configs = list(enumerate_space(w.name, 4, [8], max_microbatches=4))
    rows = run_search(w, configs, hardware="h100-sxm", progress=None, workers=2).rows
    _check_rows(rows, configs)


def test_the_command_line_on_an_onnx_file_with_train(models, tmp_path, capsys) -> None:
    out = tmp_path / "r.csv"
    rc = main(["grid-search", "--model", models["mlp"], "--dim", "batch=8", "--devices", "4",
               "--max-microbatches", "4", "--workers", "1", "--train", "--loss", "mse",
               "--batch-sizes", "4", "8", "-o", str(out), "--plot", str(tmp_path / "p.png")])
    assert rc == 0
    rows = list(csv.DictReader(open(out, encoding="utf-8")))
    assert {r["model"] for r in rows} == {"mlp.onnx+train-mse-sgd"}
    assert sorted({int(r["batch_size"]) for r in rows}) == [4, 8]
    assert len(rows) == 2 * 9 and {r["status"] for r in rows} <= STATUSES
    # Without --dim, --batch-sizes binds the batch dimension.
    rc = main(["grid-search", "--model", models["mlp"], "--devices", "2", "--workers", "1",
               "--batch-sizes", "2", "--max-microbatches", "2"])
    assert rc == 0
    assert "mlp.onnx on 2 x h100-sxm: 3 configurations" in capsys.readouterr().out


def test_a_fixed_batch_is_the_only_one_searched(models, capsys) -> None:
    w = workload(models["fixed"])
    assert w.source is not None and (w.source.batch_dim, w.source.own_batch) == (None, 4)
    with pytest.raises(ConfigError, match=r"batch size is fixed at 4 .*batch 8"):
        w.prepared([8])
    rc = main(["grid-search", "--model", models["fixed"], "--devices", "2", "--workers", "1",
               "--batch-sizes", "8", "16", "--max-microbatches", "2"])
    assert rc == 0
    out = capsys.readouterr()
    assert "only batch 4 is searched, not --batch-sizes 8 16" in out.err
    assert "fixed.onnx on 2 x h100-sxm: 3 configurations" in out.out


def test_import_writes_the_training_step_and_a_dir_file_is_searched(models, tmp_path,
                                                                    capsys) -> None:
    path = tmp_path / "step.dir"
    rc = main(["import", models["mlp"], "--dim", "batch=4", "--train", "--loss",
               "cross_entropy", "--optimizer", "adam", "--lr", "0.001", "-o", str(path)])
    assert rc == 0
    m = distir.load(path)
    fn = m.entry
    names = [p.name for p in fn.params]
    assert "target" in names and names[-1] == "adam_step"
    assert "fc1.bias.adam_m" in fn.initializers  # the optimizer state is written too
    adam = [op for op in fn.ops if op.op_type == "AdamOptimizer"]
    assert adam and all(op.attrs["lr"] == pytest.approx(0.001) for op in adam)
    # The weights written beside it make the step executable as it is.
    x = np.random.default_rng(0).normal(size=(4, 3, 16)).astype(np.float32)
    y = np.zeros((4, 3), np.int64)
    loss = distir.execute(fn, [x, y])[0]
    assert np.isfinite(loss).all()

    # A .dir file is searched at its own batch size; its step is already a training step.
    out = tmp_path / "r.csv"
    rc = main(["grid-search", "--model", str(path), "--devices", "4", "--workers", "1",
               "--max-microbatches", "2", "-o", str(out), "--plot", str(tmp_path / "p.png")])
    assert rc == 0
    rows = list(csv.DictReader(open(out, encoding="utf-8")))
    assert {(r["model"], r["batch_size"]) for r in rows} == {("step.dir", "4")}
    assert len(rows) == 6 and {r["status"] for r in rows} <= STATUSES


def test_a_function_in_python(models) -> None:
    fn = distir.import_onnx(models["mlp"], dims={"batch": 8}).entry
    res = run_search(fn, devices=2, hardware="h100-sxm", progress=None)
    assert len(res.rows) == 1 + 1 + 7  # D2, T2, P2 with K = 2 .. 128
    assert {r["model"] for r in res.rows} == {"@main"}
    assert {int(r["batch_size"]) for r in res.rows} == {8}
    assert any(r["status"] == "ok" for r in res.rows)
    w = workload(distir.Module([fn]), name="mine", batch_input="x")
    assert (w.name, w.batch_inputs) == ("mine", ("x",))
    with pytest.raises(ConfigError, match="own batch size 8 only, not 16"):
        w.prepared([16])
    with pytest.raises(ConfigError, match="give the configurations, or devices=N"):
        run_search(fn)
    # Its real run builds the searched program (there is no file to read weights from).
    from grid_search.real import measure
    from grid_search.space import Config

    rows = measure(workload(fn), [Config("@main", 8, 1, 1, 1, 1, "1f1b")], backend="gloo",
                   steps=1, warmup=0, progress=None)
    assert rows[0]["measured_status"] == "ok", rows[0]


@pytest.mark.parametrize("argv, pattern", [
    (["--model", "gpt3-train"], r"unknown model 'gpt3-train': use mlp, gpt2, a preset"),
    (["--model", "nothing.onnx"], r"nothing.onnx: no such file"),
    (["--model", "{bad}", "--dim", "batch=8"], r"bad.onnx: not an ONNX model"),
    (["--model", "{mlp}", "--dim", "batch=8", "--loss", "mse"],
     r"--loss goes with --train"),
    (["--model", "{argmax}", "--dim", "batch=8", "--train"],
     r"argmax.onnx: --train --loss mse: the first result of @main must be a "
     r"floating-point tensor"),
    (["--model", "{mlp}", "--dim", "batch=8", "--batch-input", "ids"],
     r"--batch-input ids is not an input of the model \(its inputs: x\)"),
    (["--model", "{mlp}", "--dim", "batch=8", "--n-layer", "2"],
     r"--n-layer: sizes and --dtype go with the mlp and gpt2 builders"),
    (["--model", "mlp-1b", "--train"], r"mlp-1b is already a training step"),
    (["--model", "gpt2-1.6b-train", "--train", "--loss", "mse"],
     r"gpt2-1.6b-train is already a training step"),
    (["--model", "gpt2-1.6b", "--dim", "batch=8"], r"--dim and --batch-input go with a "
                                                   r"model file"),
])
def test_errors_are_one_line(models, tmp_path, capsys, argv, pattern) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf at all")
    files = {"{bad}": str(bad), **{"{" + k + "}": v for k, v in models.items()}}
    argv = [files.get(a, a) for a in argv]
    rc = main(["grid-search", *argv, "--devices", "2", "--workers", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and err[0].startswith("error: "), err
    assert re.search(pattern, err[0]), err[0]


def test_dim_on_a_dir_file_and_train_without_weights(tmp_path) -> None:
    path = tmp_path / "g.dir"
    path.write_text(distir.dumps(distir.models.gpt2(1, 16, 2, 20, 4, 2)))
    with pytest.raises(ConfigError, match="--dim binds an ONNX model's symbolic"):
        workload(str(path), dims={"batch": 2})
    with pytest.raises(ConfigError, match="--train needs the model's weights"):
        workload(str(path), train=TrainOptions())
    w = workload(str(path))
    assert (w.source.batch_input, w.source.own_batch) == ("input_ids", 2)  # type: ignore


def test_an_untransformable_model_gives_rows_not_an_error() -> None:
    """Whatever the transform refuses (or fails on) becomes rows with reasons."""
    w = workload("gpt2-1-32-2-train", vocab_size=40, seq_len=4)
    assert w.train == TrainOptions("cross_entropy", "adam", 1e-4)
    configs = list(enumerate_space(w.name, 4, [4], max_microbatches=2))
    rows = run_search(w, configs, hardware="h100-sxm", progress=None).rows
    _check_rows(rows, configs)


TINY = {"n_layer": 1, "d_model": 32, "n_head": 2, "vocab_size": 40, "seq_len": 4,
        "n_positions": 4}


@pytest.mark.parametrize("name", ["gpt2-350m-train", "gpt2-1.6b-train", "gpt2-13b-train",
                                  "gpt2-175b-train"])
def test_the_training_presets_build_and_simulate_at_tiny_sizes(name) -> None:
    from distir.models import presets

    assert name in presets.names(training=True)
    cfg = presets.get(name, batch_size=2, **TINY)
    assert (cfg.loss, cfg.optimizer, cfg.forward.n_head) == ("cross_entropy", "adam", 2)
    fn = cfg.build()
    distir.verify(fn)
    types = distir.infer_types(fn)
    weights = cfg.weight_shapes()
    # the loss, every weight updated, Adam's two moments per weight, the step count
    assert len(types) == 1 + 3 * len(weights) + 1
    assert [t.shape for t in types[1:1 + len(weights)]] == list(weights.values())
    assert distir.simulate(fn).latency_s > 0
    # The search's preset of the same name builds the same step.
    import dataclasses

    from grid_search.models import PRESETS

    w = dataclasses.replace(PRESETS[name], sizes={k: v for k, v in TINY.items()
                                                  if k != "n_positions"})
    assert distir.dumps(w.build(2)) == distir.dumps(fn)


def test_training_labels_round_trip() -> None:
    """Result files name a training workload by label; ``workload(label)`` rebuilds it."""
    w = workload("gpt2", n_layer=2, d_model=32, n_head=2, train=TrainOptions("mse", "sgd"))
    assert w.name == "gpt2-2-32-2-train-mse-sgd"
    back = workload(w.name)
    assert (back.name, back.sizes, back.train.loss, back.train.optimizer) == (  # type: ignore
        w.name, w.sizes, "mse", "sgd")
    w = workload("gpt2-1.6b-train", train=TrainOptions("cross_entropy", "adam", 0.5))
    assert (w.name, w.train.lr) == ("gpt2-1.6b-train", 0.5)  # type: ignore[union-attr]
    assert workload("gpt2-13b-train").sizes == workload("gpt2-13b").sizes


def test_run_top_records_its_inputs_and_compare_warns_of_old_adam_rows(models, tmp_path,
                                                                         capsys) -> None:
    """A real run of a model file records how its inputs were made (the file's weights, the
    optimizer's state as training holds it); ``study compare`` warns of Adam rows measured
    before that (random moments), and of rows that computed on NaN."""
    from grid_search.study import main as study

    out = tmp_path / "top.csv"
    assert main(["grid-search", "--model", models["mlp"], "--dim", "batch=8", "--devices", "1",
                 "--workers", "1", "--train", "--loss", "mse", "--optimizer", "adam",
                 "--run-top", "1", "--backend", "gloo", "-o", str(out),
                 "--plot", str(tmp_path / "p.png")]) == 0
    rows = list(csv.DictReader(open(out, encoding="utf-8")))
    ran = [r for r in rows if r["measured_status"]]
    assert [r["measured_inputs"] for r in ran] == ["training-state+weights"]
    assert [r["measured_nonfinite"] for r in ran] == [""]
    old = tmp_path / "old.csv"
    for r in ran:
        r["measured_inputs"] = ""
        r["measured_nonfinite"] = "3"
    with open(old, "w", newline="", encoding="utf-8") as f:
        wr = csv.DictWriter(f, list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    capsys.readouterr()
    opts = ["--model", models["mlp"], "--dim", "batch=8", "--train", "--loss", "mse",
            "--optimizer", "adam"]
    assert study(["compare", str(old), *opts, "--hardware", "h100-sxm",
                  "-o", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert "1 row(s) were measured before runs drew Adam's moments" in err
    assert "1 row(s) computed on NaN" in err
    text = (tmp_path / "c.md").read_text(encoding="utf-8")
    assert "drew Adam's moments" in text


def test_run_top_rows_of_a_model_file_are_compared(models, tmp_path, capsys) -> None:
    """``grid-search --run-top`` on an ONNX file (gloo on the CPU), then ``study compare
    --model`` on its CSV: the measured rows rebuilt from the file with the search's options,
    their fingerprints checked; without --model, or with another model, a one-line error."""
    from grid_search.study import main as study

    out = tmp_path / "top.csv"
    search = ["grid-search", "--model", models["mlp"], "--dim", "batch=8", "--devices", "2",
              "--max-microbatches", "2", "--workers", "1", "--train", "--loss", "mse",
              "--run-top", "2", "--backend", "gloo", "-o", str(out),
              "--plot", str(tmp_path / "p.png")]
    assert main(search) == 0
    rows = list(csv.DictReader(open(out, encoding="utf-8")))
    ran = [r for r in rows if r["measured_status"]]
    assert len(ran) == 2 and all(len(r["program_fingerprint"]) == 16 for r in ran)
    capsys.readouterr()
    opts = ["--model", models["mlp"], "--dim", "batch=8", "--train", "--loss", "mse"]
    assert study(["compare", str(out), *opts, "--hardware", "h100-sxm",
                  "-o", str(tmp_path / "c")]) == 0
    text = (tmp_path / "c.md").read_text(encoding="utf-8")
    assert "Programs: 2 row(s) record the fingerprint" in text
    assert "Model file: mlp.onnx+train-mse-sgd" in text
    assert re.search(r"^\| 8 \| 2 \| ", text, re.M)  # the two measured rows, not the others
    for argv, says in (
            ([], r"rows are of the model file mlp\.onnx\+train-mse-sgd: pass --model FILE"),
            ([*opts, "--optimizer", "adam"],
             r"rows are of mlp\.onnx\+train-mse-sgd, and --model .* is "
             r"mlp\.onnx\+train-mse-adam"),
            (["--dim", "batch=8"], r"--dim: these go with --model FILE")):
        capsys.readouterr()
        assert study(["compare", str(out), *argv, "-o", str(tmp_path / "x")]) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and re.search(says, err[0]), err


def test_study_explain_rebuilds_a_run_top_row_of_a_model_file(models, tmp_path,
                                                               capsys) -> None:
    """``study explain --model FILE`` with the search's options runs and explains the very
    program a ``grid-search --run-top`` row measured (the fingerprints agree); the file
    options without a file are a one-line error."""
    from grid_search.study import main as study

    out = tmp_path / "top.csv"
    opts = ["--model", models["mlp"], "--dim", "batch=8", "--train", "--loss", "mse"]
    assert main(["grid-search", *opts, "--devices", "2", "--max-microbatches", "2",
                 "--workers", "1", "--run-top", "1", "--backend", "gloo", "-o", str(out),
                 "--plot", str(tmp_path / "p.png")]) == 0
    row = next(r for r in csv.DictReader(open(out, encoding="utf-8"))
               if r["measured_status"] == "ok")
    assert study(["explain", *opts, "--batch-size", "8", "--dp", row["dp"], "--tp", row["tp"],
                  "--pp", row["pp"], "--microbatches", row["microbatches"], "--schedule",
                  row["schedule"], "--backend", "gloo", "--steps", "1", "--warmup", "0",
                  "-o", str(tmp_path / "x")]) == 0
    head = (tmp_path / "x" / "explain.txt").read_text(encoding="utf-8").splitlines()[0]
    assert head.startswith("mlp.onnx+train-mse-sgd (Float32) batch 8, ")
    assert f"program {row['program_fingerprint']}:" in head
    # the program and its small weights, read back, explain the same traces elsewhere
    assert (tmp_path / "x" / "program.npz").is_file()
    assert main(["explain", "--program", str(tmp_path / "x" / "program.dir"),
                 str(tmp_path / "x" / "prof"), "--json"]) == 0
    capsys.readouterr()
    assert study(["explain", "--model", "mlp-2-32", "--dim", "batch=8", "--batch-size", "8",
                  "-o", str(tmp_path / "y")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dim: it goes with a model file" in err[0], err
    # the header names a model file's own dtype
    from distir.ir.types import DType
    from distir.models import mlp
    from grid_search.study import _main_dtype

    assert _main_dtype(mlp(16, 8, 8, 4, 2, dtype=DType.Float16)) == "Float16"


def test_study_measure_runs_a_model_file(models, tmp_path, capsys) -> None:
    """``study measure`` takes a model file with the options its search was given, records
    the file's own dtype, and its memory check picks the batch sizes predicted near a cap
    (on gloo, the cap is checked against the live bytes by types): the larger runs out."""
    from grid_search.study import main as study

    out = tmp_path / "m.csv"
    assert study(["measure", "--model", models["mlp"], "--train", "--loss", "mse",
                  "--batch-sizes", "4", "8", "--max-devices", "1", "--backend", "gloo",
                  "--steps", "1", "--warmup", "0", "-o", str(out)]) == 0
    rows = list(csv.DictReader(open(out, encoding="utf-8")))
    assert [(r["model"], r["batch_size"], r["measured_status"]) for r in rows] == [
        ("mlp.onnx+train-mse-sgd", "4", "ok"), ("mlp.onnx+train-mse-sgd", "8", "ok")]
    assert "'dtype': 'Float32'" in rows[0]["env"]
    w = workload(models["mlp"], train=TrainOptions(loss="mse"), batch_sizes=[4, 1024])
    import distir
    from grid_search.study import _configs
    # (the CPU holds the live tensors alone: the liveness peaks, not a GPU's workspaces)
    peaks = {c.batch_size: max(distir.simulate(w.program(w.analyze(c.batch_size), c),
                                               "h100-sxm").peak_memory_bytes.values())
             for c in _configs(w, [4, 1024], 1, 1, "1f1b")}
    cap = (peaks[4] + peaks[1024]) // 2
    mc = tmp_path / "mc.csv"
    assert study(["measure", "--model", models["mlp"], "--train", "--loss", "mse",
                  "--batch-sizes", "4", "1024", "--max-devices", "1", "--max-microbatches", "1",
                  "--backend", "gloo", "--steps", "1", "--warmup", "0", "--memory-check",
                  "--memory-limit", str(cap), "--margin", "100", "-o", str(mc)]) == 0
    got = {r["batch_size"]: r["measured_status"] for r in csv.DictReader(open(mc))}
    assert got == {"4": "ok", "1024": "oom"}
    capsys.readouterr()
    assert study(["measure", "--model", "mlp-2-32", "--dim", "batch=4", "--batch-sizes", "4",
                  "--max-devices", "1", "-o", str(tmp_path / "x.csv")]) != 0
    assert "--dim: it goes with a model file" in capsys.readouterr().err
