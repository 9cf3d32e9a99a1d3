"""`luminal chat` driven through a pseudo-terminal, as a user types: multi-turn answers, the
history kept in the KV cache (a turn prefills only its new tokens), Ctrl-C, /reset, Ctrl-D."""

from __future__ import annotations

import re
import sys

import pytest

pexpect = pytest.importorskip("pexpect")

STATS = re.compile(r"\[prefill (\d+) new tokens, (\d+) cached;")
Q1, Q2 = "What is the capital of France?", "And of Germany?"


@pytest.fixture
def spawn(cli_env):
    """`spawn(*args)` starts `luminal chat` in a pty; every child is gone after the test."""
    children = []

    def start(*args: str):
        child = pexpect.spawn(sys.executable, ["-m", "luminal", "chat", *args], env=cli_env,
                              encoding="utf-8", timeout=180, dimensions=(40, 200))
        children.append(child)
        child.expect_exact("> ")
        return child

    yield start
    for child in children:
        child.close(force=True)


def _turn(child, text: str) -> tuple[str, int, int]:
    """Send `text`; the reply and the statistics line's prefill and cached counts."""
    child.sendline(text)
    child.expect(STATS)
    reply = child.before.split("\n", 1)[1].strip()  # after the echoed input line
    prefill, cached = int(child.match.group(1)), int(child.match.group(2))
    child.expect_exact("> ")
    return reply, prefill, cached


def test_llama_chat_keeps_history_in_the_cache(spawn, smollm2_file, smollm2_tokenizer):
    """Turn 2 prefills exactly the ChatML text that follows the cached turn 1 (end of the
    reply, the new user message, the assistant header), and its greedy answer is what a
    fresh full prefill of the whole conversation gives."""
    from llama_helpers import cpu_generator

    tok = smollm2_tokenizer
    child = spawn()
    reply1, prefill1, cached1 = _turn(child, Q1)
    reply2, prefill2, cached2 = _turn(child, Q2)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    first = [{"role": "user", "content": Q1}]
    assert reply1 == "The capital of France is Paris."
    assert prefill1 == len(tok.encode(tok.apply_chat_template(first)))
    new_text = f"<|im_end|>\n<|im_start|>user\n{Q2}<|im_end|>\n<|im_start|>assistant\n"
    assert prefill2 == len(tok.encode(new_text, add_special_tokens=False))
    assert cached2 == cached1 + prefill2 + len(tok.encode(reply2)) and prefill2 < cached1

    conversation = [*first, {"role": "assistant", "content": reply1},
                    {"role": "user", "content": Q2}]
    want = cpu_generator(smollm2_file).generate(tok.apply_chat_template(conversation), 64)
    assert reply2 == want.text


def test_llama_chat_ctrl_c_reset_and_ctrl_d(spawn, smollm2_file, smollm2_tokenizer):
    """Ctrl-C stops the reply and keeps the session; /reset starts a fresh conversation that
    still opens with the system message; Ctrl-D exits with status 0."""
    tok, system = smollm2_tokenizer, "You are a helpful assistant."
    child = spawn("--system", system, "-n", "300")
    story = "Tell me a very long story about a dragon."
    child.sendline(story)
    child.expect_exact(story)  # the terminal's echo of the input
    child.expect(r"\w+ \w+ \w+")  # the reply has started streaming
    child.sendintr()
    child.expect_exact("[stopped]")
    child.expect(STATS)
    child.expect_exact("> ")
    assert "Traceback" not in child.before
    child.sendline("/reset")
    child.expect_exact("[conversation reset]")
    child.expect_exact("> ")
    reply, prefill, cached = _turn(child, Q1)
    assert "Paris" in reply
    fresh = [{"role": "system", "content": system}, {"role": "user", "content": Q1}]
    assert prefill == len(tok.encode(tok.apply_chat_template(fresh)))
    assert cached == prefill + len(tok.encode(reply))
    child.sendline("/nonsense")
    child.expect_exact("unknown command /nonsense")
    child.expect_exact("> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "Traceback" not in (child.before or "")


def test_llama_chat_message_over_the_context_names_the_way_out(cli_env, smollm2_file):
    """A message that does not fit the context leaves the session running and says how to
    get out: /reset, or a larger --ctx."""
    from test_llama_cli import luminal

    out = luminal(cli_env, "chat", "--ctx", "8", "--quiet", stdin="Hello there friend\n/exit\n")
    assert out.returncode == 0, out.stderr
    assert ("the sequence would exceed the context of 8 tokens (0 cached + 33 new); /reset "
            "starts over (--ctx sets the context, up to the model's 8192 tokens)") in out.stderr
    assert "Traceback" not in out.stderr
