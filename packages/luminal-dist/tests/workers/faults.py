"""MPI worker for the fault tests: rank 1 dies (`kill`), hangs (`hang`) or builds a
different graph (`mismatch`) while rank 0 runs an all-reduce step loop. Start-up and the
graph check wait up to the default timeout (ranks start at different times on a loaded
machine); the steps wait only STEP_TIMEOUT seconds."""

import os
import signal
import sys
import time

import luminal as lm
import luminal_dist as ld
import numpy as np

comm = ld.world()
mode, step_timeout = sys.argv[1], float(sys.argv[2])
g = lm.Graph()
width = 5 if mode == "mismatch" and comm.rank == 1 else 4
a = g.tensor((width,), name="a").set(np.ones(width, np.float32))
total = ld.all_reduce(a.exp2()).retrieve()
if mode == "mismatch" and comm.rank == 1:
    total = total.sqrt().retrieve()
try:
    g.compile((lm.GenericCompiler(), ld.Distributed(lm.backend("reference"), comm)))
except ld.DistributedError as mismatch:
    # said before the traceback, as below: on a loaded machine the launcher tore the job down
    # before the traceback's last line (the message) was forwarded
    print(f"rank {comm.rank}: {mismatch}", file=sys.stderr, flush=True)
    raise
g.execute()
comm.timeout = step_timeout
for step in range(1000):
    if comm.rank == 1 and step == 2:
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "hang":
            time.sleep(3600)
    try:
        g.execute()
    except ld.CollectiveTimeout as timeout:
        # said before the traceback: the launcher may tear down the job before the
        # traceback's last line (the message) is forwarded
        print(f"rank {comm.rank}: {timeout}", file=sys.stderr, flush=True)
        raise
    print(f"rank {comm.rank} step {step}", flush=True)
