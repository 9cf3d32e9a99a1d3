"""Convolutions and pooling over (N, C, *spatial) tensors (PyTorch semantics and weight
layouts)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from luminal import GraphTensor

from . import functional as F
from . import init
from .module import Module, Parameter

__all__ = ["AvgPool2d", "Conv1d", "Conv2d", "MaxPool2d"]

IntOrTuple = int | Sequence[int]


def _tuple(v: IntOrTuple, n: int) -> tuple[int, ...]:
    return (v,) * n if isinstance(v, int) else tuple(v)


class _ConvNd(Module):
    spatial = 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrTuple,
                 stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                 groups: int = 1, bias: bool = True) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{type(self).__name__}: in_channels ({in_channels}) and out_channels "
                f"({out_channels}) must both be divisible by groups ({groups})"
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, self.spatial)
        self.stride, self.padding = stride, padding
        self.dilation = dilation
        fan_in = in_channels // groups * math.prod(self.kernel_size)
        self.weight = Parameter((out_channels, in_channels // groups, *self.kernel_size),
                                init=init.uniform_fan_in(fan_in))
        self.bias = Parameter((out_channels,), init=init.uniform_fan_in(fan_in)) if bias else None

    def _conv(self, x: GraphTensor, fn) -> GraphTensor:
        g = x.graph
        bias = self.bias.tensor(g) if self.bias is not None else None
        return fn(x, self.weight.tensor(g), bias, self.stride, self.padding, self.dilation,
                  self.groups)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}")


class Conv1d(_ConvNd):
    """1-D convolution: (N, C_in, L) -> (N, C_out, L_out); weight (C_out, C_in/groups, K)."""

    spatial = 1

    def forward(self, x: GraphTensor) -> GraphTensor:
        return self._conv(x, F.conv1d)


class Conv2d(_ConvNd):
    """2-D convolution: (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""

    spatial = 2

    def forward(self, x: GraphTensor) -> GraphTensor:
        return self._conv(x, F.conv2d)


class MaxPool2d(Module):
    def __init__(self, kernel_size: IntOrTuple, stride: IntOrTuple | None = None,
                 padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x: GraphTensor) -> GraphTensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    def __init__(self, kernel_size: IntOrTuple, stride: IntOrTuple | None = None,
                 padding: IntOrTuple = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: GraphTensor) -> GraphTensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
