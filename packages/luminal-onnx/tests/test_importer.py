"""The importer on small models built with onnx.helper, checked against onnxruntime, and its
errors on bad files, unsupported operators and bad feeds."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from luminal_onnx import (
    NeedsStaticInputError,
    OnnxImportError,
    UnsupportedError,
    load,
    run,
    supported_operators,
)
from onnx import TensorProto, helper, numpy_helper
from onnx_helpers import single_node_model

ort = pytest.importorskip("onnxruntime")
BACKENDS = ["reference", "cpu"]


def _save(tmp_path, model: onnx.ModelProto, name: str = "m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return path


def _ort(model: onnx.ModelProto, feeds: dict) -> dict:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _small_convnet() -> onnx.ModelProto:
    """Conv-BN-Relu-MaxPool, a residual Add, GlobalAveragePool, Flatten, Gemm, Softmax with a
    symbolic batch dim: the shape of an image classifier."""
    rng = np.random.default_rng(0)
    init = {
        "w1": rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32),
        "b1": rng.normal(0, 0.1, 8).astype(np.float32),
        "scale": rng.uniform(0.5, 1.5, 8).astype(np.float32),
        "shift": rng.normal(0, 0.1, 8).astype(np.float32),
        "mean": rng.normal(0, 0.1, 8).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, 8).astype(np.float32),
        "w2": rng.normal(0, 0.2, (8, 8, 3, 3)).astype(np.float32),
        "fc": rng.normal(0, 0.3, (5, 8)).astype(np.float32),
        "fc_b": rng.normal(0, 0.1, 5).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "scale", "shift", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], auto_pad="SAME_UPPER"),
        helper.make_node("Add", ["c2", "p1"], ["res"]),
        helper.make_node("GlobalAveragePool", ["res"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 5])],
        [numpy_helper.from_array(a, n) for n, a in init.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_convnet_with_symbolic_batch_matches_onnxruntime(tmp_path, backend):
    proto = _small_convnet()
    model = load(_save(tmp_path, proto))
    (batch_dim, *rest) = model.input_shapes()["x"]
    assert str(batch_dim) == "batch" and rest == [3, 16, 16]
    compiled = model.compiled(backend)
    for n in (1, 3):  # one compiled graph serves every batch size
        x = np.random.default_rng(n).normal(size=(n, 3, 16, 16)).astype(np.float32)
        got = model.run({"x": x}, backend)["probs"]
        np.testing.assert_allclose(got, _ort(proto, {"x": x})["probs"], rtol=1e-4, atol=1e-6)
        assert model.compiled(backend) is compiled


def test_shape_arithmetic_is_folded_with_symbolic_dims(tmp_path):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write flatten(x, 1)
    for a dynamic batch: the target shape is worked out at import time, symbolically."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
        helper.make_node("Transpose", ["y"], ["z"], perm=[1, 0]),
    ]
    init = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array([0], np.int64), "axes"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    graph = helper.make_graph(nodes, "flatten",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             ["n", 2, 3])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [6, "n"])],
                              init)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model = load(_save(tmp_path, proto))
    assert len(model.graph.input_nodes()) == 1  # only x: the shape glue left no inputs
    for n in (2, 5):
        x = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
        np.testing.assert_array_equal(model.run({"x": x}, "reference")["z"],
                                      _ort(proto, {"x": x})["z"])


def test_int64_outputs_keep_their_declared_type(tmp_path):
    x = np.array([[3.0, 9.0, 1.0], [7.0, 2.0, 8.0]], np.float32)
    proto = single_node_model("ArgMax", {"x": x}, ["i"], axis=1, keepdims=0)
    out = run(_save(tmp_path, proto), {"x": x}, "reference")["i"]
    assert out.dtype == np.int64 and out.tolist() == [1, 2]


def test_values_needed_at_import_time(tmp_path):
    x = np.arange(6, dtype=np.float32)
    shape = np.array([2, 3], np.int64)
    path = _save(tmp_path, single_node_model("Reshape", {"x": x, "shape": shape}, ["y"]))
    with pytest.raises(NeedsStaticInputError, match=r"input 'shape' must be known at import "
                                                    r"time.*static_inputs") as info:
        load(path)
    assert info.value.input_name == "shape" and info.value.op_type == "Reshape"
    model = load(path, static_inputs={"shape": shape})
    assert model.input_names == ["x"]
    np.testing.assert_array_equal(model.run({"x": x}, "reference")["y"], x.reshape(2, 3))


def test_unsupported_operator_names_node_op_and_opset(tmp_path):
    x = np.zeros((2, 3), np.float32)
    proto = single_node_model("NonZero", {"x": x}, ["y"], opset=13)
    proto.graph.node[0].name = "find_them"
    with pytest.raises(UnsupportedError, match=r"node 'find_them' \(NonZero, opset 13\): "
                                               r"operator not supported"):
        load(_save(tmp_path, proto))


def test_unsupported_attribute_fails_at_import(tmp_path):
    x = np.zeros((1, 1, 4, 4), np.float32)
    proto = single_node_model("MaxPool", {"x": x}, ["y"], kernel_shape=[2, 2], storage_order=1)
    with pytest.raises(UnsupportedError, match=r"\(MaxPool, opset 17\): storage_order=1"):
        load(_save(tmp_path, proto))
    proto = single_node_model("Relu", {"x": x}, ["y"])
    proto.graph.node[0].attribute.append(helper.make_attribute("mystery", 3))
    with pytest.raises(OnnxImportError, match=r"checker rejects.*mystery"):
        load(_save(tmp_path, proto))


def test_unsupported_dtype_and_domain(tmp_path):
    x = np.zeros(3, np.float64)
    with pytest.raises(OnnxImportError, match=r"input 'x' has type double"):
        load(_save(tmp_path, single_node_model("Relu", {"x": x}, ["y"])))
    proto = single_node_model("Relu", {"x": x.astype(np.float32)}, ["y"])
    proto.graph.node[0].domain = "com.microsoft"
    proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedError, match=r"domain 'com\.microsoft'"):
        load(_save(tmp_path, proto, "ms.onnx"))


@pytest.mark.parametrize("content, message", [
    (b"", "not a valid ONNX protobuf|holds no ONNX graph"),
    (b"\x08\x07\x12\xff\xff\xff\xff\x0f", "not a valid ONNX protobuf"),
    (b"this is a text file, not a model", "not a valid ONNX protobuf|holds no ONNX graph"),
])
def test_bad_files_give_clear_errors(tmp_path, content, message):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(OnnxImportError, match=message):
        load(path)


def test_truncated_model_and_missing_file(tmp_path):
    whole = _small_convnet().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(OnnxImportError, match=r"cut\.onnx"):
        load(path)
    with pytest.raises(OnnxImportError, match="no such ONNX file"):
        load(tmp_path / "absent.onnx")


def test_checker_rejects_dangling_input(tmp_path):
    proto = single_node_model("Relu", {"x": np.zeros(2, np.float32)}, ["y"])
    proto.graph.node[0].input[0] = "nowhere"
    with pytest.raises(OnnxImportError, match=r"checker rejects|nowhere"):
        load(_save(tmp_path, proto))


def test_feed_errors(tmp_path):
    model = load(_save(tmp_path, _small_convnet()))
    x = np.zeros((1, 3, 16, 16), np.float32)
    with pytest.raises(ValueError, match=r"missing \['x'\]"):
        model.run({}, "reference")
    with pytest.raises(ValueError, match=r"unexpected \['y'\]"):
        model.run({"x": x, "y": x}, "reference")
    with pytest.raises(ValueError, match=r"expects shape \(batch, 3, 16, 16\)"):
        model.run({"x": np.zeros((1, 3, 8, 8), np.float32)}, "reference")
    with pytest.raises(ValueError, match="expects float32, got int64"):
        model.run({"x": x.astype(np.int64)}, "reference")


def test_int64_values_beyond_int32_are_refused(tmp_path):
    x = np.array([1, 2], np.int64)
    model = load(_save(tmp_path, single_node_model("Neg", {"x": x}, ["y"])))
    with pytest.raises(OnnxImportError, match="outside the int32 range"):
        model.run({"x": np.array([1, 2**40], np.int64)}, "reference")


def test_supported_operators_cover_vision_and_transformers():
    ops = set(supported_operators())
    assert {"Conv", "ConvTranspose", "MaxPool", "Resize", "BatchNormalization", "MatMul",
            "Gemm", "Softmax", "LayerNormalization", "Erf", "Gather", "Where", "Expand",
            "Concat", "Split", "Slice", "Transpose", "Reshape", "ReduceMean", "Pow",
            "Sqrt", "Div", "Cast", "Shape", "Unsqueeze", "Squeeze", "Range"} <= ops
