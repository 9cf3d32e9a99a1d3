"""The "compiling" progress bar of `Generator`: what a compiler writes to stderr meanwhile
(luminal-cpu's one-time "compiling the CPU runtime library" line) lands on a line of its own,
and the bar is drawn again below it."""

from __future__ import annotations

import re
import sys

import luminal as lm
from luminal_models.generate import _CompileStep
from tqdm.auto import tqdm


class Announcing:
    """A compiler that says something on stderr, in two writes, as print() does."""

    def compile(self, graph: lm.Graph) -> None:
        print("luminal-cpu: compiling the runtime library", file=sys.stderr)
        sys.stderr.write("a last note without its newline")


def test_a_compilers_stderr_lines_print_above_the_bar(capsys):
    with tqdm(total=1, desc="compiling", file=sys.stderr, leave=False) as bar:
        _CompileStep("building for cpu", Announcing(), bar).compile(lm.Graph())
        assert bar.n == 1
    err = capsys.readouterr().err
    # each line starts a line of the terminal (after tqdm's carriage returns that lift the bar),
    # never after the bar's own text
    for line in ("luminal-cpu: compiling the runtime library\n",
                 "a last note without its newline\n"):
        at = err.index(line)
        assert err[at - 1] in "\r\n", repr(err[max(0, at - 40):at + len(line)])
    assert re.search(r"a last note without its newline\n.*compiling.*building for cpu", err,
                     re.S), repr(err)


def test_without_a_bar_stderr_is_left_alone(capsys):
    bar = tqdm(total=1, disable=True)
    _CompileStep("building for cpu", Announcing(), bar).compile(lm.Graph())
    assert capsys.readouterr().err == ("luminal-cpu: compiling the runtime library\n"
                                       "a last note without its newline")
