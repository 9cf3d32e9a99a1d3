"""Horizontal fusion: independent kernels share one launch.

A decode step is hundreds of small kernels, and on a GPU each dependent launch costs a few
microseconds however little it does, so the step is bound by how many launches it makes, not
by the bytes it moves. Many of them do not depend on each other: the q, k and v projections
read the same activations, and so do gate and up; the keys' and values' cache appends and the
queries' rotation are independent too.

`schedule` places every call of a program at the earliest *level* its data allows (after every
earlier call that writes a buffer it reads, or reads or writes a buffer it writes), keeps
program order within a level, and reorders the calls level by level. Every kernel of a level
can then run at once; the memory plan is made afterwards with the levels as its steps, so two
buffers of one level never share memory. `fused_entry` renders one kernel that
runs a level's kernels side by side: each body (see `dialect.py`) gets its own range of the
launch's blocks. Only bodies written for `THREADS` threads per block are fused (attention,
tuned for fewer, launches alone), and a block runs exactly one body, so block-wide barriers
stay correct.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal_codegen.ir import Program

from .dialect import CUDA, KernelFunction


@dataclass(frozen=True)
class Level:
    """Calls (indices into `Program.calls`) with no memory conflict among them."""

    calls: tuple[int, ...]


def schedule(program: Program) -> tuple[Program, tuple[Level, ...]]:
    """`program` with its calls reordered level by level, and the levels (indices into the
    reordered calls, each level a contiguous run); see the module docstring."""
    last_write: dict[int, int] = {}
    last_access: dict[int, int] = {}
    levels: list[list[int]] = []
    for c, call in enumerate(program.calls):
        params = program.kernels[call.kernel].params
        reads = {b for p, b in zip(params, call.args) if not p.output}
        writes = {b for p, b in zip(params, call.args) if p.output}
        level = max([last_write.get(m, -1) + 1 for m in reads]
                    + [last_access.get(m, -1) + 1 for m in writes] + [0])
        for m in reads:
            last_access[m] = max(last_access.get(m, -1), level)
        for m in writes:
            last_write[m] = max(last_write.get(m, -1), level)
            last_access[m] = max(last_access.get(m, -1), level)
        if level == len(levels):
            levels.append([])
        levels[level].append(c)
    order = [c for calls in levels for c in calls]
    reordered = replace(program, calls=[program.calls[c] for c in order])
    runs, start = [], 0
    for calls in levels:
        runs.append(Level(tuple(range(start, start + len(calls)))))
        start += len(calls)
    return reordered, tuple(runs)


def fused_entry(name: str, members: list[KernelFunction]) -> str:
    """An entry running `members` side by side: arguments `lm_dims`, then per member its block
    count and its buffers; blocks [0, g0) run member 0, the next g1 member 1, and so on."""
    args = [f"const long long *{CUDA.restrict} lm_dims"]
    lines = ["long lm_b = blockIdx.x;"]
    for i, fn in enumerate(members):
        params = [(t, f"m{i}_{n}", out) for t, n, out in fn.params]
        args += [f"const long lm_g{i}", *CUDA.arguments(params, False)]
        call = [n for _, n, _ in params] + (["lm_dims"] if fn.uses_dims else []) + ["lm_b"]
        lines += [f"if (lm_b < lm_g{i}) {{ {fn.name}_body({', '.join(call)}); return; }}",
                  f"lm_b -= lm_g{i};"]
    body = "\n".join("  " + line for line in lines[:-1])
    return f'{CUDA.kernel_qualifier} void {name}({", ".join(args)}) {{\n{body}\n}}\n'
