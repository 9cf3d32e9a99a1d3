"""luminal-train: reverse-mode autograd as a graph compiler, optimizers, losses, training loop.

    import luminal as lm
    import luminal_train as lt

    loss = lt.cross_entropy(logits, labels)
    step = lt.TrainStep(loss, lt.AdamW(params, lr=1e-3))   # backward + update, one graph
    lt.fit(step, lt.Batches({x: xs, labels: ys}, 64), epochs=10)

The pieces compose on their own: `lt.Autograd(params, loss)` is a compiler (`lt.grad` its
build-time form), optimizers add in-graph updates whose state persists through
`Graph.assign`, `lt.clip_grad_norm` clips in the graph, and checkpoints are safetensors.
"""

from .autograd import Autograd, grad
from .checkpoint import load_checkpoint, save_checkpoint
from .clip import clip_grad_norm
from .loop import Batches, TrainStep, default_backend, fit
from .losses import binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss, nll_loss
from .optim import SGD, Adam, AdamW, Optimizer
from .schedules import Constant, Cosine, LinearWarmup, Schedule, StepDecay
from .views import transpose_view

__version__ = "0.1.0"

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "Autograd",
    "Batches",
    "Constant",
    "Cosine",
    "LinearWarmup",
    "Optimizer",
    "Schedule",
    "StepDecay",
    "TrainStep",
    "binary_cross_entropy_with_logits",
    "clip_grad_norm",
    "cross_entropy",
    "default_backend",
    "fit",
    "grad",
    "l1_loss",
    "load_checkpoint",
    "mse_loss",
    "nll_loss",
    "save_checkpoint",
    "transpose_view",
]
