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

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import luminal as lm
import numpy as np

from .llama import Llama
from .sampling import Sampler, SamplingParams
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
        stop_reason: "stop_token", "max_tokens" or "context" (the model's context is full).
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
    """A compiled Llama with its KV cache, ready to generate.

    Args:
        model: the model (weights loaded).
        tokenizer: for text prompts and streaming output; optional for id-level use.
        backend: a luminal backend (`lm.backend("cpu")`), or a compiler ending in one (the
            search compiler); None means the reference backend.
    """

    def __init__(self, model: Llama, tokenizer: Tokenizer | None = None,
                 backend: Any = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.backend = backend if backend is not None else lm.backend("reference")
        self.max_context = model.config.max_position_embeddings
        g = self.graph = lm.Graph()
        self.cache = model.new_cache(g)
        self.tokens = g.tensor((1, "seq"), name="tokens", dtype=lm.int32)
        self.logits = model(self.tokens, self.cache, last_only=True).retrieve()
        g.compile((lm.GenericCompiler(), self.backend))

    @property
    def position(self) -> int:
        """How many tokens the cache holds."""
        return self.cache.length

    def reset(self) -> None:
        """Forget the cached sequence."""
        self.cache.reset()

    def forward(self, ids: Iterable[int]) -> np.ndarray:
        """Feed `ids` after the cached ones; return the logits (vocab,) of the last of them."""
        ids = np.asarray(list(ids), dtype=np.int32).reshape(1, -1)
        if ids.shape[1] == 0:
            raise ValueError("forward: needs at least one token id")
        if self.position + ids.shape[1] > self.max_context:
            raise ValueError(f"the sequence would exceed the model's context of "
                             f"{self.max_context} tokens")
        self.tokens.set(ids)
        self.graph.execute()
        self.cache.advance(ids.shape[1])
        return self.logits.numpy().reshape(-1)

    def stream(self, prompt_ids: list[int], max_tokens: int,
               sampling: SamplingParams = GREEDY,
               stop_ids: Iterable[int] = ()) -> Iterator[int]:
        """Yield generated ids one by one (a fresh sequence: the cache is reset first).

        Stops after a stop id (which is yielded), after `max_tokens`, or when the context is
        full.
        """
        self.reset()
        sample, stops = Sampler(sampling), frozenset(stop_ids)
        logits = self.forward(prompt_ids)
        for i in range(max_tokens):
            token = sample(logits)
            yield token
            if token in stops or i + 1 == max_tokens or self.position >= self.max_context:
                return
            logits = self.forward([token])

    def generate(self, prompt: str | list[int], max_tokens: int = 128,
                 sampling: SamplingParams = GREEDY,
                 stop_ids: Iterable[int] | None = None,
                 on_text: Callable[[str], None] | None = None) -> GenerationResult:
        """Generate a continuation of `prompt` (text, or token ids).

        `stop_ids` defaults to the tokenizer's end-of-generation ids. `on_text` receives the
        text as it is produced (whole UTF-8 characters only), for streaming output.
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
        pieces: list[str] = []

        def emit(piece: str) -> None:
            if piece:
                pieces.append(piece)
                if on_text is not None:
                    on_text(piece)

        ids: list[int] = []
        stop_reason = "max_tokens"
        start = time.perf_counter()
        first_token_at = start
        for token in self.stream(prompt_ids, max_tokens, sampling, stops):
            if not ids:
                first_token_at = time.perf_counter()
            ids.append(token)
            if token in stops:
                stop_reason = "stop_token"
            elif decoder is not None:
                emit(decoder.push(token))
        end = time.perf_counter()
        if decoder is not None:
            emit(decoder.flush())
        if stop_reason != "stop_token" and len(ids) < max_tokens:
            stop_reason = "context"
        return GenerationResult(
            text="".join(pieces), token_ids=ids, prompt_tokens=len(prompt_ids),
            stop_reason=stop_reason, prefill_s=first_token_at - start,
            decode_s=end - first_token_at, decode_steps=max(len(ids) - 1, 0),
        )
