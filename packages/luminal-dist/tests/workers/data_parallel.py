"""MPI worker: 20 data-parallel AdamW steps of an MLP, with the gradient all-reduces after
the backward pass and overlapped with it; every rank then asks for a checkpoint at
OUT.rank<r>.safetensors (rank 0 alone writes one), and rank 0 trains the same model in one
process on the combined batches and writes the three parameter sets to OUT.npz."""

import sys

import luminal as lm
import luminal_dist as ld
import luminal_nn.functional as F
import luminal_train as lt
import numpy as np

dp = ld.DataParallel(bucket_mb=0.01)  # several buckets for these small gradients
out, backend = sys.argv[1], lm.backend(sys.argv[2])
rng = np.random.default_rng(0)
xs = rng.standard_normal((16 * 20, 12)).astype(np.float32)
ys = rng.integers(0, 5, 16 * 20).astype(np.int32)
init = {"w1": rng.standard_normal((32, 12)) * 0.3, "b1": np.zeros(32),
        "w2": rng.standard_normal((5, 32)) * 0.3, "b2": np.zeros(5)}


def train(data_parallel, rank, size, checkpoint=None):
    g = lm.Graph()
    p = {k: g.tensor(v.shape, name=k).set(v.astype(np.float32)) for k, v in init.items()}
    x = g.tensor(("batch", 12), name="x")
    y = g.tensor(("batch",), name="y", dtype=lm.int32)
    logits = F.linear(F.linear(x, p["w1"], p["b1"]).relu(), p["w2"], p["b2"])
    step = lt.TrainStep(lt.cross_entropy(logits, y), lt.AdamW(p, 1e-2),
                        backend=backend, data_parallel=data_parallel)
    batches = lt.Batches({x: xs, y: ys}, 16 // size, seed=3, rank=rank, world_size=size)
    lt.fit(step, batches, epochs=1, progress=False)
    assert step.step == 20
    if checkpoint:
        step.save(checkpoint)
    return {k: t.numpy() for k, t in p.items()}


parallel = train(dp, dp.rank, dp.size, f"{out}.rank{dp.rank}.safetensors")
overlapped = train(ld.DataParallel(bucket_mb=0.01, overlap=True), dp.rank, dp.size)
others = dp.comm.all_gather(np.concatenate([v.reshape(-1) for v in parallel.values()]))
if dp.rank == 0:
    single = train(None, 0, 1)
    np.savez(out, **{f"dp.{k}": v for k, v in parallel.items()},
             **{f"single.{k}": v for k, v in single.items()},
             **{f"overlap.{k}": v for k, v in overlapped.items()},
             ranks=others.reshape(dp.size, -1))
