"""`luminal generate`'s options and edges, run as a user would: --file, --stop, --system,
--quiet, --ctx, --threads, --activations, errors that name the flag, the command's own usage
for a bad flag, empty prompts refused before loading, the hint on a terminal, Ctrl-C, and
`luminal models`."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import weakref

import pytest
from luminal_models.cli_options import add_model_options, cpu_settings_from_args, exempt_from_gc
from test_llama_cli import luminal


def test_llama_cli_refuses_bad_input_before_loading(cli_env):
    for args, stdin in ((("generate", ""), None), (("generate", "  \n"), None),
                        (("generate",), "\n")):
        out = luminal(cli_env, *args, stdin=stdin)
        assert out.returncode == 1
        assert out.stderr == "luminal generate: error: the prompt is empty\n"
    topk = luminal(cli_env, "generate", "hi", "--top-k", "-3")
    assert topk.returncode == 2
    assert "luminal generate: error: argument --top-k: must be >= 0, got -3" in topk.stderr
    flag = luminal(cli_env, "generate", "hi", "--bogus")
    assert flag.returncode == 2
    assert flag.stderr.startswith("usage: luminal generate ")
    assert "unrecognized arguments: --bogus" in flag.stderr
    both = luminal(cli_env, "generate", "hi", "--file", "x.txt")
    assert both.returncode == 1 and "not both" in both.stderr


def test_llama_cli_file_stop_quiet_threads(cli_env, smollm2_file, tmp_path):
    """The prompt from a file (its newline kept), cut before the stop text, and nothing on
    stderr with --quiet."""
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Once upon a time", encoding="utf-8")
    out = luminal(cli_env, "generate", "--file", str(prompt), "-n", "8", "--stop", "Nova",
                  "--quiet", "--threads", "1")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ", the city of \n" and out.stderr == ""
    missing = luminal(cli_env, "generate", "--file", str(tmp_path / "nope.txt"))
    assert missing.returncode == 1 and "nope.txt" in missing.stderr


def test_llama_cli_activations_sets_the_cpu_backends_precision(cli_env, smollm2_file,
                                                               monkeypatch):
    parser = argparse.ArgumentParser()
    add_model_options(parser)
    with monkeypatch.context() as patch:  # the settings must not reach the tests after this
        environ: dict[str, str] = {}
        patch.setattr(os, "environ", environ)
        cpu_settings_from_args(parser.parse_args([]))
        assert environ == {}
        cpu_settings_from_args(parser.parse_args(["--activations", "int8", "--threads", "1"]))
        assert environ == {"LUMINAL_CPU_QUANT_ACTIVATIONS": "int8", "LUMINAL_CPU_THREADS": "1"}
    assert os.environ.get("LUMINAL_CPU_QUANT_ACTIVATIONS") != "int8"
    # llama.cpp's numerics still continue the prompt sensibly
    out = luminal(cli_env, "generate", "The capital of France is", "-n", "4", "--json",
                  "--activations", "int8")
    assert out.returncode == 0, out.stderr
    assert "Paris" in json.loads(out.stdout)["text"]
    bad = luminal(cli_env, "generate", "hi", "--activations", "int4")
    assert bad.returncode == 2
    assert "argument --activations: invalid choice: 'int4'" in bad.stderr


def test_llama_cli_system_and_ctx(cli_env, smollm2_file, smollm2_tokenizer):
    tok, system = smollm2_tokenizer, "You are a helpful assistant."
    question = "What is the capital of France?"
    out = luminal(cli_env, "generate", "--system", system, question, "-n", "16", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    assert result["prompt_tokens"] == len(tok.encode(tok.apply_chat_template(messages)))
    assert "Paris" in result["text"]
    # 4 prompt tokens in a 6-token context: three tokens fit (the last is never fed back)
    short = luminal(cli_env, "generate", "Once upon a time", "--ctx", "6", "-n", "8", "--json")
    assert short.returncode == 0, short.stderr
    assert json.loads(short.stdout)["token_ids"] == [28, 260, 2240]
    assert json.loads(short.stdout)["stop_reason"] == "context"
    # a prompt longer than the context: the error names the flag that sets it
    over = luminal(cli_env, "generate", "Once upon a time", "--ctx", "2", "--quiet")
    assert over.returncode == 1 and over.stdout == ""
    assert over.stderr == ("luminal generate: error: the sequence would exceed the context of 2 "
                           "tokens (0 cached + 4 new); --ctx sets the context, up to the "
                           "model's 8192 tokens\n")


def test_llama_cli_models_lists_smollm2_with_its_size(cli_env, smollm2_file):
    out = luminal(cli_env, "models", "--json")
    assert out.returncode == 0, out.stderr
    smollm2 = next(m for m in json.loads(out.stdout) if m["name"] == "smollm2")
    assert smollm2["installed"] and smollm2["size_bytes"] == smollm2_file.stat().st_size
    table = luminal(cli_env, "models")
    assert "smollm2" in table.stdout and "98.4 MB" in table.stdout


def test_llama_cli_terminal_hint_and_ctrl_c(cli_env, smollm2_file):
    pexpect = pytest.importorskip("pexpect")
    waiting = pexpect.spawn(sys.executable, ["-m", "luminal", "generate"], env=cli_env,
                            encoding="utf-8", timeout=60)
    waiting.expect_exact("type the prompt, then Ctrl-D")
    waiting.sendeof()
    waiting.expect(pexpect.EOF)
    waiting.close()
    assert waiting.exitstatus == 1

    child = pexpect.spawn(sys.executable, ["-m", "luminal", "generate", "A long story:", "-n",
                                           "2000", "--quiet"], env=cli_env, encoding="utf-8",
                          timeout=180)
    child.expect(r"\w+ \w+ \w+ \w+")  # it is streaming
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    tail = child.before.strip().splitlines()
    assert tail[-1] == "luminal generate: interrupted"
    assert "Traceback" not in child.before


def test_exempt_from_gc_takes_what_is_alive_out_of_collections():
    """A loaded model's objects leave the collector's generations (full collections took
    300-430 ms with SmolLM2 loaded); garbage that exists at that moment is freed first."""
    class Node:
        pass

    kept = [[i] for i in range(1000)]
    garbage = Node()
    garbage.self = garbage  # a cycle only the collector frees
    freed = weakref.ref(garbage)
    del garbage
    try:
        exempt_from_gc()
        tracked = {id(o) for o in gc.get_objects()}
        assert id(kept) not in tracked and id(kept[0]) not in tracked
        assert gc.get_freeze_count() >= len(kept) and freed() is None
    finally:
        gc.unfreeze()
