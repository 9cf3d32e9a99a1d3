"""Run a conformance case on a backend and compare it with the reference backend or PyTorch.

    from luminal.testing import run_case
    run_case("conv2d_groups", my_backend, variant="permuted")                 # vs reference
    run_case("conv2d_groups", "reference", variant="base", compare_to="torch")

The luminal side builds the case's graph, compiles it with `(GenericCompiler(), backend)` once,
then executes it once per data set: one for most variants, two for `symbolic` (the same
compiled program with the symbolic dim at two sizes; recompiling would fail the case). The
reference side runs the same graph on the reference backend with no compiler at all, so a bug
in a backend or in `GenericCompiler` shows up as a difference.

A backend declares which dtypes it runs with a `dtypes` attribute (names or `lm.DType`s,
e.g. `dtypes = ("float32", "float16", "int32", "bool")`); without one it is assumed to
support float32, int32 and bool, and the `float16` variant is not run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import Backend
from ..dtypes import dtype_of
from ..graph import Graph
from ..passes import GenericCompiler
from ..reference import ReferenceBackend
from .adapters import LuminalF, TorchF
from .cases import SYM_DIM, Case, Gen, get_case

DEFAULT_DTYPES = ("float32", "int32", "bool")


@dataclass(frozen=True)
class InputPlan:
    """How one input of a case is stored and read in a variant."""

    shape: tuple[int | str, ...]  # storage shape; SYM_DIM marks the symbolic axes
    gen: Gen
    half: bool  # float data is stored as float16
    transform: Callable[[Any, Any], Any] | None  # (F, x) -> what the op sees

    def host_data(self, rng: np.random.Generator, dims: dict[str, int]) -> np.ndarray:
        shape = tuple(dims[d] if isinstance(d, str) else d for d in self.shape)
        data = self.gen(rng, shape)
        return data.astype(np.float16) if self.half and data.dtype.kind == "f" else data


def _reverse(F, x):
    return x.permute(*reversed(range(x.ndim)))


def _every_other(F, x):
    return x[::2]


def _shift_right(F, x):
    return F.pad(x, (1, -1))


def plan_inputs(case: Case, variant: str) -> list[InputPlan]:
    """The storage shape, generator and view transform of each input of `case` in `variant`."""
    shapes = [tuple(s) for s in case.shapes]
    if variant == "broadcast":
        shapes = [(*s[:-1], 1) if i == 0 else s[1:] for i, s in enumerate(shapes)]
    if variant == "symbolic":
        for i, axis in case.sym_axes():
            shapes[i] = (*shapes[i][:axis], SYM_DIM, *shapes[i][axis + 1:])
    plans = []
    for shape, gen in zip(shapes, case.gens()):
        transform, storage = None, shape
        if variant == "permuted" and len(shape) >= 2:
            transform, storage = _reverse, shape[::-1]
        elif variant == "strided" and shape:
            transform, storage = _every_other, (2 * shape[0], *shape[1:])
        elif variant == "padded" and shape:
            transform = _shift_right
        plans.append(InputPlan(storage, gen, variant == "float16", transform))
    return plans


def dim_values(case: Case, variant: str) -> list[dict[str, int]]:
    """One symbolic-dim binding per execution."""
    if variant != "symbolic":
        return [{}]
    i, axis = case.sym_axes()[0]
    return [{SYM_DIM: case.shapes[i][axis]}, {SYM_DIM: case.second_size()}]


def _flatten(result) -> list:
    """A case's outputs as a flat list (cases may return tuples such as max's (values, indices)
    or split's pieces)."""
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _flatten(r)]
    return [result]


# ----- the two sides ------------------------------------------------------------------------
def run_luminal(case: Case, plans: Sequence[InputPlan], datas: Sequence[Sequence[np.ndarray]],
                compilers: Any) -> list[list[np.ndarray]]:
    """Build the case's graph, compile it once with `compilers`, execute once per data set."""
    g = Graph()
    F = LuminalF(g)
    inputs = [
        g.tensor(p.shape, name=f"in{k}", dtype=dtype_of(datas[0][k].dtype))
        for k, p in enumerate(plans)
    ]
    seen = [p.transform(F, t) if p.transform else t for p, t in zip(plans, inputs)]
    # materialise every output so the backend (not the host) evaluates views of results
    outputs = [o.contiguous().retrieve() for o in _flatten(case.fn(F, *seen))]
    g.compile(compilers)
    runtime = g.runtime
    results = []
    for data in datas:
        for t, arr in zip(inputs, data):
            t.set(arr)
        g.execute()
        if g.runtime is not runtime:
            raise AssertionError(f"{case.name}: execute() recompiled the graph")
        results.append([np.array(o.numpy()) for o in outputs])
    return results


