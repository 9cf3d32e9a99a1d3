"""Distributed luminal vs torch.distributed (gloo) on this machine's CPU cores.

    python benchmarks/dist_bench.py                 # data parallel + tensor parallel
    python benchmarks/dist_bench.py --rounds 5 --steps 40 --skip-tp
    python benchmarks/dist_bench.py --rounds 9 --batch 2048 --overlap-only

Data parallel: one training step (forward, backward, gradient all-reduce, AdamW update) of an
MLP 64-256-256-10 on a fixed global batch (--batch, split over the ranks), on 1 and on 2 MPI
ranks, for luminal (`luminal_dist.DataParallel`, cpu backend, one thread per rank) and for
PyTorch (`DistributedDataParallel` over gloo, one thread per rank), every job started by the
same `mpiexec`. Rounds interleave the four jobs; a job's time is the median step after
--warmup steps, a configuration's the median over rounds. Scaling efficiency is
t(1 rank) / (2 * t(2 ranks)) (1.0 = perfect strong scaling).

Overlap: at 2 ranks, luminal with the gradients in small buckets (--overlap-bucket-mb, three
all-reduces for this MLP) all-reduced after the backward pass ("luminal-buckets") and
overlapped with it ("luminal-overlap", `DataParallel(overlap=True)`), in the same rounds.

Tensor parallel: `luminal generate --json` decode tok/s of SmolLM2-135M and Gemma 3 270M in
one process and with `--tensor-parallel 2` under `mpiexec -n 2` (greedy, same prompt).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

LUMINAL_SYSTEMS = ("luminal", "luminal-buckets", "luminal-overlap")
SIZES = {"w1": (256, 64), "b1": (256,), "w2": (256, 256), "b2": (256,), "w3": (10, 256),
         "b3": (10,)}


def data(batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    init = {k: (rng.standard_normal(s) * 0.05).astype(np.float32) for k, s in SIZES.items()}
    xs = rng.standard_normal((batch * 8, 64)).astype(np.float32)
    ys = rng.integers(0, 10, batch * 8).astype(np.int32)
    return init, xs, ys


def luminal_worker(args) -> float | None:
    import luminal as lm
    import luminal_dist as ld
    import luminal_nn.functional as F
    import luminal_train as lt

    small = args.worker != "luminal"
    dp = ld.DataParallel(bucket_mb=args.overlap_bucket_mb if small else 25.0,
                         overlap=args.worker == "luminal-overlap")
    init, xs, ys = data(args.batch)
    g = lm.Graph()
    p = {k: g.tensor(v.shape, name=k).set(v) for k, v in init.items()}
    x = g.tensor(("batch", 64), name="x")
    y = g.tensor(("batch",), name="y", dtype=lm.int32)
    h = F.linear(F.linear(x, p["w1"], p["b1"]).relu(), p["w2"], p["b2"]).relu()
    step = lt.TrainStep(lt.cross_entropy(F.linear(h, p["w3"], p["b3"]), y),
                        lt.AdamW(p, 1e-3), backend="cpu", data_parallel=dp)
    batches = list(lt.Batches({x: xs, y: ys}, args.batch // dp.size, rank=dp.rank,
                              world_size=dp.size))
    times = []
    for k in range(args.warmup + args.steps):
        start = time.perf_counter()
        step(batches[k % len(batches)])
        times.append(time.perf_counter() - start)
    slowest = dp.comm.all_reduce(np.array([statistics.median(times[args.warmup:])]), "max")
    return None if dp.rank else float(slowest[0])


def torch_worker(args) -> float | None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    torch.set_num_threads(1)
    rank, size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=size)
    init, xs, ys = data(args.batch)

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterDict({k: torch.tensor(v) for k, v in init.items()})

        def forward(self, x):
            p = self.p
            h = F.relu(F.linear(F.relu(F.linear(x, p["w1"], p["b1"])), p["w2"], p["b2"]))
            return F.linear(h, p["w3"], p["b3"])

    model = torch.nn.parallel.DistributedDataParallel(MLP())
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    local = args.batch // size
    times = []
    for k in range(args.warmup + args.steps):
        lo = (k % 8) * args.batch + rank * local
        x, y = torch.tensor(xs[lo:lo + local]), torch.tensor(ys[lo:lo + local]).long()
        start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    slowest = torch.tensor([statistics.median(times[args.warmup:])], dtype=torch.float64)
    dist.all_reduce(slowest, dist.ReduceOp.MAX)
    dist.destroy_process_group()
    return None if rank else float(slowest[0])


def mpiexec() -> str:
    from luminal_dist.launch import find_mpiexec

    return find_mpiexec()


def run_job(system: str, ranks: int, args, port: int) -> float:
    argv = [mpiexec(), "-n", str(ranks), sys.executable, __file__, "--worker", system,
            "--batch", str(args.batch), "--steps", str(args.steps), "--warmup",
            str(args.warmup), "--port", str(port), "--overlap-bucket-mb",
            str(args.overlap_bucket_mb)]
    env = {**os.environ, "LUMINAL_CPU_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{system} x{ranks} failed:\n{done.stderr[-3000:]}")
    return float(done.stdout)  # the slowest rank's median step: it ends the step


def decode_tok_s(model: str, tp: int, tokens: int) -> float:
    cmd = [sys.executable, "-m", "luminal", "generate", "--model", model, "--json", "-n",
           str(tokens), "--temperature", "0", "Once upon a time"]
    if tp > 1:
        cmd = [mpiexec(), "-n", str(tp), *cmd, "--tensor-parallel", str(tp)]
    env = {**os.environ, "LUMINAL_CPU_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("{"))
    return json.loads(line)["decode_tok_s"]


def print_scaling(results: dict[tuple[str, int], list[float]]) -> None:
    print("system   ranks  step_ms  speedup  efficiency")
    for system in ("luminal", "torch"):
        t1 = statistics.median(results[(system, 1)])
        for ranks in (1, 2):
            t = statistics.median(results[(system, ranks)])
            print(f"{system:8s} {ranks:5d} {t * 1e3:8.3f} {t1 / t:8.2f} {t1 / t / ranks:11.2f}")
    ratio = statistics.median(results[("luminal", 2)]) / statistics.median(results[("torch", 2)])
    print(f"luminal / torch step time at 2 ranks: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256, help="global batch")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32, help="decoded tokens (TP)")
    parser.add_argument("--overlap-bucket-mb", type=float, default=0.1,
                        help="gradient bucket size of the overlap comparison")
    parser.add_argument("--skip-tp", action="store_true")
    parser.add_argument("--overlap-only", action="store_true",
                        help="only the overlap comparison (implies --skip-tp)")
    parser.add_argument("--worker", choices=(*LUMINAL_SYSTEMS, "torch"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=29511, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        slowest = (torch_worker if args.worker == "torch" else luminal_worker)(args)
        if slowest is not None:
            print(slowest)
        return

    from compile_bench import cpu_model

    print(f"# {cpu_model()}, {os.cpu_count()} cores; global batch {args.batch}, "
          f"{args.steps} steps x {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}")
    results: dict[tuple[str, int], list[float]] = {}
    port = args.port
    jobs = [("luminal-buckets", 2), ("luminal-overlap", 2)]
    if not args.overlap_only:
        jobs = [("luminal", 1), ("luminal", 2), ("torch", 1), ("torch", 2), *jobs]
    for _ in range(args.rounds):
        for system, ranks in jobs:
            port += 1
            results.setdefault((system, ranks), []).append(run_job(system, ranks, args, port))
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")
    if not args.overlap_only:
        print_scaling(results)
    small = {s: statistics.median(results[(s, 2)]) for s in LUMINAL_SYSTEMS[1:]}
    overlap_ratios = [o / b for o, b in zip(results[("luminal-overlap", 2)],
                                            results[("luminal-buckets", 2)], strict=True)]
    print(f"2 ranks, {args.overlap_bucket_mb:g} MB buckets: after backward "
          f"{small['luminal-buckets'] * 1e3:.3f} ms, overlapped "
          f"{small['luminal-overlap'] * 1e3:.3f} ms; overlapped / after backward per round "
          f"{' '.join(f'{r:.2f}' for r in overlap_ratios)} "
          f"(median {statistics.median(overlap_ratios):.2f})")
    if not (args.skip_tp or args.overlap_only):
        for model in ("smollm2", "gemma3"):
            single, tp = [], []
            for _ in range(args.rounds):
                single.append(decode_tok_s(model, 1, args.tokens))
                tp.append(decode_tok_s(model, 2, args.tokens))
            print(f"{model} decode tok/s: 1 process {statistics.median(single):.1f}, "
                  f"tensor-parallel 2 ranks {statistics.median(tp):.1f}")


if __name__ == "__main__":
    main()
