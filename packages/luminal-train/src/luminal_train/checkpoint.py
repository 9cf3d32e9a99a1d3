"""Checkpoints: parameters, optimizer state and the step count in one safetensors file.

Layout: tensors `param/<name>` for every parameter, `optim/<param>.<state>` and `optim/step`
for the optimizer; string metadata `format` ("luminal-train/1"), `step`, `optimizer` (class
name) and `hyperparams` (JSON). Plain arrays and strings only: never pickle.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from .autograd import Params
from .optim import Optimizer, named_params

FORMAT = "luminal-train/1"


def _resolve(params: Params | None, optimizer: Optimizer | None) -> Mapping:
    if params is not None:
        return named_params(params)
    if optimizer is not None:
        return optimizer.params
    raise ValueError("checkpoint: give params or an optimizer")


def save_checkpoint(
    path: str | os.PathLike,
    params: Params | None = None,
    optimizer: Optimizer | None = None,
    step: int = 0,
) -> None:
    """Write the current values (after the last `execute()`) of `params` (default: the
    optimizer's), the optimizer's state and `step` to `path`."""
    tensors = {f"param/{n}": np.ascontiguousarray(p.numpy())
               for n, p in _resolve(params, optimizer).items()}
    metadata = {"format": FORMAT, "step": str(int(step))}
    if optimizer is not None:
        for key, value in optimizer.state_dict().items():
            tensors[f"optim/{key}"] = np.ascontiguousarray(value)
        metadata["optimizer"] = type(optimizer).__name__
        metadata["hyperparams"] = json.dumps(optimizer.hyperparams())
    save_file(tensors, os.fspath(path), metadata=metadata)


def load_checkpoint(
    path: str | os.PathLike,
    params: Params | None = None,
    optimizer: Optimizer | None = None,
) -> int:
    """Bind the saved values to `params` (default: the optimizer's) and the optimizer's state
    inputs; returns the saved step. Names and shapes must match."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {os.fspath(path)!r} does not exist")
    try:
        with safe_open(os.fspath(path), framework="numpy") as f:
            metadata = f.metadata() or {}
        if metadata.get("format") == FORMAT:
            tensors = load_file(os.fspath(path))
    except Exception as e:  # safetensors raises its own error types for corrupt files
        raise ValueError(
            f"{os.fspath(path)!r} is not a readable checkpoint (a safetensors file written by "
            f"save_checkpoint): {e}") from e
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} checkpoint (format={metadata.get('format')!r})")
    for name, p in _resolve(params, optimizer).items():
        key = f"param/{name}"
        if key not in tensors:
            raise KeyError(f"{path}: no saved value for parameter {name!r}")
        if tensors[key].shape != tuple(p.shape):
            raise ValueError(
                f"{path}: parameter {name!r} was saved with shape {tensors[key].shape}, "
                f"the graph has {tuple(p.shape)}"
            )
        p.set(tensors[key])
    if optimizer is not None:
        saved = metadata.get("optimizer")
        if saved != type(optimizer).__name__:
            raise ValueError(f"{path}: saved optimizer is {saved}, not {type(optimizer).__name__}")
        optimizer.load_state_dict(
            {k.removeprefix("optim/"): v for k, v in tensors.items() if k.startswith("optim/")}
        )
    return int(metadata.get("step", 0))
