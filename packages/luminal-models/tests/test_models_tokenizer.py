"""Tokenizer rebuilt from GGUF metadata, checked against transformers and the recorded prompts.

transformers loads its own tokenizer from the same GGUF (``AutoTokenizer(..., gguf_file=...)``);
that is slow, so it is loaded once per session (the ``hf_tokenizer`` fixture in conftest.py).
"""

from __future__ import annotations

import unicodedata
from typing import Any

import jinja2
import pytest
from luminal_models.errors import TokenizerError
from luminal_models.gguf_file import GGUFFile
from luminal_models.tokenizer import Tokenizer

# baselines.md §6
STORY_PROMPT = "Once upon a time"
STORY_IDS = [6403, 1980, 253, 655]
CHAT_MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
CHAT_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
CHAT_IDS = [
    1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407,
    19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531,
    198,
]  # fmt: skip

TEXTS = [
    "",
    "Hello, world!",
    STORY_PROMPT,
    "The quick brown fox jumps over the lazy dog.",
    "  two leading spaces",
    "trailing spaces   ",
    "multiple     spaces   between   words",
    "   ",
    "tabs\tand\t\ttabs\t",
    "new\nlines\n\n\nmany\n",
    "windows\r\nline\r\nendings\r\n",
    " \n \t mixed whitespace \t\n ",
    "12345 67890 3.14159 -42 1e10 $1,000,000.00",
    "In the 21st century, on 2024-11-22T05:05:00Z, 007 agents",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    'for (int i = 0; i < 10; ++i) { printf("%d\\n", i); }',
    "I'm sure you're right; they've said we'll go, it's John's and I'd know",
    "DON'T SHOUT, IT'S RUDE. You'RE Fine",
    "日本語のテキストと中文文本",
    "한국어 텍스트입니다",
    "Emoji: 😀👍🏽🇫🇷 👨‍👩‍👧‍👦 ❤️",
    "Café naïve résumé façade São Paulo Zürich",
    "combining: e\u0301 a\u0308 n\u0303 \u0915\u093f",
    "Ελληνικά και русский текст",
    "x² + y² = z²",
    "<|im_start|>user\nHi there<|im_end|>\n",
    "text<|endoftext|>more<|im_start|>assistant",
    "<jupyter_code>print(1)<jupyter_output>1<empty_output>",
    "<|im_start|> spaced <|im_end|>",
    "URL: https://example.com/path?query=1&x=y#frag email@example.com",
    "\u00a0non-breaking\u00a0space and zero\u200bwidth",
    "\x00 control \x07 chars \x1b[0m",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
]

# A space before a non-ASCII numeral: llama.cpp isolates \p{N} first; transformers' GGUF loader
# does not (it has no "smollm" entry), so here only the llama.cpp rule is the reference.
NUMERAL_TEXTS = [
    "math: ½ + ¼ = ¾",
    "العربية والأرقام ١٢٣",
    "chapter Ⅻ and ① ② ③",
    "x ² and ²³",
]


# Whitespace runs before numerals, where transformers' GGUF tokenizer (plain GPT-2 regex) and
# SmolLM2's real pre-tokenizer (digits isolated first) disagree. Expected ids were produced by
# llama.cpp, an independent implementation: llama-cpp-python 0.3.36,
# `llama_cpp.Llama(<SmolLM2-135M-Instruct.Q4_1.gguf>, vocab_only=True)
#  .tokenize(text.encode(), add_bos=False, special=True)` (llama_cpp is not a test dependency).
LLAMA_CPP_IDS = [
    ("x  2", [104, 256, 34]),  # [x, ĠĠ, 2]; transformers: [x, Ġ, Ġ, 2]
    ("a\n\n2", [81, 1116, 34]),  # [a, ĊĊ, 2]
    ("total:\t\t42", [9712, 42, 1656, 36, 34]),  # [total, :, ĉĉ, 4, 2]
    ("    1 + 2", [289, 33, 1232, 216, 34]),
    ("  12  34", [256, 33, 34, 256, 35, 36]),
    ("\t\t7", [1656, 39]),
    ("price =  3.50", [17517, 446, 256, 35, 30, 37, 32]),
    ("data = [\n    1,\n    22,\n]\n", [1824, 446, 933, 2367, 33, 28, 2367, 34, 34, 28, 198, 77,
                                        198]),
    ("x  ½", [104, 256, 16738]),
    ("x   \u0665", [104, 333, 164, 115]),  # ARABIC-INDIC DIGIT FIVE
    ("<|im_start|>user\n  42<|im_end|>", [1, 4093, 11181, 36, 34, 2]),
]  # fmt: skip


