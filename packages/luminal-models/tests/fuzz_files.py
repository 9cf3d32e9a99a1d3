"""Mutation fuzzing of the model loaders: seed files, mutations, and a worker that runs cases.

Run by `test_models_fuzz.py` as a worker process (`python fuzz_files.py OUT_DIR SEED START
COUNT`): the worker writes one small valid GGUF and one Hugging Face checkpoint directory
(config.json, model.safetensors, tokenizer files), then for each case derives a mutated copy
from (SEED, case index) alone, loads it the way `luminal generate` does, and prints one JSON line
per case: ``{"case": i, "kind": ..., "outcome": ..., "seconds": ..., "rss_mb": ...}``. Before each
case it prints ``{"start": i}``, so the parent knows which case hung or died by a signal.

Outcomes: "ok" (loaded), "error:<Type>" for the loaders' documented error types, "cli-bad" when
`luminal generate` on the same file did not print exactly one line and exit 1, and
"unexpected:<Type>: message" for anything else.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import resource
import shutil
import struct
import sys
import time
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
from test_llama_loading import FFN, HEAD_DIM, HEADS, HIDDEN, KV_HEADS, tiny_llama_tensors

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
INTERESTING = [0, 1, 2, 3, 7, 8, 31, 32, 33, 63, 64, 255, 256, 4095, 4096, 65535, 65536,
               2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def _tokenizer_metadata() -> tuple[list[str], list[str]]:
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    merges = ["h e", "l l", "Ġ w", "o r"]
    tokens = [*alphabet, *(m.replace(" ", "") for m in merges), "<|im_start|>", "<|im_end|>"]
    return tokens, merges


def gguf_metadata(vocab: int) -> dict[str, Any]:
    tokens, merges = _tokenizer_metadata()
    return {
        "general.architecture": "llama",
        "llama.block_count": 1, "llama.context_length": 64,
        "llama.embedding_length": HIDDEN, "llama.feed_forward_length": FFN,
        "llama.attention.head_count": HEADS, "llama.attention.head_count_kv": KV_HEADS,
        "llama.rope.dimension_count": HEAD_DIM, "llama.vocab_size": vocab,
        "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.freq_base": 10000.0,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": [1] * (len(tokens) - 2) + [3, 3],
        "tokenizer.ggml.bos_token_id": len(tokens) - 2,
        "tokenizer.ggml.eos_token_id": len(tokens) - 1,
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": TEMPLATE,
    }  # fmt: skip


def write_gguf(path: Path, metadata: dict[str, Any], seed: int = 0) -> Path:
    """A tiny Llama GGUF (Q8_0 and Q4_0 matrices, F32 vectors) with `metadata`; a value may be
    a (value, GGUFValueType) pair to force its stored type."""
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter
    from luminal_models import quants

    vocab = len(_tokenizer_metadata()[0])
    w = GGUFWriter(path, arch=None)
    for key, value in metadata.items():
        if isinstance(value, tuple):
            value, vtype = value
            sub = GGUFValueType.INT32 if vtype == GGUFValueType.ARRAY else None
            w.add_key_value(key, value, vtype, sub_type=sub)
        else:
            w.add_key_value(key, value, _value_type(value),
                            sub_type=_value_type(value[0]) if isinstance(value, list) else None)
    for k, (name, x) in enumerate(tiny_llama_tensors(np.random.default_rng(seed), vocab).items()):
        if x.ndim == 2:
            q = (quants.Q8_0, GGMLQuantizationType.Q8_0) if k % 2 else (
                quants.Q4_0, GGMLQuantizationType.Q4_0)
            w.add_tensor(name, quants.quantize(x, q[0]).reshape(x.shape[0], -1), raw_dtype=q[1])
        else:
            w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _value_type(value: Any) -> Any:
    from gguf import GGUFValueType

    if isinstance(value, bool):
        return GGUFValueType.BOOL
    if isinstance(value, int):
        return GGUFValueType.UINT32 if 0 <= value < 2**32 else GGUFValueType.INT64
    if isinstance(value, float):
        return GGUFValueType.FLOAT32
    if isinstance(value, str):
        return GGUFValueType.STRING
    return GGUFValueType.ARRAY


def hf_config(vocab: int) -> dict[str, Any]:
    return {"vocab_size": vocab, "hidden_size": HIDDEN, "intermediate_size": FFN,
            "num_hidden_layers": 1, "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS, "rms_norm_eps": 1e-5,
            "max_position_embeddings": 64, "tie_word_embeddings": True}


def write_checkpoint(folder: Path, seed: int = 0) -> Path:
    """A tiny Hugging Face Llama checkpoint directory (tied embeddings)."""
    from luminal_models.llama import gguf_to_hf_name
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokens, merges = _tokenizer_metadata()
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {gguf_to_hf_name(k): v
               for k, v in tiny_llama_tensors(np.random.default_rng(seed), len(tokens)).items()}
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(hf_config(len(tokens))))
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "chat_template": TEMPLATE}))
    return folder


# ----- mutations -------------------------------------------------------------------------------
def mutate_bytes(data: bytes, rng: random.Random, header_end: int) -> bytes:
    """One to four byte-level mutations, mostly inside the header (where parsing happens)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        where = rng.randrange(header_end) if rng.random() < 0.85 else rng.randrange(len(buf))
        kind = rng.randrange(6)
        if kind == 0:  # flip a bit
            buf[where] ^= 1 << rng.randrange(8)
        elif kind == 1:  # an interesting integer over 4 or 8 bytes
            width = rng.choice((4, 8))
            value = rng.choice(INTERESTING) % (1 << (8 * width))
            buf[where:where + width] = value.to_bytes(width, "little")
        elif kind == 2:  # truncate
            del buf[where:]
            break
        elif kind == 3:  # delete a run
            del buf[where:where + rng.randint(1, 16)]
        elif kind == 4:  # insert random bytes
            buf[where:where] = rng.randbytes(rng.randint(1, 16))
        else:  # overwrite with random bytes
            n = rng.randint(1, 8)
            buf[where:where + n] = rng.randbytes(n)
    return bytes(buf)


