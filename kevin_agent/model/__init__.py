"""Whole models: profile one, rank its modules, extract one into a task, put a verified kernel
back, and measure the whole model with it.

Parent side (no torch): ``modelfile`` (the file, read statically), ``process`` (a worker),
``ranking``, ``table``, ``extract``, ``install``, ``e2e``; their subcommands are
``cli.model_commands``. Worker side (``worker/``): loading the model, the profiler, capture into a
task file, and ``guard``, the code a delivered kernel module carries to install itself.
"""
