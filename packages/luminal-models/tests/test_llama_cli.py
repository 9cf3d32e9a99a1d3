"""`luminal generate` in a fresh interpreter, found through the plugin entry point (the
`cli_env` fixture of conftest.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

CHAT_ANSWER = "The capital of France is Paris."


def luminal(env: dict[str, str], *args: str, stdin: str | None = None):
    return subprocess.run([sys.executable, "-m", "luminal", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def model_available(smollm2_file: Path) -> Path:
    return smollm2_file


def test_llama_cli_generate_is_registered_by_the_plugin(cli_env):
    out = luminal(cli_env, "plugins", "--json")
    assert out.returncode == 0, out.stderr
    models = next(p for p in json.loads(out.stdout) if p["name"] == "luminal-models")
    assert models["registered"]["luminal_register_commands"] == [
        "generate", "chat", "serve", "models", "embed", "transcribe"]
    helped = luminal(cli_env, "generate", "--help")
    assert helped.returncode == 0
    assert "--temperature" in helped.stdout and "greedy" in helped.stdout


def test_llama_cli_chat_streams_text_and_reports_speed(cli_env, model_available):
    out = luminal(cli_env, "generate", "--chat", "What is the capital of France?",
                  "--max-tokens", "16")
    assert out.returncode == 0, out.stderr
    assert out.stdout == CHAT_ANSWER + "\n"
    assert "prefill 37 tokens" in out.stderr and "tok/s" in out.stderr
    # compilation shows its progress, step by step, as weight loading does
    assert "compiling:" in out.stderr and "optimizing the graph" in out.stderr
    assert "building for " in out.stderr and "2/2" in out.stderr


def test_gemma3_cli_chat_uses_gemma_turns_and_says_so_once(cli_env):
    """`--model gemma3`: the base model's file has no chat template; --chat wraps the prompt
    in Gemma 3's turn format (11 prompt tokens) and says so once on stderr."""
    out = luminal(cli_env, "generate", "--model", "gemma3", "--chat", "Hi there",
                  "--max-tokens", "2")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("no tokenizer.chat_template; using Gemma 3's official turn") == 1
    # <bos> <start_of_turn> user \n Hi ▁there <end_of_turn> \n <start_of_turn> model \n
    assert "prefill 11 tokens" in out.stderr


def test_llama_cli_json(cli_env, model_available):
    out = luminal(cli_env, "generate", "Once upon a time", "-n", "8", "--json",
                  "--backend", "reference")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) >= {"text", "token_ids", "prompt_tokens", "prefill_tok_s",
                           "decode_tok_s"}
    assert result["token_ids"] == [28, 260, 2240, 282, 23324, 27108, 436, 253]
    assert result["text"] == ", the city of Nova Haven was a"
    assert result["prompt_tokens"] == 4 and result["stop_reason"] == "max_tokens"
    assert result["prefill_tok_s"] > 0 and result["decode_tok_s"] > 0


def test_llama_cli_seeded_sampling_from_stdin_is_reproducible(cli_env, model_available):
    """Same seed, same ids; the newline that ends piped input (`echo ... |`) is not part of
    the prompt ("Once upon a time" is 4 tokens, with a newline 5)."""
    args = ("generate", "--temperature", "0.9", "--seed", "7", "-n", "6", "--json",
            "--backend", "reference")
    first, second = (luminal(cli_env, *args, stdin=text)
                     for text in ("Once upon a time\n", "Once upon a time"))
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["token_ids"] == json.loads(second.stdout)["token_ids"]
    assert json.loads(first.stdout)["prompt_tokens"] == 4


def test_llama_cli_reports_errors(cli_env, tmp_path):
    missing = luminal(cli_env, "generate", "hi", "--model", str(tmp_path / "nope.gguf"))
    assert missing.returncode == 1
    assert "luminal generate: error:" in missing.stderr and "nope.gguf" in missing.stderr
    bad = luminal(cli_env, "generate", "hi", "--top-p", "0")
    assert bad.returncode == 2
    assert "luminal generate: error: argument --top-p: must be in (0, 1], got 0" in bad.stderr


