"""`Tokenizer.from_pretrained`: a Hugging Face checkpoint's tokenizer.json (byte-level BPE, and
SentencePiece-style BPE with byte fallback), checked against transformers' tokenizer for the
same folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from luminal_models.errors import TokenizerError
from luminal_models.tokenizer import Tokenizer

TEXTS = [
    "Hello world 123",
    " leading space",
    "日本語 😀 x 🎉",
    "tabs\tand  spaces\n\n",
    "<|im_start|>user\nhi<|im_end|>",
]
KINDS = ["byte_level", "metaspace"]


@pytest.mark.parametrize("kind", KINDS)
def test_from_pretrained_matches_transformers(tiny_tokenizer_dir, kind):
    transformers = pytest.importorskip("transformers")
    folder = tiny_tokenizer_dir(kind)
    tok = Tokenizer.from_pretrained(folder)
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == hf.encode(text), text
        assert tok.decode(ids) == hf.decode(ids)
        assert tok.decode(ids, skip_special_tokens=True) == hf.decode(ids,
                                                                      skip_special_tokens=True)
        # streaming never splits a character and adds up to the whole decode
        assert "".join(tok.decode_stream(ids)) == hf.decode(ids)
    messages = [{"role": "user", "content": "Hi there"}]
    assert tok.apply_chat_template(messages) == hf.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)
    assert tok.eos_id == hf.eos_token_id == tok.token_to_id("<|im_end|>")
    assert tok.vocab_size == len(hf)


def test_from_pretrained_stop_ids_and_template_file(tiny_tokenizer_dir):
    folder = tiny_tokenizer_dir()
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 2]}))
    (folder / "chat_template.jinja").write_text("{{ messages[0]['content'] }}!")
    tok = Tokenizer.from_pretrained(folder)
    assert tok.eos_ids >= {1, 2} and tok.eos_id == 2
    assert tok.special_ids == {0, 1, 2}
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "x!"


def test_text_diff_decoder_holds_back_split_characters(tiny_tokenizer_dir):
    """SentencePiece-style byte fallback spells 🎉 (not in the training text) as four <0x..>
    tokens: nothing comes out until the last of them."""
    tok = Tokenizer.from_pretrained(tiny_tokenizer_dir("metaspace"))
    ids = tok.encode("a 🎉 b")
    assert [tok.id_to_token(i) for i in ids[2:6]] == ["<0xF0>", "<0x9F>", "<0x8E>", "<0x89>"]
    dec = tok.incremental_decoder()
    pieces = [dec.push(i) for i in ids] + [dec.flush()]
    assert pieces[2:6] == ["", "", "", "🎉"]
    assert "".join(pieces) == tok.decode(ids) == "a 🎉 b"


def test_from_pretrained_errors_name_the_file(tmp_path: Path, tiny_tokenizer_dir):
    with pytest.raises(TokenizerError, match=r"no tokenizer\.json"):
        Tokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "Nope"}}')
    with pytest.raises(TokenizerError, match=r"tokenizer\.json: the tokenizers library cannot "
                                             "load it"):
        Tokenizer.from_pretrained(tmp_path)
    folder = tiny_tokenizer_dir()
    (folder / "tokenizer_config.json").write_text("{oops")
    with pytest.raises(TokenizerError, match=r"tokenizer_config\.json: not valid JSON"):
        Tokenizer.from_pretrained(folder)
