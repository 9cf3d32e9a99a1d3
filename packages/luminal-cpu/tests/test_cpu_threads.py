"""The thread governor: runs use the cores other processes leave free."""

from __future__ import annotations

import ctypes
import os
import time
from importlib.resources import files

import luminal as lm
import numpy as np
import pytest
from luminal_cpu import CpuBackend, threads, toolchain
from luminal_cpu.source import build_runtime


class FakeMachine:
    """Stands in for /proc/stat and the process clock: `others` cores busy elsewhere."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = self.busy = self.own = 0.0
        self.cpus = 4  # CPUs this process may use
        monkeypatch.setattr(threads, "_cpus", lambda: frozenset(range(self.cpus)))
        monkeypatch.setattr(threads, "_busy_seconds", lambda cpus: self.busy)
        monkeypatch.setattr(threads.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(threads.time, "process_time", lambda: self.own)

    def advance(self, seconds: float, others: float, own: float) -> None:
        self.now += seconds
        self.busy += seconds * (others + own)
        self.own += seconds * own


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    for var in (threads.ENV_THREADS, "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    return FakeMachine(monkeypatch)


def test_governor_gives_up_the_cores_others_use_and_takes_them_back(machine):
    gov = threads.ThreadGovernor(cores=4, interval=0.2)
    assert gov.threads() == 4  # first call: nothing measured yet
    machine.advance(0.3, others=1.0, own=3.0)
    assert gov.threads() == 3
    machine.advance(0.1, others=3.0, own=1.0)
    assert gov.threads() == 3  # within the interval: no new measurement
    machine.advance(0.2, others=3.0, own=1.0)
    assert gov.threads() == 1
    machine.advance(0.3, others=0.0, own=1.0)
    assert gov.threads() == 4


def test_governor_hysteresis_keeps_a_borderline_load_from_flapping(machine):
    machine.cpus = 2
    gov = threads.ThreadGovernor(cores=2, interval=0.1, take=0.6, release=0.3)
    gov.threads()
    counts = []
    for others in (0.5, 0.7, 0.5, 0.4, 0.2, 0.5):
        machine.advance(0.2, others=others, own=1.0)
        counts.append(gov.threads())
    assert counts == [2, 1, 1, 1, 2, 2]


def test_governor_ignores_what_others_did_while_this_process_idled(machine):
    # a benchmark's interleaved rounds: our run, then another program keeps both cores busy
    # for 2 s while we wait, then a quiet second; the next run must not see a loaded machine
    machine.cpus = 2
    gov = threads.ThreadGovernor(cores=2, interval=0.2, stale=1.0)
    gov.threads()
    machine.advance(0.3, others=0.0, own=2.0)
    assert gov.threads() == 2
    machine.advance(2.0, others=2.0, own=0.0)
    machine.advance(1.0, others=0.0, own=0.0)
    assert gov.threads() == 2  # the gap is stale: last count kept, a new window opened
    machine.advance(0.3, others=1.0, own=1.0)
    assert gov.threads() == 1  # real contention in a recent window still counts
    machine.advance(5.0, others=0.0, own=0.0)
    assert gov.threads() == 1  # after an idle gap: the last count, until measured again
    machine.advance(0.3, others=0.0, own=2.0)
    assert gov.threads() == 2
    machine.advance(3.0, others=1.0, own=1.0)  # a long run of ours, contended: measured
    assert gov.threads() == 1


def test_governor_always_leaves_one_thread(machine):
    machine.cpus = 2
    gov = threads.ThreadGovernor(cores=2, interval=0.1)
    gov.threads()
    machine.advance(0.2, others=8.0, own=0.5)
    assert gov.threads() == 1


def test_governor_counts_only_the_cpus_it_may_use_against_its_cap(machine):
    # 8 CPUs in this process's set, 4 threads wanted (OMP_NUM_THREADS=4, say): others using
    # 3 of the 8 leave room for all 4; using 5 they leave 3
    machine.cpus = 8
    gov = threads.ThreadGovernor(cores=4, interval=0.1)
    gov.threads()
    machine.advance(0.2, others=3.0, own=4.0)
    assert gov.threads() == 4
    machine.advance(0.2, others=5.0, own=3.0)
    assert gov.threads() == 3


def test_governor_survives_a_clock_that_did_not_move(machine):
    gov = threads.ThreadGovernor(cores=4, interval=0.0)
    gov.threads()
    assert gov.threads() == 4  # same timestamp: no division by zero


def test_fixed_thread_count_and_omp_cap(machine, monkeypatch):
    monkeypatch.setenv(threads.ENV_THREADS, "3")
    gov = threads.ThreadGovernor(cores=8)
    machine.advance(0.5, others=6.0, own=1.0)
    assert (gov.adaptive, gov.threads()) == (False, 3)
    monkeypatch.delenv(threads.ENV_THREADS)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads.ThreadGovernor(cores=8).cores == 2


def test_without_proc_stat_every_run_gets_every_core(machine, monkeypatch):
    monkeypatch.setattr(threads, "_busy_seconds", lambda cpus: None)
    gov = threads.ThreadGovernor(cores=4)
    assert not gov.adaptive and gov.threads() == 4


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize(("m", "k", "n"), [(37, 64, 48), (128, 96, 576)])
def test_results_do_not_depend_on_the_thread_count(monkeypatch, count, m, k, n):
    # 576 columns: split into as many tiles as balance the threads (6 for 2 or 3 threads)
    monkeypatch.setattr(threads.governor(), "threads", lambda: count)
    rng = np.random.default_rng(0)
    g = lm.Graph()
    x = g.tensor((m, k), name="x").set(rng.standard_normal((m, k), dtype=np.float32))
    w = g.tensor((k, n), name="w").set(rng.standard_normal((k, n), dtype=np.float32))
    y = (x @ w).softmax(-1).sum(0).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    g.execute()
    xs, ws = x.numpy().astype(np.float64), w.numpy().astype(np.float64)
    z = xs @ ws
    want = (np.exp(z - z.max(-1, keepdims=True))
            / np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)).sum(0)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("count", [1, 2, 3])
def test_finely_chunked_loops_give_the_same_bits_on_any_thread_count(monkeypatch, count):
    """A kernel of 300 x 700 points is work enough for several chunks per thread
    (`lm_for_begin_work`), which threads claim as they finish: every row is still computed
    once, the same way."""
    monkeypatch.setattr(threads.governor(), "threads", lambda: count)
    xs = np.random.default_rng(1).standard_normal((300, 700), dtype=np.float32)
    g = lm.Graph()
    x = g.tensor((300, 700), name="x").set(xs)
    y = ((x * 2.0).exp2() + x).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    g.execute()
    ref = lm.Graph()
    rx = ref.tensor((300, 700), name="x").set(xs)
    ry = ((rx * 2.0).exp2() + rx).retrieve()
    monkeypatch.setattr(threads.governor(), "threads", lambda: 1)
    ref.compile((lm.GenericCompiler(), CpuBackend()))
    ref.execute()
    np.testing.assert_array_equal(y.numpy(), ry.numpy())
    np.testing.assert_allclose(y.numpy(), np.exp2(2.0 * xs.astype(np.float64)) + xs,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat (not Linux)")
def test_busy_seconds_reads_the_cpus_of_this_process():
    cpus = threads._cpus()
    before = threads._busy_seconds(cpus)
    end = time.process_time() + 0.05
    while time.process_time() < end:  # keep one of our CPUs busy for a moment
        pass
    after = threads._busy_seconds(cpus)
    assert before is not None and 0 < before <= after
    assert threads._busy_seconds(frozenset()) == 0


CLAIM_ORDER = r"""
#include <omp.h>
/* thread 1 runs two loops of `n` iterations alone (thread 0 waits until it is done, then
 * passes them): the chunks it claims, in order, go to order[]; -1 without two threads */