def run_torch(case: Case, plans: Sequence[InputPlan], datas: Sequence[Sequence[np.ndarray]]):
    """The case on PyTorch (CPU). Half-precision inputs run in float32 (the values are the
    same; torch's CPU half kernels are not the semantics under test) and int32 as int64."""
    import torch

    F = TorchF()
    results = []
    for data in datas:
        xs = []
        for p, arr in zip(plans, data):
            if arr.dtype == np.float16:
                arr = arr.astype(np.float32)
            t = torch.from_numpy(arr.astype(np.int64) if arr.dtype.kind == "i" else arr)
            xs.append(p.transform(F, t) if p.transform else t)
        with torch.no_grad():
            outs = _flatten(case.fn(F, *xs))
        results.append([o.detach().cpu().numpy() for o in outs])
    return results


# ----- comparison ---------------------------------------------------------------------------
def _kind(dtype: np.dtype) -> str:
    return {"b": "bool", "i": "int", "u": "int"}.get(dtype.kind, "float")


def compare(got: np.ndarray, want: np.ndarray, atol: float, rtol: float, what: str) -> None:
    """Same shape, same kind of dtype (bool / integer / floating), values within tolerance
    (exact for bool and integer results; NaN equals NaN)."""
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape}, expected {want.shape}")
    if _kind(got.dtype) != _kind(want.dtype):
        raise AssertionError(
            f"{what}: dtype {got.dtype} is {_kind(got.dtype)}, expected {_kind(want.dtype)} "
            f"({want.dtype})"
        )
    if _kind(want.dtype) == "float":
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol, err_msg=what
        )
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


# ----- entry point --------------------------------------------------------------------------
def resolve_backend(backend: Backend | str) -> Backend:
    """A `Backend` instance, or the installed backend registered under that name."""
    if isinstance(backend, str):
        from ..plugins import backend as lookup

        return lookup(backend)
    return backend


def backend_dtypes(backend: Backend) -> set[str]:
    """Names of the dtypes `backend` declares (its `dtypes` attribute)."""
    declared = getattr(backend, "dtypes", None) or DEFAULT_DTYPES
    return {dtype_of(d).name for d in declared}


def case_variants(case: Case, backend: Backend | None = None) -> tuple[str, ...]:
    """The variants of `case` to run on `backend` (float16 only where it is declared)."""
    half = backend is not None and "float16" in backend_dtypes(backend)
    return tuple(v for v in case.variants() if v != "float16" or half)


def run_case(case: Case | str, backend: Backend | str = "reference", variant: str = "base",
             compare_to: str = "reference", seed: int = 0) -> None:
    """Run `case` in `variant` on `backend`; raise AssertionError where it differs from
    `compare_to` ("reference": the reference backend; "torch": PyTorch)."""
    case = get_case(case) if isinstance(case, str) else case
    if variant not in case.variants():
        raise ValueError(f"{case.name}: variant {variant!r} does not apply "
                         f"(it has {', '.join(case.variants())})")
    if compare_to not in ("reference", "torch"):
        raise ValueError(f"compare_to must be 'reference' or 'torch', got {compare_to!r}")
    backend = resolve_backend(backend)
    plans = plan_inputs(case, variant)
    rng = np.random.default_rng(seed)
    envs = dim_values(case, variant)
    datas = [[p.host_data(rng, env) for p in plans] for env in envs]
    got = run_luminal(case, plans, datas, (GenericCompiler(), backend))
    if compare_to == "torch":
        want = run_torch(case, plans, datas)
    else:
        want = run_luminal(case, plans, datas, ReferenceBackend())
    atol, rtol = case.tolerances(variant)
    for env, g_outs, w_outs in zip(envs, got, want):
        where = f"{case.name}[{variant}]" + (f" with {env}" if env else "")
        if len(g_outs) != len(w_outs):
            raise AssertionError(f"{where}: {len(g_outs)} outputs, expected {len(w_outs)}")
        for k, (g_out, w_out) in enumerate(zip(g_outs, w_outs)):
            compare(g_out, w_out, atol, rtol, f"{where} output {k} vs {compare_to}")
