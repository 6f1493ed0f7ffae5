"""Unit tests of ``distir.import_onnx`` on small models built here with ``onnx.helper``."""

from __future__ import annotations

import os
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import distir
from distir.analysis import execute, infer_types, type_env
from distir.errors import DistIRError, ImportError_
from distir.importers.onnx import import_onnx
from distir.ir.types import DenseAttr, DType, TensorType

F32 = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=(), opset=21, functions=(), opsets=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    ops = [helper.make_opsetid("", opset), *opsets]
    return helper.make_model(g, opset_imports=ops, functions=list(functions))


def vi(name, shape, et=F32):
    return helper.make_tensor_value_info(name, et, shape)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def mlp_model(opset=21):
    """x[batch, 4] -> Gemm(w, b) -> Relu -> Cast(float16) -> Dropout -> y."""
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    b = np.array([0.5, -1.0, 2.0], np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "layer/w", "layer/b"], ["h"], alpha=1.0, transB=0),
        helper.make_node("Relu", ["h"], ["a"]),
        helper.make_node("Cast", ["a"], ["a16"], to=TensorProto.FLOAT16),
        helper.make_node("Dropout", ["a16"], ["y", ""]),
    ]
    return model(nodes, [vi("x", ["batch", 4])], [vi("y", ["batch", 3], TensorProto.FLOAT16)],
                 [init("layer/w", w), init("layer/b", b)], opset)


GOLDEN = """\
func @main(%x: Tensor[Float32, (2, 4), 0],
           %"layer/w": Tensor[Float32, (4, 3), 0],
           %"layer/b": Tensor[Float32, (3,), 0]) {
  %h = Gemm(%x, %"layer/w", %"layer/b")
  %a = Relu(%h)
  %a16 = Cast(%a, to=Float16)
  %y = Dropout(%a16)
  return %y
}
"""


def test_golden_text():
    m = import_onnx(mlp_model(), dims={"batch": 2})
    assert distir.dumps(m) == GOLDEN


def test_params_initializers_and_execute_without_weights():
    m = import_onnx(mlp_model(), dims={"batch": 2})
    fn = m.entry
    assert fn.name == "main"
    assert [p.name for p in fn.params] == ["x", "layer/w", "layer/b"]
    assert all(p.type.device == 0 for p in fn.params)
    assert list(m.initializers) == ["layer/w", "layer/b"]
    assert m.initializers is fn.initializers
    x = np.array([[1, 2, 3, 4], [-1, -2, -3, -4]], np.float32)
    (y,) = execute(fn, [x])
    w, b = m.initializers["layer/w"], m.initializers["layer/b"]
    np.testing.assert_allclose(y, np.maximum(x @ w + b, 0).astype(np.float16), rtol=1e-3)
    assert y.dtype == np.float16
    assert infer_types(fn) == (TensorType(DType.Float16, (2, 3), 0),)


def test_print_parse_round_trip_and_weights_by_name(tmp_path):
    m = import_onnx(mlp_model(), dims={"batch": 2})
    text = distir.dumps(m)
    again = distir.parse(text)
    assert distir.dumps(again) == text
    assert {p.name for p in again.entry.params} >= set(m.initializers)


def test_device_places_params_and_constants():
    c = helper.make_node("Constant", [], ["c"], value_float=2.0)
    mul = helper.make_node("Mul", ["x", "c"], ["y"])
    m = import_onnx(model([c, mul], [vi("x", [3])], [vi("y", [3])]), device=2)
    assert m.entry.params[0].type == TensorType(DType.Float32, (3,), 2)
    assert m.entry.ops[0].attrs["device"] == 2
    assert infer_types(m.entry) == (TensorType(DType.Float32, (3,), 2),)
    with pytest.raises(ImportError_, match="device must be a device number"):
        import_onnx(model([c, mul], [vi("x", [3])], [vi("y", [3])]), device=-1)


