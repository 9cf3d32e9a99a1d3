"""Stop sequences on streamed text: cut the output where a stop string begins.

Text arrives in pieces (one token's worth at a time), so a stop string can straddle pieces.
`StopStrings` holds back the shortest tail that could still grow into a stop string and
releases it once it cannot, so what it passes on never contains the start of a stop string
that is later completed.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["StopStrings"]


class StopStrings:
    """Feeds text pieces through; reports when one of `stops` has appeared.

    `push(piece)` returns the text that is safe to show; once a stop string is found,
    `stopped` is True and the text from the stop string on is dropped. `flush()` returns what
    was held back when the stream ends without a stop.
    """

    def __init__(self, stops: Iterable[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.stopped = False
        self._held = ""

    def push(self, piece: str) -> str:
        if self.stopped:
            return ""
        text = self._held + piece
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped, self._held = True, ""
            return text[:cut]
        keep = self._partial_tail(text)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held

    def _partial_tail(self, text: str) -> int:
        """Length of the longest tail of `text` that is a proper prefix of a stop string."""
        for n in range(min(len(text), max((len(s) for s in self.stops), default=1) - 1), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self.stops):
                return n
        return 0
