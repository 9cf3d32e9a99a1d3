"""luminal_nn modules against torch.nn modules holding the same weights (reference backend)."""

from __future__ import annotations

import gc
import re
import weakref

import luminal as lm
import luminal_nn as nn
import numpy as np
import pytest

torch = pytest.importorskip("torch")

ATOL = 1e-5  # fp32, both sides; reductions sum in different orders


def run(module: nn.Module, *inputs: np.ndarray, **kwargs) -> np.ndarray:
    """Build a graph applying `module` to `inputs`, execute on the reference backend."""
    g = lm.Graph()
    tensors = [g.tensor(x.shape, dtype=lm.dtype_of(x.dtype)).set(x) for x in inputs]
    out = module(*tensors, **kwargs).retrieve()
    g.execute()
    return out.numpy()


def load_from_torch(module: nn.Module, torch_module: torch.nn.Module) -> None:
    module.load_state_dict({k: v.detach().numpy() for k, v in torch_module.state_dict().items()})


def torch_out(torch_module: torch.nn.Module, *inputs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return torch_module(*(torch.from_numpy(x) for x in inputs)).numpy()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.mark.parametrize("bias", [True, False])
def test_nn_linear(rng, bias):
    ref = torch.nn.Linear(5, 3, bias=bias)
    mod = nn.Linear(5, 3, bias=bias)
    load_from_torch(mod, ref)
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(run(mod, x), torch_out(ref, x), atol=ATOL)


def test_nn_embedding(rng):
    ref = torch.nn.Embedding(11, 6)
    mod = nn.Embedding(11, 6)
    load_from_torch(mod, ref)
    ids = rng.integers(0, 11, (2, 5)).astype(np.int32)
    with torch.no_grad():
        want = ref(torch.from_numpy(ids).long()).numpy()
    np.testing.assert_allclose(run(mod, ids), want, atol=ATOL)


def test_nn_embedding_attend_is_tied_head(rng):
    mod = nn.Embedding(7, 4)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    g = lm.Graph()
    out = mod.attend(g.tensor((3, 4)).set(x)).retrieve()
    g.execute()
    np.testing.assert_allclose(out.numpy(), x @ mod.weight.data.T, atol=ATOL)


@pytest.mark.parametrize("affine,bias", [(True, True), (True, False), (False, False)])
def test_nn_layer_norm(rng, affine, bias):
    ref = torch.nn.LayerNorm(8, eps=1e-5, elementwise_affine=affine, bias=bias)
    if affine:
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5)
            if bias:
                ref.bias.uniform_(-1, 1)
    mod = nn.LayerNorm(8, elementwise_affine=affine, bias=bias)
    load_from_torch(mod, ref)
    x = rng.standard_normal((3, 8)).astype(np.float32) * 3 + 1
    np.testing.assert_allclose(run(mod, x), torch_out(ref, x), atol=ATOL)


@pytest.mark.parametrize("eps", [None, 1e-5])
def test_nn_rms_norm(rng, eps):
    ref = torch.nn.RMSNorm(8, eps=eps)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
    mod = nn.RMSNorm(8, eps=eps)
    load_from_torch(mod, ref)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    np.testing.assert_allclose(run(mod, x), torch_out(ref, x), atol=ATOL)


@pytest.mark.parametrize("kwargs", [
    {}, {"stride": 2, "padding": 1}, {"dilation": 2, "padding": 2}, {"groups": 2, "bias": False},
])
def test_nn_conv1d(rng, kwargs):
    ref = torch.nn.Conv1d(4, 6, 3, **kwargs)
    mod = nn.Conv1d(4, 6, 3, **kwargs)
    load_from_torch(mod, ref)
    x = rng.standard_normal((2, 4, 10)).astype(np.float32)
    np.testing.assert_allclose(run(mod, x), torch_out(ref, x), atol=ATOL)


@pytest.mark.parametrize("kwargs", [
    {}, {"stride": 2, "padding": 1}, {"stride": (1, 2), "padding": (2, 0), "dilation": (2, 1)},
    {"groups": 2},
])
def test_nn_conv2d(rng, kwargs):
    ref = torch.nn.Conv2d(4, 6, (3, 3), **kwargs)
    mod = nn.Conv2d(4, 6, (3, 3), **kwargs)
    load_from_torch(mod, ref)
    x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
    np.testing.assert_allclose(run(mod, x), torch_out(ref, x), atol=ATOL)


