"""Checking generated MSL on Linux: clang++ against the stand-in header `shim/metal_stdlib`.

Two checks, neither of them Metal verification (see the header's comment):

- `syntax_check(kernels)`: every kernel as the Metal backend renders it (threadgroup reductions,
  simdgroup-matrix GEMMs, quantized GEMVs included) goes through `clang++ -fsyntax-only`, a few
  hundred kernels per translation unit, the units compiled concurrently (one clang process per
  kernel would take ten times longer);
- `CpuMetalBackend`: a luminal backend that renders every kernel one thread per point (matmuls
  one thread per output), compiles them as C++ into shared libraries and runs each kernel by
  calling it for every thread id in turn, so the generated arithmetic and index expressions are
  compared with the reference backend. Threadgroup and simdgroup cooperation never runs here.

Identical IR kernels (the same op in many graphs) are rendered and compiled once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from luminal import Backend, BackendStatus, Runtime
from luminal.codegen import Kernel, Matmul, QuantOperand, lower
from luminal.symbolic import evaluator
from luminal_metal.dialect import METAL
from luminal_metal.kernels import KernelSource, library_source, render_kernel_source

SHIM = Path(__file__).with_name("shim")
CLANG = shutil.which("clang++")
FLAGS = ["-std=c++17", "-x", "c++", "-I", str(SHIM), "-Wno-unknown-attributes",
         "-Werror=return-type", "-fno-strict-aliasing", "-ffp-contract=off"]
# compiled CPU kernels, by source hash (atomic renames: pytest-xdist workers share it)
CACHE = Path(tempfile.gettempdir()) / f"luminal-metal-cpu-{os.getuid()}"
BATCH = 400  # kernels per translation unit
JOBS = 2
NO_CLANG = "clang++ is not installed (scripts/setup.sh installs it: apt install clang)"


def _run(args: list[str]) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"clang++ failed ({' '.join(args[-3:])}):\n{proc.stderr[-8000:]}")


def _units(kernels: Sequence[Kernel | Matmul], cpu: bool) -> list[tuple[str, list[str]]]:
    """Translation units of at most BATCH kernels: (source, kernel function names)."""
    units = []
    for start in range(0, len(kernels), BATCH):
        chunk = kernels[start:start + BATCH]
        sources = [render_kernel_source(k, f"f{start + i}", cpu) for i, k in enumerate(chunk)]
        units.append((library_source(sources) + _drivers(chunk, sources, start) if cpu
                      else library_source(sources), [s.launches[0].function for s in sources]))
    return units


def unique(kernels: Iterable[Kernel | Matmul]) -> list[Kernel | Matmul]:
    return list(dict.fromkeys(kernels))


def syntax_check(kernels: Sequence[Kernel | Matmul]) -> int:
    """Compile every kernel (as rendered for Metal) with -fsyntax-only; returns how many
    kernel functions were checked."""
    units = _units(unique(kernels), cpu=False)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(JOBS) as pool:
        paths = []
        for i, (source, _) in enumerate(units):
            path = Path(tmp) / f"unit{i}.metal"
            path.write_text(source)
            paths.append(path)
        list(pool.map(lambda p: _run([CLANG, *FLAGS, "-fsyntax-only", str(p)]), paths))
    return sum(source.count("\nkernel void ") for source, _ in units)


# ----- running one thread per point on the CPU ------------------------------------------------
def _param_types(kernel: Kernel | Matmul) -> list[str]:
    quant = kernel.b.buf if isinstance(kernel, Matmul) and isinstance(
        kernel.b, QuantOperand) else None
    return [("uchar" if k == quant else METAL.storage_type(p.dtype)) + ("" if p.output else
            " const") + " *" for k, p in enumerate(kernel.params)]


def _drivers(kernels: Sequence[Kernel | Matmul], sources: Sequence[KernelSource],
             start: int) -> str:
    """`run_fN(buffers, dims, threads)`: kernel fN called for every thread id in turn."""
    out = []
    for i, (kernel, source) in enumerate(zip(kernels, sources)):
        launch = source.launches[0]
        args = [f"({t})b[{k}]" for k, t in enumerate(_param_types(kernel))]
        args += [f"d[{j}]" for j in range(len(launch.dims))]
        out.append(f'extern "C" void run_f{start + i}(void **b, long *d, unsigned long n) {{\n'
                   f"  for (unsigned long t = 0; t < n; t++) f{start + i}({', '.join(args)}, "
                   "(uint)t);\n}\n")
    return "".join(out)


def _half_runtime() -> list[str]:
    """clang's own runtime library, which holds the float <-> half conversions of `__fp16`
    (GCC's libgcc lacks them on x86-64)."""
    path = subprocess.run([CLANG, "-rtlib=compiler-rt", "-print-libgcc-file-name"],
                          capture_output=True, text=True).stdout.strip()
    return ["-x", "none", path] if path and Path(path).exists() else []


class KernelLibrary:
    """Compiled CPU versions of IR kernels: `function(kernel)` is a ctypes function
    `(void **buffers, long *dims, unsigned long threads)` and the kernel's launch."""

    def __init__(self, cache: Path = CACHE):
        self.cache = cache
        self._found: dict[Kernel | Matmul, tuple[Any, KernelSource]] = {}

    def build(self, kernels: Iterable[Kernel | Matmul]) -> None:
        todo = [k for k in unique(kernels) if k not in self._found]
        if not todo:
            return
        units = _units(todo, cpu=True)
        with ThreadPoolExecutor(JOBS) as pool:
            libs = list(pool.map(self._compile, [source for source, _ in units]))
        for start, (lib, (_, names)) in zip(range(0, len(todo), BATCH), zip(libs, units)):
            for i, name in enumerate(names):
                kernel = todo[start + i]
                fn = getattr(lib, f"run_f{start + i}")
                fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_long),
                               ctypes.c_ulong]
                fn.restype = None
                self._found[kernel] = (fn, render_kernel_source(kernel, name, cpu=True))

    def _compile(self, source: str) -> Any:
        """A shared library of `source`, cached on disk by its hash (atomic renames, so the
        two pytest-xdist workers may build the same one at once)."""
        digest = hashlib.sha256(source.encode()).hexdigest()[:32]
        lib = self.cache / f"{digest}.so"
        if not lib.exists():
            self.cache.mkdir(parents=True, exist_ok=True)
            src = self.cache / f"{digest}.{os.getpid()}.cpp"
            src.write_text(source)
            tmp = self.cache / f"{digest}.{os.getpid()}.so"
            _run([CLANG, *FLAGS, "-O1", "-shared", "-fPIC", "-w", str(src), "-o", str(tmp),
                  *_half_runtime()])
            os.replace(tmp, lib)
            src.unlink()
        return ctypes.CDLL(str(lib))

    def function(self, kernel: Kernel | Matmul) -> tuple[Any, KernelSource]:
        if kernel not in self._found:
            self.build([kernel])
        return self._found[kernel]


