"""Every conformance case on the reference backend, against PyTorch and against itself.

`test_op_matches_torch` checks the semantics of each high-level op (values, shapes, and bool
/ integer / float result kinds) in every variant: broadcasting, non-contiguous inputs,
symbolic dims bound to two values on one compiled graph, and float16.
`test_conformance_reference` is the kit's one-liner as a third-party backend would use it:
the reference backend behind `GenericCompiler` against the uncompiled reference graph.
"""

from __future__ import annotations

import importlib.util
import inspect

import pytest
from luminal.reference import ReferenceBackend
from luminal.testing import CASES, case_variants, conformance_tests, run_case

REFERENCE = ReferenceBackend()
# only the PyTorch comparisons need torch: the kit's reference run and the coverage checks
# below run everywhere (Python 3.12 has no local torch wheel)
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="PyTorch is not installed")


@pytest.mark.parametrize(
    ("case", "variant"),
    [pytest.param(c, v, id=f"{c.name}-{v}") for c in CASES for v in case_variants(c, REFERENCE)],
)
@needs_torch
def test_op_matches_torch(case, variant):
    run_case(case, REFERENCE, variant, compare_to="torch")


test_conformance_reference = conformance_tests("reference")

# Every op the suite promises to cover, as it is spelled in a case's source.
COVERED = (
    '+', '-', '*', '/', '**', '%', '//', '<', '<=', '>', '>=', '==', '!=', '&', '|', '^', '~',
    '@', 'neg', 'abs', 'sign', 'sqrt', 'rsqrt', 'exp(', 'exp2', 'log(', 'log2', 'sin', 'cos',
    'tanh', 'sigmoid', 'relu', 'gelu', 'approximate', 'silu', 'softplus', 'leaky_relu',
    'clamp', 'maximum', 'minimum', 'where', 'pow', 'floor', 'ceil', 'round', 'trunc', 'sum(',
    'amax', 'amin', 'max(', 'min(', 'mean', 'var(', 'std(', 'prod', 'argmax', 'argmin',
    'softmax', 'log_softmax', 'logsumexp', 'cumsum', 'reshape', 'view(', 'permute',
    'transpose', 'expand', 'unsqueeze', 'squeeze', 'flatten', '[1]', '[-1]', '::2', 'None',
    '...', 'pad(', 'value=', 'cat(', 'stack', 'split', 'chunk', 'repeat', 'flip', 'matmul',
    'gather', 'embedding', 'arange', 'ones', 'zeros', 'full', 'tril', 'triu', 'conv1d',
    'conv2d', 'groups=', 'dilation=', 'max_pool2d', 'avg_pool2d', 'ceil_mode',
    'count_include_pad', 'layer_norm', 'rms_norm', 'interpolate', 'scale_factor', 'size=',
    'scaled_dot_product_attention', 'is_causal', 'linear', '"same"', '"valid"',
)


def test_cases_cover_every_op():
    sources = "\n".join(inspect.getsource(c.fn) for c in CASES)
    missing = [token for token in COVERED if token not in sources]
    assert not missing, f"no conformance case uses {missing}"


def test_cases_have_unique_names_and_run_every_variant_somewhere():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    used = {v for c in CASES for v in c.variants()}
    assert used == {"base", "broadcast", "permuted", "strided", "padded", "symbolic", "float16"}
