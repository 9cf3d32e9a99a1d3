"""Fuzzing the loaders with thousands of mutated GGUF, safetensors, config.json and tokenizer
files (see `fuzz_files.py`): no signal, no hang, no memory blow-up, only documented errors, and
`luminal generate` prints one line and exits 1 for every file it cannot load.

Cases run in batches in worker processes with an address-space limit (RLIMIT_AS), each case
with a time limit enforced from outside: a worker that dies by a signal or stops reporting is
replaced and its current case recorded as "signal" or "hang".
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

CASES = 3000
SEED = 18
CASE_SECONDS = 20.0  # far above the few milliseconds a case takes: only a hang reaches it
MEMORY_BYTES = 1 << 30  # address space a worker may add to what it maps at start
RSS_BOUND_MB = 256  # growth of a worker's peak resident memory over all its cases
WORKER = Path(__file__).with_name("fuzz_files.py")


def _run_batch(out: Path, start: int, count: int) -> list[dict]:
    """Run cases start..start+count in one worker (replacing it after a hang or a signal)."""
    results: list[dict] = []
    index = start
    while index < start + count:
        work = out / f"worker-{index}"
        work.mkdir()
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(work), str(SEED), str(index),
             str(start + count - index), str(MEMORY_BYTES)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning"})
        current, deadline = None, time.monotonic() + 120.0  # the first deadline covers start-up
        while True:
            wait = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([proc.stdout], [], [], wait)
            if not ready:
                proc.kill()
                proc.wait()
                results.append({"case": current if current is not None else index,
                                "kind": "?", "outcome": "hang"})
                index = (current if current is not None else index) + 1
                break
            line = proc.stdout.readline()
            if not line:
                code = proc.wait()
                if code != 0:
                    results.append({"case": current, "kind": "?",
                                    "outcome": f"signal:{-code}" if code < 0 else f"exit:{code}",
                                    "stderr": proc.stderr.read()[-2000:]})
                    index = (current if current is not None else index) + 1
                else:
                    index = start + count
                break
            record = json.loads(line)
            if "start" in record:
                current, deadline = record["start"], time.monotonic() + CASE_SECONDS
            else:
                results.append(record)
                index = record["case"] + 1
        proc.stdout.close()
        proc.stderr.close()
    return results


def test_mutated_model_files_fail_cleanly(tmp_path: Path) -> None:
    results = _run_batch(tmp_path, 0, CASES)
    outcomes = Counter(r["outcome"] for r in results)
    by_kind = Counter((r["kind"], r["outcome"]) for r in results)
    print(f"fuzz outcomes over {len(results)} cases: {dict(outcomes)}")
    print("by input kind:", {f"{k} {o}": n for (k, o), n in sorted(by_kind.items())})
    assert len(results) == CASES
    bad = [r for r in results if not (r["outcome"] == "ok" or r["outcome"].startswith("error:"))]
    assert not bad, bad[:10]
    peak = max(r.get("rss_mb", 0) for r in results)
    assert peak < RSS_BOUND_MB, f"a worker's peak RSS grew by {peak} MB"
    # the mutations reach every loader and both outcomes (a fuzzer that only produces
    # garbage the first check rejects would prove little)
    assert {"GGUFError", "SafetensorsError", "TokenizerError", "ModelFileError", "CT2Error",
            "ChatTemplateLimitError"} <= {o.split(":", 1)[1] for o in outcomes if ":" in o}
    assert outcomes["ok"] > CASES // 100
