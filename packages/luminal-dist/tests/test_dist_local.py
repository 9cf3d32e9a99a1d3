"""luminal-dist in one process: collectives lowered to their decomposition on every backend,
stage splitting, fingerprints, the data-sharding sampler, tensor-parallel slicing, launch
and NCCL argument handling (no GPU needed)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import luminal as lm
import luminal_dist as ld
import luminal_nn.functional as F
import luminal_train as lt
import numpy as np
import pytest
from luminal_dist.launch import launch_command
from luminal_dist.nccl import nccl_op, nccl_type


def _graph(x: np.ndarray, size: int = 1):
    g = lm.Graph()
    a = g.tensor(x.shape, name="a").set(x)
    outs = [ld.all_reduce(a.transpose(0, 1), comm=size), ld.all_gather(a * 2.0, 1, comm=size),
            ld.reduce_scatter(a.exp2(), 0, comm=size), ld.broadcast(a[1:], comm=size)]
    return g, [t.retrieve() for t in outs]


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_world_of_one_lowers_collectives_to_copies(backend) -> None:
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    g, outs = _graph(x)
    g.compile((lm.GenericCompiler(), ld.Distributed(lm.backend(backend), ld.SingleProcess())))
    assert not any(isinstance(n.op, ld.Collective) for n in g.nodes.values())
    g.execute()
    expected = [x.T, x * 2, np.exp2(x), x[1:]]
    for t, want in zip(outs, expected, strict=True):
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)


def test_collectives_of_a_larger_world_need_distributed() -> None:
    g, _ = _graph(np.ones((4, 3), np.float32), size=2)
    g.compile(lm.backend("reference"))
    with pytest.raises(ld.DistributedError, match="compile the graph with"):
        g.execute()
    g2, _ = _graph(np.ones((4, 3), np.float32), size=2)
    with pytest.raises(ValueError, match="built for 2 ranks, the communicator has 1"):
        g2.compile(ld.Distributed(lm.backend("reference"), ld.SingleProcess()))


def test_collective_shapes_and_argument_errors() -> None:
    g = lm.Graph()
    a = g.tensor((4, 6), name="a")
    assert tuple(ld.all_gather(a, -1, comm=3).shape) == (4, 18)
    assert tuple(ld.reduce_scatter(a, 1, comm=3).shape) == (4, 2)
    with pytest.raises(ValueError, match="does not split into 4 equal parts"):
        ld.reduce_scatter(a, 1, comm=4)
    with pytest.raises(ValueError, match="unknown reduction 'mean'"):
        ld.all_reduce(a, "mean", comm=2)
    with pytest.raises(ValueError, match="root 2 is not a rank"):
        ld.broadcast(a, 2, comm=2)
    with pytest.raises(ValueError, match="dim 2 is out of range"):
        ld.all_gather(a, 2, comm=2)


def test_stages_cut_at_each_round_of_collectives() -> None:
    g = lm.Graph()
    a = g.tensor((3,), name="a")
    once = ld.all_reduce(a.exp2(), comm=2)
    twice = ld.all_reduce(once.sqrt() + a, comm=2)
    (twice * 3.0).retrieve()
    stages = ld.split_stages(g)
    assert [len(s.collectives) for s in stages] == [1, 1, 0]
    # stage 1 reads the first all-reduce and the user's input `a`; stage 2 the second
    assert once.id in stages[1].feeds and a.id in stages[1].feeds
    assert list(stages[2].feeds) == [twice.id]


def test_fingerprint_covers_structure_and_collectives_not_shard_sizes() -> None:
    def build(width: int, extra: bool = False, gather: int = 0):
        g = lm.Graph()
        a = g.tensor((width, 4), name="a")
        y = ld.all_reduce((a @ g.tensor((4, 4), name="w")).sum(0), comm=2)
        if extra:
            y = y.sqrt()
        y.retrieve()
        return ld.graph_fingerprint(g)

    assert build(3) == build(5)  # unequal tensor-parallel shards still agree
    assert build(3) != build(3, extra=True)
    ld.check_same_graph(lm.Graph(), ld.SingleProcess())


def test_sharded_batches_cover_the_single_process_batches() -> None:
    g = lm.Graph()
    x = g.tensor(("n",), name="x")
    data = np.arange(23, dtype=np.float32)
    single = list(lt.Batches({x: data}, 8, seed=1, drop_last=False))
    shards = [list(lt.Batches({x: data}, 4, seed=1, drop_last=False, rank=r, world_size=2))
              for r in range(2)]
    assert len(shards[0]) == len(shards[1]) == len(single) == 3
    for whole, part0, part1 in zip(single, *shards, strict=True):
        np.testing.assert_array_equal(np.concatenate([part0[x], part1[x]]), whole[x])
    # a last global batch smaller than the world is dropped on every rank
    assert len(lt.Batches({x: data[:17]}, 4, drop_last=False, world_size=4, rank=3)) == 1
    with pytest.raises(ValueError, match="rank 2 is not in"):
        lt.Batches({x: data}, 4, rank=2, world_size=2)


def test_gradient_buckets_respect_size_and_dtype() -> None:
    g = lm.Graph()
    grads = [g.tensor((100,)), g.tensor((100,)), g.tensor((300,)),
             g.tensor((10,), dtype=lm.float16), g.tensor((10,))]
    assert ld.data_parallel.buckets(grads, 800) == [[0, 1], [2], [3], [4]]
    assert ld.DataParallel(ld.SingleProcess()).reduce_gradients(grads) == grads


def test_overlap_starts_each_gradient_bucket_when_its_backward_part_is_done() -> None:
    g = lm.Graph()
    weights = [g.tensor((16, 16), name=f"w{i}").set(np.eye(16)) for i in range(3)]
    h = g.tensor((4, 16), name="x")
    for w in weights:
        h = F.linear(h, w).relu()
    loss = h.sum()
    dp = ld.DataParallel(SimpleNamespace(rank=0, size=2), bucket_mb=16 * 16 * 4 / 2**20)
    reduced = dp.reduce_gradients(lt.grad(loss, weights))  # one bucket per weight
    for t in [*reduced, loss]:
        t.retrieve()
    # the buckets, last layer first (the order backward produces them)
    buckets = [g.nodes[t.id].inputs[0].src for t in reduced[::-1]]
    blocking = ld.split_stages(g)
    assert [[c.id for c in s.collectives] for s in blocking] == [buckets, []]
    overlapped = ld.split_stages(g, overlap=True)
    assert [[c.id for c in s.collectives] for s in overlapped] == [[b] for b in buckets] + [[]]
    # each part after the first is a further step of the backward pass
    assert all(s.graph.nodes for s in overlapped)
    assert sum(len(s.graph.nodes) for s in overlapped) >= sum(len(s.graph.nodes)
                                                              for s in blocking)


def test_tensor_parallel_slices_heads_and_mlp_columns() -> None:
    from luminal_models.llama import Llama, LlamaConfig

    config = LlamaConfig(vocab_size=32, hidden_size=24, intermediate_size=10, num_layers=1,
                         num_heads=6, num_kv_heads=3, head_dim=4)
    full = Llama(config)
    rng = np.random.default_rng(0)
    for _, p in full.named_parameters():
        p.data = rng.standard_normal(p.shape).astype(np.float32)
    state = full.state_dict()
    shards = []
    for rank in range(2):
        model = Llama(config)
        model.load_state_dict(state)
        comm = SimpleNamespace(rank=rank, size=2)
        shards.append(ld.TensorParallel(lm.backend("reference"), comm).shard(model))
    assert [m.config.num_kv_heads for m in shards] == [2, 1]  # 3 KV heads over 2 ranks
    assert [m.config.num_heads for m in shards] == [4, 2]
    layer = "model.layers.0."
    parts = [dict(m.named_parameters()) for m in shards]
    for name, axis in (("self_attn.q_proj.weight", 0), ("self_attn.k_proj.weight", 0),
                       ("self_attn.o_proj.weight", 1), ("mlp.gate_proj.weight", 0),
                       ("mlp.down_proj.weight", 1)):
        joined = np.concatenate([p[layer + name].data for p in parts], axis=axis)
        np.testing.assert_array_equal(joined, state[layer + name])
    with pytest.raises(ValueError, match="3 key/value heads and 6 query heads cannot be split "
                                         "over 4 ranks"):
        ld.TensorParallel(None, SimpleNamespace(rank=0, size=4)).shard(Llama(config))
    with pytest.raises(ValueError, match="launch it with `mpiexec -n 2"):
        ld.TensorParallel(None, ld.SingleProcess(), size=2)


def test_fewer_kv_heads_than_ranks_replicate_them() -> None:
    from luminal_dist.tensor_parallel import head_share

    # Gemma 3 270M: one KV head, 4 query heads over 2 ranks
    assert [tuple(map(list, head_share(4, 1, 2, r))) for r in range(2)] == [([0], [0, 1]),
                                                                           ([0], [2, 3])]
    # 2 KV heads of 3 query heads each over 4 ranks: uneven query shares of one KV head
    assert [tuple(map(list, head_share(6, 2, 4, r))) for r in range(4)] == [
        ([0], [0, 1]), ([0], [2]), ([1], [3, 4]), ([1], [5])]
    with pytest.raises(ValueError, match="1 key/value heads and 2 query heads cannot be split "
                                         "over 4 ranks"):
        head_share(2, 1, 4, 0)


def test_tensor_parallel_shards_gemma3_blocks() -> None:
    from luminal_models.gemma3 import Gemma3, Gemma3Config

    config = Gemma3Config(vocab_size=32, hidden_size=16, intermediate_size=12, num_layers=2,
                          num_heads=4, num_kv_heads=1, head_dim=4)
    rng = np.random.default_rng(0)
    state = {name: rng.standard_normal(p.shape).astype(np.float32)
             for name, p in Gemma3(config).named_parameters()}
    parts = []
    for rank in range(2):
        model = Gemma3(config)
        model.load_state_dict(state)
        ld.TensorParallel(None, SimpleNamespace(rank=rank, size=2)).shard(model)
        assert (model.config.num_heads, model.config.num_kv_heads) == (2, 1)
        assert model.config.intermediate_size == 6
        assert type(model.model.layers[1].mlp.down_proj).__name__ == "RowParallel"
        parts.append(dict(model.named_parameters()))
    layer = "model.layers.1."
    for name, axis in (("self_attn.q_proj.weight", 0), ("self_attn.o_proj.weight", 1),
                       ("mlp.gate_proj.weight", 0), ("mlp.up_proj.weight", 0),
                       ("mlp.down_proj.weight", 1)):
        joined = np.concatenate([p[layer + name].data for p in parts], axis=axis)
        np.testing.assert_array_equal(joined, state[layer + name])
    for name in ("self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.q_norm.weight",
                 "post_feedforward_layernorm.weight"):  # replicated on both ranks
        for p in parts:
            np.testing.assert_array_equal(p[layer + name].data, state[layer + name])


def test_launch_builds_the_mpiexec_command(monkeypatch) -> None:
    argv = launch_command(3, ["train.py", "--x"])
    assert argv[0].endswith("mpiexec") and argv[1:] == ["-n", "3", sys.executable, "train.py",
                                                        "--x"]
    assert launch_command(2, ["luminal", "generate"])[3:] == [sys.executable, "-m", "luminal",
                                                              "generate"]
    with pytest.raises(ValueError, match="give the command"):
        launch_command(2, [])
    with pytest.raises(ValueError, match="at least 1"):
        launch_command(0, ["x"])
    assert "launch" in {c.name for c in lm.plugins.commands()}
    assert {"distributed", "tensor-parallel"} <= {c.name for c in lm.compilers()}


def test_launch_refuses_bad_arguments_naming_them(tmp_path) -> None:
    """Bad values are reported against the flag, with `launch`'s usage; a script or program
    that is not there is said once, before mpiexec starts any rank."""
    def launch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "luminal", "launch", *args],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)

    for args, message in (
            (("-n", "0", "x.py"), "argument -n/--ranks: must be >= 1, got 0"),
            (("-n", "two", "x.py"), "argument -n/--ranks: expected an integer, got 'two'"),
            (("--timeout", "0", "x.py"), "argument --timeout: must be > 0, got 0")):
        done = launch(*args)
        assert done.returncode == 2
        assert done.stderr.startswith("usage: luminal launch ")
        assert f"luminal launch: error: {message}\n" in done.stderr
    for program, message in (("nosuch.py", "nosuch.py: no such script"),
                             ("nosuch-prog", "nosuch-prog: no such program")):
        done = launch("-n", "2", program)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith(f"luminal launch: error: {message}")
        assert done.stderr.count("\n") == 1
    # One write per rank: print() writes the text and the newline separately when Python runs
    # unbuffered (PYTHONUNBUFFERED), and mpiexec may then interleave the two ranks' pieces.
    (tmp_path / "hello.py").write_text("import sys\nsys.stdout.write('hello\\n')\n")
    done = launch("-n", "2", "hello.py")
    assert done.returncode == 0 and done.stdout == "hello\nhello\n"


def test_timeout_setting(monkeypatch) -> None:
    monkeypatch.setenv(ld.comm.TIMEOUT_ENV, "2.5")
    assert ld.SingleProcess().timeout == 2.5
    for bad in ("soon", "0"):
        monkeypatch.setenv(ld.comm.TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match="LUMINAL_DIST_TIMEOUT"):
            ld.comm.default_timeout()


def test_nccl_types_and_missing_cupy() -> None:
    assert nccl_type(np.float32) == "NCCL_FLOAT32" and nccl_type("bool") == "NCCL_UINT8"
    assert nccl_op("max") == "NCCL_MAX"
    with pytest.raises(ValueError, match="NCCL has no type for complex64"):
        nccl_type(np.complex64)
    try:
        import cupy  # noqa: F401
    except ImportError:  # the case here: the error says what to install
        with pytest.raises(ImportError, match=r"luminal-dist\[cuda\]"):
            ld.NcclCommunicator(bootstrap=ld.SingleProcess())


def test_generate_tensor_parallel_outside_mpi_fails_before_loading() -> None:
    import subprocess

    done = subprocess.run([sys.executable, "-m", "luminal", "generate", "--tensor-parallel", "2",
                           "-n", "1", "hi"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "launch it with `mpiexec -n 2 ...`" in done.stderr
    assert "loading" not in done.stderr  # no weights were read for nothing
