"""Greedy-token agreement on SmolLM2-135M-Instruct: luminal and llama.cpp against transformers.

    python benchmarks/llm_agreement.py                  # luminal on cpu, llama.cpp if installed
    python benchmarks/llm_agreement.py --tokens 64 --backend reference

transformers (fp32, the GGUF dequantized) is the oracle the tests use. For each prompt (plain
and chat) every system decodes greedily from the same prompt ids; the table gives how many
leading tokens agree with transformers and, at the first divergence, the gap between
transformers' two best logits there (a gap near 0 means a near-tie that rounding can flip).
llama.cpp quantizes activations to 8 bits inside its matmuls, so it is expected to flip
near-ties that fp32 math does not; luminal keeps activations in fp32.

This is a record, not a test: the tests (packages/luminal-models/tests/test_llama_model.py)
assert luminal's agreement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

PLAIN = ["Once upon a time", "The three most important inventions in history are",
         "def fibonacci(n):"]
CHAT = ["What is the capital of France?", "Write a short poem about the sea.",
        "Explain how a bicycle works."]


def transformers_greedy(path: Path, prompts: list[list[int]], steps: int, stops) -> list:
    """Per prompt: transformers' greedy ids and the top-2 logit gap at each step."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=torch.float32).eval()
    results = []
    with torch.no_grad():
        for ids in prompts:
            out = model(torch.tensor([ids]), use_cache=True)
            tokens, gaps = [], []
            for _ in range(steps):
                logits = out.logits[0, -1]
                top2 = torch.topk(logits, 2).values
                tokens.append(int(logits.argmax()))
                gaps.append(float(top2[0] - top2[1]))
                if tokens[-1] in stops:
                    break
                out = model(torch.tensor([[tokens[-1]]]), past_key_values=out.past_key_values,
                            use_cache=True)
            results.append((tokens, gaps))
    return results


def llama_cpp_greedy(path: Path, prompts: list[list[int]], steps: int, stops) -> list:
    import llama_cpp

    llm = llama_cpp.Llama(str(path), n_ctx=1024, n_threads=2, n_threads_batch=2,
                          verbose=False)
    vocab = llm.n_vocab()
    results = []
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        tokens = []
        for _ in range(steps):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                           shape=(vocab,))
            tokens.append(int(logits.argmax()))
            if tokens[-1] in stops:
                break
            llm.eval([tokens[-1]])
        results.append(tokens)
    return results


def luminal_greedy(path: Path, prompts: list[list[int]], steps: int, stops,
                   backend_name: str) -> list:
    import luminal as lm
    from luminal_models.generate import Generator
    from luminal_models.llama import Llama

    backend = lm.backend(backend_name)
    model = Llama.from_gguf(path, quantized=backend_name != "reference", progress=False)
    gen = Generator(model, None, backend)
    return [gen.generate(ids, steps, stop_ids=stops).token_ids for ids in prompts]


def agreement(tokens: list[int], oracle: list[int], gaps: list[float]) -> tuple[int, str]:
    """Leading tokens equal to the oracle's, and the oracle's top-2 gap where they part."""
    n = 0
    while n < min(len(tokens), len(oracle)) and tokens[n] == oracle[n]:
        n += 1
    if n == len(oracle) and len(tokens) >= n:
        return n, "all"
    return n, f"gap {gaps[n]:.3f}" if n < len(gaps) else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens per prompt")
    parser.add_argument("--backend", default="cpu", help="luminal backend (default: cpu)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    from luminal_models.hub import smollm2_path
    from luminal_models.tokenizer import Tokenizer

    path = smollm2_path()
    tok = Tokenizer.from_gguf(path)
    stops = frozenset(tok.eos_ids)
    names = PLAIN + [f"chat: {c}" for c in CHAT]
    prompts = [tok.encode(p) for p in PLAIN]
    prompts += [tok.encode(tok.apply_chat_template([{"role": "user", "content": c}]))
                for c in CHAT]

    print("transformers ...", file=sys.stderr, flush=True)
    oracle = transformers_greedy(path, prompts, args.tokens, stops)
    systems = {}
    print(f"luminal ({args.backend}) ...", file=sys.stderr, flush=True)
    systems[f"luminal {args.backend}"] = luminal_greedy(path, prompts, args.tokens, stops,
                                                        args.backend)
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("llama-cpp-python is not installed: llama.cpp left out", file=sys.stderr)
    else:
        print("llama.cpp ...", file=sys.stderr, flush=True)
        systems["llama.cpp"] = llama_cpp_greedy(path, prompts, args.tokens, stops)

    rows = []
    for i, name in enumerate(names):
        want, gaps = oracle[i]
        row = {"prompt": name, "oracle_tokens": len(want),
               "oracle_text": tok.decode([t for t in want if t not in stops])}
        for system, outputs in systems.items():
            n, where = agreement(outputs[i], want, gaps)
            row[system] = {"agree": n, "at_divergence": where,
                           "text": tok.decode([t for t in outputs[i] if t not in stops])}
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    print(f"Greedy agreement with transformers fp32, first {args.tokens} tokens "
          "(agreeing tokens / transformers' tokens; top-2 gap where a system diverges)\n")
    print("| prompt | " + " | ".join(systems) + " |")
    print("| --- |" + " --- |" * len(systems))
    for row in rows:
        cells = [f"{row[s]['agree']}/{row['oracle_tokens']}"
                 + ("" if row[s]["at_divergence"] == "all" else f" ({row[s]['at_divergence']})")
                 for s in systems]
        print(f"| {row['prompt']} | " + " | ".join(cells) + " |")
    for row in rows:
        for system in systems:
            if row[system]["at_divergence"] != "all":
                print(f"\n{row['prompt']!r}\n  transformers: {row['oracle_text']!r}\n"
                      f"  {system}: {row[system]['text']!r}")


if __name__ == "__main__":
    main()