def _hostile_value(rng: random.Random) -> Any:
    return rng.choice([
        0, -1, 2**31, 2**62, 10**30, 1e308, float("inf"), float("nan"), -0.5, True, None,
        "9", "", "x" * 1000, [], [1, 2], {"a": 1}, [[[[]]]],
    ])


def mutate_gguf_metadata(meta: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The seed metadata with one to three keys retyped, set out of range, or removed."""
    from gguf import GGUFValueType

    out = dict(meta)
    for _ in range(rng.randint(1, 3)):
        if not out:
            break
        key = rng.choice(list(out))
        choice = rng.randrange(7)
        if choice == 0:
            del out[key]
        elif choice == 1:
            out[key] = (str(out[key])[:50], GGUFValueType.STRING)
        elif choice == 2:
            out[key] = (rng.choice(INTERESTING[:-3]), GGUFValueType.UINT64)
        elif choice == 3:
            out[key] = (rng.choice([-1.0, 0.0, 1e30, float("inf"), float("nan")]),
                        GGUFValueType.FLOAT32)
        elif choice == 4:
            out[key] = ([rng.randrange(-5, 100000) for _ in range(rng.randint(0, 5))],
                        GGUFValueType.ARRAY)
        elif choice == 5:
            out[key] = (rng.random() < 0.5, GGUFValueType.BOOL)
        else:
            out[key] = (rng.choice([0, 3, 5, 2**31 - 1]), GGUFValueType.INT32)
    return out


def mutate_json(value: dict[str, Any], rng: random.Random) -> str:
    """A config.json / tokenizer_config.json text with hostile values or broken syntax."""
    out = dict(value)
    choice = rng.randrange(10)
    if choice == 0:
        return "[" * rng.choice((10, 1000, 100000)) + "]" * rng.choice((0, 10))
    if choice == 1:
        return json.dumps(list(out.items()))
    if choice == 2:
        text = json.dumps(out)
        cut = rng.randrange(len(text))
        return text[:cut]
    for _ in range(rng.randint(1, 3)):
        if not out:
            break
        key = rng.choice(list(out))
        if rng.random() < 0.2:
            del out[key]
        else:
            out[key] = _hostile_value(rng)
    return json.dumps(out)


# ----- running one case --------------------------------------------------------------------
def documented_errors() -> tuple[type[BaseException], ...]:
    from luminal_models.errors import ModelFileError

    return (ModelFileError, jinja2.TemplateError)


def load_like_generate(path: Path) -> str:
    """Load `path` (a .gguf or a checkpoint directory) as `luminal generate` does, plus the
    chat template; returns the phase reached ("template" when everything loaded)."""
    from luminal_models.gguf_file import GGUFFile
    from luminal_models.llama import Llama
    from luminal_models.tokenizer import Tokenizer

    if path.suffix == ".bin":  # a CTranslate2 Whisper model.bin, loaded as transcribe does
        from luminal_models.whisper import Whisper

        Whisper.from_ct2(path, progress=False)
        return "weights"
    if path.suffix == ".gguf":
        with GGUFFile(path) as gguf:
            tokenizer = Tokenizer.from_gguf(gguf)
            Llama.from_gguf(gguf, quantized=True, progress=False)
    else:
        tokenizer = Tokenizer.from_pretrained(path)
        Llama.from_safetensors(path, progress=False)
    tokenizer.encode("hello world")
    if tokenizer.chat_template is not None:
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    return "template"


def cli_prints_one_line(path: Path) -> bool:
    """`luminal generate --model PATH` (in process): exit status 1 and one line on stderr."""
    from luminal_models import cli

    parser = argparse.ArgumentParser(prog="luminal generate")
    cli.configure(parser)  # the command's own defaults, whatever options it grows
    args = parser.parse_args(["hi", "--model", str(path), "--max-tokens", "1",
                              "--backend", "reference", "--json"])
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        status = cli.run(args)
    lines = err.getvalue().splitlines()
    return status == 1 and len(lines) == 1 and lines[0].startswith("luminal generate: error:")


def make_case(work: Path, seeds: dict[str, Path], seed: int, index: int) -> tuple[str, Path]:
    """The mutated input of case `index`: (kind, path)."""
    rng = random.Random(seed * 1_000_003 + index)
    kind = rng.choice(["gguf-bytes", "gguf-bytes", "gguf-bytes", "gguf-meta",
                       "safetensors-bytes", "safetensors-bytes", "config-json",
                       "tokenizer-config", "ct2-bytes"])
    if kind == "ct2-bytes":
        path = work / "model.bin"
        data = seeds["ct2"].read_bytes()  # structure and data interleave: mutate anywhere
        path.write_bytes(mutate_bytes(data, rng, header_end=len(data)))
        return kind, path
    if kind == "gguf-bytes":
        data = seeds["gguf"].read_bytes()
        path = work / "case.gguf"
        path.write_bytes(mutate_bytes(data, rng, header_end=int(seeds["gguf_header"].read_text())))
        return kind, path
    if kind == "gguf-meta":
        meta = mutate_gguf_metadata(gguf_metadata(len(_tokenizer_metadata()[0])), rng)
        path = work / "case.gguf"
        try:
            write_gguf(path, meta)
        except (ValueError, TypeError, OverflowError, struct.error):
            write_gguf(path, gguf_metadata(len(_tokenizer_metadata()[0])))  # unwritable: seed
        return kind, path
    folder = work / "case"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(seeds["checkpoint"], folder)
    if kind == "safetensors-bytes":
        st = folder / "model.safetensors"
        data = st.read_bytes()
        header_end = 8 + struct.unpack_from("<Q", data)[0]
        st.write_bytes(mutate_bytes(data, rng, header_end))
    elif kind == "config-json":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(mutate_json(config, rng))
    else:
        config = json.loads((folder / "tokenizer_config.json").read_text())
        if rng.random() < 0.3:
            (folder / "chat_template.jinja").write_bytes(
                rng.choice([b"\xff\xfe{{ x }}", b"{% for %}", b"{{ 'a' * 10000000000 }}",
                            b"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"]))
        else:
            (folder / "tokenizer_config.json").write_text(mutate_json(config, rng))
    return kind, folder


def run_case(path: Path) -> tuple[str, bool]:
    """(outcome, whether the CLI check applies) for one mutated input."""
    try:
        load_like_generate(path)
    except documented_errors() as e:
        # the CLI check drives `luminal generate`, which reads GGUF and safetensors
        return f"error:{type(e).__name__}", not isinstance(e, jinja2.TemplateError) and (
            path.suffix != ".bin")
    except Exception as e:  # the finding this fuzzer exists for
        return f"unexpected:{type(e).__name__}: {str(e)[:300]}", False
    return "ok", False


def write_seeds(out: Path) -> dict[str, Path]:
    from luminal_models.gguf_file import GGUFFile

    gguf = write_gguf(out / "seed.gguf", gguf_metadata(len(_tokenizer_metadata()[0])))
    with GGUFFile(gguf) as g:
        first_data = min(t.offset for t in g.tensors.values())
    (out / "seed.gguf.header").write_text(str(first_data))
    from ct2_helpers import TIED, tiny_whisper_variables, write_ct2

    return {"gguf": gguf, "gguf_header": out / "seed.gguf.header",
            "checkpoint": write_checkpoint(out / "seed-checkpoint"),
            "ct2": write_ct2(out / "seed.bin", tiny_whisper_variables(), TIED)}


def worker(out: Path, seed: int, start: int, count: int, memory_bytes: int) -> None:
    seeds = write_seeds(out)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + memory_bytes, hard))
    work = out / "work"
    work.mkdir(exist_ok=True)
    for index in range(start, start + count):
        print(json.dumps({"start": index}), flush=True)
        kind, path = make_case(work, seeds, seed, index)
        began = time.perf_counter()
        try:
            outcome, check_cli = run_case(path)
            if check_cli and not cli_prints_one_line(path):
                outcome = "cli-bad"
        except MemoryError:
            outcome = "memory"
        seconds = time.perf_counter() - began
        rss_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
        print(json.dumps({"case": index, "kind": kind, "outcome": outcome,
                          "seconds": round(seconds, 4), "rss_mb": round(rss_mb, 1)}),
              flush=True)


if __name__ == "__main__":
    worker(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
           int(sys.argv[5]))
