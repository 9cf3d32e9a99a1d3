"""Text generation with a KV cache that lives on the device.

One graph is compiled once and serves both phases. Its inputs are the new token ids
(1, seq) and, per layer, the cached keys and values (1, kv_heads, past, head_dim); `seq` and
`past` are symbolic dims. Prefill runs it with seq = prompt length and past = 0, each decode
step with seq = 1 and past = tokens so far. The graph appends the new keys and values to the
cache and assigns the result back to the cache inputs (`Graph.assign`), so the cache never
travels to the host; only the last position's logits (one vocabulary row) do.

Why one graph rather than separate prefill and decode graphs: the cache inputs of one graph
are the buffers both phases read and write, so nothing is copied between phases, and the
weights are bound once. Backends see `seq` as a runtime value and pick matrix-vector kernels
when it is 1.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import luminal as lm
import numpy as np
from tqdm.auto import tqdm

from .errors import ContextLengthError
from .gemma3 import Gemma3
from .llama import Llama
from .sampling import Sampler, SamplingParams
from .stop_strings import StopStrings
from .tokenizer import Tokenizer

__all__ = ["GREEDY", "GenerationResult", "Generator"]

GREEDY = SamplingParams()


@dataclass
class GenerationResult:
    """What `Generator.generate` produced.

    Attributes:
        text: the generated text (stop tokens excluded).
        token_ids: the generated ids, including the stop token when one ended generation.
        prompt_tokens: how many ids the prompt had.
        stop_reason: "stop_token", "stop_string" (one of the `stop` strings), "max_tokens",
            "context" (the context is full) or "cancelled".
        prefill_s: wall time of the prompt's forward pass (and the first token's sampling).
        decode_s, decode_steps: wall time and number of the single-token forward passes.
    """

    text: str
    token_ids: list[int]
    prompt_tokens: int
    stop_reason: str
    prefill_s: float
    decode_s: float
    decode_steps: int = 0

    @property
    def prefill_tok_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        return self.decode_steps / self.decode_s if self.decode_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "prompt_tokens": self.prompt_tokens,
            "stop_reason": self.stop_reason,
            "prefill_tok_s": round(self.prefill_tok_s, 2),
            "decode_tok_s": round(self.decode_tok_s, 2),
        }


class Generator:
    """A compiled causal LM (`Llama`, `Gemma3`) with its KV cache, ready to generate.

    Args:
        model: the model (weights loaded).
        tokenizer: for text prompts and streaming output; optional for id-level use.
        backend: a luminal backend (`lm.backend("cpu")`), or a compiler ending in one (the
            search compiler); None means the reference backend.
        max_context: the most tokens the cache may hold (default and upper bound: the
            model's context length).
        progress: show a bar while the graph compiles (on stderr).
    """

    def __init__(self, model: Llama | Gemma3, tokenizer: Tokenizer | None = None,
                 backend: Any = None, max_context: int | None = None,
                 progress: bool = False) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.backend = backend if backend is not None else lm.backend("reference")
        limit = model.config.max_position_embeddings
        if max_context is not None and max_context < 1:
            raise ValueError(f"max_context must be >= 1, got {max_context}")
        self.max_context = limit if max_context is None else min(max_context, limit)
        self.context_ids: list[int] = []  # what the cache holds, in order
        g = self.graph = lm.Graph()
        # a cache of max_context positions written in place where the backend stores rows in
        # place (no per-step copy or rebinding of the cache); else one that grows by assignment
        in_place = getattr(self._lowering_backend, "in_place_writes", False)
        self.cache = model.new_cache(g, capacity=self.max_context if in_place else None)
        self.tokens = g.tensor((1, "seq"), name="tokens", dtype=lm.int32)
        self.logits = model(self.tokens, self.cache, last_only=True).retrieve()
        steps = (("optimizing the graph", lm.GenericCompiler()),
                 (f"building for {self.backend_name}", self.backend))
        with tqdm(total=len(steps), desc="compiling", unit="step", disable=not progress,
                  leave=False) as bar:
            g.compile(tuple(_CompileStep(name, compiler, bar) for name, compiler in steps))
        # the graph holds the weights from here on: a backend that binds them in a form of its
        # own (luminal-cpu's repacked GGUF formats, in the loaded arrays' own memory) never
        # keeps both, and binds them now, while loading, rather than at the first prompt
        model.release_to(g)
        g.prepare()
        # a decode step's Python runs with caches the weights just streamed through, so each
        # step binds the ids and reads the logits by node, with nothing else to look up (the
        # logits through their view when they are not their node's whole buffer)
        layout = self.logits.layout
        whole = layout.is_contiguous and layout.shape == self.logits.node.shape
        self._tokens_node = self.tokens.id
        # a decode step's single id goes into this array, set again every step: the runtime
        # sees the array it bound last step and keeps its pointer
        self._one_token = np.zeros((1, 1), np.int32)
        self._logits_node = self.logits.id if whole else None
        self.vocab_size = model.config.vocab_size

    @property
    def _lowering_backend(self) -> Any:
        """The backend itself, through a compiler that wraps one (the search compiler)."""
        backend = self.backend
        while not hasattr(backend, "name") and hasattr(backend, "backend"):
            backend = backend.backend
        return backend

    @property
    def backend_name(self) -> str:
        """The backend's name."""
        backend = self._lowering_backend
        return getattr(backend, "name", type(backend).__name__)

    @property
    def position(self) -> int:
        """How many tokens the cache holds."""
        return self.cache.length

    def reset(self) -> None:
        """Forget the cached sequence."""
        self.cache.reset()
        self.context_ids.clear()

    def forward(self, ids: Iterable[int]) -> np.ndarray:
        """Feed `ids` after the cached ones; return the logits (vocab,) of the last of them."""
        new = [int(i) for i in ids]
        if not new:
            raise ValueError("forward: needs at least one token id")
        if not 0 <= min(new) <= max(new) < self.vocab_size:
            bad = next(i for i in new if not 0 <= i < self.vocab_size)
            raise ValueError(f"forward: token id {bad} is outside the vocabulary "
                             f"[0, {self.vocab_size})")
        if self.position + len(new) > self.max_context:
            raise ContextLengthError(f"the sequence would exceed the context of "
                                     f"{self.max_context} tokens ({self.position} cached + "
                                     f"{len(new)} new)")
        return self._forward(new).reshape(-1)

    def _forward(self, new: list[int]) -> np.ndarray:
        """`forward` of ids known to be in the vocabulary and to fit the context (a decode
        step's sampled id: its checks cost more than the rest of the step's Python), with the
        logits as the graph holds them (vocab_size values, leading axes of size 1: the
        sampler takes them so, and a reshape costs a decode step microseconds)."""
        # what `tokens.set` does, less its checks of arbitrary data: these are in-range ints
        g = self.graph
        if len(new) == 1:
            self._one_token[0, 0] = new[0]
            g.set_data(self._tokens_node, self._one_token)
        else:
            g.set_data(self._tokens_node, np.array([new], dtype=np.int32))
        if g.dims.get("seq") != len(new):  # a decode step's is 1 already
            g.set_dim("seq", len(new))
        g.execute()
        self.cache.advance(len(new))
        self.context_ids.extend(new)
        if self._logits_node is None:
            return self.logits.numpy()
        return g.fetch(self._logits_node)

    def stream(self, prompt_ids: list[int], max_tokens: int,
               sampling: SamplingParams = GREEDY,
               stop_ids: Iterable[int] = (), keep_cache: bool = False) -> Iterator[int]:
        """Yield generated ids one by one.

        The prompt starts a fresh sequence (the cache is reset first) unless `keep_cache`,
        where it continues the cached one (a chat's next turn: only the new ids are
        prefilled). Stops after a stop id (which is yielded), after `max_tokens`, or when the
        context is full. The last yielded id is not fed to the model.
        """
        if not keep_cache:
            self.reset()
        sample, stops = Sampler(sampling), frozenset(stop_ids)
        logits = self.forward(prompt_ids)
        for i in range(max_tokens):
            token = sample(logits, self.context_ids)
            yield token
            if token in stops or i + 1 == max_tokens or self.position >= self.max_context:
                return
            logits = self._forward([token])  # an index of `logits`: in the vocabulary

    def generate(self, prompt: str | list[int], max_tokens: int = 128,
                 sampling: SamplingParams = GREEDY,
                 stop_ids: Iterable[int] | None = None,
                 on_text: Callable[[str], None] | None = None,
                 stop: Iterable[str] = (), keep_cache: bool = False,
                 cancelled: Callable[[], bool] | None = None) -> GenerationResult:
        """Generate a continuation of `prompt` (text, or token ids).

        `stop_ids` defaults to the tokenizer's end-of-generation ids; the text ends before the
        first of the `stop` strings. `on_text` receives the text as it is produced (whole
        UTF-8 characters, never the start of a stop string), for streaming output.
        `keep_cache` continues the cached sequence (see `stream`). `cancelled` is asked after
        each token; when it returns True generation ends with stop reason "cancelled".
        """
        tok = self.tokenizer
        if isinstance(prompt, str):
            if tok is None:
                raise ValueError("a text prompt needs a tokenizer")
            prompt_ids = tok.encode(prompt)
        else:
            prompt_ids = list(prompt)
        stops = frozenset(tok.eos_ids if tok is not None and stop_ids is None else stop_ids or ())
        decoder = tok.incremental_decoder() if tok is not None else None
        stop_strings = StopStrings(stop)
        pieces: list[str] = []

        def emit(piece: str) -> None:
            piece = stop_strings.push(piece)
            if piece:
                pieces.append(piece)
                if on_text is not None:
                    on_text(piece)

        ids: list[int] = []
        stop_reason = "max_tokens"
        start = time.perf_counter()
        first_token_at = start
        for token in self.stream(prompt_ids, max_tokens, sampling, stops, keep_cache):
            if not ids:
                first_token_at = time.perf_counter()
            ids.append(token)
            if token in stops:
                stop_reason = "stop_token"
            elif decoder is not None:
                emit(decoder.push(token))
            if stop_strings.stopped:
                stop_reason = "stop_string"
                break
            if cancelled is not None and cancelled():
                stop_reason = "cancelled"
                break
        end = time.perf_counter()
        if decoder is not None and not stop_strings.stopped:
            emit(decoder.flush())
            emit(stop_strings.flush())
        if stop_reason == "max_tokens" and len(ids) < max_tokens:
            stop_reason = "context"
        return GenerationResult(
            text="".join(pieces), token_ids=ids, prompt_tokens=len(prompt_ids),
            stop_reason=stop_reason, prefill_s=first_token_at - start,
            decode_s=end - first_token_at, decode_steps=max(len(ids) - 1, 0),
        )


class _CompileStep:
    """One compiler of the chain, advancing a progress bar when it is done."""

    def __init__(self, name: str, compiler: Any, bar: tqdm) -> None:
        self.name, self.compiler, self.bar = name, compiler, bar

    def compile(self, graph: lm.Graph) -> None:
        self.bar.set_postfix_str(self.name)
        if self.bar.disable:
            self.compiler.compile(graph)
        else:
            # what a compiler says on stderr (luminal-cpu's first build of its runtime library,
            # a warning) goes on lines of its own above the bar, not onto the bar's line
            with _LinesAboveBar(sys.stderr) as above, contextlib.redirect_stderr(above):
                self.compiler.compile(graph)
        self.bar.update()


class _LinesAboveBar(io.TextIOBase):
    """A text stream that prints each complete line to `stream` through `tqdm.write`, which
    lifts the progress bars drawn on `stream` out of the way and draws them again below."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.pending = stream, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            tqdm.write(line, file=self.stream)
        return len(text)

    def __exit__(self, *exc: object) -> None:
        if self.pending:
            tqdm.write(self.pending, file=self.stream)
        self.pending = ""