def _smollm2_tokenizer_json_pipeline(gguf: GGUFFile) -> Any:
    """A `tokenizers` pipeline set up as SmolLM2's own tokenizer.json (BPE from this file's
    vocabulary and merges; pre-tokenizer Sequence[Digits(individual_digits=True),
    ByteLevel(add_prefix_space=False, use_regex=True)]; control tokens matched whole),
    written out independently of luminal_models.tokenizer."""
    from tokenizers import AddedToken, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    meta = gguf.metadata
    tokens = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    pipeline = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    pipeline.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    control = [t for t, typ in zip(tokens, meta["tokenizer.ggml.token_type"]) if typ == 3]
    pipeline.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    return pipeline


@pytest.mark.parametrize("text, ids", LLAMA_CPP_IDS, ids=[repr(t) for t, _ in LLAMA_CPP_IDS])
def test_whitespace_before_numerals_matches_llama_cpp(
    smollm2_tokenizer: Tokenizer, text: str, ids: list[int]
) -> None:
    assert smollm2_tokenizer.encode(text) == ids
    assert smollm2_tokenizer.decode(ids) == text


def test_encode_matches_the_smollm2_tokenizer_json_pipeline(
    smollm2_gguf: GGUFFile, smollm2_tokenizer: Tokenizer
) -> None:
    """Fixed texts plus 3000 random strings rich in whitespace runs, digits and non-ASCII
    numerals give the same ids as SmolLM2's real pre-tokenizer (and the llama.cpp ids agree
    with it too)."""
    import random

    pipeline = _smollm2_tokenizer_json_pipeline(smollm2_gguf)
    rng = random.Random(0)
    alphabet = [*"ab xyZ 09 12\n\t  .,:;'\"!?-_()[]{}", "½", "٣", "é", "中", "😀", "'s", "'ll",
                "\u00a0", "\r\n", "  ", "Ⅷ", "²", "<|im_end|>"]
    texts = [*TEXTS, *NUMERAL_TEXTS, *(t for t, _ in LLAMA_CPP_IDS)]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))
              for _ in range(3000)]
    for text in texts:
        assert smollm2_tokenizer.encode(text) == pipeline.encode(text).ids, repr(text)
    for text, ids in LLAMA_CPP_IDS:
        assert pipeline.encode(text).ids == ids, repr(text)


def _numeral_segments(text: str) -> list[str]:
    """Split ``text`` so every \\p{N} character stands alone, as llama.cpp's first regex does."""
    out: list[str] = []
    for ch in text:
        if unicodedata.category(ch).startswith("N"):
            out += [ch, ""]
        elif out:
            out[-1] += ch
        else:
            out.append(ch)
    return [s for s in out if s]


def test_prompt_ids_from_baselines(smollm2_tokenizer: Tokenizer) -> None:
    assert smollm2_tokenizer.encode(STORY_PROMPT) == STORY_IDS  # add_bos_token is false
    prompt = smollm2_tokenizer.apply_chat_template(CHAT_MESSAGES, add_generation_prompt=True)
    assert prompt == CHAT_PROMPT
    assert smollm2_tokenizer.encode(prompt) == CHAT_IDS
    assert smollm2_tokenizer.decode(CHAT_IDS) == CHAT_PROMPT


