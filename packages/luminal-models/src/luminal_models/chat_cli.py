"""`luminal chat`: an interactive conversation in the terminal.

Replies stream as they are generated. The history stays in the model's KV cache, so each
turn prefills only the new message (see `luminal_models.chat`). Ctrl-C stops the current
reply and keeps what was said; Ctrl-D or /exit leaves; /reset starts over.
"""

from __future__ import annotations

import argparse
import sys
import time

from .cli_options import (
    add_model_options,
    add_sampling_options,
    checked,
    context_hint,
    cpu_settings_from_args,
    ctrl_c_sets_flag,
    load_generator,
    sampling_params,
    write_stdout,
)
from .errors import ContextLengthError

__all__ = ["HELP", "configure", "run"]

HELP = "chat with a language model in the terminal (multi-turn, streaming)"

COMMANDS = "/reset starts a new conversation, /exit (or Ctrl-D) quits, Ctrl-C stops a reply"

_EPILOG = f"""\
In the chat: {COMMANDS}.
Each turn prints a statistics line on stderr (hide it with --quiet).

examples:
  luminal chat
  luminal chat --system "You are a terse assistant." --temperature 0.7 --seed 1
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `luminal chat`'s arguments."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    add_model_options(parser)
    parser.add_argument("--system", default=None, metavar="TEXT",
                        help="system message that opens the conversation")
    parser.add_argument("--max-tokens", "-n", type=checked(int, 1), default=512, metavar="N",
                        help="most tokens per reply (default: %(default)s)")
    add_sampling_options(parser)
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress bars and no statistics lines")


def run(args: argparse.Namespace) -> int:
    """Execute `luminal chat`; returns the exit status."""
    from .chat import ChatSession
    from .errors import HubError, ModelFileError

    cpu_settings_from_args(args)
    try:
        sampling = sampling_params(args)
        generator, path = load_generator(args.model, args.backend, args.ctx,
                                         progress=not args.quiet, search=args.search)
        session = ChatSession(generator, args.system)
    except KeyboardInterrupt:
        print("\nluminal chat: interrupted", file=sys.stderr)
        return 130
    except (ValueError, RuntimeError, FileNotFoundError, HubError, ModelFileError) as exc:
        print(f"luminal chat: error: {exc}", file=sys.stderr)
        return 1
    print(f"[{path.name} on {generator.backend_name}; {COMMANDS}]", file=sys.stderr)
    if generator.tokenizer.chat_template_note:
        print(f"luminal chat: {generator.tokenizer.chat_template_note}", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return 0
        except KeyboardInterrupt:
            print("\n(/exit or Ctrl-D quits)", file=sys.stderr)
            continue
        text = line.strip()
        if not text:
            continue
        if text == "/exit":
            return 0
        if text == "/reset":
            session.reset()
            print("[conversation reset]", file=sys.stderr)
            continue
        if text.startswith("/") and " " not in text:
            print(f"unknown command {text}; {COMMANDS}", file=sys.stderr)
            continue
        try:
            _answer(session, text, args, sampling)
        except KeyboardInterrupt:  # Ctrl-C before the reply began: nothing was generated
            print("\n[stopped]", file=sys.stderr)


def _answer(session, text: str, args: argparse.Namespace, sampling) -> None:
    start = time.perf_counter()
    with ctrl_c_sets_flag() as interrupted:
        try:
            result = session.send(text, args.max_tokens, sampling, on_text=write_stdout,
                                  cancelled=lambda: interrupted[0])
        except ContextLengthError as exc:  # the conversation no longer fits the context
            print(f"\nluminal chat: {exc}; /reset starts over ({context_hint(session.generator)})",
                  file=sys.stderr)
            return
    write_stdout("\n")
    if result.stop_reason == "cancelled":
        print("[stopped]", file=sys.stderr)
    if not args.quiet:
        print(f"[prefill {result.prompt_tokens} new tokens, {session.cached_tokens} cached; "
              f"{len(result.token_ids)} generated at {result.decode_tok_s:.1f} tok/s; "
              f"{time.perf_counter() - start:.1f} s]", file=sys.stderr)
