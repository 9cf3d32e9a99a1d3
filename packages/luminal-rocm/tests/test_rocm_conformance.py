"""The luminal-core conformance kit on the OpenCL device, against the reference backend.

The whole kit is about 1,600 (case, variant) tests, and PoCL compiles every new kernel with
LLVM at its first launch, so CI runs a selection: a dozen cases in every variant (permuted,
strided, padded, broadcast, symbolic, float16) and a broad set of ops in the base variant.
`LUMINAL_ROCM_FULL_CONFORMANCE=1` runs everything (about 15 minutes on two PoCL cores).
"""

from __future__ import annotations

import os

from luminal.testing import conformance_tests
from luminal_rocm import OpenCLBackend

EVERY_VARIANT = [
    "chain", "exp", "add", "where", "sum_dim", "max_dim_keepdim", "softmax", "matmul_batched",
    "cat", "pad_2d", "getitem_step", "layer_norm",
]
BASE_ONLY = [
    "neg", "abs", "sign", "rsqrt", "log2", "sin", "tanh", "sigmoid", "gelu", "silu", "erf",
    "clamp", "floor", "round", "trunc", "pow_frac", "div", "mod", "floordiv", "fmod", "eq",
    "nan_compare", "inf_compare", "int_add", "int_mul", "int_floordiv", "int_mod",
    "int_compare", "float_to_int", "bool_and", "bool_not", "bool_where", "sum_int",
    "argmax_dim", "mean_dims_keepdim", "var_dim", "cumsum", "prod_dim", "logsumexp",
    "matmul_2d", "matmul_1d_2d", "matmul_2d_sym_k", "linear", "gather", "embedding", "arange",
    "tril", "conv2d_stride_pad", "conv1d_dilation_groups", "max_pool2d", "avg_pool2d_pad",
    "rms_norm", "interpolate_scale", "sdpa_causal", "flip", "roll", "repeat", "stack",
    "getitem_tensor_index", "cat_mixed_dtypes",
]

if os.environ.get("LUMINAL_ROCM_FULL_CONFORMANCE"):
    test_rocm_conformance = conformance_tests(OpenCLBackend())
else:
    test_rocm_conformance_variants = conformance_tests(OpenCLBackend(), cases=EVERY_VARIANT)
    test_rocm_conformance_ops = conformance_tests(OpenCLBackend(), cases=BASE_ONLY,
                                                  variants=["base"])
