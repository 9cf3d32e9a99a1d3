"""Checking generated MSL on Linux: clang++ against the stand-in header `shim/metal_stdlib`.

Two checks, neither of them Metal verification (see the header's comment):

- `syntax_check(kernels)`: every kernel as the Metal backend renders it (threadgroup reductions,
  simdgroup-matrix GEMMs, quantized GEMVs included) goes through `clang++ -fsyntax-only`, a few
  hundred kernels per translation unit, the units compiled concurrently (one clang process per
  kernel would take ten times longer);
- `CpuMetalBackend`: a luminal backend that compiles the kernels as C++ into shared libraries
  and runs them on the CPU, so the generated arithmetic, index expressions and dtype
  conversions are compared with the reference backend. One-thread-per-point kernels are
  called for every thread id in turn; the cooperative ones (threadgroup reductions, SIMD
  GEMVs, simdgroup-matrix GEMMs) run a threadgroup at a time on real threads with the shim's
  barriers and lane exchanges. Apple's scheduling, memory model, matrix hardware and
  fast-math are not emulated.

Identical IR kernels (the same op in many graphs) are rendered and compiled once.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from luminal import Backend, BackendStatus, Runtime
from luminal.symbolic import evaluator
from luminal_codegen import Kernel, Matmul
from luminal_metal import dialect as metal_dialect
from luminal_metal import kernels as metal_kernels
from luminal_metal import matmul as metal_matmul
from luminal_metal.kernels import (
    KernelSource,
    Launch,
    library_source,
    lower_for_metal,
    render_kernel_source,
)

SHIM = Path(__file__).with_name("shim")
CLANG = shutil.which("clang++")
FLAGS = ["-std=c++17", "-x", "c++", "-I", str(SHIM), "-Wno-unknown-attributes",
         "-Werror=return-type", "-fno-strict-aliasing", "-ffp-contract=off"]
# compiled CPU kernels, by source hash (shared by pytest-xdist workers and later sessions)
CACHE = Path(tempfile.gettempdir()) / f"luminal-metal-cpu-{os.getuid()}"
BATCH = 400  # kernels per translation unit
JOBS = 2
NO_CLANG = "clang++ is not installed (scripts/setup.sh installs it: apt install clang)"


def _run(args: list[str]) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"clang++ failed ({' '.join(args[-3:])}):\n{proc.stderr[-8000:]}")


MODES = ("thread", "metal", "cooperative")


@contextmanager
def _rendering(mode: str) -> Iterator[None]:
    """Render kernels in `mode` (see `CpuMetalBackend`): "cooperative" lowers the backend's
    thresholds so that every reduction and matmul takes its cooperative form, with 64-thread
    groups for reductions (two simdgroups, so the cross-simdgroup step runs too)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode != "cooperative":
        yield
        return
    saved = (metal_dialect.THREADGROUP_MIN_REDUCE, metal_dialect.THREADGROUP_MAX_POINTS,
             metal_matmul.PER_THREAD_MAX_K, metal_kernels.THREADS)
    metal_dialect.THREADGROUP_MIN_REDUCE, metal_dialect.THREADGROUP_MAX_POINTS = 0, 1 << 62
    metal_matmul.PER_THREAD_MAX_K, metal_kernels.THREADS = 0, 64
    try:
        yield
    finally:
        (metal_dialect.THREADGROUP_MIN_REDUCE, metal_dialect.THREADGROUP_MAX_POINTS,
         metal_matmul.PER_THREAD_MAX_K, metal_kernels.THREADS) = saved


def _units(kernel_list: Sequence[Kernel | Matmul], mode: str, drivers: bool = False
           ) -> list[tuple[str, list[KernelSource]]]:
    """Translation units of at most BATCH kernels, kernel i named `f{i}`, rendered in `mode`,
    made runnable on the CPU (`cpu_source`) where `drivers`."""
    units = []
    for start in range(0, len(kernel_list), BATCH):
        chunk = kernel_list[start:start + BATCH]
        with _rendering(mode):
            sources = [render_kernel_source(k, f"f{start + i}", mode == "thread")
                       for i, k in enumerate(chunk)]
        source = library_source(sources)
        units.append((cpu_source(source) if drivers else source, sources))
    return units


def unique(kernels: Iterable[Kernel | Matmul]) -> list[Kernel | Matmul]:
    return list(dict.fromkeys(kernels))


def syntax_check(kernels: Sequence[Kernel | Matmul]) -> int:
    """Compile every kernel (as rendered for Metal) with -fsyntax-only; returns how many
    kernel functions were checked."""
    units = _units(unique(kernels), "metal")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(JOBS) as pool:
        paths = []
        for i, (source, _) in enumerate(units):
            path = Path(tmp) / f"unit{i}.metal"
            path.write_text(source)
            paths.append(path)
        list(pool.map(lambda p: _run([CLANG, *FLAGS, "-fsyntax-only", str(p)]), paths))
    return sum(len(ks.launches) for _, sources in units for ks in sources)


