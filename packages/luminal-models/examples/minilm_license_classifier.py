"""Fine-tune all-MiniLM-L6-v2 with luminal-train to tell which license a sentence comes from.

    python packages/luminal-models/examples/minilm_license_classifier.py [--backend cpu]
        [--epochs 4] [--train-layers 2] [--no-progress]

The task: sentences of four license texts that every Debian system ships in
/usr/share/common-licenses (Apache-2.0, GPL-3, MPL-2.0, GFDL-1.3), labelled by license, split
into training and held-out sets (stratified, fixed seed). The model is the MiniLM encoder, mean
pooling as sentence-transformers, and a new linear head; the encoder's top `--train-layers`
layers and the head are trained with AdamW (the embeddings and lower layers stay frozen).
The last line of output is `test_accuracy=<value>`; before it, the held-out accuracy of the
untrained head is printed for comparison.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import luminal as lm
import luminal_nn as nn
import luminal_train as lt
import numpy as np
from luminal_models.bert import Bert, mean_pool, minilm_path

LICENSES = ("Apache-2.0", "GPL-3", "MPL-2.0", "GFDL-1.3")
LICENSE_DIR = Path("/usr/share/common-licenses")
MAX_LEN = 64
PER_CLASS = 39  # sentences per license (Apache-2.0, the shortest text, has 41)


def license_sentences(seed: int = 0) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """(train texts, train labels, test texts, test labels): PER_CLASS sentences of 6 to 60
    words per license, a third of each class held out."""
    rng = np.random.default_rng(seed)
    train_x, train_y, test_x, test_y = [], [], [], []
    for label, name in enumerate(LICENSES):
        text = " ".join((LICENSE_DIR / name).read_text(encoding="utf-8").split())
        sentences = [s for s in re.split(r"(?<=[.;:])\s+", text) if 6 <= len(s.split()) <= 60]
        sentences = sorted(set(sentences))
        if len(sentences) < PER_CLASS:
            raise ValueError(f"{LICENSE_DIR / name}: only {len(sentences)} usable sentences")
        picked = [sentences[i] for i in rng.permutation(len(sentences))[:PER_CLASS]]
        held = PER_CLASS // 3
        test_x += picked[:held]
        train_x += picked[held:]
        test_y += [label] * held
        train_y += [label] * (PER_CLASS - held)
    return train_x, np.array(train_y, np.int32), test_x, np.array(test_y, np.int32)


class SentenceClassifier(nn.Module):
    """MiniLM, mean pooling, and a linear head over the pooled sentence vector."""

    def __init__(self, encoder: Bert, classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.config.hidden_size, classes)

    def forward(self, ids: lm.GraphTensor, mask: lm.GraphTensor) -> lm.GraphTensor:
        return self.head(mean_pool(self.encoder(ids, mask), mask))


def tokenize(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Ids and attention mask, every text padded (or truncated) to MAX_LEN tokens."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_LEN)
    tokenizer.enable_padding(length=MAX_LEN)
    encodings = tokenizer.encode_batch(texts)
    return (np.array([e.ids for e in encodings], np.int32),
            np.array([e.attention_mask for e in encodings], np.float32))


def trainable(model: SentenceClassifier, train_layers: int) -> list[str]:
    """Names of the parameters to train: the head and the top `train_layers` layers."""
    first = model.encoder.config.num_layers - train_layers
    keep = ("head.", *(f"encoder.layers.{i}." for i in range(first, 99)))
    return [name for name, _ in model.named_parameters() if name.startswith(keep)]


def build(model: SentenceClassifier, names: list[str], lr: float, steps: int,
          backend: str | None) -> tuple[lt.TrainStep, dict[str, lm.GraphTensor], lt.AdamW]:
    """The training step (loss, gradients, AdamW update in one graph) and its inputs."""
    g = lm.Graph()
    ids = g.tensor(("batch", "seq"), name="ids", dtype=lm.int32)
    mask = g.tensor(("batch", "seq"), name="mask")
    labels = g.tensor(("batch",), name="labels", dtype=lm.int32)
    loss = lt.cross_entropy(model(ids, mask), labels)
    params = dict(model.named_parameters())
    opt = lt.AdamW({n: params[n].tensor(g) for n in names}, lt.Cosine(lr, steps))
    step = lt.TrainStep(loss, opt, clip_grad_norm=1.0, backend=backend)
    return step, {"ids": ids, "mask": mask, "labels": labels}, opt


def accuracy(model: SentenceClassifier, ids: np.ndarray, mask: np.ndarray, labels: np.ndarray,
             backend: str | None) -> float:
    g = lm.Graph()
    x = g.tensor(("batch", "seq"), name="ids", dtype=lm.int32)
    m = g.tensor(("batch", "seq"), name="mask")
    logits = model(x, m).retrieve()
    g.compile((lm.GenericCompiler(), lt.default_backend(backend)))
    x.set(ids)
    m.set(mask)
    g.execute()
    return float((logits.numpy().argmax(1) == labels).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=None,
                        help="luminal backend name (default: the best installed one)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--train-layers", type=int, default=2,
                        help="how many of the top encoder layers to train (0: the head only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args()

    train_x, train_y, test_x, test_y = license_sentences(args.seed)
    train_ids, train_mask = tokenize(train_x)
    test_ids, test_mask = tokenize(test_x)
    rng = np.random.default_rng(args.seed)
    model = SentenceClassifier(Bert.from_safetensors(minilm_path(), progress=False),
                               len(LICENSES))
    model.head.weight.data = rng.normal(0, 0.02, model.head.weight.shape).astype(np.float32)
    model.head.bias.data = np.zeros(len(LICENSES), np.float32)
    before = accuracy(model, test_ids, test_mask, test_y, args.backend)
    print(f"untrained head: test_accuracy={before:.4f}")

    names = trainable(model, args.train_layers)
    steps = args.epochs * -(-len(train_x) // args.batch_size)
    step, inputs, opt = build(model, names, args.lr, steps, args.backend)
    batches = lt.Batches({inputs["ids"]: train_ids, inputs["mask"]: train_mask,
                          inputs["labels"]: train_y}, args.batch_size, drop_last=False,
                         seed=args.seed)
    losses = lt.fit(step, batches, epochs=args.epochs, progress=not args.no_progress)
    print(f"trained {len(names)} tensors for {steps} steps: loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}")
    model.load_state_dict({n: t.numpy() for n, t in opt.params.items()}, strict=False)
    print(f"test_accuracy={accuracy(model, test_ids, test_mask, test_y, args.backend):.4f}")


if __name__ == "__main__":
    main()
