"""`luminal generate`: text generation from the command line.

Registered by this distribution's plugin through the `luminal_register_commands` hook. The
generated text streams to stdout; load and speed figures go to stderr, so the output can be
piped. `--json` prints one JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

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

__all__ = ["configure", "run"]

HELP = "generate text with a language model: SmolLM2 (the default), Gemma 3 or a Llama-family GGUF"

_EPILOG = """\
Defaults: greedy decoding (--temperature 0), which is deterministic. With --temperature > 0,
tokens are sampled among the --top-k 40 most likely whose probabilities reach --top-p 0.95
(llama.cpp's defaults), less those under --min-p times the most likely; --seed makes
sampling reproducible. Generation stops at the model's end-of-turn token, before a --stop
text, or after --max-tokens. Ctrl-C stops it (exit status 130).

examples:
  luminal generate "Once upon a time"
  luminal generate --chat "What is the capital of France?"
  luminal generate --system "Answer in French." "What is the capital of France?"
  luminal generate -f prompt.txt --stop "THE END" --repeat-penalty 1.1 --quiet
  echo "The recipe:" | luminal generate --temperature 0.8 --seed 1 --json
  luminal generate --model ./my-llama-checkpoint "Hello"   # config.json + safetensors
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `luminal generate`'s arguments."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("prompt", nargs="?", metavar="PROMPT",
                        help="the prompt (else --file, else stdin without its final newline)")
    parser.add_argument("--file", "-f", type=Path, default=None, metavar="PATH",
                        help="read the prompt from this file (UTF-8)")
    add_model_options(parser)
    parser.add_argument("--max-tokens", "-n", type=checked(int, 1), default=128, metavar="N",
                        help="most tokens to generate (default: %(default)s)")
    add_sampling_options(parser)
    parser.add_argument("--stop", action="append", default=[], metavar="TEXT",
                        help="end the output before TEXT (repeatable)")
    parser.add_argument("--chat", action="store_true",
                        help="wrap the prompt as a user message with the model's chat template")
    parser.add_argument("--system", default=None, metavar="TEXT",
                        help="system message (implies --chat)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress bars and no statistics line")
    parser.add_argument("--tensor-parallel", type=checked(int, 1), default=1, metavar="N",
                        help="shard the model over N MPI ranks (luminal-dist; run under "
                             "`mpiexec -n N` or `luminal launch -n N`; rank 0 prints)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (text, token_ids, prompt_tokens, "
                             "stop_reason, prefill_tok_s, decode_tok_s) instead of streaming "
                             "text")


def run(args: argparse.Namespace) -> int:
    """Execute `luminal generate`; returns the exit status (130 after Ctrl-C)."""
    try:
        return _run(args)
    except KeyboardInterrupt:
        return _interrupted()


def _run(args: argparse.Namespace) -> int:
    prompt = _read_prompt(args)
    if prompt is None:
        return 1
    cpu_settings_from_args(args)

    from jinja2 import TemplateError

    from .errors import ContextLengthError, HubError, ModelFileError

    quiet = args.quiet or args.json or _rank() != 0
    try:
        sampling = sampling_params(args)
        start = time.perf_counter()
        generator, path = load_generator(args.model, args.backend, args.ctx,
                                         progress=not quiet, search=args.search,
                                         tensor_parallel=args.tensor_parallel)
        loaded = time.perf_counter() - start
        if args.chat or args.system is not None:
            if generator.tokenizer.chat_template_note and not quiet:
                print(f"luminal generate: {generator.tokenizer.chat_template_note}",
                      file=sys.stderr)
            system = [] if args.system is None else [{"role": "system", "content": args.system}]
            prompt = generator.tokenizer.apply_chat_template(
                [*system, {"role": "user", "content": prompt}])
        stream = None if args.json or _rank() != 0 else write_stdout
        with ctrl_c_sets_flag(again_raises=True) as interrupted:
            result = generator.generate(prompt, args.max_tokens, sampling, on_text=stream,
                                        stop=args.stop, cancelled=lambda: interrupted[0])
    except ContextLengthError as exc:
        return _fail(f"{exc}; {context_hint(generator)}")
    except (ValueError, RuntimeError, FileNotFoundError, HubError, ModelFileError,
            TemplateError) as exc:
        return _fail(str(exc))
    if result.stop_reason == "cancelled":  # Ctrl-C while generating
        return _interrupted()
    if _rank() != 0:  # the other ranks of a tensor-parallel job computed the same tokens
        return 0
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
        return 0
    sys.stdout.write("\n")
    if not args.quiet:
        print(f"[{path.name} on {generator.backend_name}: loaded and compiled in "
              f"{loaded:.1f} s; prefill {result.prompt_tokens} tokens at "
              f"{result.prefill_tok_s:.1f} tok/s; generated {len(result.token_ids)} tokens, "
              f"decoding at {result.decode_tok_s:.1f} tok/s; stop: {result.stop_reason}]",
              file=sys.stderr)
    return 0


def _rank() -> int:
    """This process's MPI rank under a launcher (0 otherwise): only rank 0 prints."""
    return int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))


def _read_prompt(args: argparse.Namespace) -> str | None:
    """The prompt from the argument, --file or stdin; None (after an error message) when it is
    missing or empty, so nothing is loaded for nothing."""
    if args.prompt is not None and args.file is not None:
        _fail("give the prompt as an argument or with --file, not both")
        return None
    if args.prompt is not None:
        prompt = args.prompt
    elif args.file is not None:
        try:
            prompt = args.file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            _fail(f"--file {args.file}: {exc.strerror if isinstance(exc, OSError) else exc}")
            return None
    else:
        if sys.stdin.isatty():
            print("luminal generate: type the prompt, then Ctrl-D (or pass it: "
                  "luminal generate \"Once upon a time\")", file=sys.stderr)
        # `echo text | luminal generate`: the newline ends the input, it is not part of it
        prompt = sys.stdin.read()
        prompt = prompt[:-2] if prompt.endswith("\r\n") else prompt.removesuffix("\n")
    if not prompt.strip():
        _fail("the prompt is empty")
        return None
    return prompt


def _interrupted() -> int:
    sys.stdout.flush()
    print("\nluminal generate: interrupted", file=sys.stderr)
    return 130


def _fail(message: str) -> int:
    # one line, whatever the message holds (a compiler's output, a name with newlines)
    print(f"luminal generate: error: {' | '.join(message.splitlines())}", file=sys.stderr)
    return 1