# ----- running one thread per point on the CPU ------------------------------------------------
_SIGNATURE = re.compile(r"^kernel void (\w+)\((.*)\) \{$", re.MULTILINE)


def signatures(source: str) -> dict[str, tuple[list[tuple[int, str]], list[int], bool]]:
    """Per kernel function of an MSL source: its buffers (argument index, C pointer type),
    the argument indices of its dims, and whether it runs one thread per point."""
    out = {}
    for name, args in _SIGNATURE.findall(source):
        buffers, dims = [], []
        for arg in args.split(", "):
            slot = re.search(r"\[\[buffer\((\d+)\)\]\]", arg)
            if slot is None:
                continue
            if "&" in arg:
                dims.append(int(slot.group(1)))
            else:
                pointee = arg.split("*")[0].replace("device ", "").strip()
                buffers.append((int(slot.group(1)), f"{pointee} *"))
        out[name] = (buffers, dims, "lm_tid" in args)
    return out


def cpu_source(source: str) -> str:
    """An MSL library made runnable on the CPU: threadgroup memory shared by the threads of a
    group (function-static: the groups of a dispatch run one after the other, see the shim's
    `lm_dispatch`), and per kernel function `fn` a driver `run_fn(buffers, dims, size,
    threads)` that dispatches it as the GPU would: `size` threads one after the other, or
    `size` threadgroups of `threads` threads."""
    out = [re.sub(r"(?m)^(\s*)threadgroup ", r"\1static ", source)]
    for fn, (buffers, dims, per_thread) in signatures(source).items():
        args = [f"({t})b[{k}]" for k, (_, t) in enumerate(buffers)]
        args += [f"d[{j}]" for j in range(len(dims))]
        if per_thread:
            body = f"  for (unsigned long t = 0; t < n; t++) {fn}({', '.join(args)}, (uint)t);\n"
        else:
            coords = "(uint)g, t, threads, t % 32, t / 32"
            body = (f"  lm_dispatch(n, threads, [&](unsigned long g, unsigned t) {{ "
                    f"{fn}({', '.join(args)}, {coords}); }});\n")
        out.append(f'extern "C" void run_{fn}(void **b, long *d, unsigned long n, '
                   f"unsigned threads) {{\n{body}}}\n")
    return "".join(out)


def _half_runtime() -> list[str]:
    """clang's own runtime library, which holds the float <-> half conversions of `__fp16`
    (GCC's libgcc lacks them on x86-64)."""
    path = subprocess.run([CLANG, "-rtlib=compiler-rt", "-print-libgcc-file-name"],
                          capture_output=True, text=True).stdout.strip()
    return ["-x", "none", path] if path and Path(path).exists() else []


def driver(lib: Any, function: str) -> Any:
    """The ctypes driver of kernel function `function` (see `cpu_source`)."""
    fn = getattr(lib, f"run_{function}")
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_long),
                   ctypes.c_ulong, ctypes.c_uint]
    fn.restype = None
    return fn


