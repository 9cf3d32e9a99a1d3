"""Train a small convolutional network on scikit-learn's 8x8 digits; prints the held-out
accuracy.

    python packages/luminal-train/examples/digits_cnn.py [--backend cpu] [--epochs 20] [--search]

conv 3x3 (16) -> relu -> max-pool 2 -> conv 3x3 (32) -> relu -> max-pool 2 -> linear (10).
The last line of output is `test_accuracy=<value>` (>= 0.97 expected).
"""

from __future__ import annotations

import luminal as lm
import luminal_nn.functional as F
from digits_common import parse_args, train_and_evaluate

SHAPES = {"c1": (16, 1, 3, 3), "c1b": (16,), "c2": (32, 16, 3, 3), "c2b": (32,),
          "fc": (10, 128), "fcb": (10,)}
FAN_IN = {"c1": 9, "c1b": 9, "c2": 144, "c2b": 144, "fc": 128, "fcb": 128}


def forward(x: lm.GraphTensor, p: dict[str, lm.GraphTensor]) -> lm.GraphTensor:
    h = F.max_pool2d(F.conv2d(x, p["c1"], p["c1b"], padding=1).relu(), 2)  # (N, 16, 4, 4)
    h = F.max_pool2d(F.conv2d(h, p["c2"], p["c2b"], padding=1).relu(), 2)  # (N, 32, 2, 2)
    return F.linear(h.flatten(1), p["fc"], p["fcb"])


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], epochs=20, lr=1e-2, batch_size=64)
    accuracy = train_and_evaluate(args, SHAPES, FAN_IN, forward)
    if accuracy is not None:  # None on the ranks other than 0 of a distributed run
        print(f"test_accuracy={accuracy:.4f}")


if __name__ == "__main__":
    main()
