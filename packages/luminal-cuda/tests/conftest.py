"""Fixtures of the luminal-cuda tests.

`fake_cupy` stands in for CuPy on machines without a GPU: it records kernel launches, copies,
cuBLAS calls and stream captures instead of running them, so the runtime's control flow (when
it captures, replays, re-uploads, reallocates) is tested everywhere. `emulated_cuda` makes
`CudaBackend` run on `emulator.py`, which executes the generated CUDA C on the CPU, so the
backend's numbers are tested everywhere too; the tests marked `cuda` run on a real GPU.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest


class FakeMemory:
    _next = itertools.count(1)

    def __init__(self, size: int, log: list):
        self.ptr = next(FakeMemory._next) << 32
        self.size = size
        self._log = log

    def copy_from_device_async(self, src: FakeMemory, size: int, stream: Any = None) -> None:
        self._log.append(("preserve", src.ptr, self.ptr, size))


class FakeGraph:
    def __init__(self, ops: list, log: list):
        self.ops = ops
        self._log = log

    def launch(self, stream: Any = None) -> None:
        self._log.append(("replay", len(self.ops)))


class FakeStream:
    def __init__(self, cupy: FakeCupy, non_blocking: bool = False):
        self.ptr = 7
        self._cupy = cupy

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def begin_capture(self) -> None:
        self._cupy.capturing = []

    def end_capture(self) -> FakeGraph:
        ops, self._cupy.capturing = self._cupy.capturing, None
        return FakeGraph(ops, self._cupy.log)

    def synchronize(self) -> None:
        self._cupy.log.append(("sync",))


class FakeCupy:
    """The parts of the CuPy API the runtime uses; `log` lists what ran, in order."""

    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.capturing: list | None = None
        self.sources: list[str] = []
        fake = self

        class RawModule:
            def __init__(self, code: str, options: tuple = ()):
                fake.sources.append(code)

            def get_function(self, name: str):
                return lambda grid, block, args: fake.record(("launch", name, grid, block, args))

        runtime = SimpleNamespace(
            memcpyHostToDevice=1, memcpyDeviceToHost=2, memcpyDeviceToDevice=3,
            memcpyAsync=lambda dst, src, n, kind, stream: fake.record(("memcpy", kind, dst, n)),
            memcpy=lambda dst, src, n, kind: fake.log.append(("memcpy_sync", kind, src, n)),
            memsetAsync=lambda ptr, value, n, stream: fake.record(("memset", ptr, n)),
        )
        cublas = SimpleNamespace(
            setStream=lambda handle, stream: None,
            gemmStridedBatchedEx=lambda *args: fake.record(("gemm", *args[1:6])),
        )

        class Device:
            def __init__(self, ordinal: int = 0):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return None

        self.RawModule = RawModule
        self.cuda = SimpleNamespace(
            Stream=lambda non_blocking=False: FakeStream(fake, non_blocking),
            Device=Device,
            alloc=lambda n: fake.alloc(n),
            runtime=runtime,
            cublas=cublas,
            get_cublas_handle=lambda: 1,
        )

    def alloc(self, n: int) -> FakeMemory:
        mem = FakeMemory(n, self.log)
        self.log.append(("alloc", mem.ptr, n))
        return mem

    def record(self, op: tuple) -> None:
        (self.capturing if self.capturing is not None else self.log).append(op)

    def kinds(self) -> list[str]:
        return [op[0] for op in self.log]

    def clear(self) -> None:
        self.log.clear()


@pytest.fixture
def fake_cupy() -> FakeCupy:
    return FakeCupy()


def pytest_runtest_setup(item: pytest.Item) -> None:
    # The repository's root conftest loads luminal.testing.pytest_plugin, which skips `cuda`
    # tests without a GPU; when these tests run on their own, do the same here.
    if item.get_closest_marker("cuda") is None:
        return
    if item.config.pluginmanager.has_plugin("luminal.testing.pytest_plugin"):
        return
    from luminal.testing.hardware import has_cuda

    if not has_cuda():
        pytest.skip("no cuda device")


def _emulator():
    spec = importlib.util.spec_from_file_location(
        "luminal_cuda_tests_emulator", Path(__file__).with_name("emulator.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def emulated_cuda(monkeypatch: pytest.MonkeyPatch):
    """`CudaBackend` compiles and runs on the CPU emulator (skips without a C++ compiler)."""
    from luminal_cuda import backend
    from luminal_cuda.device import DeviceInfo

    emulator = _emulator()
    if emulator.host_compiler() is None:
        pytest.skip("no host C++ compiler to emulate CUDA kernels with")
    cupy = emulator.EmulatedCupy()
    info = DeviceInfo(0, "CPU emulation", "sm_80", 12040, 12040, 120400, 0)
    monkeypatch.setattr(backend, "import_cupy", lambda: cupy)
    monkeypatch.setattr(backend, "open_device", lambda cp: info)
    return cupy


def _decoder_graph():
    """A compiled transformer block (grouped-query attention, rotary embedding) decoding with
    a KV cache; returns the graph and its input x (1, seq, 64)."""
    import luminal as lm

    nn = pytest.importorskip("luminal_nn", reason="luminal-nn builds the decoder graph")
    g = lm.Graph()
    block = nn.TransformerBlock(64, 4, 128, num_kv_heads=2, rope=nn.RotaryEmbedding(16))
    cache = nn.KVCache(g, 1, 1, 2, 16)
    x = g.tensor((1, "seq", 64), name="x")
    block(x, cache[0]).retrieve()
    g.compile(lm.GenericCompiler())
    return g, x


@pytest.fixture
def decoder_graph():
    """Builds a new model-shaped graph per call (see `_decoder_graph`)."""
    return _decoder_graph
