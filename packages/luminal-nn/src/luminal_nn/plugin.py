"""luminal plugin entry point for luminal-nn.

luminal-nn registers nothing through the hooks today: its modules are imported directly
(`import luminal_nn as nn`). The entry point exists so that `luminal plugins` lists the
distribution with its version next to the others.
"""
