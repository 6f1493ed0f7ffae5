"""``If`` nodes that branch on a shape are specialized once the dimensions are bound: the
branch taken replaces the ``If`` (nested ones too), and the model imports as a straight
line. An ``If`` on the inputs' values is refused in one line, as before."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import distir
from distir.errors import ImportError_

F32 = TensorProto.FLOAT


def _branch(name: str, op: str, x: str = "x") -> onnx.GraphProto:
    return helper.make_graph([helper.make_node(op, [x], [f"{name}_y"])], name, [],
                             [helper.make_tensor_value_info(f"{name}_y", F32, None)])


def _model(cond_nodes: list, then: onnx.GraphProto, other: onnx.GraphProto) -> onnx.ModelProto:
    nodes = [*cond_nodes,
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["batch", 4])],
                          [helper.make_tensor_value_info("y", F32, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _width_is(n: int) -> list:
    """``cond = Shape(x)[1] == n``."""
    return [helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Constant", [], ["one"], value=helper.make_tensor(
                "one", TensorProto.INT64, [], [1])),
            helper.make_node("Gather", ["s", "one"], ["w"], axis=0),
            helper.make_node("Constant", [], ["n"], value=helper.make_tensor(
                "n", TensorProto.INT64, [], [n])),
            helper.make_node("Equal", ["w", "n"], ["cond"])]


@pytest.mark.parametrize(("width", "op"), [(4, "Relu"), (5, "Neg")])
def test_an_if_on_a_shape_takes_its_branch(width: int, op: str) -> None:
    m = distir.import_onnx(_model(_width_is(width), _branch("then", "Relu"),
                                  _branch("else", "Neg")), dims={"batch": 2})
    kinds = [o.op_type for o in m.entry.ops]
    assert "If" not in kinds and op in kinds and ({"Relu", "Neg"} - {op}).isdisjoint(kinds)
    x = np.arange(-4, 4, dtype=np.float32).reshape(2, 4)
    (y,) = distir.execute(m.entry, [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0) if op == "Relu" else -x)


def test_nested_ifs_are_specialized() -> None:
    inner = helper.make_graph(
        [*_width_is(4), helper.make_node("If", ["cond"], ["in_y"],
                                         then_branch=_branch("a", "Abs"),
                                         else_branch=_branch("b", "Neg"))],
        "inner", [], [helper.make_tensor_value_info("in_y", F32, None)])
    # (the inner condition's names differ from the outer's: rename them)
    for n in inner.node:
        n.output[:] = [f"i_{o}" if o in ("s", "one", "w", "n", "cond") else o for o in n.output]
        n.input[:] = [f"i_{o}" if o in ("s", "one", "w", "n", "cond") else o for o in n.input]
    m = distir.import_onnx(_model(_width_is(4), inner, _branch("else", "Neg")),
                           dims={"batch": 3})
    kinds = [o.op_type for o in m.entry.ops]
    assert "If" not in kinds and "Abs" in kinds and "Neg" not in kinds


def test_an_if_on_values_is_refused_in_one_line() -> None:
    cond = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Constant", [], ["z"], value=helper.make_tensor(
                "z", F32, [], [0.0])),
            helper.make_node("Greater", ["s", "z"], ["cond"])]
    with pytest.raises(ImportError_) as e:
        distir.import_onnx(_model(cond, _branch("then", "Relu"), _branch("else", "Neg")),
                           dims={"batch": 2})
    msg = str(e.value)
    assert "\n" not in msg and "If (1 node)" in msg and "reads input values" in msg


class _Scripted(torch.nn.Module):
    """A TorchScript branch on a dynamic size, as scripted helpers write them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _by_rank(x)


@torch.jit.script
def _by_rank(x: torch.Tensor) -> torch.Tensor:
    if x.size(0) % 2 == 0:
        return torch.relu(x)
    return -x


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (TorchScript: deprecated)
@pytest.mark.parametrize("batch", [4, 5])
def test_a_torchscript_branch_on_the_batch_size_imports(tmp_path, batch: int) -> None:
    path = tmp_path / "scripted.onnx"
    torch.onnx.export(_Scripted(), (torch.randn(2, 3, 4),), str(path), dynamo=False,
                      input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    assert any(n.op_type == "If" for n in onnx.load(str(path)).graph.node)
    m = distir.import_onnx(str(path), dims={"batch": batch})
    assert all(o.op_type != "If" for o in m.entry.ops)
    x = np.random.default_rng(0).standard_normal((batch, 3, 4)).astype(np.float32)
    (y,) = distir.execute(m.entry, [x])
    np.testing.assert_allclose(y, np.maximum(x, 0) if batch % 2 == 0 else -x)


def _one(name: str, v: int | float, dtype: int = TensorProto.INT64) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name],
                            value=helper.make_tensor(name, dtype, [], [v]))


@pytest.mark.parametrize("case", ["nonzero", "reshape_to_an_input"])
def test_a_shape_that_depends_on_values_is_not_taken_for_known(case: str) -> None:
    """``Shape(NonZero(x))`` and the shape of a ``Reshape`` to a shape given at run time
    depend on values: such an ``If`` is refused, not decided on made-up inputs (a review
    found both specialized from zeros)."""
    extra = []
    if case == "nonzero":
        cond = [helper.make_node("NonZero", ["x"], ["nz"]),
                helper.make_node("Shape", ["nz"], ["s"]), _one("one", 1),
                helper.make_node("Gather", ["s", "one"], ["w"], axis=0), _one("z", 0),
                helper.make_node("Greater", ["w", "z"], ["cond"])]
    else:
        extra = [helper.make_tensor_value_info("shp", TensorProto.INT64, [2])]
        cond = [helper.make_node("Reshape", ["x", "shp"], ["r"]),
                helper.make_node("Shape", ["r"], ["s"]), _one("zero", 0),
                helper.make_node("Gather", ["s", "zero"], ["w"], axis=0), _one("two", 2),
                helper.make_node("Equal", ["w", "two"], ["cond"])]
    m = _model(cond, _branch("then", "Relu"), _branch("else", "Neg"))
    m.graph.input.extend(extra)
    with pytest.raises(ImportError_) as e:
        distir.import_onnx(m, dims={"batch": 2})
    assert "\n" not in str(e.value) and "If (1 node)" in str(e.value)


def test_branches_with_initializers_of_one_name_are_not_mixed_up() -> None:
    """Two specialized branches, each adding its own initializer ``bias`` (1 and 100): the
    result is ONNX's (or the second ``If`` is refused), never one ``bias`` read twice."""
    def adds(name: str, w: float) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("Add", ["x", "bias"], [f"{name}_y"])], name, [],
            [helper.make_tensor_value_info(f"{name}_y", F32, None)],
            initializer=[helper.make_tensor("bias", F32, [], [w])])
    nodes = [*_width_is(4),
             helper.make_node("If", ["cond"], ["a"], then_branch=adds("t1", 1.0),
                              else_branch=_branch("e1", "Neg")),
             helper.make_node("If", ["cond"], ["b"], then_branch=adds("t2", 100.0),
                              else_branch=_branch("e2", "Neg")),
             helper.make_node("Add", ["a", "b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["batch", 4])],
                          [helper.make_tensor_value_info("y", F32, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    x = np.zeros((2, 4), np.float32)
    try:
        fn = distir.import_onnx(m, dims={"batch": 2}).entry
    except ImportError_ as e:
        assert "\n" not in str(e) and "If (1 node)" in str(e)
        return
    (y,) = distir.execute(fn, [x])
    np.testing.assert_array_equal(y, np.full((2, 4), 101.0, np.float32))