def test_special_ids(smollm2_tokenizer: Tokenizer) -> None:
    tok = smollm2_tokenizer
    assert (tok.bos_id, tok.eos_id, tok.unk_id, tok.pad_id) == (1, 2, 0, 2)
    assert tok.eos_ids == {0, 2}  # <|im_end|> and <|endoftext|>, as llama.cpp's EOG set
    assert tok.add_bos is False and tok.vocab_size == 49152
    assert tok.id_to_token(1) == "<|im_start|>" and tok.token_to_id("<|im_end|>") == 2
    assert tok.special_ids == frozenset(range(17))
    assert tok.pre == "smollm"


@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_transformers(
    smollm2_tokenizer: Tokenizer, hf_tokenizer: Any, text: str
) -> None:
    ids = smollm2_tokenizer.encode(text)
    assert ids == hf_tokenizer.encode(text, add_special_tokens=True)
    assert smollm2_tokenizer.decode(ids) == hf_tokenizer.decode(ids) == text
    assert smollm2_tokenizer.decode(ids, skip_special_tokens=True) == hf_tokenizer.decode(
        ids, skip_special_tokens=True
    )


@pytest.mark.parametrize("text", NUMERAL_TEXTS)
def test_numerals_are_isolated_like_llama_cpp(
    smollm2_tokenizer: Tokenizer, hf_tokenizer: Any, text: str
) -> None:
    expected = [
        i
        for seg in _numeral_segments(text)
        for i in hf_tokenizer.encode(seg, add_special_tokens=False)
    ]
    ids = smollm2_tokenizer.encode(text)
    assert ids == expected
    assert smollm2_tokenizer.decode(ids) == text


def test_space_before_numeral_is_its_own_token(smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode(" ½")
    assert [smollm2_tokenizer.id_to_token(i) for i in ids] == ["Ġ", "Â½"]


def test_chat_template_matches_transformers(
    smollm2_tokenizer: Tokenizer, hf_tokenizer: Any
) -> None:
    conversations = [
        CHAT_MESSAGES,
        [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "Hi 👋"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Name a prime."},
        ],
    ]
    for messages in conversations:
        for add_generation_prompt in (True, False):
            ours = smollm2_tokenizer.apply_chat_template(messages, add_generation_prompt)
            theirs = hf_tokenizer.apply_chat_template(
                messages, add_generation_prompt=add_generation_prompt, tokenize=False
            )
            assert ours == theirs


def test_chat_template_is_sandboxed_and_can_raise(smollm2_gguf: GGUFFile) -> None:
    meta = dict(smollm2_gguf.metadata)
    meta["tokenizer.chat_template"] = (
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}"
        "{{ messages | tojson }}"
    )
    tok = Tokenizer(meta)
    assert tok.apply_chat_template([{"role": "user", "content": "<&>"}]) == (
        '[{"role": "user", "content": "<&>"}]'
    )
    with pytest.raises(jinja2.TemplateError, match="user first"):
        tok.apply_chat_template([{"role": "system", "content": "x"}])
    meta["tokenizer.chat_template"] = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(jinja2.exceptions.SecurityError):
        Tokenizer(meta).apply_chat_template(CHAT_MESSAGES)
    del meta["tokenizer.chat_template"]
    with pytest.raises(TokenizerError, match=r"no tokenizer\.chat_template"):
        Tokenizer(meta).apply_chat_template(CHAT_MESSAGES)


