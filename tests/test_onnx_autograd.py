"""An imported ONNX model is made of luminal's high-level ops, so luminal-train's autograd
differentiates it: gradients of a small MLP (Gemm, Relu, Sigmoid, MatMul, Add) with respect
to its ONNX initializers, against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
lt = pytest.importorskip("luminal_train")
luminal_onnx = pytest.importorskip("luminal_onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def test_gradients_of_an_imported_mlp_match_torch(tmp_path):
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.5, (6, 4)).astype(np.float32)
    b1 = rng.normal(0, 0.1, 6).astype(np.float32)
    w2 = rng.normal(0, 0.5, (6, 3)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["m"]),
             helper.make_node("Sigmoid", ["m"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 3])],
        [numpy_helper.from_array(a, n) for n, a in (("w1", w1), ("b1", b1), ("w2", w2))])
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    x = rng.normal(size=(5, 4)).astype(np.float32)

    model = luminal_onnx.load(path)
    weights = model.weights
    loss = (model.outputs["y"] * model.outputs["y"]).sum()
    grads = lt.grad(loss, [weights["w1"], weights["b1"], weights["w2"]])
    for g in grads:
        g.retrieve()
    model.inputs["x"].set(x)
    model.graph.execute()

    tw1, tb1, tw2 = (torch.tensor(a, requires_grad=True) for a in (w1, b1, w2))
    y = torch.sigmoid(torch.relu(torch.tensor(x) @ tw1.T + tb1) @ tw2)
    (y * y).sum().backward()
    for ours, theirs in zip(grads, (tw1, tb1, tw2)):
        np.testing.assert_allclose(ours.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-6)
