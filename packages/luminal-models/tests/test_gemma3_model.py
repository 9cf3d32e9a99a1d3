"""Gemma 3 270M (Q4_K_M GGUF from the PyPI chunk wheels) against transformers (torch CPU, fp32,
the same GGUF dequantized by transformers' own loader), and its K-quant blocks against the
`gguf` package's decoders.

transformers is the oracle at test time: it is loaded once per session and every output it
gives (logits, greedy ids, top-2 margins, token ids) is computed here. Tolerance for the first
forward's logits (a prompt of 6 tokens: prefill's quantized GEMM): both systems use the same
dequantized fp32 weights. Under the cpu backend's float-like `int24` setting only fp32
summation order and x's 24-bit digits differ: 2e-4 absolute on logits spanning about -22..22
is about 7x the largest difference measured (3e-5, the 262,144-entry head included). The
default `int16` rounds the GEMM's x to 16 bits per group of 32 values: 1e-2 is about 3x the
largest difference measured (3.1e-3); greedy tokens are compared under the default.
"""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from llama_helpers import check_greedy, cpu_backend, forward_logits, hf_greedy
from luminal.quant import BLOCK_FORMATS, dequantize
from luminal_models.gemma3 import Gemma3
from luminal_models.generate import Generator
from luminal_models.gguf_file import GGUFFile
from luminal_models.hub import gemma3_path
from luminal_models.tokenizer import Tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

# the cpu backend's LUMINAL_CPU_QUANT_ACTIVATIONS setting -> tolerance on the first logits
LOGITS_ATOL = {"int24": 2e-4, "int16": 1e-2}
GREEDY_TOKENS = 32
PROMPTS = {"plain": ("The capital of France is", False),
           "chat": ("Write one sentence about the sea.", True)}
TOKENIZER_TEXTS = ["Hello world", "  two  spaces\n\nnewlines\ttab", "ünïcödé 日本語 🙂",
                   "x = 12345.678", "def f(a):\n    return a  # done"]


@pytest.fixture(scope="module")
def gemma_path():
    return gemma3_path(progress=False)


@pytest.fixture(scope="module")
def gemma_tokenizer(gemma_path) -> Tokenizer:
    return Tokenizer.from_gguf(gemma_path)


@pytest.fixture(scope="module")
def prompts(gemma_tokenizer: Tokenizer) -> dict[str, list[int]]:
    tok = gemma_tokenizer
    return {name: tok.encode(tok.apply_chat_template([{"role": "user", "content": text}])
                             if chat else text)
            for name, (text, chat) in PROMPTS.items()}


@pytest.fixture(scope="module")
def oracle(gemma_path, gemma_tokenizer: Tokenizer, prompts) -> dict:
    """transformers' logits and greedy ids for the prompts, and its tokenizer's ids."""
    torch.set_num_threads(2)
    folder, name = str(gemma_path.parent), gemma_path.name
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32).eval()
    result: dict = {}
    for key, ids in prompts.items():
        result[f"{key}_greedy"] = hf_greedy(hf, ids, GREEDY_TOKENS, gemma_tokenizer.eos_ids)
    with torch.no_grad():
        result["plain_logits"] = hf(torch.tensor([prompts["plain"]])).logits[0].numpy()
    del hf
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    result["token_ids"] = {text: hf_tok.encode(text) for text in TOKENIZER_TEXTS}
    result["prompt_ids"] = {key: hf_tok.encode(gemma_tokenizer.decode(ids[1:]))
                            for key, ids in prompts.items()}
    return result


@pytest.fixture(scope="module")
def gemma(gemma_path) -> Gemma3:
    return Gemma3.from_gguf(gemma_path, quantized=True, progress=False)


@pytest.fixture(scope="module")
def generator(gemma: Gemma3, gemma_tokenizer: Tokenizer) -> Generator:
    return Generator(gemma, gemma_tokenizer, cpu_backend())