class KernelLibrary:
    """Compiled CPU versions of IR kernels: `functions(kernel, mode)` gives each launch of the
    kernel rendered in `mode` (see `CpuMetalBackend`) with its ctypes driver
    `(void **buffers, long *dims, unsigned long size, unsigned threads)`."""

    def __init__(self, cache: Path = CACHE):
        self.cache = cache
        self._found: dict[tuple[Kernel | Matmul, str], list[tuple[Launch, Any]]] = {}

    def build(self, kernel_list: Iterable[Kernel | Matmul], mode: str = "thread") -> None:
        todo = [k for k in unique(kernel_list) if (k, mode) not in self._found]
        if not todo:
            return
        units = _units(todo, mode, drivers=True)
        with ThreadPoolExecutor(JOBS) as pool:
            libs = list(pool.map(self.compile, [source for source, _ in units]))
        for lib, (_, sources) in zip(libs, units):
            for ks in sources:
                kernel = todo[int(ks.launches[0].function[1:].split("_")[0])]
                self._found[kernel, mode] = [(launch, driver(lib, launch.function))
                                             for launch in ks.launches]

    def compile(self, source: str) -> Any:
        """A shared library of `source`, cached on disk by its hash (the pytest-xdist workers
        share it: one builds, the other waits on the lock)."""
        digest = hashlib.sha256(source.encode()).hexdigest()[:32]
        lib = self.cache / f"{digest}.so"
        self.cache.mkdir(parents=True, exist_ok=True)
        with open(self.cache / f"{digest}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits, then loads it
            if not lib.exists():
                src = self.cache / f"{digest}.{os.getpid()}.cpp"
                src.write_text(source)
                tmp = self.cache / f"{digest}.{os.getpid()}.so"
                _run([CLANG, *FLAGS, "-O1", "-shared", "-fPIC", "-pthread", "-w", str(src),
                      "-o", str(tmp), *_half_runtime()])
                os.replace(tmp, lib)
                src.unlink()
        return ctypes.CDLL(str(lib))

    def functions(self, kernel: Kernel | Matmul, mode: str) -> list[tuple[Launch, Any]]:
        if (kernel, mode) not in self._found:
            self.build([kernel], mode)
        return self._found[kernel, mode]


class CpuMetalBackend(Backend):
    """Runs MSL kernels on the CPU (see the module docstring), rendered in `mode`:

    - "thread": one thread per point (matmuls one thread per output), the kernels called for
      every thread id in turn;
    - "metal": exactly as `MetalBackend` renders them; the cooperative ones (threadgroup
      reductions, GEMV, GEMM) run through the shim's `lm_dispatch`: real threads, barriers and
      lane exchanges (slow: for small graphs);
    - "cooperative": as "metal", with every reduction and matmul in its cooperative form
      whatever its size (the kit's shapes are mostly below the backend's thresholds).

    `kernels` collects every IR kernel it compiled graphs into. It lowers with its schedule
    (`with_schedule`) as `MetalBackend` does, so a searched plan runs on it too."""

    name = "metal-on-cpu"
    schedulable = True
    dtypes = ("float32", "float16", "bfloat16", "int32", "bool", "uint8")

    def __init__(self, mode: str = "thread", library: KernelLibrary | None = None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.library = library or KernelLibrary()
        self.kernels: list[Kernel | Matmul] = []

    def probe(self) -> BackendStatus:
        if CLANG is None:
            return BackendStatus(False, reason=NO_CLANG)
        return BackendStatus(True, device="CPU, through clang++ and shim/metal_stdlib")

    def compile(self, graph) -> None:
        program = lower_for_metal(graph, self.schedule)
        self.kernels += program.kernels
        graph.set_runtime(_CpuRuntime(graph, program, self.library, self.mode))


class _CpuRuntime(Runtime):
    def __init__(self, graph, program, library: KernelLibrary, mode: str):
        super().__init__(graph)
        library.build(program.kernels, mode)
        self.program = program
        self.launches = [library.functions(k, mode) for k in program.kernels]
        exprs = [e for launches in self.launches for launch, _ in launches
                 for e in (launch.size, launch.when)]
        self.evaluate = evaluator([*exprs, *(b.numel * b.dtype.itemsize
                                             for b in program.buffers)])
        self.sizes_at = len(exprs)

    def upload(self, host: np.ndarray) -> np.ndarray:
        return host.view(np.uint8).copy()

    def download(self, buffer: np.ndarray, dtype) -> np.ndarray:
        return buffer.view(dtype.numpy).copy()

    def launch(self, inputs: dict[int, np.ndarray], dims: dict[str, int]) -> dict[int, Any]:
        values = iter(self.evaluate(dims))
        geometry = [[(next(values), next(values)) for _ in launches]
                    for launches in self.launches]
        sizes = list(values)
        arrays = [inputs[b.node] if b.role == "input" else np.zeros(sizes[k], np.uint8)
                  for k, b in enumerate(self.program.buffers)]
        for call in self.program.calls:
            pointers = (ctypes.c_void_p * max(len(call.args), 1))(
                *(arrays[b].ctypes.data for b in call.args))
            for (launch, fn), (size, when) in zip(self.launches[call.kernel],
                                                  geometry[call.kernel]):
                if when and size > 0:
                    dim_values = (ctypes.c_long * max(len(launch.dims), 1))(
                        *(dims[d] for d in launch.dims))
                    fn(pointers, dim_values, size, launch.threads)
        return {b.node: arrays[k] for k, b in enumerate(self.program.buffers)
                if b.role == "output"}


# ----- the graphs checked ---------------------------------------------------------------------
def kit_kernels(case, variant: str, dtype: str | None = None) -> list[Kernel | Matmul]:
    """The IR kernels of a conformance case's graph, built as the kit builds it (input dtypes
    from the kit's own data generators; `dtype` re-declares its float inputs, e.g. bfloat16)."""
    import luminal as lm
    from luminal.dtypes import dtype_of
    from luminal.testing.adapters import LuminalF
    from luminal.testing.kit import _flatten, dim_values, plan_inputs

    plans = plan_inputs(case, variant)
    env = dim_values(case, variant)[0]
    data = [p.host_data(np.random.default_rng(0), env) for p in plans]
    g = lm.Graph()
    fns = LuminalF(g)
    inputs = [g.tensor(p.shape, name=f"in{k}", dtype=dtype if dtype and x.dtype.kind == "f"
                       else dtype_of(x.dtype)) for k, (p, x) in enumerate(zip(plans, data))]
    seen = [p.transform(fns, t) if p.transform else t for p, t in zip(plans, inputs)]
    for o in _flatten(case.fn(fns, *seen)):
        o.contiguous().retrieve()
    g.compile(lm.GenericCompiler())
    return lower_for_metal(g).kernels
