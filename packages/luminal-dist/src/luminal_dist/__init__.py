"""luminal-dist: collectives as graph ops, data-parallel training and tensor-parallel
inference over MPI (mpi4py) and NCCL (CuPy).

    import luminal_dist as ld

    comm = ld.world()                         # MPI's world under mpiexec, else one process
    total = ld.all_reduce(partial_sum)        # a graph op
    g.compile((lm.GenericCompiler(), ld.Distributed(lm.backend("cpu"))))

See `DataParallel` (with `luminal_train.TrainStep(data_parallel=...)`) and `TensorParallel`
(`luminal generate --tensor-parallel N` under `mpiexec -n N`).
"""

from .comm import (
    CollectiveTimeout,
    Communicator,
    DistributedError,
    SingleProcess,
    launched_by_mpi,
    world,
)
from .data_parallel import DataParallel
from .fingerprint import check_same_graph, graph_fingerprint
from .mpi import MpiCommunicator
from .nccl import NcclCommunicator
from .ops import (
    AllGather,
    AllReduce,
    Broadcast,
    Collective,
    ReduceScatter,
    all_gather,
    all_reduce,
    broadcast,
    reduce_scatter,
)
from .staged import Distributed, StagedRuntime, split_stages

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "TensorParallel":  # needs luminal-nn, imported only when asked for
        from .tensor_parallel import TensorParallel

        return TensorParallel
    raise AttributeError(f"module 'luminal_dist' has no attribute {name!r}")

__all__ = [
    "AllGather",
    "AllReduce",
    "Broadcast",
    "Collective",
    "CollectiveTimeout",
    "Communicator",
    "DataParallel",
    "Distributed",
    "DistributedError",
    "MpiCommunicator",
    "NcclCommunicator",
    "ReduceScatter",
    "SingleProcess",
    "StagedRuntime",
    "TensorParallel",
    "all_gather",
    "all_reduce",
    "broadcast",
    "check_same_graph",
    "graph_fingerprint",
    "launched_by_mpi",
    "reduce_scatter",
    "split_stages",
    "world",
]
