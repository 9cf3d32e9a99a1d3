"""Typed, range-checked reads of configuration values (GGUF metadata, config.json, tokenizer
side files).

Values come from files written by strangers, so each one is checked for its type (an int is
not a bool, a float is finite) and range before it is used, and a failure is one error naming
the source, the key, what was expected and what was found.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ModelFileError

__all__ = [
    "MAX_JSON_BYTES",
    "get_bool",
    "get_float",
    "get_int",
    "get_int_list",
    "get_str",
    "get_str_list",
    "read_json_object",
]

MAX_JSON_BYTES = 64 << 20  # far above any real config.json / tokenizer_config.json

_MISSING: Any = object()


def _shown(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:60] + "..."
    return f"{text} ({type(value).__name__})"


def _absent(source: object, key: str, default: Any, error: type[ModelFileError]) -> Any:
    if default is _MISSING:
        raise error(f"{source}: has no {key!r}")
    return default


def get_int(source: object, meta: Mapping[str, Any], key: str, lo: int, hi: int,
            default: Any = _MISSING, error: type[ModelFileError] = ModelFileError) -> Any:
    """``meta[key]`` as an int in ``[lo, hi]`` (``default`` when absent or null)."""
    value = meta.get(key)
    if value is None:
        return _absent(source, key, default, error)
    if isinstance(value, float) and value.is_integer():  # JSON writers may say 64.0
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise error(f"{source}: {key} must be an integer in [{lo}, {hi}], got {_shown(value)}")
    return value


def get_float(source: object, meta: Mapping[str, Any], key: str, lo: float, hi: float,
              default: Any = _MISSING, error: type[ModelFileError] = ModelFileError,
              open_low: bool = False) -> Any:
    """``meta[key]`` as a finite float in ``[lo, hi]`` (``(lo, hi]`` with ``open_low``)."""
    value = meta.get(key)
    if value is None:
        return _absent(source, key, default, error)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        value = float(value)
        ok = (lo < value if open_low else lo <= value) and value <= hi
    if not ok:
        bracket = "(" if open_low else "["
        raise error(f"{source}: {key} must be a finite number in {bracket}{lo}, {hi}], got "
                    f"{_shown(value)}")
    return value


def get_bool(source: object, meta: Mapping[str, Any], key: str, default: Any = _MISSING,
             error: type[ModelFileError] = ModelFileError) -> Any:
    """``meta[key]`` as a bool (JSON true/false, GGUF bool)."""
    value = meta.get(key)
    if value is None:
        return _absent(source, key, default, error)
    if not isinstance(value, bool):
        raise error(f"{source}: {key} must be true or false, got {_shown(value)}")
    return value


def get_str(source: object, meta: Mapping[str, Any], key: str, default: Any = _MISSING,
            error: type[ModelFileError] = ModelFileError) -> Any:
    """``meta[key]`` as a str."""
    value = meta.get(key)
    if value is None:
        return _absent(source, key, default, error)
    if not isinstance(value, str):
        raise error(f"{source}: {key} must be a string, got {_shown(value)}")
    return value


def get_str_list(source: object, meta: Mapping[str, Any], key: str, default: Any = _MISSING,
                 error: type[ModelFileError] = ModelFileError) -> Any:
    """``meta[key]`` as a list of str."""
    value = meta.get(key)
    if value is None:
        return _absent(source, key, default, error)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise error(f"{source}: {key} must be a list of strings, got {_shown(value)}")
    return value


def get_int_list(source: object, meta: Mapping[str, Any], key: str, default: Any = _MISSING,
                 error: type[ModelFileError] = ModelFileError) -> Any:
    """``meta[key]`` as a list of int."""
    value = meta.get(key)
    if value is None:
        return _absent(source, key, default, error)
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise error(f"{source}: {key} must be a list of integers, got {_shown(value)}")
    return value


def read_json_object(path: Path, error: type[ModelFileError] = ModelFileError) -> dict[str, Any]:
    """A JSON file that must hold an object: size-capped, UTF-8, no deep nesting.

    Raises:
        error: unreadable, over ``MAX_JSON_BYTES``, not UTF-8, not JSON, or not an object.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror or e}") from e
    if len(data) > MAX_JSON_BYTES:
        raise error(f"{path}: larger than {MAX_JSON_BYTES} bytes; not a config file")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise error(f"{path}: not valid JSON: {e}") from e
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise error(f"{path}: must hold a JSON object, got {_shown(value)}")
    return value
