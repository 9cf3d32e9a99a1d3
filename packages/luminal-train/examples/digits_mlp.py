"""Train a two-layer perceptron on scikit-learn's 8x8 digits; prints the held-out accuracy.

    python packages/luminal-train/examples/digits_mlp.py [--backend cpu] [--epochs 30] [--search]
    mpiexec -n 2 python packages/luminal-train/examples/digits_mlp.py --distributed

The last line of output is `test_accuracy=<value>` (>= 0.95 expected).
"""

from __future__ import annotations

import luminal as lm
import luminal_nn.functional as F
from digits_common import parse_args, train_and_evaluate

HIDDEN = 128
SHAPES = {"w1": (HIDDEN, 64), "b1": (HIDDEN,), "w2": (10, HIDDEN), "b2": (10,)}
FAN_IN = {"w1": 64, "b1": 64, "w2": HIDDEN, "b2": HIDDEN}


def forward(x: lm.GraphTensor, p: dict[str, lm.GraphTensor]) -> lm.GraphTensor:
    h = F.linear(x.flatten(1), p["w1"], p["b1"]).relu()
    return F.linear(h, p["w2"], p["b2"])


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], epochs=30, lr=5e-3, batch_size=64)
    accuracy = train_and_evaluate(args, SHAPES, FAN_IN, forward)
    if accuracy is not None:  # None on the ranks other than 0 of a distributed run
        print(f"test_accuracy={accuracy:.4f}")


if __name__ == "__main__":
    main()
