"""Rendering a model's Jinja chat template (``tokenizer.chat_template`` in GGUF metadata).

Templates come from model files, so they are untrusted code: they run in Jinja's immutable
sandbox, and ``namespace()`` refuses underscore attributes so a template cannot reach interpreter
internals through it. The environment otherwise matches what Hugging Face templates are written
against (``trim_blocks``/``lstrip_blocks``, loop controls, ``raise_exception``, ``strftime_now``
and a ``tojson`` that does not HTML-escape), so templates render as they do in transformers.

A render is also bounded, so a hostile template gets a :class:`ChatTemplateLimitError` instead of
exhausting memory, the stack or time: the template source is at most ``MAX_TEMPLATE_BYTES``; the
output and every string or list the template builds (``*``, ``+``, ``~``, ``replace`` and the
padding filters are checked *before* they allocate) at most ``MAX_OUTPUT_CHARS``; integer powers
at most ``MAX_POWER_BITS`` bits; any integer argument of a call or filter at most
``MAX_OUTPUT_CHARS`` (so ``center(10**10)`` or ``"%999999999d"`` is refused); macro recursion is
cut by Python's recursion limit; and a render stops after ``MAX_RENDER_SECONDS`` (checked at
every call, attribute access, operator and output chunk, so also in threads).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache, wraps
from typing import Any

import jinja2
import jinja2.ext
import jinja2.utils
from jinja2.compiler import CodeGenerator, Frame
from jinja2.nodes import Concat
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = [
    "MAX_OUTPUT_CHARS",
    "MAX_RENDER_SECONDS",
    "MAX_TEMPLATE_BYTES",
    "ChatTemplateLimitError",
    "compile_chat_template",
    "render_chat_template",
]

MAX_TEMPLATE_BYTES = 1 << 20
MAX_OUTPUT_CHARS = 1 << 20
MAX_POWER_BITS = 4096
MAX_RENDER_SECONDS = 5.0
# a run of digits this long in a format string is a width or precision over the limit
_HUGE_FORMAT_FIELD = re.compile(rf"\d{{{len(str(MAX_OUTPUT_CHARS))},}}")


class ChatTemplateLimitError(jinja2.exceptions.TemplateError):
    """A chat template exceeded a resource limit (output size, recursion or time)."""


_deadline = threading.local()


def _check_time() -> None:
    end = getattr(_deadline, "at", None)
    if end is not None and time.monotonic() > end:
        raise ChatTemplateLimitError(f"chat template ran longer than {MAX_RENDER_SECONDS} s")


def _check_size(n: int, what: str) -> None:
    if n > MAX_OUTPUT_CHARS:
        raise ChatTemplateLimitError(
            f"chat template builds {what} of {n} items (limit {MAX_OUTPUT_CHARS})")


def _check_int_args(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_OUTPUT_CHARS:
            raise ChatTemplateLimitError(
                f"chat template passes {value} to {name} (limit {MAX_OUTPUT_CHARS})")


def _check_format(fmt: Any) -> None:
    if isinstance(fmt, str) and _HUGE_FORMAT_FIELD.search(fmt):
        raise ChatTemplateLimitError("chat template formats with a huge field width")


def _sized(value: Any) -> int:
    return len(value) if isinstance(value, str | list | tuple) else 0


def _replaced_size(text: Any, old: Any, new: Any, count: Any = -1) -> int:
    if not (isinstance(text, str) and isinstance(old, str) and isinstance(new, str)):
        return 0
    hits = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * max(0, len(new) - len(old))


_CONTEXTS = (jinja2.runtime.Context, jinja2.nodes.EvalContext)


def _bounded_filter(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
    """A filter that refuses huge integer arguments and huge results of ``replace``."""

    @wraps(f)
    def checked(*args: Any, **kwargs: Any) -> Any:
        _check_time()
        plain = [a for a in args if not isinstance(a, _CONTEXTS)]
        if name == "format" and plain:
            _check_format(plain[0])
        _check_int_args(f"the {name} filter", plain, kwargs)
        if name == "replace" and len(plain) >= 3:
            _check_size(_replaced_size(*plain[:4]), "a string")
        result = f(*args, **kwargs)
        _check_size(_sized(result), "a value")
        return result

    return checked


class _LimitedCodeGenerator(CodeGenerator):
    """Compiles ``a ~ b`` to a size-checked join (Jinja has no hook for that operator)."""

    def visit_Concat(self, node: Concat, frame: Frame) -> None:
        self.write("environment.checked_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _raise_exception(message: str) -> None:
    # Templates call this to reject conversations they cannot format (e.g. bad role order).
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own filter HTML-escapes <, > and &, which would corrupt prompts.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _Namespace(jinja2.utils.Namespace):
    """``namespace()`` that rejects underscore-prefixed attribute names."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        # Jinja's Namespace takes ``self`` positionally so ``namespace(self=...)`` still works.
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates may not set underscore attributes on a namespace ({name!r})"
            )


