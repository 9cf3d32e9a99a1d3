"""How many threads the next run uses: the cores, less those other processes keep busy.

A run is one OpenMP parallel region whose threads share each kernel's work in chunks
(csrc/runtime.h): no barriers, but a thread that shares its core with another process still
delays every kernel in which it holds a chunk when it is preempted, and a small model's
decode step runs hundreds of kernels. Passive waiting helps the contended case but costs 3x
on an idle machine, so the governor measures, every `interval` seconds, how much of the CPUs
this process may use the rest of the machine kept busy (`/proc/stat` less this process's own
CPU time) and hands the runs only the cores that are left.

Only windows in which this process ran count: when the last measurement is older than
`stale` seconds and the process used less than half a CPU since (it sat idle: a user typing,
a benchmark timing another program), what other processes did meanwhile says nothing about
now (they had the cores we left free), so the governor keeps its last count and opens a new
window. Averaging over such a gap gave a prefill that followed another program's run one
thread of two (benchmarks/llm_bench.py's interleaved rounds: luminal's prefill median sat at
its one-thread rate, its best at the two-thread one).

`OMP_NUM_THREADS` caps the count; `LUMINAL_CPU_THREADS=N` fixes it and turns the governor off.
Without `/proc/stat` (not Linux) every run gets all cores.
"""

from __future__ import annotations

import functools
import os
import threading
import time

from . import device

ENV_THREADS = "LUMINAL_CPU_THREADS"
_STAT = "/proc/stat"


def _positive_int(text: str | None) -> int | None:
    try:
        value = int((text or "").split(",")[0])
    except ValueError:
        return None
    return value if value > 0 else None


def _cpus() -> frozenset[int]:
    """The CPUs this process may run on (a container's cpuset, `taskset`), or all of them."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def _busy_seconds(cpus: frozenset[int]) -> float | None:
    """CPU-seconds all processes have kept `cpus` busy since boot, or None where unknown."""
    try:
        with open(_STAT, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    ticks = 0
    for line in lines[1:]:  # per-CPU lines: cpuN user nice system idle iowait irq softirq steal
        fields = line.split()
        if not fields or not fields[0].startswith(b"cpu"):
            break
        if int(fields[0][3:]) in cpus:
            ticks += sum(int(fields[i]) for i in (1, 2, 3, 6, 7, 8) if i < len(fields))
    return ticks / os.sysconf("SC_CLK_TCK")


class ThreadGovernor:
    """Chooses the thread count of each run (see the module docstring).

    Only the CPUs this process may use are measured. Hysteresis keeps the count from
    flapping: a CPU counts as taken once others use more than `take` of it and as free
    again below `release`. A window longer than `stale` seconds in which this process idled is
    not measured (see the module docstring). Safe to call from several threads.
    """

    def __init__(self, cores: int | None = None, interval: float = 0.2,
                 take: float = 0.6, release: float = 0.3, stale: float = 1.0) -> None:
        fixed = _positive_int(os.environ.get(ENV_THREADS))
        cap = _positive_int(os.environ.get("OMP_NUM_THREADS"))
        self.cpus = _cpus()
        self.cores = fixed or min(cores or device.cores(), cap or 1 << 30)
        self.adaptive = (fixed is None and self.cores > 1
                         and _busy_seconds(self.cpus) is not None)
        self.interval, self.take, self.release = interval, take, release
        self.stale = max(stale, interval)
        self._taken = 0  # CPUs of self.cpus that other processes keep busy
        self._threads = self.cores
        self._last: tuple[float, float, float] | None = None
        self._lock = threading.Lock()

    def threads(self) -> int:
        """The thread count for the next run."""
        if not self.adaptive:
            return self.cores
        with self._lock:
            now, last = time.monotonic(), self._last
            if last is not None and now - last[0] < self.interval:
                return self._threads
            busy, own = _busy_seconds(self.cpus), time.process_time()
            if busy is None:
                return self._threads
            if last is not None and now > last[0]:
                gap, ran = now - last[0], own - last[2]
                if gap <= self.stale or ran >= 0.5 * gap:
                    self._threads = self._count(max(0.0, (busy - last[1]) - ran) / gap)
            self._last = (now, busy, own)
            return self._threads

    def _count(self, others: float) -> int:
        """Threads to use when other processes keep `others` of our CPUs busy."""
        taken, usable = self._taken, len(self.cpus)
        while taken < usable - 1 and others > taken + self.take:
            taken += 1
        while taken > 0 and others < taken - 1 + self.release:
            taken -= 1
        self._taken = taken
        return max(1, min(self.cores, usable - taken))


@functools.lru_cache(maxsize=1)
def governor() -> ThreadGovernor:
    """The process's governor, shared by every compiled graph (they compete for the same
    cores)."""
    return ThreadGovernor()