def test_incremental_decoder_holds_back_split_characters(smollm2_tokenizer: Tokenizer) -> None:
    tok = smollm2_tokenizer
    text = "Hi 👋🏽 and 世界!"
    ids = tok.encode(text)
    # The emoji really is spread over several tokens, each undecodable on its own.
    assert any("\ufffd" in tok.decode([i]) for i in ids)
    dec = tok.incremental_decoder()
    pieces = [dec.push(i) for i in ids]
    assert "".join(pieces) + dec.flush() == text
    assert not any("\ufffd" in p for p in pieces)
    assert "" in pieces  # at least one push had to wait for the rest of a character
    assert list(tok.decode_stream(ids)) == [p for p in pieces if p]


def test_incremental_decoder_special_tokens_and_flush(smollm2_tokenizer: Tokenizer) -> None:
    tok = smollm2_tokenizer
    ids = [*CHAT_IDS, *tok.encode("The capital is Paris."), 2]
    assert "".join(tok.decode_stream(ids)) == tok.decode(ids)
    skipped = "".join(tok.decode_stream(ids, skip_special_tokens=True))
    assert skipped == tok.decode(ids, skip_special_tokens=True)
    assert "<|im_end|>" not in skipped
    # A stream that stops mid-character ends with U+FFFD from flush(), not an exception.
    partial = [i for i in tok.encode("👋") if "\ufffd" in tok.decode([i])][:1]
    dec = tok.incremental_decoder()
    assert dec.push(partial[0]) == ""
    assert dec.flush() == "\ufffd"
    dec.reset()
    assert dec.push(tok.encode("ok")[0]) == "ok"


def test_add_bos_and_eos_when_the_file_asks(smollm2_gguf: GGUFFile) -> None:
    meta = dict(smollm2_gguf.metadata)
    meta["tokenizer.ggml.add_bos_token"] = True
    meta["tokenizer.ggml.add_eos_token"] = True
    tok = Tokenizer(meta)
    assert tok.encode(STORY_PROMPT) == [1, *STORY_IDS, 2]
    assert tok.encode(STORY_PROMPT, add_special_tokens=False) == STORY_IDS


def test_unsupported_tokenizers_fail_clearly(smollm2_gguf: GGUFFile) -> None:
    meta = dict(smollm2_gguf.metadata)
    with pytest.raises(TokenizerError, match="model is 'bert'; supported: 'gpt2'"):
        Tokenizer({**meta, "tokenizer.ggml.model": "bert"}, name="m.gguf")
    with pytest.raises(TokenizerError, match=r"unsupported pre-tokenizer.*'qwen2'"):
        Tokenizer({**meta, "tokenizer.ggml.pre": "qwen2"})
    no_merges = {k: v for k, v in meta.items() if k != "tokenizer.ggml.merges"}
    with pytest.raises(TokenizerError, match=r"no 'tokenizer\.ggml\.merges'"):
        Tokenizer(no_merges)
    with pytest.raises(TokenizerError, match=r"bos_token_id must be an integer in \[0, 49151\], "
                       r"got 99999 \(int\)"):
        Tokenizer({**meta, "tokenizer.ggml.bos_token_id": 99999})


def test_vocabulary_is_kept_as_the_file_spells_it(smollm2_gguf: GGUFFile,
                                                  smollm2_tokenizer: Tokenizer) -> None:
    # the tokenizer keeps the vocabulary packed (not the metadata's list of str): every id
    # still reads back exactly, and token_bytes agrees with the decoder for each piece
    tokens = smollm2_gguf.metadata["tokenizer.ggml.tokens"]
    assert smollm2_tokenizer.vocab_size == len(tokens)
    assert [smollm2_tokenizer.id_to_token(i) for i in range(len(tokens))] == tokens
    assert smollm2_tokenizer.id_to_token(-1) == tokens[-1]
    with pytest.raises(IndexError):
        smollm2_tokenizer.id_to_token(len(tokens))
    pieces = smollm2_tokenizer.token_bytes
    assert len(pieces) == len(tokens)
    for i in (0, 1, 200, 1000, 20000, len(tokens) - 1):
        assert pieces[i].decode("utf-8", "replace") == smollm2_tokenizer.decode([i])
