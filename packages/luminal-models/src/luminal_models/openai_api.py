"""OpenAI API request checking and response shapes (no HTTP here: see `server`).

Requests are checked field by field, and a bad one raises `APIError`, which the server turns
into OpenAI's error body (`{"error": {"message", "type", "param", "code"}}`) naming the
offending field. Fields this server does not implement are refused when they would change
the answer (`n > 1`, `logprobs`), and ignored when they would not (`user`, `metadata`).
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["APIError", "CompletionRequest", "chat_messages", "finish_reason",
           "parse_request"]


class APIError(Exception):
    """A request the server refuses, with OpenAI's error fields and the HTTP status."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 type: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.type, self.code = (
            message, param, status, type, code)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


@dataclass
class CompletionRequest:
    """A checked /v1/completions or /v1/chat/completions request."""

    chat: bool
    model: str
    prompt: str  # for chat: the messages rendered with the chat template by the server
    messages: list[dict[str, str]] = field(default_factory=list)
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    id: str = ""
    created: int = 0

    def __post_init__(self) -> None:
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float,
            low_open: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise APIError(f"{name} must be a number, got {value!r}", name)
    if value < low or (low_open and value == low) or value > high:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise APIError(f"{name} must be in {interval}, got {value!r}", name)
    return float(value)


def _integer(body: dict[str, Any], name: str, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise APIError(f"{name} must be an integer, got {value!r}", name)
    if value < low:
        raise APIError(f"{name} must be >= {low}, got {value}", name)
    return value


def _text_content(content: Any, where: str) -> str:
    """A message's content: a string, or a list of {"type": "text", "text": ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                raise APIError(f"{where}: only text content parts are supported", where)
            parts.append(part["text"])
        return "".join(parts)
    raise APIError(f"{where} must be a string or a list of text parts", where)


def chat_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    """The checked `messages` of a chat request, as {"role", "content"} strings."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError("messages must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise APIError(f"{where} must be an object", where)
        role = m.get("role")
        if role == "developer":  # OpenAI's newer name for the system role
            role = "system"
        if role not in ("system", "user", "assistant"):
            raise APIError(f"{where}.role must be 'system', 'user' or 'assistant', got "
                           f"{role!r}", f"{where}.role")
        out.append({"role": role, "content": _text_content(m.get("content"),
                                                           f"{where}.content")})
    return out


def parse_request(body: Any, chat: bool) -> CompletionRequest:
    """Check a request body; the prompt of a chat request is left empty (the server renders
    the messages with the model's template)."""
    if not isinstance(body, dict):
        raise APIError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise APIError("model must be a non-empty string", "model")
    if _integer(body, "n", 1) not in (None, 1):
        raise APIError("n > 1 is not supported: send one request per completion", "n")
    if body.get("logprobs") not in (None, False, 0):
        raise APIError("logprobs are not supported", "logprobs")
    if chat:
        messages, prompt = chat_messages(body), ""
    else:
        messages, prompt = [], body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise APIError("prompt must be a string (one prompt per request)", "prompt")
        if not prompt:
            raise APIError("prompt must not be empty", "prompt")
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not (isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)
            and len(stop) <= 4):
        raise APIError("stop must be a non-empty string or a list of at most 4 of them",
                       "stop")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise APIError(f"stream must be a boolean, got {stream!r}", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise APIError("stream_options must be an object", "stream_options")
    max_tokens = _integer(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 1)
    if max_tokens is None and not chat:
        max_tokens = 16  # OpenAI's default for /v1/completions
    seed = _integer(body, "seed", 0)
    return CompletionRequest(
        chat=chat, model=model, prompt=prompt, messages=messages, max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0, 2),
        top_p=_number(body, "top_p", 1.0, 0, 1, low_open=True),
        top_k=_integer(body, "top_k", 0) or 0,
        min_p=_number(body, "min_p", 0.0, 0, 1),
        repeat_penalty=_number(body, "repeat_penalty", 1.0, 0, 10, low_open=True),
        seed=seed, stop=stop, stream=stream,
        include_usage=bool(options.get("include_usage", False)),
    )


def finish_reason(stop_reason: str) -> str:
    """OpenAI's finish_reason for a `GenerationResult.stop_reason`."""
    return "length" if stop_reason in ("max_tokens", "context") else "stop"
