"""ONNX's own operator tests (the `node/` suite of `onnx/backend/test/data`) run on luminal.

Each case is a directory with `model.onnx` and `test_data_set_*/{input,output}_*.pb`. A case
is *excluded* when its tensors use a type luminal has no dtype for (double, strings, int8...),
*unsupported* when the importer refuses it (the message names node, op type and opset),
*failed* when it imports but runs wrong or raises, *passed* when every output matches within
the tolerances of ONNX's backend test runner (rtol 1e-3, atol 1e-7), which onnxruntime's
backend tests use by default.

    python -m luminal_onnx.conformance --backend cpu [--filter REGEX] [--json]

Debian's `libonnx-testdata` installs the suite at `DEFAULT_ROOT`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from . import dtypes
from .errors import NeedsStaticInputError, OnnxImportError
from .model import OnnxModel, read_model

DEFAULT_ROOT = Path("/usr/share/libonnx-testdata/data/node")
RTOL, ATOL = 1e-3, 1e-7
STATUSES = ("passed", "failed", "unsupported", "excluded")


@dataclass
class CaseResult:
    name: str
    operator: str
    status: str  # one of STATUSES
    detail: str = ""


def cases(root: Path = DEFAULT_ROOT, pattern: str | None = None) -> list[Path]:
    """The case directories under `root` (sorted), optionally those whose name matches."""
    found = sorted(p for p in Path(root).iterdir() if (p / "model.onnx").is_file())
    if pattern:
        found = [p for p in found if re.search(pattern, p.name)]
    return found


def operator_of(model: onnx.ModelProto) -> str:
    """The operator a case tests: its one node's type, or 'expanded' for function bodies."""
    kinds = {n.op_type for n in model.graph.node if n.op_type != "Constant"}
    return kinds.pop() if len(kinds) == 1 else "(function-expanded graph)"


def _read_tensors(folder: Path, prefix: str) -> list[onnx.TensorProto | None]:
    """The `prefix_N.pb` protos in index order; None for one that is not a plain tensor."""
    files = sorted(folder.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[-1]))
    out = []
    for f in files:
        proto = onnx.TensorProto()
        try:
            proto.ParseFromString(f.read_bytes())
        except Exception:
            out.append(None)
            continue
        out.append(proto if proto.dims or proto.raw_data or _has_values(proto) else None)
    return out


def _array(proto: onnx.TensorProto, declared: int) -> np.ndarray:
    """The proto's values; the suite stores bfloat16 data as raw uint16 bits."""
    arr = numpy_helper.to_array(proto)
    if declared == onnx.TensorProto.BFLOAT16 and arr.dtype == np.uint16:
        arr = arr.view(ml_dtypes.bfloat16)
    return arr


def _has_values(proto: onnx.TensorProto) -> bool:
    fields = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data",
              "string_data")
    return any(len(getattr(proto, f)) for f in fields) or proto.data_type != 0


def _unsupported_type(model: onnx.ModelProto) -> str | None:
    for vi in [*model.graph.input, *model.graph.output]:
        if not vi.type.HasField("tensor_type"):
            return f"{vi.name!r} is not a tensor"
        if not dtypes.is_supported(vi.type.tensor_type.elem_type):
            return f"{vi.name!r} is {dtypes.type_name(vi.type.tensor_type.elem_type)}"
    return None


def run_case(case: Path, backend: str) -> CaseResult:
    """Import and run one case on `backend`, comparing every data set's outputs."""
    try:
        model = read_model(case / "model.onnx", case.name)
    except OnnxImportError as e:
        return CaseResult(case.name, "?", "unsupported", str(e))
    op = operator_of(model)
    why = _unsupported_type(model)
    if why:
        return CaseResult(case.name, op, "excluded", why)
    initialized = {i.name for i in model.graph.initializer}
    input_names = [vi.name for vi in model.graph.input if vi.name not in initialized]
    output_names = [vi.name for vi in model.graph.output]
    declared = {vi.name: vi.type.tensor_type.elem_type
                for vi in [*model.graph.input, *model.graph.output]}
    for data_set in sorted(case.glob("test_data_set_*")):
        inputs = _read_tensors(data_set, "input")
        expected = _read_tensors(data_set, "output")
        if any(t is None for t in inputs + expected):
            return CaseResult(case.name, op, "excluded", "sequence or optional test data")
        feeds = {n: _array(t, declared[n]) for n, t in zip(input_names, inputs)}
        result = _run(model, feeds, backend, case.name)
        if isinstance(result, CaseResult):
            result.operator = op
            return result
        for name, want in zip(output_names, expected):
            want_arr = _array(want, declared[name])
            got = result[name]
            problem = _mismatch(got, want_arr)
            if problem:
                return CaseResult(case.name, op, "failed", f"output {name!r}: {problem}")
    return CaseResult(case.name, op, "passed")


