"""Recurrent layers RNN, GRU and LSTM, unrolled over their (static) sequence length.

The input projections of all steps are one matmul; each step then adds its recurrent matmul
and gate arithmetic. Weight layouts and gate orders follow the ONNX spec: GRU gates z, r, h;
LSTM gates i, o, f, c and peepholes i, o, f.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import luminal as lm

from .registry import converter

if TYPE_CHECKING:
    from .importer import NodeContext

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                        "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _activation(ctx: NodeContext, name: str, alpha, beta):
    simple = {"Tanh": lambda x: x.tanh(), "Sigmoid": lambda x: x.sigmoid(),
              "Relu": lambda x: x.relu(), "Softsign": lambda x: x / (x.abs() + 1.0),
              "Softplus": lambda x: x.softplus()}
    if name in simple:
        return simple[name]
    with_params = {
        "LeakyRelu": lambda x: x.leaky_relu(alpha if alpha is not None else 0.01),
        "ThresholdedRelu": lambda x: lm.where(x > (alpha if alpha is not None else 1.0), x, 0.0),
        "HardSigmoid": lambda x: (x * (alpha if alpha is not None else 0.2)
                                  + (beta if beta is not None else 0.5)).clamp(0.0, 1.0),
        "Elu": lambda x: x.elu(alpha if alpha is not None else 1.0),
        "ScaledTanh": lambda x: (x * beta).tanh() * alpha,
        "Affine": lambda x: x * alpha + beta,
    }
    if name not in with_params:
        raise ctx.fail(f"activation {name!r} is not supported")
    return with_params[name]


def _activations(ctx: NodeContext, directions: int) -> list[list]:
    """The activation functions of each direction."""
    per_direction = len(_DEFAULT_ACTIVATIONS[ctx.op_type])
    names = ctx.attr("activations", None) or _DEFAULT_ACTIVATIONS[ctx.op_type] * directions
    alphas = ctx.attr("activation_alpha", None) or []
    betas = ctx.attr("activation_beta", None) or []
    fns = [_activation(ctx, n, alphas[k] if k < len(alphas) else None,
                       betas[k] if k < len(betas) else None) for k, n in enumerate(names)]
    return [fns[d * per_direction:(d + 1) * per_direction] for d in range(directions)]


@converter("RNN", "GRU", "LSTM")
def _recurrent(ctx: NodeContext):
    kind = ctx.op_type
    x, w, r = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    hidden = ctx.attr("hidden_size")
    direction = ctx.attr("direction", "forward")
    directions = 2 if direction == "bidirectional" else 1
    layout = ctx.attr("layout", 0)
    if ctx.attr("clip", None) is not None:
        raise ctx.fail("clip is not supported")
    if kind == "LSTM" and ctx.attr("input_forget", 0):
        raise ctx.fail("input_forget=1 is not supported")
    linear_before_reset = ctx.attr("linear_before_reset", 0) if kind == "GRU" else 0
    if layout:
        x = x.transpose(0, 1)  # (batch, seq, in) -> (seq, batch, in)
    steps = x.shape[0]
    if not isinstance(steps, int):
        raise ctx.fail("the sequence length must be static to unroll the recurrence")
    if ctx.has(4) and any(n != steps for n in ctx.static_ints(4)):
        raise ctx.fail("sequence_lens shorter than the sequence are not supported")
    gates = _GATES[kind]
    acts = _activations(ctx, directions)
    ys, last_h, last_c = [], [], []
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        h0 = _initial(ctx, 5, d, layout, x, hidden)
        c0 = _initial(ctx, 6, d, layout, x, hidden) if kind == "LSTM" else None
        bias = ctx.tensor(3)[d] if ctx.has(3) else None
        peep = ctx.tensor(7)[d] if kind == "LSTM" and ctx.has(7) else None
        projected = lm.matmul(x, w[d].transpose(0, 1))  # (seq, batch, gates * hidden)
        if bias is not None:
            projected = projected + bias[: gates * hidden]
        rec_bias = bias[gates * hidden:] if bias is not None else None
        h, c = h0, c0
        outputs = [None] * steps
        for t in (reversed(range(steps)) if reverse else range(steps)):
            step = _CELLS[kind](projected[t], h, c, r[d], rec_bias, peep, hidden, acts[d],
                                linear_before_reset)
            h, c = step
            outputs[t] = h
        ys.append(lm.stack(outputs, 0))  # (seq, batch, hidden)
        last_h.append(h)
        last_c.append(c)
    y = lm.stack(ys, 1)  # (seq, directions, batch, hidden)
    y_h = lm.stack(last_h, 0)
    if layout:
        y, y_h = y.permute(2, 0, 1, 3), y_h.transpose(0, 1)
    out = [y, y_h]
    if kind == "LSTM":
        y_c = lm.stack(last_c, 0)
        out.append(y_c.transpose(0, 1) if layout else y_c)
    return out


def _initial(ctx: NodeContext, i: int, d: int, layout: int, x: lm.GraphTensor, hidden: int):
    if ctx.has(i):
        state = ctx.tensor(i)
        return state[:, d] if layout else state[d]
    return x.graph.zeros((x.shape[1], hidden))


def _split(t: lm.GraphTensor, parts: int, hidden: int) -> list[lm.GraphTensor]:
    return [t[..., k * hidden:(k + 1) * hidden] for k in range(parts)]


def _rnn_cell(xw, h, c, r, rec_bias, peep, hidden, acts, _lbr):
    pre = xw + lm.matmul(h, r.transpose(0, 1))
    if rec_bias is not None:
        pre = pre + rec_bias
    return acts[0](pre), None


def _gru_cell(xw, h, c, r, rec_bias, peep, hidden, acts, linear_before_reset):
    f, g = acts
    x_z, x_r, x_h = _split(xw, 3, hidden)
    r_z, r_r, r_h = r[:hidden], r[hidden:2 * hidden], r[2 * hidden:]
    b_z, b_r, b_h = _split(rec_bias, 3, hidden) if rec_bias is not None else (0.0, 0.0, 0.0)
    z = f(x_z + lm.matmul(h, r_z.transpose(0, 1)) + b_z)
    reset = f(x_r + lm.matmul(h, r_r.transpose(0, 1)) + b_r)
    if linear_before_reset:
        candidate = g(x_h + reset * (lm.matmul(h, r_h.transpose(0, 1)) + b_h))
    else:
        candidate = g(x_h + lm.matmul(reset * h, r_h.transpose(0, 1)) + b_h)
    return (1.0 - z) * candidate + z * h, None


def _lstm_cell(xw, h, c, r, rec_bias, peep, hidden, acts, _lbr):
    f, g, out_act = acts
    pre = xw + lm.matmul(h, r.transpose(0, 1))
    if rec_bias is not None:
        pre = pre + rec_bias
    p_i, p_o, p_f = _split(peep, 3, hidden) if peep is not None else (None, None, None)
    x_i, x_o, x_f, x_c = _split(pre, 4, hidden)
    i = f(x_i + p_i * c if p_i is not None else x_i)
    forget = f(x_f + p_f * c if p_f is not None else x_f)
    c_new = forget * c + i * g(x_c)
    o = f(x_o + p_o * c_new if p_o is not None else x_o)
    return o * out_act(c_new), c_new


_CELLS = {"RNN": _rnn_cell, "GRU": _gru_cell, "LSTM": _lstm_cell}