int claim_order(long n, long ns, long *order) {
  lm_team team = {0};
  int alone_done = 0, count = 0, threads = 0;
  #pragma omp parallel num_threads(2)
  {
    lm_team_enter(&team);
    if (omp_get_thread_num() == 1) {
      threads = omp_get_num_threads();
      for (int loop = 0; loop < 2; loop++) {
        lm_for_begin_work(n, ns);
        for (long lo, hi; lm_for_next(&lo, &hi);) order[count++] = lo;
      }
      __atomic_store_n(&alone_done, 1, __ATOMIC_RELEASE);
    } else {
      while (!__atomic_load_n(&alone_done, __ATOMIC_ACQUIRE)) sched_yield();
      for (int loop = 0; loop < 2; loop++) {
        lm_for_begin_work(n, ns);
        for (long lo, hi; lm_for_next(&lo, &hi);) order[count++] = -lo - 1;
      }
    }
    lm_team_leave();
  }
  return threads == 2 ? count : -1;
}
"""


@pytest.mark.parametrize("n, ns", [(100, 0), (1600, 10**9), (7, 10**9)])
def test_a_thread_claims_its_own_chunks_first_then_the_others(n, ns):
    """Loops over the same rows give each row to the same core (the one that wrote it last)
    whenever both threads are there: thread 1 claims the second half's chunks first, in order
    (one chunk per thread, 8 per thread, fewer chunks than that). Alone, it then claims the
    rest from the end (no thread waits for another to arrive; the owner of those works from
    their start)."""
    cc = toolchain.compiler()
    runtime = build_runtime(cc)
    header = files("luminal_cpu").joinpath("csrc", "runtime.h").read_text()
    library = toolchain.build("#include <sched.h>\n" + header + CLAIM_ORDER, cc,
                              links=(runtime.path,)).handle
    order = (ctypes.c_long * 64)()
    count = library.claim_order(ctypes.c_long(n), ctypes.c_long(ns), order)
    if count < 0:
        pytest.skip("OpenMP gave fewer than two threads")
    starts = sorted(order[:count // 2])
    assert len(starts) > 1 and starts[0] == 0
    own = [s for c, s in enumerate(starts) if c * 2 // len(starts) == 1]
    others = [s for s in reversed(starts) if s not in own]
    assert list(order[:count]) == 2 * (own + others)