@pytest.mark.parametrize("attr, value, dtype, expect", [
    ("value_float", 1.5, DType.Float32, 1.5),
    ("value_floats", [1.0, 2.5], DType.Float32, [1.0, 2.5]),
    ("value_int", 7, DType.Int64, 7),
    ("value_ints", [1, -1], DType.Int64, [1, -1]),
    ("value", numpy_helper.from_array(np.array([[1, 2]], np.int32)), DType.Int32, [[1, 2]]),
])
def test_constant_forms_become_a_dense_value(attr, value, dtype, expect):
    node = helper.make_node("Constant", [], ["c"], **{attr: value})
    m = import_onnx(model([node], [], [vi("c", None)]))
    (op,) = m.entry.ops
    assert op.op_type == "Constant" and list(op.attrs) == ["value"]
    v = op.attrs["value"]
    assert isinstance(v, DenseAttr) and v.dtype is dtype
    assert v.array.tolist() == expect
    (out,) = execute(m.entry, [])
    assert out.tolist() == expect


def test_constant_of_strings_is_rejected():
    node = helper.make_node("Constant", [], ["c"], value_strings=["a"])
    with pytest.raises(ImportError_, match=r"node #0 \(Constant\): a Constant of strings"):
        import_onnx(model([node], [], [vi("c", None)]))


def test_attributes_convert_and_defaults_drop():
    nodes = [
        helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-1, epsilon=1e-5),
        helper.make_node("Transpose", ["y"], ["t"], perm=[1, 0]),
        helper.make_node("LeakyRelu", ["t"], ["u"], alpha=0.1),
        helper.make_node("Softmax", ["u"], ["v"], axis=-1),
    ]
    m = import_onnx(model(nodes, [vi("x", [2, 3]), vi("s", [3])], [vi("v", [3, 2])]))
    ln, tr, lr, sm = m.entry.ops
    assert ln.attrs == {}  # axis=-1 and epsilon=1e-5 are LayerNormalization's defaults
    assert tr.attrs == {"perm": (1, 0)}
    assert lr.attrs == {"alpha": 0.1}  # shortest float32 decimal, not 0.10000000149011612
    assert sm.attrs == {}
    assert "alpha=0.1)" in distir.dumps(m)


def test_names_are_kept_and_quoted():
    nodes = [helper.make_node("Relu", ["gpu_0/data_0"], ["gpu_0/conv1:0"]),
             helper.make_node("Neg", ["gpu_0/conv1:0"], ["out.1"])]
    m = import_onnx(model(nodes, [vi("gpu_0/data_0", [2])], [vi("out.1", [2])]))
    text = distir.dumps(m)
    assert '%"gpu_0/data_0"' in text and '%"gpu_0/conv1:0" = Relu' in text
    assert "%out.1 = Neg" in text


def test_omitted_inputs_and_outputs():
    nodes = [
        # Clip(x, "", max): an omitted input in the middle; the trailing one is dropped.
        helper.make_node("Clip", ["x", "", "hi"], ["c"]),
        helper.make_node("Split", ["c"], ["p", "", "q"], axis=0, num_outputs=3),
    ]
    hi = init("hi", np.array(1.0, np.float32))
    m = import_onnx(model(nodes, [vi("x", [6])], [vi("p", [2]), vi("q", [2])], [hi]))
    clip, split = m.entry.ops
    assert clip.inputs[1] is None and len(clip.inputs) == 3
    assert [v.name for v in split.outputs] == ["p", "_", "q"]
    text = distir.dumps(m)
    assert "Clip(%x, _, %hi)" in text and "%p, _, %q = Split(" in text
    p, q = execute(m.entry, [np.arange(6, dtype=np.float32) - 2])
    assert p.tolist() == [-2.0, -1.0] and q.tolist() == [1.0, 1.0]


def test_unsorted_nodes_are_ordered():
    nodes = [helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])]
    m = import_onnx(model(nodes, [vi("x", [2])], [vi("y", [2])]))
    assert [op.op_type for op in m.entry.ops] == ["Relu", "Neg"]
    assert execute(m.entry, [np.array([-1.0, 2.0], np.float32)])[0].tolist() == [0.0, -2.0]


