"""Optimizers as graph constructors (PyTorch `torch.optim` semantics).

An optimizer adds the update of every parameter to the training graph. Its state (moments,
momentum buffers, the step counter) lives in graph inputs, and `Graph.assign` feeds each new
value back into its input after every `execute()`, so state stays on the device between steps
with no host round trip. The learning rate is a scalar input as well: a schedule changes it
between steps without recompiling (`schedule_lr`). Bias corrections are computed in the graph
from the step counter, so a plain `g.execute()` loop is already correct.

    opt = lt.AdamW(params, lr=1e-3)
    opt.step(lt.grad(loss, params))          # build time; or lt.AdamW(..., grads=ag) as a compiler
    g.compile((lm.GenericCompiler(), lm.backend()))
    for i, batch in enumerate(data):
        opt.schedule_lr(i); x.set(batch); g.execute()
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from luminal import Graph, GraphTensor, float32

from .autograd import Params, param_list
from .schedules import Constant, Schedule

State = dict[str, GraphTensor]


def named_params(params: Params) -> dict[str, GraphTensor]:
    """Parameters by name: the mapping's keys, else the inputs' names (made unique)."""
    if isinstance(params, Mapping):
        param_list(params)
        return dict(params)
    named: dict[str, GraphTensor] = {}
    for k, p in enumerate(param_list(params)):
        name = p.node.op.label_name
        named[name if name not in named else f"{name}.{k}"] = p
    return named


class Optimizer:
    """Base class. Subclasses list their per-parameter `state_names` and implement `update`.

    `grads` (an `Autograd` or a list of gradient tensors) makes the optimizer usable as a
    compiler placed after the autograd compiler: `g.compile((ag, opt, ...))`.
    """

    state_names: tuple[str, ...] = ()

    def __init__(self, params: Params, lr: float | Schedule, grads: Iterable[GraphTensor] | None):
        self.params = named_params(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        self.graph: Graph = next(iter(self.params.values())).graph
        self.schedule: Schedule = lr if callable(lr) else Constant(float(lr))
        self.lr = self.graph.tensor((), name="optim.lr").set(_check_lr(self.schedule(0)))
        self.step_count = self.graph.tensor((), name="optim.step").set(0.0)
        self.state: dict[str, State] = {
            name: {
                s: self.graph.tensor(p.layout.shape, name=f"{name}.{s}").set(
                    np.zeros(p.shape, np.float32)
                )
                for s in self.active_state()
            }
            for name, p in self.params.items()
        }
        self.grads = grads
        self.built = False

    def active_state(self) -> tuple[str, ...]:
        """The state this configuration needs (e.g. no buffer for SGD without momentum)."""
        return self.state_names

    def hyperparams(self) -> dict[str, Any]:
        """Constructor arguments besides params and lr, for checkpoints and reprs."""
        return {}

    # ----- graph building -----------------------------------------------------------------
    def compile(self, graph: Graph) -> None:
        """Compiler form: build the update from the `grads` given at construction (once)."""
        if self.built:
            return
        if self.grads is None:
            raise ValueError(f"{type(self).__name__}: pass grads= to use it as a compiler")
        if graph is not self.graph:
            raise ValueError(f"{type(self).__name__}: the parameters belong to another graph")
        self.step(self.grads)

    def step(self, grads: Iterable[GraphTensor]) -> None:
        """Add the update of every parameter from its gradient (in parameter order)."""
        if self.built:
            raise RuntimeError(f"{type(self).__name__}.step() was already built into the graph")
        grads = list(grads)
        if len(grads) != len(self.params):
            raise ValueError(f"got {len(grads)} gradients for {len(self.params)} parameters")
        t = self.step_count + 1.0  # the step being taken, counted from 1 as in PyTorch
        for (name, p), g in zip(self.params.items(), grads):
            if tuple(g.layout.shape) != tuple(p.layout.shape):
                raise ValueError(f"gradient of {name!r} has shape {g.shape}, expected {p.shape}")
            new_p, new_state = self.update(p.to(float32), g.to(float32), self.state[name], t)
            self.graph.assign(p, new_p.to(p.dtype))
            for s, value in new_state.items():
                self.graph.assign(self.state[name][s], value)
        self.graph.assign(self.step_count, t)
        self.built = True

    def update(
        self, p: GraphTensor, g: GraphTensor, state: State, t: GraphTensor
    ) -> tuple[GraphTensor, State]:
        """New parameter value and new state tensors for one parameter at step `t` (>= 1)."""
        raise NotImplementedError

    # ----- host-side control --------------------------------------------------------------
    def set_lr(self, value: float) -> None:
        """Learning rate of the next executions (a scalar input: no recompilation)."""
        self.lr.set(np.float32(_check_lr(value)))

    def schedule_lr(self, step: int) -> float:
        """Set the learning rate from the schedule for 0-based step `step`; returns it."""
        value = float(self.schedule(step))
        self.set_lr(value)
        return value

    def state_dict(self) -> dict[str, np.ndarray]:
        """Host copies of the state: `step` and `<param>.<state name>` arrays."""
        out = {"step": np.asarray(self.step_count.numpy(), np.float32)}
        for name, state in self.state.items():
            for s, t in state.items():
                out[f"{name}.{s}"] = np.asarray(t.numpy())
        return out

    def load_state_dict(self, values: Mapping[str, np.ndarray]) -> None:
        """Inverse of `state_dict` (checks that every entry is present)."""
        missing = [k for k in self.state_dict_keys() if k not in values]
        if missing:
            raise KeyError(f"optimizer state is missing {missing}")
        self.step_count.set(np.asarray(values["step"], np.float32).reshape(()))
        for name, state in self.state.items():
            for s, t in state.items():
                t.set(values[f"{name}.{s}"])

    def state_dict_keys(self) -> list[str]:
        return ["step"] + [f"{n}.{s}" for n, state in self.state.items() for s in state]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparams().items())
        return f"{type(self).__name__}({len(self.params)} params, lr={self.schedule!r}, {args})"


def _check_lr(lr: float) -> float:
    """`lr` itself; a ValueError (PyTorch's message) when it is negative or not a number."""
    value = float(lr)
    if not value >= 0.0:
        raise ValueError(f"Invalid learning rate: {lr}")
    return value


def _check_nonnegative(name: str, value: float) -> None:
    if not float(value) >= 0.0:
        raise ValueError(f"Invalid {name} value: {value}")


def _power(beta: float, t: GraphTensor) -> GraphTensor:
    """beta ** t in the graph (t a float scalar tensor >= 1)."""
    if beta == 0.0:
        return t * 0.0
    return (t * math.log2(beta)).exp2()


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov momentum and (L2)
    weight decay, as `torch.optim.SGD` (the first step fills the buffer with the gradient)."""

    state_names = ("momentum_buffer",)

    def __init__(self, params: Params, lr: float | Schedule = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 maximize: bool = False, grads: Iterable[GraphTensor] | None = None):
        _check_nonnegative("momentum", momentum)
        _check_nonnegative("weight_decay", weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        self.momentum, self.dampening = momentum, dampening
        self.weight_decay, self.nesterov, self.maximize = weight_decay, nesterov, maximize
        super().__init__(params, lr, grads)

    def active_state(self) -> tuple[str, ...]:
        return self.state_names if self.momentum else ()

    def hyperparams(self) -> dict[str, Any]:
        return {"momentum": self.momentum, "dampening": self.dampening,
                "weight_decay": self.weight_decay, "nesterov": self.nesterov,
                "maximize": self.maximize}

    def update(self, p, g, state, t):
        d = -g if self.maximize else g
        if self.weight_decay:
            d = d + p * self.weight_decay
        new_state: State = {}
        if self.momentum:
            # PyTorch starts the buffer at the raw gradient: no dampening on the first step
            first = (t < 1.5).to(float32)
            coef = (1.0 - self.dampening) + first * self.dampening
            buf = state["momentum_buffer"] * self.momentum + d * coef
            new_state["momentum_buffer"] = buf
            d = d + buf * self.momentum if self.nesterov else buf
        return p - d * self.lr, new_state


class Adam(Optimizer):
    """Adam with bias correction, optional AMSGrad and L2 weight decay (`torch.optim.Adam`)."""

    state_names = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    decoupled = False  # AdamW decays the weights directly instead of through the gradient

    def __init__(self, params: Params, lr: float | Schedule = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, maximize: bool = False,
                 grads: Iterable[GraphTensor] | None = None):
        _check_nonnegative("epsilon", eps)
        _check_nonnegative("weight_decay", weight_decay)
        if len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        for k, beta in enumerate(betas):
            if not 0.0 <= float(beta) < 1.0:
                raise ValueError(f"Invalid beta parameter at index {k}: {beta}")
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps, self.weight_decay = eps, weight_decay
        self.amsgrad, self.maximize = amsgrad, maximize
        super().__init__(params, lr, grads)

    def active_state(self) -> tuple[str, ...]:
        return self.state_names if self.amsgrad else self.state_names[:2]

    def hyperparams(self) -> dict[str, Any]:
        return {"betas": list(self.betas), "eps": self.eps, "weight_decay": self.weight_decay,
                "amsgrad": self.amsgrad, "maximize": self.maximize}

    def update(self, p, g, state, t):
        beta1, beta2 = self.betas
        if self.maximize:
            g = -g
        if self.weight_decay and self.decoupled:
            p = p * (1.0 - self.lr * self.weight_decay)
        elif self.weight_decay:
            g = g + p * self.weight_decay
        m = state["exp_avg"] * beta1 + g * (1.0 - beta1)
        v = state["exp_avg_sq"] * beta2 + g * g * (1.0 - beta2)
        new_state = {"exp_avg": m, "exp_avg_sq": v}
        if self.amsgrad:
            v = state["max_exp_avg_sq"].maximum(v)
            new_state["max_exp_avg_sq"] = v
        step_size = self.lr / (1.0 - _power(beta1, t))
        denom = v.sqrt() / (1.0 - _power(beta2, t)).sqrt() + self.eps
        return p - m / denom * step_size, new_state


class AdamW(Adam):
    """Adam with decoupled weight decay (`torch.optim.AdamW`, default weight_decay 0.01)."""

    decoupled = True

    def __init__(self, params: Params, lr: float | Schedule = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, maximize: bool = False,
                 grads: Iterable[GraphTensor] | None = None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize, grads)
