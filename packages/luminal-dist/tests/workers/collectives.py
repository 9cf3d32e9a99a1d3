"""MPI worker: every collective on every rank, as graph ops (cpu backend) and on the
communicator directly; writes this rank's results to OUT.rank.npz for the test to check."""

import sys

import luminal as lm
import luminal_dist as ld
import numpy as np

comm = ld.world()
out = sys.argv[1]
rng = np.random.default_rng(comm.rank)
x = rng.standard_normal((4, 6)).astype(np.float32)
ints = rng.integers(-50, 50, (3, 5)).astype(np.int32)

g = lm.Graph()
a = g.tensor((4, 6), name="a").set(x)
i = g.tensor((3, 5), name="i", dtype=lm.int32).set(ints)
results = {
    "graph_sum": ld.all_reduce(a.transpose(0, 1)).retrieve(),
    "graph_max": ld.all_reduce(a, "max").retrieve(),
    "graph_int_sum": ld.all_reduce(i).retrieve(),
    "graph_gather": ld.all_gather(a, dim=1).retrieve(),
    "graph_scatter": ld.reduce_scatter(a * 2.0, dim=0).retrieve(),
    "graph_bcast": ld.broadcast(a + 1.0, root=1).retrieve(),
    # collectives reading graph leaves directly: an input, and an iota (arange)
    "graph_input": ld.all_gather(a, dim=0).retrieve(),
    "graph_iota": ld.all_reduce(g.arange(5)).retrieve(),
    # a second round: a collective of a value computed from a collective
    "graph_chain": ld.all_reduce(ld.all_reduce(a).exp2() * 0.5).retrieve(),
}
g.compile((lm.GenericCompiler(), ld.Distributed(lm.backend(sys.argv[2]))))
g.execute()
arrays = {k: t.numpy() for k, t in results.items()}
arrays["comm_sum"] = comm.all_reduce(x)
arrays["comm_half"] = comm.all_reduce(x.astype(np.float16))
arrays["x"], arrays["ints"] = x, ints
np.savez(f"{out}.{comm.rank}.npz", **arrays)
