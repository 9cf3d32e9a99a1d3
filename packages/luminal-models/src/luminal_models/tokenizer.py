"""Tokenizers rebuilt from GGUF metadata.

A GGUF carries no ``tokenizer.json``; it stores the vocabulary, merges and special ids under
llama.cpp's key names. For byte-level BPE vocabularies (``tokenizer.ggml.model == "gpt2"``) this
module rebuilds an equivalent Hugging Face ``tokenizers.Tokenizer`` that encodes exactly as
llama.cpp does for the same file.

The pre-tokenizer comes from ``tokenizer.ggml.pre``. For ``"smollm"`` (and the other names llama.cpp
groups with it, e.g. ``"starcoder"``) llama.cpp first isolates every ``\\p{N}`` character and then
applies the GPT-2 split regex; that is also what SmolLM2's own ``tokenizer.json`` does (a
``Digits(individual_digits=True)`` step before ``ByteLevel``), so this is how the model's
training text was tokenized, and it is what we do.

transformers' GGUF loader has no entry for ``"smollm"`` and falls back to the plain GPT-2 regex,
which differs wherever whitespace precedes a numeral. The GPT-2 regex keeps one space for the
word after a whitespace run (``\\s+(?!\\S)``), so ``"x  2"`` becomes ``x``, ``" "``, ``" 2"``
and then ``[x, Ġ, Ġ, 2]`` (the vocabulary has no ``Ġ2``), whereas isolating the digit first
leaves the whole run ``"  "`` before it: ``[x, ĠĠ, 2]``. The same happens for newline and tab
runs (``"a\\n\\n2"``, ``"total:\\t\\t42"``), indented numbers in code, and a space before a
non-ASCII numeral (``" ½"``). Two independent implementations agree with us, not with
transformers: llama.cpp (``llama_cpp.Llama(..., vocab_only=True).tokenize``; its ids for these
cases are recorded in ``tests/test_models_tokenizer.py``, and it matched us on 3000 random
strings when this was checked), and a ``tokenizers`` pipeline set up like SmolLM2's
``tokenizer.json`` from this file's vocabulary and merges (compared at test time on the same
kind of random strings).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, overload

import numpy as np
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

from .chat_formats import GEMMA3_CHAT_TEMPLATE
from .config_schema import (
    REQUIRED,
    get_bool,
    get_int,
    get_list,
    get_str,
    read_capped,
    read_json_object,
)
from .errors import TokenizerError

__all__ = ["IncrementalDecoder", "Tokenizer", "TokenizerError"]

# llama.cpp's token types (enum llama_token_type / gguf.TokenType).
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6

_GPT2_PRE = "gpt2"
_SENTENCEPIECE_PRE = "sentencepiece"
_SPACE = "\u2581"  # SentencePiece's spelling of a space
_DIGITS_THEN_GPT2_PRE = "digits+gpt2"

# tokenizer.ggml.pre -> pre-tokenizer recipe, for the byte-level names llama.cpp handles with
# the GPT-2 regex (optionally after isolating numerals). Other names need other regexes; they
# fail loudly rather than tokenize subtly wrong.
_PRE_TOKENIZERS: dict[str, str] = {
    **dict.fromkeys(("gpt-2", "mpt", "olmo", "jais"), _GPT2_PRE),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
        _DIGITS_THEN_GPT2_PRE,
    ),
}

# Control tokens llama.cpp treats as end of generation when present (besides the EOS/EOT ids).
_END_OF_GENERATION_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|eom_id|>",
        "<EOT>",
        "<|end_of_text|>",
    }
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used to spell byte-level tokens.

    Printable Latin-1 bytes stand for themselves; the other 68 bytes are assigned the code points
    from U+0100 upward in byte order (so the space, 0x20, is written 'Ġ').
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in _bytes_to_unicode().items()}


def _merges_by_file_order(vocab: Mapping[str, int]) -> list[tuple[str, str]]:
    """Every way to build a piece from two pieces, the piece earlier in the file first (ties:
    the longer left part, then the longer right part), as transformers derives Gemma's
    merges."""
    found: list[tuple[int, int, int, str, str]] = []
    for piece, index in vocab.items():
        local = [(piece[:cut], piece[cut:]) for cut in range(1, len(piece))
                 if piece[:cut] in vocab and piece[cut:] in vocab]
        local.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        found.extend((index, len(left), len(right), left, right) for left, right in local)
    found.sort(key=lambda merge: (merge[0], -merge[1], -merge[2]))
    return [(left, right) for _, _, _, left, right in found]


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    # ByteLevel with use_regex applies the GPT-2 split regex, then maps bytes to the alphabet.
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if _PRE_TOKENIZERS[pre] == _GPT2_PRE:
        return byte_level
    numerals = pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated")
    return pre_tokenizers.Sequence([numerals, byte_level])


def _read_template(path: Path) -> str:
    from .chat_template import MAX_TEMPLATE_BYTES  # Jinja only where templates are used

    data = read_capped(path, MAX_TEMPLATE_BYTES, TokenizerError)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TokenizerError(f"{path}: not UTF-8 text: {e}") from None


class _PackedBytes(Sequence[bytes]):
    """A read-only list of byte strings in one buffer plus offsets: a vocabulary of 262,144
    pieces held as Python objects costs about 18 MB, packed about 4 MB."""

    def __init__(self, items: Iterable[bytes]) -> None:
        parts = list(items)
        self._offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=self._offsets[1:])
        self._blob = b"".join(parts)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {n} entries")
        return self._blob[self._offsets[index]:self._offsets[index + 1]]


class _PackedText(_PackedBytes):
    """`_PackedBytes` of text (UTF-8; lone surrogates kept as they were)."""

    def __init__(self, items: Iterable[str]) -> None:
        super().__init__(t.encode("utf-8", "surrogatepass") for t in items)

    def __getitem__(self, index):  # type: ignore[override]
        raw = super().__getitem__(index)
        if isinstance(raw, list):
            return [r.decode("utf-8", "surrogatepass") for r in raw]
        return raw.decode("utf-8", "surrogatepass")


def _packed_types(types: Iterable[int]) -> bytes:
    """Token types one byte each (values outside 0..255 match no known type, as before)."""
    return bytes(t if 0 <= t < 256 else 0 for t in types)


class Tokenizer:
    """A byte-level BPE tokenizer built from GGUF metadata.

    Args:
        metadata: GGUF key/value metadata (e.g. ``GGUFFile(path).metadata``).
        name: shown in error messages (typically the file path).

    Raises:
        TokenizerError: the metadata lacks a tokenizer, or describes a model or pre-tokenizer
            this class does not implement.
    """

    def __init__(self, metadata: Mapping[str, Any], name: str = "tokenizer"):
        self.name = name
        def text(key: str, default: Any) -> Any:
            return get_str(name, metadata, key, default, error=TokenizerError)

        model = text("tokenizer.ggml.model", None)
        if model not in ("gpt2", "llama"):
            raise TokenizerError(
                f"{name}: tokenizer.ggml.model is {model!r}; supported: 'gpt2' (byte-level "
                "BPE) and 'llama' (SentencePiece BPE with byte fallback)"
            )
        self._sentencepiece = model == "llama"
        # Files from before the key existed get plain GPT-2 splitting, as transformers gives
        # them (llama.cpp's "default" also splits punctuation runs and digit triples).
        pre = text("tokenizer.ggml.pre", "gpt-2")
        if self._sentencepiece:
            pre = _SENTENCEPIECE_PRE  # no regex split: spaces are part of the pieces
        elif pre not in _PRE_TOKENIZERS:
            raise TokenizerError(
                f"{name}: unsupported pre-tokenizer tokenizer.ggml.pre={pre!r} "
                f"(supported: {', '.join(sorted(_PRE_TOKENIZERS))})"
            )
        self.pre: str = pre
        tokens: list[str] = get_list(name, metadata, "tokenizer.ggml.tokens", str,
                                     error=TokenizerError)
        # SentencePiece files may leave the merges out (they follow from the vocabulary)
        merges: list[str] | None = get_list(name, metadata, "tokenizer.ggml.merges", str,
                                            None if self._sentencepiece else REQUIRED,
                                            error=TokenizerError)
        self._space_prefix = get_bool(name, metadata, "tokenizer.ggml.add_space_prefix",
                                      True, error=TokenizerError)
        types = get_list(name, metadata, "tokenizer.ggml.token_type", int,
                         [_NORMAL] * len(tokens), error=TokenizerError)
        if len(types) != len(tokens):
            raise TokenizerError(
                f"{name}: {len(tokens)} tokens but {len(types)} token types in the metadata"
            )
        self._tokens: Sequence[str] = tokens  # packed once the backend is built
        self._types = _packed_types(types)

        def token_id(key: str) -> int | None:
            return get_int(name, metadata, key, 0, len(tokens) - 1, None, error=TokenizerError)

        self.bos_id: int | None = token_id("tokenizer.ggml.bos_token_id")
        self.eos_id: int | None = token_id("tokenizer.ggml.eos_token_id")
        self.unk_id: int | None = token_id("tokenizer.ggml.unknown_token_id")
        self.pad_id: int | None = token_id("tokenizer.ggml.padding_token_id")
        for key in ("eot", "eom"):
            token_id(f"tokenizer.ggml.{key}_token_id")
        self.add_bos: bool = get_bool(name, metadata, "tokenizer.ggml.add_bos_token", False,
                                      error=TokenizerError)
        self.add_eos: bool = get_bool(name, metadata, "tokenizer.ggml.add_eos_token", False,
                                      error=TokenizerError)
        self.chat_template: str | None = text("tokenizer.chat_template", None)
        # a sentence for the user when the template is a built-in stand-in, not the file's
        self.chat_template_note: str | None = None
        if self.chat_template is None and text("general.architecture", None) == "gemma3":
            self.chat_template = GEMMA3_CHAT_TEMPLATE
            self.chat_template_note = (
                f"{name} has no tokenizer.chat_template; using Gemma 3's official turn format "
                "(<start_of_turn>user ... <end_of_turn>)")

        self.special_ids: frozenset[int] = frozenset(
            i for i, t in enumerate(types) if t in (_CONTROL, _UNKNOWN)
        )
        self.eos_ids: frozenset[int] = self._end_of_generation_ids(metadata)
        self.backend: HFTokenizer = (
            self._build_sentencepiece_backend(tokens, merges, types) if self._sentencepiece
            else self._build_backend(tokens, merges or [], types))
        # the metadata's list of str goes with the GGUF file; this keeps a compact copy
        self._tokens = _PackedText(tokens)

    @classmethod
    def from_gguf(cls, path_or_file: str | os.PathLike[str] | Any) -> Tokenizer:
        """Build the tokenizer of a GGUF file (a path or an open :class:`GGUFFile`)."""
        from .gguf_file import GGUFFile

        gguf = path_or_file if isinstance(path_or_file, GGUFFile) else GGUFFile(path_or_file)
        return cls(gguf.metadata, name=str(gguf.path))

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike[str]) -> Tokenizer:
        """The tokenizer of a Hugging Face checkpoint directory: ``tokenizer.json`` (loaded by
        the ``tokenizers`` library, so any model type it supports), plus, where present,
        ``tokenizer_config.json`` (BOS/EOS tokens, ``chat_template``), ``chat_template.jinja``
        and the ``eos_token_id`` of ``generation_config.json`` / ``config.json`` (all of them
        stop generation).

        Raises:
            TokenizerError: no ``tokenizer.json``, or one the ``tokenizers`` library cannot
                load, or a malformed JSON side file.
        """
        path = Path(folder)
        if path.is_file():
            path = path.parent
        tokenizer_json = path / "tokenizer.json"
        if not tokenizer_json.is_file():
            raise TokenizerError(
                f"{path}: no tokenizer.json (a Hugging Face checkpoint's tokenizer is read from "
                "its tokenizer.json; older tokenizer.model / vocab.json + merges.txt layouts "
                "are not supported)"
            )
        try:
            backend = HFTokenizer.from_file(str(tokenizer_json))
        except Exception as e:  # the Rust library raises a bare Exception
            raise TokenizerError(f"{tokenizer_json}: the tokenizers library cannot load it: "
                                 f"{e}") from e

        def side_file(name: str) -> dict[str, Any]:
            file = path / name
            return read_json_object(file, TokenizerError) if file.is_file() else {}

        config = side_file("tokenizer_config.json")
        self = cls.__new__(cls)
        self.name = str(tokenizer_json)
        self.pre = "tokenizer.json"
        self.backend = backend
        size = backend.get_vocab_size(with_added_tokens=True)
        added = backend.get_added_tokens_decoder()
        self._tokens = _PackedText(backend.id_to_token(i) or "" for i in range(size))
        self._types = _packed_types(
            (_CONTROL if added[i].special else _USER_DEFINED) if i in added else _NORMAL
            for i in range(size)
        )
        self._byte_level = type(backend.decoder).__name__ == "ByteLevel"

        def token_id(key: str) -> int | None:
            value = config.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            return backend.token_to_id(value) if isinstance(value, str) else None

        self.bos_id, self.eos_id = token_id("bos_token"), token_id("eos_token")
        self.unk_id, self.pad_id = token_id("unk_token"), token_id("pad_token")
        probe = backend.encode("", add_special_tokens=True).ids
        self.add_bos = self.bos_id is not None and self.bos_id in probe[:1]
        self.add_eos = self.eos_id is not None and self.eos_id in probe[-1:]
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if (path / "chat_template.jinja").is_file():
            template = _read_template(path / "chat_template.jinja")
        self.chat_template = template if isinstance(template, str) else None
        self.chat_template_note = None
        self.special_ids = frozenset(i for i, t in enumerate(self._types) if t == _CONTROL)
        eos: set[int] = {self.eos_id} if self.eos_id is not None else set()
        for name in ("generation_config.json", "config.json"):
            value = side_file(name).get("eos_token_id")
            for i in value if isinstance(value, list) else [value]:
                if isinstance(i, int) and 0 <= i < size:
                    eos.add(i)
        eos.update(i for i in self.special_ids if self._tokens[i] in _END_OF_GENERATION_TEXTS)
        self.eos_ids = frozenset(eos)
        return self

    def _end_of_generation_ids(self, metadata: Mapping[str, Any]) -> frozenset[int]:
        ids = {
            metadata[k]
            for k in (
                "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.eot_token_id",
                "tokenizer.ggml.eom_token_id",
            )
            if metadata.get(k) is not None
        }
        ids.update(
            i
            for i, typ in enumerate(self._types)
            if typ == _CONTROL and self._tokens[i] in _END_OF_GENERATION_TEXTS
        )
        return frozenset(ids)

    def _merge_pairs(self, merges: list[str]) -> list[tuple[str, str]]:
        pairs: list[tuple[str, str]] = []
        for m in merges:
            left, sep, right = m.partition(" ")
            if not sep:
                raise TokenizerError(f"{self.name}: malformed merge {m!r} (expected 'a b')")
            pairs.append((left, right))
        return pairs

    def _build_backend(self, tokens: list[str], merges: list[str], types: list[int]) -> HFTokenizer:
        vocab = {tok: i for i, tok in enumerate(tokens)}
        # No unk token: every byte has a token, so BPE never needs one (llama.cpp has none here).
        backend = HFTokenizer(models.BPE(vocab=vocab, merges=self._merge_pairs(merges),
                                         fuse_unk=False))
        backend.pre_tokenizer = _pre_tokenizer(self.pre)
        backend.decoder = decoders.ByteLevel()
        return self._add_special_tokens(backend, tokens, types)

    def _build_sentencepiece_backend(self, tokens: list[str], merges: list[str] | None,
                                     types: list[int]) -> HFTokenizer:
        """SentencePiece BPE: spaces spelled U+2581, pieces merged pairwise, characters the
        vocabulary lacks written as byte tokens (``<0x0A>``), as transformers builds it for
        Gemma GGUF files. A piece of several spaces is stored with real spaces; it is looked up
        spelled with U+2581, so it is respelled first (its id stays). Without merges in the
        file they are derived from the vocabulary: every split of a piece into two pieces, the
        earlier piece in the file merging first (Gemma's scores do not follow the merge order,
        its file order does)."""
        spelled = [_SPACE * len(t) if len(t) > 1 and not t.strip(" ") else t for t in tokens]
        vocab = {tok: i for i, tok in enumerate(spelled)}
        pairs = self._merge_pairs(merges) if merges is not None else _merges_by_file_order(vocab)
        unk = self._tokens[self.unk_id] if self.unk_id is not None else None
        backend = HFTokenizer(models.BPE(vocab=vocab, merges=pairs, unk_token=unk,
                                         fuse_unk=True, byte_fallback=True))
        backend.normalizer = normalizers.Sequence(
            ([normalizers.Prepend(_SPACE)] if self._space_prefix else [])
            + [normalizers.Replace(" ", _SPACE)])
        backend.decoder = decoders.Sequence(
            [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
            + ([decoders.Strip(" ", 1, 0)] if self._space_prefix else []))
        # the respelled space pieces are ordinary pieces now, not text matched whole
        types = [_NORMAL if t != respelled else typ
                 for t, respelled, typ in zip(tokens, spelled, types)]
        return self._add_special_tokens(backend, tokens, types)

    def _add_special_tokens(self, backend: HFTokenizer, tokens: list[str],
                            types: list[int]) -> HFTokenizer:
        # Control tokens are matched whole in the text and dropped by skip_special_tokens;
        # user-defined ones are matched whole but are ordinary text otherwise. Their contents
        # are already in the vocabulary, so adding them keeps their ids.
        backend.add_special_tokens(
            [
                AddedToken(tok, special=True, normalized=False)
                for tok, typ in zip(tokens, types)
                if typ in (_CONTROL, _UNKNOWN)
            ]
        )
        backend.add_tokens(
            [
                AddedToken(tok, special=False, normalized=False)
                for tok, typ in zip(tokens, types)
                if typ == _USER_DEFINED
            ]
        )
        template = self._post_processor()
        if template is not None:
            backend.post_processor = template
        return backend

    def _post_processor(self) -> processors.TemplateProcessing | None:
        head: list[str] = []
        tail: list[str] = []
        specials: dict[str, int] = {}
        for wanted, token_id, what, side in (
            (self.add_bos, self.bos_id, "BOS", head),
            (self.add_eos, self.eos_id, "EOS", tail),
        ):
            if not wanted:
                continue
            if token_id is None:
                raise TokenizerError(
                    f"{self.name}: the file asks to add {what} but gives no {what} id"
                )
            side.append(self._tokens[token_id])
            specials[self._tokens[token_id]] = token_id
        if not specials:
            return None
        single = [*head, "$A", *tail]
        pair = [*single, *head, "$B:1", *tail]
        return processors.TemplateProcessing(
            single=" ".join(single), pair=" ".join(pair), special_tokens=list(specials.items())
        )

    @property
    def vocab_size(self) -> int:
        """Number of tokens in the vocabulary (the model's embedding rows)."""
        return len(self._tokens)

    def id_to_token(self, token_id: int) -> str:
        """The vocabulary entry for ``token_id`` as the file spells it (byte-level alphabet)."""
        return self._tokens[token_id]

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary entry, or None."""
        return self.backend.token_to_id(token)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids for ``text``.

        Special tokens written in the text (``"<|im_start|>"``) become their ids.
        ``add_special_tokens`` adds BOS/EOS only where the file asks for them
        (``tokenizer.ggml.add_bos_token`` / ``add_eos_token``).
        """
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text for ``ids``; invalid UTF-8 (e.g. a cut multi-byte character) becomes U+FFFD."""
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    @cached_property
    def token_bytes(self) -> Sequence[bytes]:
        """The raw bytes each token id stands for (special tokens: their UTF-8 text)."""
        return _PackedBytes(self._each_token_bytes())

    def _each_token_bytes(self) -> Iterator[bytes]:
        """`token_bytes`, one id after another."""
        sentencepiece = getattr(self, "_sentencepiece", False)
        for tok, typ in zip(self._tokens, self._types):
            if typ in (_CONTROL, _UNKNOWN, _USER_DEFINED):
                yield tok.encode("utf-8")
            elif sentencepiece and typ == _BYTE:
                yield bytes((int(tok[3:-1], 16),))  # "<0x0A>"
            elif sentencepiece:
                yield tok.replace(_SPACE, " ").encode("utf-8")
            else:
                # A character outside the byte alphabet stands for itself, as in the decoder.
                yield b"".join(
                    bytes((_CHAR_TO_BYTE[c],)) if c in _CHAR_TO_BYTE else c.encode("utf-8")
                    for c in tok
                )

    def incremental_decoder(self, skip_special_tokens: bool = False) -> IncrementalDecoder:
        """A fresh :class:`IncrementalDecoder` for streaming output."""
        if not getattr(self, "_byte_level", True):
            return _TextDiffDecoder(self, skip_special_tokens=skip_special_tokens)
        return IncrementalDecoder(self, skip_special_tokens=skip_special_tokens)

    def decode_stream(self, ids: Iterable[int], skip_special_tokens: bool = False) -> Iterator[str]:
        """Yield text pieces as ``ids`` arrive, never splitting a multi-byte character."""
        dec = self.incremental_decoder(skip_special_tokens)
        for token_id in ids:
            piece = dec.push(token_id)
            if piece:
                yield piece
        tail = dec.flush()
        if tail:
            yield tail

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **context: Any,
    ) -> str:
        """Format a conversation with the model's own chat template (sandboxed Jinja).

        Args:
            messages: ``[{"role": "user", "content": "..."}, ...]``.
            add_generation_prompt: end with the opening of an assistant turn.
            **context: extra template variables (``tools``, ...).

        Raises:
            TokenizerError: the file has no chat template.
            jinja2.TemplateError: the template rejected the conversation.
        """
        if self.chat_template is None:
            raise TokenizerError(f"{self.name}: the model has no tokenizer.chat_template")
        from .chat_template import render_chat_template  # Jinja: only once a chat is rendered

        special = {
            f"{key}_token": self._tokens[token_id]
            for key, token_id in (
                ("bos", self.bos_id),
                ("eos", self.eos_id),
                ("unk", self.unk_id),
                ("pad", self.pad_id),
            )
            if token_id is not None
        }
        return render_chat_template(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            **{**special, **context},
        )

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size}, pre={self.pre!r})"


class IncrementalDecoder:
    """Turns a stream of token ids into text pieces without breaking UTF-8 characters.

    A character such as an emoji can be spread over several byte-level tokens; its bytes are held
    back until the character is complete. Call :meth:`push` per id and :meth:`flush` at the end.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False):
        self._token_bytes = tokenizer.token_bytes
        self._skip = tokenizer.special_ids if skip_special_tokens else frozenset()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes (possibly ``""``)."""
        if token_id in self._skip:
            return ""
        return self._utf8.decode(self._token_bytes[token_id])

    def flush(self) -> str:
        """End of stream: return what is left, with an incomplete character as U+FFFD."""
        return self._utf8.decode(b"", final=True)

    def reset(self) -> None:
        """Forget any held-back bytes, to start a new stream."""
        self._utf8.reset()


class _TextDiffDecoder(IncrementalDecoder):
    """Streaming for tokenizers whose tokens are not byte-level (a ``tokenizer.json`` with a
    Metaspace / byte-fallback decoder): decodes a short window of recent ids with the
    tokenizer's own decoder and emits what the newest id added, holding back text that ends in
    an incomplete character (U+FFFD)."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False):
        self._backend = tokenizer.backend
        self._skip = tokenizer.special_ids if skip_special_tokens else frozenset()
        self.reset()

    def _decode(self, ids: list[int]) -> str:
        return self._backend.decode(ids, skip_special_tokens=False)

    def push(self, token_id: int) -> str:
        if token_id in self._skip:
            return ""
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix : self._read])
        now = self._decode(self._ids[self._prefix :])
        if len(now) <= len(before) or now.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return now[len(before) :]

    def flush(self) -> str:
        before = self._decode(self._ids[self._prefix : self._read])
        now = self._decode(self._ids[self._prefix :])
        self.reset()
        return now[len(before) :]

    def reset(self) -> None:
        self._ids: list[int] = []
        self._prefix = self._read = 0
