"""`luminal launch`: run a command on N local ranks through MPI's launcher (`mpiexec`).

    luminal launch -n 2 packages/luminal-train/examples/digits_mlp.py --distributed
    luminal launch -n 2 --timeout 60 luminal generate --tensor-parallel 2 "Hello"

A thin wrapper: a `.py` script runs under this Python, `--timeout` sets
`$LUMINAL_DIST_TIMEOUT` (seconds a collective waits for the other ranks), and the exit status
is mpiexec's (non-zero when any rank failed). The `mpiexec` next to this Python (the one the
`mpich` wheel installs) is preferred over the one on PATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .comm import TIMEOUT_ENV

HELP = "run a command on N local ranks with MPI (a thin wrapper over mpiexec)"


def find_mpiexec() -> str:
    """The `mpiexec` of this environment, else the first on PATH."""
    local = Path(sys.executable).parent / "mpiexec"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("no mpiexec found: install MPI with `pip install mpich mpi4py` "
                                "(luminal-dist depends on both)")
    return found


def launch_command(ranks: int, command: list[str]) -> list[str]:
    """The mpiexec argument vector running `command` on `ranks` local processes."""
    if ranks < 1:
        raise ValueError(f"-n must be at least 1, got {ranks}")
    if not command:
        raise ValueError("give the command to run, e.g. `luminal launch -n 2 train.py`")
    if command[0].endswith(".py"):
        command = [sys.executable, *command]
    elif command[0] == "luminal":  # this environment's CLI, whatever PATH says
        command = [sys.executable, "-m", "luminal", *command[1:]]
    return [find_mpiexec(), "-n", str(ranks), *command]


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--ranks", type=_count, default=2, metavar="N",
                        help="number of processes (default: %(default)s)")
    parser.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                        help=f"seconds a collective waits for the other ranks before the job "
                             f"fails (sets ${TIMEOUT_ENV}; default 300)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the script (.py) or program and its arguments")


def missing_program(command: list[str]) -> str | None:
    """Why `command` cannot start (a script or program that is not there), else None: said
    once here rather than once per rank by mpiexec."""
    program = command[0] if command else None
    if program is None or program == "luminal":
        return None
    if program.endswith(".py"):
        return None if Path(program).is_file() else f"{program}: no such script"
    if shutil.which(program) is None:
        return f"{program}: no such program (not a file, nor on PATH)"
    return None


def run(args: argparse.Namespace) -> int:
    try:
        argv = launch_command(args.ranks, list(args.command))
    except (ValueError, FileNotFoundError) as exc:
        print(f"luminal launch: error: {exc}", file=sys.stderr)
        return 2
    missing = missing_program(list(args.command))
    if missing is not None:
        print(f"luminal launch: error: {missing}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    if args.timeout is not None:
        env[TIMEOUT_ENV] = str(args.timeout)
    return subprocess.call(argv, env=env)