def test_gemma3_config_from_gguf(gemma: Gemma3):
    c = gemma.config
    assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim) == (
        18, 640, 4, 1, 256)
    assert (c.intermediate_size, c.vocab_size, c.sliding_window) == (2048, 262144, 512)
    assert [i for i in range(18) if not c.is_sliding(i)] == [5, 11, 17]
    assert gemma.num_parameters() == 268_098_176


def test_gemma3_tokenizer_matches_transformers(gemma_tokenizer: Tokenizer, oracle, prompts):
    for text, want in oracle["token_ids"].items():
        assert gemma_tokenizer.encode(text) == want, text
        assert gemma_tokenizer.decode(want, skip_special_tokens=True) == text
    for key, ids in prompts.items():
        assert ids == oracle["prompt_ids"][key], key
    assert prompts["chat"][:4] == [2, 105, 2364, 107]  # <bos><start_of_turn>user\n


def test_gemma3_chat_template_is_gemmas_turn_format(gemma_tokenizer: Tokenizer):
    assert "no tokenizer.chat_template" in gemma_tokenizer.chat_template_note
    text = gemma_tokenizer.apply_chat_template([
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi "},
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}])
    assert text == ("<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                    "<start_of_turn>model\nHello.<end_of_turn>\n"
                    "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")


@pytest.mark.parametrize("setting", list(LOGITS_ATOL))
def test_gemma3_first_forward_logits_match_transformers(gemma: Gemma3, oracle, prompts, setting,
                                                       monkeypatch):
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", setting)
    got = forward_logits(gemma, prompts["plain"], cpu_backend())
    want = oracle["plain_logits"]
    assert got.shape == want.shape == (len(prompts["plain"]), 262144)
    np.testing.assert_allclose(got, want, atol=LOGITS_ATOL[setting], rtol=0)
    assert (got.argmax(-1) == want.argmax(-1)).all()


@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_gemma3_greedy_generation_matches_transformers(generator: Generator, oracle, prompts,
                                                       prompt):
    want, margins = oracle[f"{prompt}_greedy"]
    result = generator.generate(prompts[prompt], max_tokens=GREEDY_TOKENS)
    check_greedy(result.token_ids, want, margins, "transformers")
    if prompt == "plain":
        assert result.text.startswith(" the capital of the country of France.")


@pytest.mark.parametrize("qtype", ["q8_0", "q5_0", "q4_k", "q6_k"])
def test_gemma3_blocks_decode_as_gguf_does(gemma_path, qtype):
    """Real blocks of each format in the file: GGUFFile's decoding, core's decomposition
    (reference backend) and the cpu backend's fused matvec against the gguf package's
    decoder."""
    with GGUFFile(gemma_path) as f:
        info = next(i for i in f.tensors.values()
                    if i.qtype.name.lower() == qtype and len(i.shape) == 2)
        raw = np.ascontiguousarray(f.tensor(info.name, dequantize=False)[:8])
        loaded = f.tensor(info.name)[:8]  # GGUFFile's own float32 decoding
    fmt = BLOCK_FORMATS[qtype]
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(fmt.ggml_type))
    np.testing.assert_array_equal(loaded, want.astype(np.float32))
    rows, cols = raw.shape[0], info.shape[1]
    x = np.random.default_rng(0).standard_normal((1, cols)).astype(np.float32)
    for backend in (lm.backend("reference"), cpu_backend()):
        g = lm.Graph()
        w = dequantize(g.tensor(raw.shape, dtype=lm.uint8).set(raw), qtype, (rows, cols))
        decoded = w.retrieve()
        product = (g.tensor((1, cols)).set(x) @ w.T).retrieve()
        g.compile((lm.GenericCompiler(), backend))
        g.execute()
        np.testing.assert_allclose(decoded.numpy(), want, rtol=1e-6, atol=0, err_msg=info.name)
        np.testing.assert_allclose(product.numpy(), x.astype(np.float64) @ want.T.astype(
            np.float64), rtol=1e-4, atol=1e-4, err_msg=info.name)