def test_undefined_value_is_named():
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add1")]
    with pytest.raises(ImportError_, match=r"node 'add1' \(Add\) uses 'ghost', which no node"):
        import_onnx(model(nodes, [vi("x", [2])], [vi("y", [2])]))


def test_graph_output_that_is_an_input_or_initializer():
    w = init("w", np.ones(2, np.float32))
    m = import_onnx(model([], [vi("x", [2])], [vi("x", [2]), vi("w", [2])], [w]))
    x = np.array([3.0, 4.0], np.float32)
    a, b = execute(m.entry, [x])
    assert a.tolist() == [3.0, 4.0] and b.tolist() == [1.0, 1.0]


# --- symbolic dimensions ------------------------------------------------------------

def test_dims_bind_symbolic_dimensions():
    m = import_onnx(mlp_model(), dims={"batch": 8})
    assert m.entry.params[0].type.shape == (8, 4)
    assert infer_types(m.entry)[0].shape == (8, 3)


def test_unbound_dim_names_it_and_the_input():
    with pytest.raises(ImportError_) as e:
        import_onnx(mlp_model())
    msg = str(e.value)
    assert "\n" not in msg
    assert re.search(r"'batch' \(input 'x', axis 0\)", msg)
    assert "dims={'batch': N}" in msg and "--dim batch=N" in msg


def test_several_unbound_dims_are_listed_together():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["b", "s", 4])],
              [vi("y", ["b", "s", 4])])
    with pytest.raises(ImportError_, match=r"'b' \(input 'x', axis 0\), 's' \(input 'x', axis 1"):
        import_onnx(m, dims={})
    assert import_onnx(m, dims={"b": 2, "s": 3}).entry.params[0].type.shape == (2, 3, 4)


def test_unknown_dim_name_is_an_error():
    with pytest.raises(ImportError_, match=r"dims names 'btach', which no input .* batch"):
        import_onnx(mlp_model(), dims={"btach": 2})
    for bad in (-1, 0):
        with pytest.raises(ImportError_, match="positive integers"):
            import_onnx(mlp_model(), dims={"batch": bad})


def test_unnamed_unknown_dim_is_an_error():
    x = helper.make_tensor_value_info("x", F32, [None, 4])
    with pytest.raises(ImportError_, match="unnamed unknown dimension at axis 0"):
        import_onnx(model([helper.make_node("Relu", ["x"], ["y"])], [x], [vi("y", None)]))


# --- what cannot be imported ------------------------------------------------------

def _loop_body():
    return helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"])], "body",
                             [vi("i", [], TensorProto.INT64), vi("c", [], TensorProto.BOOL)],
                             [vi("c_out", [], TensorProto.BOOL)])


def test_unsupported_model_lists_every_op_type_with_counts():
    body = _loop_body()
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Loop", ["n", "cond"], [], body=body),
        helper.make_node("Loop", ["n", "cond"], [], body=body),
        helper.make_node("FusedGemm", ["a", "a"], ["b"], domain="com.microsoft"),
        helper.make_node("If", ["cond"], ["c"], then_branch=body, else_branch=body),
        helper.make_node("Unique", ["a"], ["d"]),
        helper.make_node("MatMulGrad", ["a", "a", "a"], ["e", "f"]),  # DistIR's, not ONNX's
    ]
    m = model(nodes, [vi("x", [2, 2]), vi("n", [], TensorProto.INT64),
                      vi("cond", [], TensorProto.BOOL)], [vi("b", None)],
              opsets=[helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(ImportError_) as e:
        import_onnx(m)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("error: <model g>: 5 unsupported op types: Loop (2 nodes), ")
    for part in ("If (1 node)", "MatMulGrad (1 node)", "Unique (1 node)",
                 "com.microsoft:FusedGemm (1 node)", "control flow"):
        assert part in msg
    assert "Relu" not in msg


def test_unsupported_check_comes_before_dims_and_opset():
    nodes = [helper.make_node("Unique", ["x"], ["y"])]
    m = model(nodes, [vi("x", ["batch"])], [vi("y", None)], opset=9)
    with pytest.raises(ImportError_, match=r"1 unsupported op type: Unique \(1 node\)"):
        import_onnx(m)


def test_file_not_found(tmp_path):
    p = tmp_path / "missing.onnx"
    with pytest.raises(ImportError_, match=r"missing.onnx: no such file"):
        import_onnx(str(p))
    with pytest.raises(ImportError_, match="is a directory"):
        import_onnx(tmp_path)


@pytest.mark.parametrize("content", [b"func @main() {\n  return\n}\n", b"\x00\xff" * 50, b""])
def test_not_an_onnx_file(tmp_path, content):
    p = tmp_path / "bad.onnx"
    p.write_bytes(content)
    with pytest.raises(ImportError_, match=r"bad.onnx: not an ONNX model") as e:
        import_onnx(p)
    assert "\n" not in str(e.value)


def test_wrong_argument_type():
    with pytest.raises(ImportError_, match="takes a path or an onnx.ModelProto, not bytes"):
        import_onnx(b"abc")


def test_dtype_outside_distir():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2], TensorProto.UINT8)],
              [vi("y", [2], TensorProto.UINT8)])
    with pytest.raises(ImportError_, match=r"input 'x' has ONNX type UINT8, which DistIR does not"):
        import_onnx(m)


