"""Repository-wide pytest setup: the hardware markers (`cuda`, `rocm`, `metal`) skip, with the
reason, where the device is missing (see luminal.testing.pytest_plugin)."""

pytest_plugins = ["luminal.testing.pytest_plugin"]