def _run(model: onnx.ModelProto, feeds: dict, backend: str, name: str):
    static: dict[str, np.ndarray] = {}
    for _ in range(len(feeds) + 1):
        try:
            imported = OnnxModel(model, static, source=name)
            break
        except NeedsStaticInputError as e:
            if e.input_name in static or e.input_name not in feeds:
                return CaseResult(name, "", "unsupported", str(e))
            static[e.input_name] = feeds[e.input_name]
        except OnnxImportError as e:
            return CaseResult(name, "", "unsupported", str(e))
        except Exception as e:  # a converter bug: reported, never hidden
            return CaseResult(name, "", "failed", f"import raised {type(e).__name__}: {e}")
    try:
        return imported.run({k: v for k, v in feeds.items() if k not in static}, backend)
    except Exception as e:
        return CaseResult(name, "", "failed", f"run raised {type(e).__name__}: {e}")


def _mismatch(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "biu" or want.dtype == bool:
        bad = np.asarray(got != want)
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        close = np.isclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True)
        bad = ~close
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        return (f"{int(bad.sum())} of {bad.size} values differ; first at {first}: got "
                f"{got[first]!r}, expected {want[first]!r}")
    return ""


def summarize(results: list[CaseResult]) -> dict:
    """Counts overall and per operator, and the pass rate over supported dtypes."""
    totals = Counter(r.status for r in results)
    per_op: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        per_op[r.operator][r.status] += 1
    counted = totals["passed"] + totals["failed"] + totals["unsupported"]
    return {
        "totals": {s: totals[s] for s in STATUSES},
        "pass_rate": totals["passed"] / counted if counted else 0.0,
        "per_operator": {op: {s: c[s] for s in STATUSES if c[s]}
                         for op, c in sorted(per_op.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m luminal_onnx.conformance",
        description="Run ONNX's node tests (Debian libonnx-testdata) on a luminal backend and "
                    "report passed / failed / unsupported cases per operator.")
    configure(parser)
    return run_cli(parser.parse_args(argv))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help="folder of node test cases (default: %(default)s)")
    parser.add_argument("--backend", "-b", default="reference",
                        help="luminal backend to run on (default: %(default)s)")
    parser.add_argument("--filter", "-k", default=None, metavar="REGEX",
                        help="only the cases whose name matches REGEX")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--failures", action="store_true",
                        help="list every failed and unsupported case with its reason")


def run_cli(args: argparse.Namespace) -> int:
    if not Path(args.root).is_dir():
        print(f"error: {args.root} does not exist (Debian: apt-get install libonnx-testdata)",
              file=sys.stderr)
        return 2
    todo = cases(args.root, args.filter)
    results = []
    start = time.perf_counter()
    for k, case in enumerate(todo, 1):
        results.append(run_case(case, args.backend))
        if not args.json and sys.stderr.isatty():
            print(f"\r{k}/{len(todo)} {case.name[:60]:60}", end="", file=sys.stderr)
    summary = summarize(results)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    summary["backend"] = args.backend
    if args.json:
        summary["cases"] = [asdict(r) for r in results]
        print(json.dumps(summary, indent=1))
        return 0
    if sys.stderr.isatty():
        print(file=sys.stderr)
    t = summary["totals"]
    print(f"{args.backend}: {t['passed']} passed, {t['failed']} failed, {t['unsupported']} "
          f"unsupported, {t['excluded']} excluded (dtypes luminal lacks); pass rate "
          f"{summary['pass_rate']:.1%} of supported-dtype cases, {summary['seconds']} s")
    for op, counts in summary["per_operator"].items():
        print(f"  {op:32} " + ", ".join(f"{s} {n}" for s, n in counts.items()))
    if args.failures:
        for r in results:
            if r.status in ("failed", "unsupported"):
                print(f"{r.status:11} {r.name}: {r.detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