def test_llama_cli_names_an_unsupported_architecture(cli_env, tmp_path):
    from gguf import GGUFWriter

    path = tmp_path / "qwen.gguf"
    writer = GGUFWriter(path, arch="qwen2")
    writer.add_block_count(1)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file,
                 writer.write_tensors_to_file, writer.close):
        step()
    out = luminal(cli_env, "generate", "hi", "--model", str(path))
    assert out.returncode == 1
    assert (f"{path}: architecture 'qwen2' is not supported (luminal-models runs 'llama', "
            "'mistral', 'gemma3')") in out.stderr


# ----- Hugging Face checkpoint directories ----------------------------------------------------

def _write_tiny_llama(folder: Path, vocab: int) -> None:
    """config.json + model.safetensors of a random 2-layer Llama (GQA, untied head)."""
    import numpy as np
    from luminal_models.llama import Llama, LlamaConfig
    from safetensors.numpy import save_file

    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
              "vocab_size": vocab, "hidden_size": 32, "intermediate_size": 48,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-5, "max_position_embeddings": 128, "rope_theta": 10000.0,
              "tie_word_embeddings": False}
    (folder / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(3)
    shapes = {n: p.shape for n, p in Llama(LlamaConfig.from_hf(config)).named_parameters()}
    save_file({n: (rng.normal(size=s) * (1.0 if n.endswith("norm.weight") else 0.3))
               .astype(np.float32) for n, s in shapes.items()}, str(folder / "model.safetensors"))


def test_llama_cli_generates_from_a_hugging_face_checkpoint_dir(cli_env, tiny_tokenizer_dir):
    """`--model DIR` reads config.json + *.safetensors + tokenizer.json; the ids are what
    the same model and tokenizer give in-process, and (where transformers is installed) each
    is transformers' argmax for that position."""
    from luminal_models.generate import Generator
    from luminal_models.llama import Llama
    from luminal_models.tokenizer import Tokenizer

    folder = tiny_tokenizer_dir(name="checkpoint")
    tok = Tokenizer.from_pretrained(folder)
    _write_tiny_llama(folder, tok.vocab_size)
    out = luminal(cli_env, "generate", "--model", str(folder), "--chat", "Hello world", "-n",
                  "8", "--json", "--backend", "reference")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hello world"}])
    want = Generator(Llama.from_safetensors(folder, progress=False), tok).generate(prompt, 8)
    assert result["token_ids"] == want.token_ids and result["text"] == want.text
    assert result["prompt_tokens"] == len(tok.encode(prompt))

    try:
        import torch
        import transformers
    except ImportError:
        return
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    prompt_ids = transformers.AutoTokenizer.from_pretrained(str(folder)).encode(prompt)
    assert prompt_ids == tok.encode(prompt)
    ids = prompt_ids + result["token_ids"]
    with torch.no_grad():
        logits = hf.eval()(torch.tensor([ids])).logits[0]
    n = len(prompt_ids)
    assert logits[n - 1:-1].argmax(-1).tolist() == result["token_ids"]


def test_llama_cli_checkpoint_dir_without_tokenizer_json_fails_clearly(cli_env, tmp_path):
    folder = tmp_path / "weights-only"
    folder.mkdir()
    _write_tiny_llama(folder, 64)
    out = luminal(cli_env, "generate", "hi", "--model", str(folder))
    assert out.returncode == 1
    assert f"luminal generate: error: {folder}: not a Hugging Face checkpoint" in out.stderr
    assert "no tokenizer.json" in out.stderr


def test_llama_cli_hostile_files_fail_in_one_line(cli_env, tmp_path):
    from fuzz_files import gguf_metadata, write_checkpoint, write_gguf

    gguf = write_gguf(tmp_path / "bad.gguf", {**gguf_metadata(262),
                                               "tokenizer.chat_template": "{{ f( }}",
                                               "llama.attention.head_count": 0})
    folder = write_checkpoint(tmp_path / "ckpt")
    (folder / "config.json").write_text('{"num_attention_heads": 0}')
    for model, message in ((gguf, r"head_count must be an integer in \[1, 1024\], got 0"),
                           (folder, "config.json: has no .hidden_size.")):
        run = luminal(cli_env, "generate", "hi\nthere", "--chat", "--model", str(model))
        assert run.returncode == 1 and run.stdout == ""
        assert len(run.stderr.splitlines()) == 1, run.stderr
        assert re.search(message, run.stderr), run.stderr
