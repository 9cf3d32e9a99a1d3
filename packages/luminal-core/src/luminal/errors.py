"""The exception a high-level op raises for arguments that do not fit it."""


class OpError(ValueError, RuntimeError):
    """Bad arguments to an op (shapes that do not fit, invalid options), raised when the
    graph is built. It is a `ValueError`, luminal's convention, and a `RuntimeError`, what
    PyTorch raises for the same mistakes, so code written against either catches it."""
