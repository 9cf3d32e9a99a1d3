"""Collectives as graph ops: all-reduce, all-gather, reduce-scatter, broadcast.

Each op records the world size it was built for. In a world of one every collective is the
identity, which is its primitive decomposition: `Distributed` replaces it by its input (or a
`Contiguous` copy of a non-trivial view), so any backend runs the graph. With more ranks,
`Distributed` runs the graph in stages and the collectives between them on a communicator.

    import luminal_dist as ld

    total = ld.all_reduce(partial)            # sum over ranks, same shape
    rows = ld.all_gather(shard, dim=0)        # (size * n, ...)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from luminal import GraphTensor
from luminal.ir import Edge
from luminal.ops import Op

from .comm import Communicator, DistributedError, Done, Pending, check_reduce_op


@dataclass(frozen=True)
class Collective(Op):
    """Base of the collectives; `size` is the number of ranks taking part."""

    size: int

    def reference(self, xs, dtype, dims):
        if self.size == 1:
            return xs[0]
        raise DistributedError(
            f"{self.label()} spans {self.size} ranks: compile the graph with "
            "luminal_dist.Distributed(backend) so the collective runs on a communicator")

    def run(self, comm: Communicator, x):
        """Carry out the collective on this rank's host value `x`."""
        raise NotImplementedError

    def start(self, comm: Communicator, x) -> Pending:
        """Start the collective on `x`; its `wait()` gives `run`'s result. Blocking (done at
        once) unless the communicator can start this collective without waiting."""
        return Done(self.run(comm, x))

    def label(self) -> str:
        return f"{self.name} x{self.size}"


@dataclass(frozen=True)
class AllReduce(Collective):
    op: str = "sum"

    def run(self, comm, x):
        return comm.all_reduce(x, self.op)

    def start(self, comm, x) -> Pending:
        start = getattr(comm, "start_all_reduce", None)
        return Done(self.run(comm, x)) if start is None else start(x, self.op)

    def label(self) -> str:
        return f"AllReduce {self.op} x{self.size}"


@dataclass(frozen=True)
class AllGather(Collective):
    axis: int = 0

    def output_shape(self, shapes: Sequence) -> tuple:
        shape = list(shapes[0])
        shape[self.axis] = shape[self.axis] * self.size
        return tuple(shape)

    def run(self, comm, x):
        return comm.all_gather(x, self.axis)


@dataclass(frozen=True)
class ReduceScatter(Collective):
    axis: int = 0
    op: str = "sum"

    def output_shape(self, shapes: Sequence) -> tuple:
        shape = list(shapes[0])
        shape[self.axis] = shape[self.axis] // self.size
        return tuple(shape)

    def run(self, comm, x):
        return comm.reduce_scatter(x, self.axis, self.op)


@dataclass(frozen=True)
class Broadcast(Collective):
    root: int = 0

    def run(self, comm, x):
        return comm.broadcast(x, self.root)


def _apply(op: Collective, t: GraphTensor) -> GraphTensor:
    node = t.graph.add_node(op, [Edge(t.id, t.layout)], op.output_shape([t.layout.shape]),
                            t.dtype)
    return t.graph.wrap(node.id)


def _size(comm: Communicator | int | None) -> int:
    if comm is None:
        from .comm import world

        return world().size
    return comm if isinstance(comm, int) else comm.size


def _axis(t: GraphTensor, dim: int) -> int:
    rank = len(t.shape)
    if not -rank <= dim < rank:
        raise ValueError(f"dim {dim} is out of range for a tensor of shape {tuple(t.shape)}")
    return dim % rank


def all_reduce(t: GraphTensor, op: str = "sum", comm: Communicator | int | None = None
               ) -> GraphTensor:
    """The elementwise `op` ("sum", "max", "min") of `t` over every rank (`comm` or its size;
    default: this job's world)."""
    return _apply(AllReduce(_size(comm), check_reduce_op(op)), t)


def all_gather(t: GraphTensor, dim: int = 0, comm: Communicator | int | None = None
               ) -> GraphTensor:
    """Every rank's `t` concatenated along `dim` in rank order (equal shapes on every rank)."""
    return _apply(AllGather(_size(comm), _axis(t, dim)), t)


def reduce_scatter(t: GraphTensor, dim: int = 0, op: str = "sum",
                   comm: Communicator | int | None = None) -> GraphTensor:
    """The sum (or `op`) of `t` over every rank, split along `dim`: rank r keeps part r."""
    size, axis = _size(comm), _axis(t, dim)
    extent = t.shape[axis]
    if isinstance(extent, int) and extent % size:
        raise ValueError(f"reduce_scatter: dim {dim} of shape {tuple(t.shape)} does not split "
                         f"into {size} equal parts")
    return _apply(ReduceScatter(size, axis, check_reduce_op(op)), t)


def broadcast(t: GraphTensor, root: int = 0, comm: Communicator | int | None = None
              ) -> GraphTensor:
    """Rank `root`'s `t` on every rank."""
    size = _size(comm)
    if not 0 <= root < size:
        raise ValueError(f"broadcast: root {root} is not a rank of a world of {size}")
    return _apply(Broadcast(size, root), t)
