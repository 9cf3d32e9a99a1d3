"""Rendering a model's Jinja chat template (``tokenizer.chat_template`` in GGUF metadata).

Templates come from model files, so they are untrusted code: they run in Jinja's immutable
sandbox, and ``namespace()`` refuses underscore attributes so a template cannot reach interpreter
internals through it. The environment otherwise matches what Hugging Face templates are written
against (``trim_blocks``/``lstrip_blocks``, loop controls, ``raise_exception``, ``strftime_now``
and a ``tojson`` that does not HTML-escape), so templates render as they do in transformers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["compile_chat_template", "render_chat_template"]


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


@lru_cache(maxsize=16)
def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a chat template in the sandboxed environment (cached by source text).

    Raises:
        jinja2.TemplateSyntaxError: the template is not valid Jinja.
    """
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
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
            failed while rendering.
    """
    template = compile_chat_template(source)
    plain = [dict(m) for m in messages]
    return template.render(messages=plain, add_generation_prompt=add_generation_prompt, **context)
