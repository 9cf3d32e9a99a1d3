"""Real two-rank MPI jobs on 127.0.0.1 (the mpiexec of mpich's wheel): collectives against
NumPy, data-parallel training against one process on the combined batch (and rank-0
checkpointing), the digits example against one process, tensor-parallel SmolLM2 and Gemma 3
against one process, and faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from luminal_dist.launch import launch_command
from safetensors import safe_open

WORKERS = Path(__file__).parent / "workers"


def mpirun(ranks: int, *args: str, timeout: float = 240, env: dict | None = None,
           check: bool = True) -> subprocess.CompletedProcess:
    """`mpiexec -n RANKS python ARGS...` (a worker script name, or `-m module ...`)."""
    script = [str(WORKERS / args[0]), *args[1:]] if args[0].endswith(".py") else list(args)
    argv = launch_command(ranks, [sys.executable, *script])
    full_env = {**os.environ, "LUMINAL_CPU_THREADS": "1", **(env or {})}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n"
                    f"{done.stderr[-4000:]}")
    return done



@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_collectives_equal_numpy(tmp_path, backend) -> None:
    mpirun(2, "collectives.py", str(tmp_path / "out"), backend)
    r = [dict(np.load(tmp_path / f"out.{k}.npz")) for k in range(2)]
    xs, ints = [d["x"] for d in r], [d["ints"] for d in r]
    for d in r:
        np.testing.assert_allclose(d["graph_sum"], (xs[0] + xs[1]).T, rtol=1e-6)
        np.testing.assert_allclose(d["comm_sum"], xs[0] + xs[1], rtol=1e-6)
        np.testing.assert_allclose(d["comm_half"], (xs[0].astype(np.float16) + xs[1].astype(
            np.float16)).astype(np.float16), rtol=1e-3)
        np.testing.assert_array_equal(d["graph_max"], np.maximum(xs[0], xs[1]))
        np.testing.assert_array_equal(d["graph_int_sum"], ints[0] + ints[1])
        np.testing.assert_array_equal(d["graph_gather"], np.concatenate(xs, axis=1))
        np.testing.assert_array_equal(d["graph_input"], np.concatenate(xs, axis=0))
        np.testing.assert_array_equal(d["graph_iota"], 2 * np.arange(5))
        np.testing.assert_array_equal(d["graph_bcast"], xs[1] + 1)
        np.testing.assert_allclose(d["graph_chain"], np.exp2(xs[0] + xs[1]), rtol=1e-5)
    scattered = 2 * (xs[0] + xs[1])
    np.testing.assert_allclose(r[0]["graph_scatter"], scattered[:2], rtol=1e-6)
    np.testing.assert_allclose(r[1]["graph_scatter"], scattered[2:], rtol=1e-6)


def test_data_parallel_equals_one_process_on_the_combined_batch(tmp_path) -> None:
    mpirun(2, "data_parallel.py", str(tmp_path / "params.npz"), "cpu")
    d = np.load(tmp_path / "params.npz")
    for name in ("w1", "b1", "w2", "b2"):
        assert not np.allclose(d[f"single.{name}"], 0) or name.startswith("b")
        np.testing.assert_allclose(d[f"dp.{name}"], d[f"single.{name}"], atol=1e-5)
        # all-reduces overlapped with the backward pass: the same update
        np.testing.assert_allclose(d[f"overlap.{name}"], d[f"dp.{name}"], atol=1e-6, rtol=0)
    np.testing.assert_array_equal(d["ranks"][0], d["ranks"][1])  # identical on every rank
    # rank-0 checkpointing: both ranks called save(), rank 0 alone wrote, after step 20
    assert not (tmp_path / "params.npz.rank1.safetensors").exists()
    with safe_open(str(tmp_path / "params.npz.rank0.safetensors"), "numpy") as ckpt:
        assert ckpt.metadata()["step"] == "20"
        for name in ("w1", "b1", "w2", "b2"):
            np.testing.assert_array_equal(ckpt.get_tensor(f"param/{name}"), d[f"dp.{name}"])


def _accuracy(stdout: str) -> float:
    lines = [line for line in stdout.splitlines() if line.startswith("test_accuracy=")]
    assert len(lines) == 1, stdout  # rank 0 prints
    return float(lines[0].split("=")[1])


def test_luminal_launch_trains_the_digits_example_to_one_process_accuracy() -> None:
    """`luminal launch -n 2 digits_mlp.py --distributed` reaches the accuracy of the same
    script in one process (same global batch and seed)."""
    example = Path(__file__).parents[2] / "luminal-train" / "examples" / "digits_mlp.py"
    env = {**os.environ, "LUMINAL_CPU_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "luminal", "launch", "-n", "2", "--timeout", "120", str(example),
         "--distributed", "--no-progress"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    single = subprocess.run([sys.executable, str(example), "--no-progress"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert single.returncode == 0, single.stderr[-3000:]
    accuracy = _accuracy(done.stdout)
    assert accuracy >= 0.95
    # the same updates up to summation order: at most a test image or two differs
    assert abs(accuracy - _accuracy(single.stdout)) <= 0.006


def _generate(model: str, tokens: int, tensor_parallel: bool) -> list[int]:
    prompt = ["-m", "luminal", "generate", "--model", model, "--json", "-n", str(tokens),
              "The capital of France is"]
    if tensor_parallel:
        done = mpirun(2, *prompt, "--tensor-parallel", "2")
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        assert len(lines) == 1, done.stdout  # rank 0 prints, rank 1 does not
        return json.loads(lines[0])["token_ids"]
    done = subprocess.run([sys.executable, *prompt], capture_output=True, text=True,
                          timeout=240, check=True)
    return json.loads(done.stdout)["token_ids"]


def test_tensor_parallel_smollm2_greedy_tokens_equal_one_process() -> None:
    single = _generate("smollm2", 3, tensor_parallel=False)
    assert len(single) == 3
    assert _generate("smollm2", 3, tensor_parallel=True) == single


def test_tensor_parallel_gemma3_greedy_tokens_equal_one_process() -> None:
    # Gemma 3 270M: its one KV head is replicated, its 4 query heads split 2 + 2
    single = _generate("gemma3", 8, tensor_parallel=False)
    assert len(single) == 8
    assert _generate("gemma3", 8, tensor_parallel=True) == single


@pytest.mark.parametrize("mode", ["kill", "hang"])
def test_a_lost_rank_fails_the_job_within_the_timeout(mode) -> None:
    start = time.monotonic()
    done = mpirun(2, "faults.py", mode, "3", timeout=120, env={"LUMINAL_DIST_TIMEOUT": "60"},
                  check=False)
    assert done.returncode != 0
    assert "rank 0 step 1" in done.stdout  # the job ran until the fault
    assert time.monotonic() - start < 60  # not the 300 s default, nor forever
    if mode == "kill":  # the launcher ends the job and says which rank died, and how
        assert "BAD TERMINATION" in done.stdout + done.stderr
        assert "Killed (signal 9)" in done.stdout + done.stderr
    if mode == "hang":  # rank 0 names the collective it waited for, and the cause
        assert "did not complete within 3 s" in done.stderr, done.stderr[-3000:]
        assert "all_reduce(sum)" in done.stderr


def test_mismatched_graphs_are_detected_before_the_first_step() -> None:
    done = mpirun(2, "faults.py", "mismatch", "3", timeout=120,
                  env={"LUMINAL_DIST_TIMEOUT": "60"}, check=False)
    assert done.returncode != 0
    assert "the graphs of ranks [1] differ from rank 0's" in done.stderr
    assert "step 0" not in done.stdout
