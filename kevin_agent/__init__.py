"""kevin-opt: Kevin-32B writes kernels for your PyTorch module; kevin-opt verifies and commits them."""

__version__ = "0.1.0"
