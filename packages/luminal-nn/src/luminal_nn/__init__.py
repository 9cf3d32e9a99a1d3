"""luminal_nn: neural-network modules that build luminal graphs.

    import luminal as lm
    import luminal_nn as nn

    g = lm.Graph()
    layer = nn.Linear(4, 2)
    y = layer(g.tensor((3, 4)).set(x)).retrieve()
    g.execute()

Modules hold parameters (host arrays bound to graph inputs) and add ops when called; they
never loop over data. `state_dict()` / `load_state_dict()` move weights in and out by dotted
name, with the same names PyTorch uses for the equivalent modules.
"""

from .activation import GELU, LeakyReLU, ReLU, Sigmoid, SiLU, Softmax, Tanh
from .attention import KVCache, LayerCache, MultiHeadAttention, causal_mask
from .conv import AvgPool2d, Conv1d, Conv2d, MaxPool2d
from .linear import Embedding, Identity, Linear
from .module import Buffer, Module, ModuleList, Parameter, QuantizedParameter, Sequential
from .norm import LayerNorm, RMSNorm
from .rotary import RotaryEmbedding, rope_inv_freq
from .transformer import FeedForward, SwiGLU, TransformerBlock

__version__ = "0.1.0"

__all__ = [
    "GELU",
    "AvgPool2d",
    "Buffer",
    "Conv1d",
    "Conv2d",
    "Embedding",
    "FeedForward",
    "Identity",
    "KVCache",
    "LayerCache",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "MaxPool2d",
    "Module",
    "ModuleList",
    "MultiHeadAttention",
    "Parameter",
    "QuantizedParameter",
    "RMSNorm",
    "ReLU",
    "RotaryEmbedding",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "SwiGLU",
    "Tanh",
    "TransformerBlock",
    "causal_mask",
    "rope_inv_freq",
]