class CpuMetalBackend(Backend):
    """Runs the MSL kernels, rendered one thread per point, on the CPU (see the module
    docstring). `kernels` collects every IR kernel it compiled graphs into."""

    name = "metal-on-cpu"
    dtypes = ("float32", "float16", "bfloat16", "int32", "bool", "uint8")

    def __init__(self, library: KernelLibrary | None = None):
        self.library = library or KernelLibrary()
        self.kernels: list[Kernel | Matmul] = []

    def probe(self) -> BackendStatus:
        if CLANG is None:
            return BackendStatus(False, reason=NO_CLANG)
        return BackendStatus(True, device="CPU, through clang++ and shim/metal_stdlib")

    def compile(self, graph) -> None:
        program = lower(graph)
        self.kernels += program.kernels
        graph.set_runtime(_CpuRuntime(graph, program, self.library))


class _CpuRuntime(Runtime):
    def __init__(self, graph, program, library: KernelLibrary):
        super().__init__(graph)
        library.build(program.kernels)
        self.program = program
        self.functions = [library.function(k) for k in program.kernels]
        launches = [source.launches[0] for _, source in self.functions]
        self.evaluate = evaluator([*(launch.size for launch in launches),
                                   *(b.numel * b.dtype.itemsize for b in program.buffers)])

    def upload(self, host: np.ndarray) -> np.ndarray:
        return host.view(np.uint8).copy()

    def download(self, buffer: np.ndarray, dtype) -> np.ndarray:
        return buffer.view(dtype.numpy).copy()

    def launch(self, inputs: dict[int, np.ndarray], dims: dict[str, int]) -> dict[int, Any]:
        values = self.evaluate(dims)
        sizes = values[len(self.functions):]
        arrays = [inputs[b.node] if b.role == "input" else np.zeros(sizes[k], np.uint8)
                  for k, b in enumerate(self.program.buffers)]
        for call in self.program.calls:
            fn, source = self.functions[call.kernel]
            launch = source.launches[0]
            threads = values[call.kernel]
            if threads <= 0:
                continue
            pointers = (ctypes.c_void_p * max(len(call.args), 1))(
                *(arrays[b].ctypes.data for b in call.args))
            dim_values = (ctypes.c_long * max(len(launch.dims), 1))(
                *(dims[d] for d in launch.dims))
            fn(pointers, dim_values, threads)
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
    return lower(g).kernels
