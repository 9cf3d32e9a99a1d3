"""Moved to luminal-nn as `luminal_nn.functional` (see `luminal._MOVED`)."""

from . import _MOVED

raise ImportError(_MOVED["functional"])
