"""High-level ops, grouped by kind; each is a short composition of primitives."""