class _LimitedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the size and time limits of the module docstring."""

    code_generator_class = _LimitedCodeGenerator
    intercepted_binops = frozenset({"*", "+", "**", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_time()
        if operator == "*":
            seq, n = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(seq, str | list | tuple) and isinstance(n, int):
                _check_size(len(seq) * max(n, 0), "a sequence")
        elif operator == "+":
            _check_size(_sized(left) + _sized(right), "a sequence")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and (
                    left.bit_length() * right > MAX_POWER_BITS):
                raise ChatTemplateLimitError(
                    f"chat template computes {left} ** {right} (limit {MAX_POWER_BITS} bits)")
        elif operator == "%":
            _check_format(left)
        result = super().call_binop(context, operator, left, right)
        _check_size(_sized(result), "a value")
        return result

    def checked_concat(self, parts: Sequence[Any]) -> str:
        _check_time()
        strings = [str(p) for p in parts]
        _check_size(sum(map(len, strings)), "a string")
        return "".join(strings)

    def getattr(self, obj: Any, attribute: str) -> Any:
        _check_time()
        if attribute in ("format", "format_map"):
            _check_format(obj)
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _check_time()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _check_time()
        name = getattr(__obj, "__name__", "a function")
        _check_int_args(name, args, kwargs)
        if name == "replace" and isinstance(getattr(__obj, "__self__", None), str):
            _check_size(_replaced_size(__obj.__self__, *args[:3]), "a string")
        result = super().call(__context, __obj, *args, **kwargs)
        _check_size(_sized(result), "a value")
        return result


@lru_cache(maxsize=16)
def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a chat template in the sandboxed environment (cached by source text).

    Raises:
        jinja2.TemplateSyntaxError: the template is not valid Jinja.
        ChatTemplateLimitError: the source is longer than ``MAX_TEMPLATE_BYTES``.
    """
    if len(source.encode("utf-8", "surrogatepass")) > MAX_TEMPLATE_BYTES:
        raise ChatTemplateLimitError(f"chat template is longer than {MAX_TEMPLATE_BYTES} bytes")
    env = _LimitedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.filters = {name: _bounded_filter(name, f) for name, f in env.filters.items()}
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = _Namespace
    return env.from_string(source)


def render_chat_template(
    source: str,
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = True,
    **context: Any,
) -> str:
    """Render ``messages`` (``[{"role": ..., "content": ...}, ...]``) with a chat template.

    Args:
        source: the Jinja template text.
        messages: the conversation.
        add_generation_prompt: ask the template to open an assistant turn at the end.
        **context: further template variables (``bos_token``, ``eos_token``, ``tools``, ...).

    Raises:
        jinja2.TemplateError: the template rejected the conversation (``raise_exception``) or
            failed while rendering; :class:`ChatTemplateLimitError` (a subclass) when it
            exceeded a limit of the module docstring.
    """
    template = compile_chat_template(source)
    plain = [dict(m) for m in messages]
    out: list[str] = []
    size = 0
    _deadline.at = time.monotonic() + MAX_RENDER_SECONDS
    try:
        for chunk in template.generate(
                messages=plain, add_generation_prompt=add_generation_prompt, **context):
            size += len(chunk)
            _check_size(size, "an output")
            _check_time()
            out.append(chunk)
    except RecursionError:
        raise ChatTemplateLimitError("chat template recursed too deeply") from None
    except MemoryError:
        raise ChatTemplateLimitError("chat template ran out of memory") from None
    finally:
        _deadline.at = None
    return "".join(out)
