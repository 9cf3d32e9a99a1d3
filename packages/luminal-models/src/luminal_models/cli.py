"""`luminal generate`: text generation from the command line.

Registered by this distribution's plugin through the `luminal_register_commands` hook. The
generated text streams to stdout; load and speed figures go to stderr, so the output can be
piped. `--json` prints one JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

__all__ = ["configure", "run"]

HELP = "generate text with a Llama-family model (default: SmolLM2-135M-Instruct)"

_EPILOG = """\
Defaults: greedy decoding (--temperature 0), which is deterministic. With --temperature > 0,
tokens are sampled among the --top-k 40 most likely whose probabilities reach --top-p 0.95
(llama.cpp's defaults); --seed makes sampling reproducible. Generation stops at the model's
end-of-turn token or after --max-tokens.

examples:
  luminal generate "Once upon a time"
  luminal generate --chat "What is the capital of France?"
  echo "The recipe:" | luminal generate --temperature 0.8 --seed 1 --json
  luminal generate --model ./my-llama-checkpoint "Hello"   # config.json + safetensors
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `luminal generate`'s arguments."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("prompt", nargs="?", metavar="PROMPT",
                        help="the prompt (read from stdin when omitted, without its final "
                             "newline)")
    parser.add_argument("--model", "-m", default="smollm2", metavar="NAME|PATH",
                        help="'smollm2' (downloaded once if needed), a .gguf file, or a "
                             "Hugging Face checkpoint directory (config.json, *.safetensors, "
                             "tokenizer.json) (default: %(default)s)")
    parser.add_argument("--max-tokens", "-n", type=int, default=128, metavar="N",
                        help="most tokens to generate (default: %(default)s)")
    parser.add_argument("--temperature", "-t", type=float, default=0.0, metavar="T",
                        help="0 = greedy (default: %(default)s)")
    parser.add_argument("--top-k", type=int, default=40, metavar="K",
                        help="sample among the K most likely tokens; 0 = all "
                             "(default: %(default)s; ignored when greedy)")
    parser.add_argument("--top-p", type=float, default=0.95, metavar="P",
                        help="nucleus sampling mass; 1 = off (default: %(default)s; ignored "
                             "when greedy)")
    parser.add_argument("--seed", type=int, default=None, metavar="S",
                        help="random seed for sampling (default: a fresh one each run)")
    parser.add_argument("--chat", action="store_true",
                        help="wrap the prompt as a user message with the model's chat template")
    parser.add_argument("--backend", "-b", default=None, metavar="NAME",
                        help="luminal backend (default: the best available; see "
                             "`luminal backends`)")
    parser.add_argument("--search", action="store_true",
                        help="compile with the search compiler (luminal-search): slower the "
                             "first time, its plan is cached for the next runs")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (text, token_ids, prompt_tokens, "
                             "prefill_tok_s, decode_tok_s) instead of streaming text")


def run(args: argparse.Namespace) -> int:
    """Execute `luminal generate`; returns the exit status."""
    import luminal as lm
    from jinja2 import TemplateError

    from .errors import HubError, ModelFileError
    from .generate import Generator
    from .gguf_file import GGUFFile
    from .hub import resolve_model
    from .llama import Llama
    from .sampling import SamplingParams
    from .tokenizer import Tokenizer

    if args.prompt is not None:
        prompt = args.prompt
    else:
        # `echo text | luminal generate`: the newline ends the input, it is not part of it
        prompt = sys.stdin.read()
        prompt = prompt[:-2] if prompt.endswith("\r\n") else prompt.removesuffix("\n")
    if args.max_tokens < 1:
        return _fail("--max-tokens must be at least 1")
    try:
        sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
        backend = lm.backend(args.backend)
        start = time.perf_counter()
        checkpoint = _checkpoint_dir(args.model)
        if checkpoint is not None:
            path = checkpoint
            tokenizer = Tokenizer.from_pretrained(checkpoint)  # before the (larger) weights
            model = Llama.from_safetensors(checkpoint, progress=not args.json)
        else:
            path = resolve_model(args.model)
            if path.suffix.lower() != ".gguf":
                return _fail(f"{path}: `luminal generate` reads a .gguf file or a Hugging "
                             "Face checkpoint directory (config.json, *.safetensors, "
                             "tokenizer.json)")
            # the reference backend has no quantized kernels: it would decode every weight on
            # every step, so it gets float32 weights decoded once at load
            quantized = backend.name != "reference"
            # parsed once for the tokenizer and the weights; closing it frees the parsed
            # metadata (the weights keep the file's memory map alive)
            with GGUFFile(path) as gguf:
                tokenizer = Tokenizer.from_gguf(gguf)
                model = Llama.from_gguf(gguf, quantized=quantized, progress=not args.json)
        # the search compiler wraps the backend: it picks the plan, the backend compiles it
        compiler = lm.plugins.compiler("search", backend=backend,
                                       progress=not args.json) if args.search else backend
        generator = Generator(model, tokenizer, compiler)
        loaded = time.perf_counter() - start
        if args.chat:
            prompt = tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        stream = None if args.json else _write_stdout
        result = generator.generate(prompt, args.max_tokens, sampling, on_text=stream)
    except (ValueError, RuntimeError, FileNotFoundError, HubError, ModelFileError,
            TemplateError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        print(f"[{path.name} on {backend.name}: loaded and compiled in {loaded:.1f} s; "
              f"prefill {result.prompt_tokens} tokens at {result.prefill_tok_s:.1f} tok/s; "
              f"generated {len(result.token_ids)} tokens, decoding at "
              f"{result.decode_tok_s:.1f} tok/s; stop: {result.stop_reason}]", file=sys.stderr)
    return 0


def _checkpoint_dir(model: str) -> Path | None:
    """The Hugging Face checkpoint directory `model` names (a directory, or a .safetensors
    file in one), or None for a model name or a GGUF file. A directory without the files a
    checkpoint needs is an error that says which are missing."""
    path = Path(model).expanduser()
    if path.is_file() and path.suffix.lower() == ".safetensors":
        path = path.parent
    elif not path.is_dir():
        return None
    missing = [name for name, ok in (
        ("config.json", (path / "config.json").is_file()),
        ("*.safetensors", any(path.glob("*.safetensors"))),
        ("tokenizer.json", (path / "tokenizer.json").is_file()),
    ) if not ok]
    if missing:
        raise FileNotFoundError(
            f"{path}: not a Hugging Face checkpoint `luminal generate` can read: no "
            f"{', no '.join(missing)} (it needs config.json, *.safetensors weights and the "
            "tokenizer as tokenizer.json)")
    return path


def _write_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _fail(message: str) -> int:
    # one line, whatever the message holds (a compiler's output, a name with newlines)
    print(f"luminal generate: error: {' | '.join(message.splitlines())}", file=sys.stderr)
    return 1
