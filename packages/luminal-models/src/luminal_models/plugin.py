"""luminal plugin entry point for luminal-models (hooks are registered here)."""
