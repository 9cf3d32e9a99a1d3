"""A multi-turn conversation whose history stays in the KV cache.

Each turn renders the whole conversation with the model's chat template, as the model was
trained to see it, but feeds the model only the text after what the cache already holds: the
cache holds the previous prompt and the reply's tokens, so a turn prefills the end-of-turn
marker, the new user message and the assistant header, not the whole history again. Where
the rendering does not extend the cached text (a template that rewrites earlier turns, a
reply cut inside a multi-byte character), the turn falls back to prefilling everything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .generate import GREEDY, GenerationResult, Generator
from .sampling import SamplingParams

__all__ = ["ChatSession"]


class ChatSession:
    """A conversation with a `Generator` (which it owns: its cache holds this history).

    Args:
        generator: the compiled model; it needs a tokenizer with a chat template.
        system: an optional system message that opens the conversation (and survives
            `reset`).
    """

    def __init__(self, generator: Generator, system: str | None = None) -> None:
        if generator.tokenizer is None:
            raise ValueError("a chat needs a generator with a tokenizer")
        self.generator, self.system = generator, system
        self.messages: list[dict[str, str]] = []
        self._cached_text = ""  # the text the generator's cache holds
        self.reset()

    def reset(self) -> None:
        """Forget the conversation (the system message stays)."""
        self.messages = [] if self.system is None else [
            {"role": "system", "content": self.system}]
        self.generator.reset()
        self._cached_text = ""

    def send(self, text: str, max_tokens: int = 512, sampling: SamplingParams = GREEDY,
             on_text: Callable[[str], None] | None = None, stop: Iterable[str] = (),
             cancelled: Callable[[], bool] | None = None) -> GenerationResult:
        """Add the user message `text`, generate the assistant's reply and add it too.

        `result.prompt_tokens` counts only the ids this turn prefilled. A reply cut short
        (`cancelled`, `max_tokens`) is kept as it is. Raises ValueError when the conversation
        no longer fits the context (then `reset`).
        """
        gen, tok = self.generator, self.generator.tokenizer
        messages = [*self.messages, {"role": "user", "content": text}]
        rendered = tok.apply_chat_template(messages)
        cached = self._cached_text
        continues = bool(cached) and rendered.startswith(cached)
        new_ids = tok.encode(rendered[len(cached):] if continues else rendered,
                             add_special_tokens=not continues)
        result = gen.generate(new_ids, max_tokens, sampling, on_text=on_text, stop=stop,
                              keep_cache=continues, cancelled=cancelled)
        self.messages = [*messages, {"role": "assistant", "content": result.text}]
        # the cache holds the prompt and every generated id but the last (never fed back)
        self._cached_text = rendered + tok.decode(result.token_ids[:-1])
        return result

    @property
    def cached_tokens(self) -> int:
        """How many tokens of this conversation the cache holds."""
        return self.generator.position