def test_sequence_input_is_rejected():
    s = helper.make_tensor_sequence_value_info("s", F32, [2])
    with pytest.raises(ImportError_, match="input 's' is of ONNX kind sequence_type"):
        import_onnx(model([helper.make_node("Identity", ["s"], ["y"])], [s], [vi("y", None)]))


def test_errors_are_distir_errors_with_one_line():
    with pytest.raises(DistIRError) as e:
        import_onnx(mlp_model(), dims={"batch": "eight"})
    assert "\n" not in str(e.value)


# --- opsets, functions, external data -------------------------------------------------

def test_old_opset_is_converted_to_21():
    """Opset 9: Unsqueeze/Slice/ReduceSum take axes (and starts/ends) as attributes; at
    opset 21 they are inputs, which the converter makes constants."""
    nodes = [
        helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]),
        helper.make_node("Slice", ["u"], ["s"], axes=[2], starts=[1], ends=[3]),
        helper.make_node("ReduceSum", ["s"], ["r"], axes=[2], keepdims=0),
    ]
    m9 = model(nodes, [vi("x", [2, 4])], [vi("r", [1, 2])], opset=9)
    m = import_onnx(m9)
    ops = [op.op_type for op in m.entry.ops]
    assert ops.count("Unsqueeze") == ops.count("Slice") == ops.count("ReduceSum") == 1
    assert all("axes" not in op.attrs for op in m.entry.ops)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (r,) = execute(m.entry, [x])
    np.testing.assert_array_equal(r, x[None, :, 1:3].sum(axis=2))
    assert infer_types(m.entry) == (TensorType(DType.Float32, (1, 2), 0),)


def test_later_opset_is_converted_down():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])],
              opset=22)
    assert execute(import_onnx(m).entry, [np.array([-1.0, 1.0], np.float32)])[0].tolist() \
        == [0.0, 1.0]


def test_model_local_functions_are_inlined():
    f = helper.make_function("local", "Square", ["a"], ["b"],
                             [helper.make_node("Mul", ["a", "a"], ["b"])],
                             [helper.make_opsetid("", 21)])
    nodes = [helper.make_node("Square", ["x"], ["y"], domain="local")]
    m = model(nodes, [vi("x", [3])], [vi("y", [3])], functions=[f],
              opsets=[helper.make_opsetid("local", 1)])
    imported = import_onnx(m)
    assert [op.op_type for op in imported.entry.ops] == ["Mul"]
    assert execute(imported.entry, [np.array([1.0, 2.0, 3.0], np.float32)])[0].tolist() == \
        [1.0, 4.0, 9.0]


def test_model_proto_is_not_modified():
    m = mlp_model(opset=13)
    before = m.SerializeToString()
    import_onnx(m, dims={"batch": 1})
    assert m.SerializeToString() == before


