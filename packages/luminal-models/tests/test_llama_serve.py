"""`luminal serve` as a subprocess on 127.0.0.1, driven by the real `openai` client: chat and
text completions, streaming, stop strings, seeds, OpenAI-style errors, a bounded concurrent
load whose answers each equal the same request run alone, and a clean shutdown on SIGINT."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server(cli_env, smollm2_file):
    """A running `luminal serve --port 0`; yields (base_url, process)."""
    proc = subprocess.Popen([sys.executable, "-m", "luminal", "serve", "--port", "0",
                             "--quiet"], env=cli_env, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        found = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
        if found:
            break
    else:
        proc.wait(timeout=30)
        pytest.fail("luminal serve did not start:\n" + "".join(lines))
    drain = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    drain.start()
    yield found.group(1), proc, lines
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server[0], api_key="unused", max_retries=0, timeout=120)


def test_llama_serve_models_and_chat(client):
    assert [m.id for m in client.models.list().data] == ["smollm2"]
    out = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=16,
                                         temperature=0)
    assert out.object == "chat.completion"
    assert out.choices[0].message.content == "The capital of France is Paris."
    assert out.choices[0].finish_reason == "stop"
    assert out.usage.prompt_tokens == 37 and out.usage.completion_tokens == 8  # + <|im_end|>
    cut = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=3,
                                         temperature=0)
    assert cut.choices[0].message.content == "The capital of"
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 3


def test_llama_serve_streams_chat_and_completions(client):
    chunks = list(client.chat.completions.create(
        model="smollm2", messages=QUESTION, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The capital of France is Paris."
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 8

    whole = client.completions.create(model="smollm2", prompt="Once upon a time",
                                      max_tokens=8, temperature=0)
    assert whole.choices[0].text == ", the city of Nova Haven was a"
    streamed = client.completions.create(model="smollm2", prompt="Once upon a time",
                                         max_tokens=8, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == whole.choices[0].text


def test_llama_serve_stop_and_seed(client):
    stopped = client.completions.create(model="smollm2", prompt="Once upon a time",
                                        max_tokens=8, temperature=0, stop=["Nova"])
    assert stopped.choices[0].text == ", the city of "
    assert stopped.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="smollm2", prompt="Once upon a time",
                                         max_tokens=8, temperature=0, stop=["Nova"],
                                         stream=True)
    assert "".join(c.choices[0].text for c in streamed) == ", the city of "
    seeded = [client.completions.create(model="smollm2", prompt="Once upon a time",
                                        max_tokens=12, temperature=1.0, top_p=0.9,
                                        seed=seed).choices[0].text for seed in (5, 5, 6)]
    assert seeded[0] == seeded[1] and seeded[0] != seeded[2]


def test_llama_serve_openai_style_errors(server, client):
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=QUESTION)
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="smollm2", messages=QUESTION, temperature=3)
    assert bad.value.body["param"] == "temperature"
    assert "temperature must be in [0, 2]" in bad.value.body["message"]
    for field, value in (("seed", -1), ("max_tokens", 0), ("top_p", 0), ("n", 2)):
        with pytest.raises(openai.BadRequestError) as wrong:
            client.chat.completions.create(model="smollm2", messages=QUESTION,
                                           **{field: value})
        assert wrong.value.body["param"] == field, wrong.value.body
    with pytest.raises(openai.BadRequestError) as empty:
        client.chat.completions.create(model="smollm2", messages=[])
    assert empty.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as too_long:
        client.completions.create(model="smollm2", prompt="word " * 9000, max_tokens=1)
    assert too_long.value.body["code"] == "context_length_exceeded"

    request = urllib.request.Request(server[0] + "/chat/completions", data=b"{not json",
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(request, timeout=30)
    assert raw.value.code == 400
    assert json.loads(raw.value.read())["error"]["type"] == "invalid_request_error"
    with pytest.raises(urllib.error.HTTPError) as nowhere:
        urllib.request.urlopen(server[0] + "/nowhere", timeout=30)
    assert nowhere.value.code == 404 and "error" in json.loads(nowhere.value.read())


def test_llama_serve_concurrent_requests_each_equal_their_solo_answer(client):
    """32 greedy requests (chat and text, streamed and not) from 8 client threads: all are
    answered, each exactly as the same request sent alone."""
    prompts = [f"Count from {i} to {i + 5}:" for i in range(16)]

    def ask(i: int) -> str:
        prompt = prompts[i % 16]
        if i % 2:
            return client.completions.create(model="smollm2", prompt=prompt, max_tokens=6,
                                             temperature=0).choices[0].text
        chunks = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": prompt}], max_tokens=6,
            temperature=0, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    solo = [ask(i) for i in range(32)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(ask, range(32)))
    assert together == solo
    assert len(set(solo)) > 8  # the requests really differ


def test_llama_serve_shuts_down_cleanly_on_sigint(server, client):
    """A request still streaming when SIGINT arrives is cut short; the process exits 0."""
    _, proc, lines = server
    stream = client.completions.create(model="smollm2", prompt="A long story:",
                                       max_tokens=2000, temperature=0, stream=True)
    next(iter(stream))
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    assert "luminal serve: stopped" in "".join(lines)
    assert "Traceback" not in "".join(lines)
