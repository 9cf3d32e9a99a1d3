"""What each LUMINAL_CPU_QUANT_ACTIVATIONS setting costs in accuracy: logits against transformers.

    python benchmarks/activation_precision.py                 # Gemma 3 270M
    python benchmarks/activation_precision.py --model smollm2 --settings int16,int8

For each setting (how the cpu backend's quantized matmuls hold x: `float`, `int24`, `int16`,
the default, or `int8`, llama.cpp's numerics) one uncached forward over llm_bench's 128-token
prompt is compared with transformers fp32 on the same GGUF (it dequantizes the weights, so
only the activations' arithmetic differs): the largest and mean absolute logit difference over
all 128 positions and the share of positions whose argmax agrees. The speed each setting buys
is llm_bench's (`python benchmarks/llm_bench.py --model gemma3 --activations int8`): this
forward computes the 262,144-wide head at every position, which a prefill does not. Needs
transformers and torch (`bash scripts/setup.sh` installs them) and the model
(`luminal models`).

This is a record, not a test: the tolerances the tests assert are in
packages/luminal-models/tests/test_gemma3_model.py.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
from compile_bench import cpu_model
from llm_bench import _prompt_ids  # the speed benchmark's prompt

SETTINGS = ("float", "int24", "int16", "int8")


def reference_logits(path: Path, ids: list[int]) -> np.ndarray:
    """transformers fp32 logits (len(ids), vocab) for one forward over `ids`."""
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def luminal_logits(model, ids: list[int], setting: str) -> np.ndarray:
    """luminal's logits under `setting` for one forward over `ids`."""
    import luminal as lm

    os.environ["LUMINAL_CPU_QUANT_ACTIVATIONS"] = setting  # read when the graph compiles
    g = lm.Graph()
    tokens = g.tensor((1, "seq"), dtype=lm.int32)
    logits = model(tokens).retrieve()
    g.compile((lm.GenericCompiler(), lm.backend("cpu")))
    tokens.set([ids])
    g.execute()
    return logits.numpy()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma3", choices=("gemma3", "smollm2"))
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help="comma-separated LUMINAL_CPU_QUANT_ACTIVATIONS values "
                             "(default %(default)s)")
    args = parser.parse_args()
    settings = args.settings.split(",")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        parser.error(f"--settings: unknown {unknown}; choose from {', '.join(SETTINGS)}")

    from luminal_models.causal_lm import open_causal_lm
    from luminal_models.hub import gemma3_path, smollm2_path

    path = (gemma3_path if args.model == "gemma3" else smollm2_path)(progress=True)
    model, tokenizer = open_causal_lm(path, quantized=True, progress=False)
    ids = _prompt_ids(tokenizer)
    want = reference_logits(path, ids)
    cpu = cpu_model()
    print(f"{path.name}, {len(ids)}-token prompt, against transformers fp32; {cpu}, "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print("| setting | max abs logit diff | mean abs diff | argmax agrees |")
    print("| --- | --- | --- | --- |")
    for setting in settings:
        got = luminal_logits(model, ids, setting)
        diff = np.abs(got.astype(np.float64) - want)
        agree = float((got.argmax(-1) == want.argmax(-1)).mean())
        print(f"| {setting} | {diff.max():.2e} | {diff.mean():.2e} | {agree:.1%} |",
              flush=True)


if __name__ == "__main__":
    main()