@pytest.mark.parametrize("kwargs", [
    {"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 3, "stride": 2, "ceil_mode": True},
])
def test_nn_pools(rng, kwargs):
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    np.testing.assert_allclose(run(nn.MaxPool2d(**kwargs), x),
                               torch_out(torch.nn.MaxPool2d(**kwargs), x), atol=ATOL)
    np.testing.assert_allclose(run(nn.AvgPool2d(**kwargs), x),
                               torch_out(torch.nn.AvgPool2d(**kwargs), x), atol=ATOL)


@pytest.mark.parametrize("pair", [
    (nn.ReLU(), torch.nn.ReLU()), (nn.GELU(), torch.nn.GELU()),
    (nn.GELU("tanh"), torch.nn.GELU("tanh")), (nn.SiLU(), torch.nn.SiLU()),
    (nn.Sigmoid(), torch.nn.Sigmoid()), (nn.Tanh(), torch.nn.Tanh()),
    (nn.LeakyReLU(0.2), torch.nn.LeakyReLU(0.2)), (nn.Softmax(-1), torch.nn.Softmax(-1)),
], ids=lambda p: type(p).__name__)
def test_nn_activations(rng, pair):
    mod, ref = pair
    x = rng.standard_normal((4, 6)).astype(np.float32) * 3
    np.testing.assert_allclose(run(mod, x), torch_out(ref, x), atol=1e-5)


def test_nn_sequential_mlp(rng):
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    mod = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 2))
    assert list(mod.state_dict()) == list(ref.state_dict())
    load_from_torch(mod, ref)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    np.testing.assert_allclose(run(mod, x), torch_out(ref, x), atol=ATOL)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4, bias=False)])
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, ids):
        h = self.embed(ids)
        for b in self.blocks:
            h = b(h).relu()
        return self.head(h)


def test_nn_module_tree_names_and_tying():
    net = _Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["embed.weight", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight"]
    assert net.embed.weight.name == "embed.weight"
    assert net.num_parameters() == 10 * 4 + 4 * 4 + 4 + 4 * 4
    assert [n for n, _ in net.named_modules()] == [
        "", "embed", "blocks", "blocks.0", "blocks.1", "head"]


def test_nn_state_dict_round_trip_and_rebinding(rng):
    net = _Net()
    # positive weights: random ones can make both ReLUs zero every unit, and then doubling
    # the weights leaves the output at zero
    net.load_state_dict(
        {k: rng.uniform(0.1, 1.0, v.shape).astype(np.float32) for k, v in net.state_dict().items()}
    )
    g = lm.Graph()
    ids = g.tensor((1, 3), dtype=lm.int32).set([[1, 2, 3]])
    out = net(ids).retrieve()
    g.execute()
    first = out.numpy().copy()
    assert np.all(first > 0)
    state = {k: v * 2 for k, v in net.state_dict().items()}
    net.load_state_dict(state)  # re-binds the inputs of the graph already built
    g.execute()
    assert not np.allclose(first, out.numpy())
    fresh = _Net()
    fresh.load_state_dict(state)
    assert all(np.array_equal(a, fresh.state_dict()[k]) for k, a in net.state_dict().items())


def test_nn_release_to_lets_the_graph_hold_the_weights(rng):
    """After `release_to` the parameters read their values back from the graph and hold no
    reference of their own (a backend replacing the graph's array frees the original); a
    new value set on a parameter is its own again; parameters the graph does not use keep
    theirs."""
    mod, unused = nn.Linear(3, 2), nn.Linear(3, 2)
    weight = rng.standard_normal((2, 3)).astype(np.float32)
    mod.weight.data = weight
    g = lm.Graph()
    x = rng.standard_normal((1, 3)).astype(np.float32)
    out = mod(g.tensor((1, 3)).set(x)).retrieve()
    mod.release_to(g)
    unused.release_to(g)  # none of its parameters are inputs of g: nothing to release
    assert unused.weight._holder is None
    alive = weakref.ref(weight)
    node = mod.weight._inputs[g]
    g.set_data(node, g.data[node].copy())  # what a backend's own form of the value does
    del weight
    gc.collect()
    assert alive() is None and mod.weight._data is None
    np.testing.assert_array_equal(mod.weight.data, g.data[node])
    g.execute()
    np.testing.assert_allclose(out.numpy(), x @ mod.weight.data.T + mod.bias.data, atol=ATOL)
    mod.weight.data = np.zeros((2, 3), np.float32)  # its own again, and bound into g
    assert mod.weight._holder is None and np.array_equal(g.data[node], np.zeros((2, 3)))
    with pytest.raises(ValueError, match="weight: not an input of this graph"):
        mod.weight.release_to(lm.Graph())


def test_nn_load_state_dict_errors():
    mod = nn.Linear(3, 2)
    shape_error = r"weight: expected an array of shape \(2, 3\), got \(3, 2\)"
    with pytest.raises(ValueError, match=shape_error):
        mod.load_state_dict({"weight": np.zeros((3, 2)), "bias": np.zeros(2)})
    with pytest.raises(TypeError, match="weight: expected float32 data, got int64"):
        mod.load_state_dict({"weight": np.zeros((2, 3), np.int64), "bias": np.zeros(2)})
    with pytest.raises(KeyError, match="missing: bias; unexpected: extra"):
        mod.load_state_dict({"weight": np.zeros((2, 3)), "extra": np.zeros(1)})
    assert mod.load_state_dict({"weight": np.zeros((2, 3))}, strict=False) == ["bias"]


def test_nn_module_without_super_init_is_explained():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter((2,))

    with pytest.raises(AttributeError, match=re.escape("super().__init__()")):
        Bad()