def test_external_data(tmp_path):
    w = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", [2, 64])],
              [vi("y", [2, 32])], [init("w", w)], opset=13)
    path = tmp_path / "ext.onnx"
    onnx.save(m, str(path), save_as_external_data=True, location="ext.weights",
              size_threshold=0)
    assert os.path.getsize(tmp_path / "ext.weights") == w.nbytes
    imported = import_onnx(path)
    np.testing.assert_array_equal(imported.initializers["w"], w)
    x = np.ones((2, 64), np.float32)
    np.testing.assert_allclose(execute(imported.entry, [x])[0], x @ w)

    # A ModelProto read without its data needs the directory.
    bare = onnx.load(str(path), load_external_data=False)
    with pytest.raises(ImportError_, match="keeps its data in an external file: pass base_dir"):
        import_onnx(bare)
    np.testing.assert_array_equal(import_onnx(bare, base_dir=tmp_path).initializers["w"], w)

    os.remove(tmp_path / "ext.weights")
    with pytest.raises(ImportError_, match=r"tensor 'w' keeps its data in 'ext.weights', which "
                                           "is not in"):
        import_onnx(path)


def test_every_value_is_typed_after_import():
    m = import_onnx(mlp_model(), dims={"batch": 4})
    env = type_env(m.entry)
    for op in m.entry.ops:
        for v in op.outputs:
            assert v.name == "_" or v in env


def test_importing_doc_lists_the_onnx_ops_distir_defines():
    from distir.ir.schemas import SCHEMAS

    doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "importing.md")
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    start = text.index("DistIR defines these")
    listing = text[text.index(":", start) + 1:text.index(".\n", start)]
    listed = [w.strip() for w in listing.replace("\n", " ").split(",")]
    defined = sorted(n for n, s in SCHEMAS.items() if s.domain == "onnx")
    assert sorted(listed) == defined
    assert f"these {len(defined)} ONNX ops" in text


def test_ir3_model_with_initializers_not_listed_as_inputs():
    w = init("w", np.full((2,), 3.0, np.float32))
    m = model([helper.make_node("Mul", ["x", "w"], ["y"])], [vi("x", [2])], [vi("y", [2])],
              [w], opset=9)
    m.ir_version = 3  # which wants "w" among the inputs too; runtimes do not insist
    imported = import_onnx(m)
    assert execute(imported.entry, [np.array([1.0, 2.0], np.float32)])[0].tolist() == [3.0, 6.0]
    assert m.ir_version == 3


def test_external_data_of_an_opset_21_model_proto(tmp_path):
    # No conversion, so the importer copies the caller's proto before loading the data.
    w = np.arange(6, dtype=np.float32)
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [6])], [vi("y", [6])],
              [init("w", w)])
    onnx.save(m, str(tmp_path / "a.onnx"), save_as_external_data=True, location="a.bin",
              size_threshold=0)
    bare = onnx.load(str(tmp_path / "a.onnx"), load_external_data=False)
    before = bare.SerializeToString()
    imported = import_onnx(bare, base_dir=str(tmp_path))
    np.testing.assert_array_equal(imported.initializers["w"], w)
    assert bare.SerializeToString() == before


def test_a_cast_to_its_own_type_is_an_identity():
    """A ``Cast`` (or ``CastLike``) to its input's own element type is imported as the
    ``Identity`` it is (PyTorch returns the tensor itself: no kernel, no memory of its
    own); one to another type stays a ``Cast``."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Cast", ["r"], ["same"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["same"], ["half"], to=TensorProto.FLOAT16),
        helper.make_node("CastLike", ["r", "x"], ["like"]),
        helper.make_node("Add", ["same", "like"], ["y"]),
    ]
    m = import_onnx(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3]),
                                                     vi("half", [2, 3], TensorProto.FLOAT16)]))
    assert [op.op_type for op in m.entry.ops] == ["Relu", "Identity", "Cast", "Identity",
                                                  "Add"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    y, half = execute(m.entry, [x])
    assert y.tolist() == (2 * np.maximum(x, 0)).tolist() and half.dtype == np.float16
