"""An OpenAI-compatible HTTP server (Starlette on uvicorn) over one compiled model.

Routes: `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions` (with
`"stream": true`: server-sent events ending in `data: [DONE]`), `GET /health`.

One compiled graph and its KV cache serve every request, so requests queue: a single worker
thread runs them one at a time in arrival order, while the event loop keeps accepting and
streaming. A request is never dropped or mixed with another; a streamed one whose client
goes away is cancelled at its next token. Past `max_queue` waiting requests, new ones get a
503 error at once instead of waiting without bound.

Needs the `serve` extra: `pip install 'luminal-models[serve]'`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import jinja2
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .generate import GenerationResult, Generator
from .openai_api import APIError, CompletionRequest, finish_reason, parse_request
from .sampling import SamplingParams

__all__ = ["Engine", "Server", "create_app"]


@dataclass(eq=False)
class _Job:
    request: CompletionRequest
    prompt_ids: list[int]
    on_text: Callable[[str], None]
    cancelled: bool = False


class Engine:
    """Runs generation requests on one `Generator`, one at a time, in arrival order.

    Args:
        generator: the compiled model (with its tokenizer).
        model_id: the name clients use in `"model"` (and `/v1/models` lists).
        aliases: other names accepted for it.
        max_queue: most requests waiting or running at once.
    """

    def __init__(self, generator: Generator, model_id: str, aliases: tuple[str, ...] = (),
                 max_queue: int = 64) -> None:
        if generator.tokenizer is None:
            raise ValueError("the server needs a generator with a tokenizer")
        self.generator, self.model_id = generator, model_id
        self.names = {model_id, *aliases}
        self.max_queue = max_queue
        self.created = int(time.time())
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="luminal-engine")
        self._lock = threading.Lock()
        self._pending = 0
        self._jobs: set[_Job] = set()
        self._closing = False

    def prepare(self, request: CompletionRequest) -> list[int]:
        """Check the model name, render a chat's messages, and tokenize; APIError if the
        prompt cannot be served."""
        if request.model not in self.names:
            raise APIError(f"model {request.model!r} does not exist; this server has "
                           f"{self.model_id!r}", "model", 404, code="model_not_found")
        tok = self.generator.tokenizer
        if request.chat:
            try:
                request.prompt = tok.apply_chat_template(request.messages)
            except jinja2.TemplateError as exc:
                raise APIError(f"the model's chat template rejected the messages: {exc}",
                               "messages") from None
        ids = tok.encode(request.prompt)
        limit = self.generator.max_context
        if len(ids) >= limit:
            raise APIError(f"the prompt has {len(ids)} tokens; this model's context is "
                           f"{limit} tokens, and the answer needs at least one",
                           "messages" if request.chat else "prompt",
                           code="context_length_exceeded")
        return ids

    async def run(self, job: _Job) -> GenerationResult:
        """Queue `job` and wait for its result."""
        with self._lock:
            if self._closing:
                raise APIError("the server is shutting down", status=503, type="server_error",
                               code="shutting_down")
            if self._pending >= self.max_queue:
                raise APIError(f"the server is busy ({self._pending} requests queued); try "
                               "again later", status=503, type="server_error",
                               code="overloaded")
            self._pending += 1
            self._jobs.add(job)
        try:
            future = self._worker.submit(self._generate, job)
            return await asyncio.wrap_future(future)
        finally:
            with self._lock:
                self._pending -= 1
                self._jobs.discard(job)

    def _generate(self, job: _Job) -> GenerationResult:
        r = job.request
        sampling = SamplingParams(r.temperature, r.top_k, r.top_p, r.seed, min_p=r.min_p,
                                  repeat_penalty=r.repeat_penalty)
        room = self.generator.max_context - len(job.prompt_ids)
        max_tokens = room if r.max_tokens is None else min(r.max_tokens, room)
        return self.generator.generate(job.prompt_ids, max_tokens, sampling,
                                       on_text=job.on_text, stop=r.stop,
                                       cancelled=lambda: job.cancelled)

    def cancel_all(self) -> None:
        """Refuse new requests and end the queued and running ones at their next token (the
        server is shutting down: their clients get what was generated so far)."""
        with self._lock:
            self._closing = True
            for job in self._jobs:
                job.cancelled = True

    def close(self) -> None:
        """Cancel everything and stop the worker thread."""
        self.cancel_all()
        self._worker.shutdown(wait=True, cancel_futures=True)


def _usage(result: GenerationResult) -> dict[str, int]:
    completion = len(result.token_ids)
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": completion,
            "total_tokens": result.prompt_tokens + completion}


def _choice(request: CompletionRequest, text: str | None, reason: str | None,
            first: bool = False) -> dict[str, Any]:
    """One choice of a response (`text` None: the closing chunk of a stream)."""
    if not request.chat:
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
    if not request.stream:
        return {"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": None, "finish_reason": reason}
    delta: dict[str, str] = {"role": "assistant"} if first else {}
    if text is not None:
        delta["content"] = text
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}


def _envelope(request: CompletionRequest, model: str, choices: list[dict[str, Any]],
              usage: dict[str, int] | None) -> dict[str, Any]:
    kind = ("chat.completion" if request.chat else "text_completion") + (
        ".chunk" if request.chat and request.stream else "")
    body = {"id": request.id, "object": kind, "created": request.created, "model": model,
            "system_fingerprint": None, "choices": choices}
    if usage is not None or not request.stream:
        body["usage"] = usage
    return body


def _internal(exc: Exception) -> APIError:
    return APIError(f"internal error: {type(exc).__name__}: {exc}", status=500,
                    type="server_error")


def _sse(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def create_app(engine: Engine) -> Starlette:
    """The Starlette application serving `engine`."""

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": engine.model_id, "object": "model", "created": engine.created,
             "owned_by": "luminal"}]})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def completions(request: Request) -> Response:
        return await _complete(request, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await _complete(request, chat=True)

    async def _complete(http: Request, chat: bool) -> Response:
        try:
            body = await http.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise APIError(f"the request body is not valid JSON: {exc}") from None
        request = parse_request(body, chat)
        prompt_ids = engine.prepare(request)
        if request.stream:
            return StreamingResponse(_stream(request, prompt_ids),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        result = await engine.run(_Job(request, prompt_ids, on_text=lambda text: None))
        choice = _choice(request, result.text, finish_reason(result.stop_reason))
        return JSONResponse(_envelope(request, request.model, [choice], _usage(result)))

    async def _stream(request: CompletionRequest, prompt_ids: list[int]) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[str] = asyncio.Queue()
        job = _Job(request, prompt_ids,
                   on_text=lambda text: loop.call_soon_threadsafe(pieces.put_nowait, text))
        task = asyncio.ensure_future(engine.run(job))
        first = True
        try:
            while True:
                getter = asyncio.ensure_future(pieces.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    break
                yield _sse(_envelope(request, request.model,
                                     [_choice(request, getter.result(), None, first)], None))
                first = False
            while not pieces.empty():  # text queued just before the job finished
                yield _sse(_envelope(request, request.model,
                                     [_choice(request, pieces.get_nowait(), None, first)], None))
                first = False
            try:
                result = task.result()
            except Exception as exc:  # the status line has gone: the error goes in the stream
                yield _sse((exc if isinstance(exc, APIError) else _internal(exc)).body())
                return
            reason = finish_reason(result.stop_reason)
            yield _sse(_envelope(request, request.model,
                                 [_choice(request, None, reason, first)], None))
            if request.include_usage:
                yield _sse(_envelope(request, request.model, [], _usage(result)))
            yield "data: [DONE]\n\n"
        finally:
            job.cancelled = True  # the client left early: stop generating for it

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, APIError)
        return JSONResponse(exc.body(), status_code=exc.status)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        error = APIError(f"{request.method} {request.url.path}: {exc.detail}",
                         status=exc.status_code,
                         code="not_found" if exc.status_code == 404 else None)
        return JSONResponse(error.body(), status_code=exc.status_code)

    async def internal_error(request: Request, exc: Exception) -> Response:
        return JSONResponse(_internal(exc).body(), status_code=500)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        engine.close()

    return Starlette(
        routes=[Route("/v1/models", models), Route("/health", health),
                Route("/v1/completions", completions, methods=["POST"]),
                Route("/v1/chat/completions", chat_completions, methods=["POST"])],
        exception_handlers={APIError: api_error, HTTPException: http_error,
                            Exception: internal_error},
        lifespan=lifespan)


class Server(uvicorn.Server):
    """uvicorn's server that also cuts the engine's generations short on SIGINT/SIGTERM, so
    a long streamed answer does not hold up the shutdown."""

    def __init__(self, config: uvicorn.Config, engine: Engine) -> None:
        super().__init__(config)
        self.engine = engine

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.engine.cancel_all()
        super().handle_exit(sig, frame)
