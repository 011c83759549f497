"""Whole models: profile one, rank its modules, extract one into a task, and what a delivered
kernel module says about the model it goes back into (``delivered``, ``marks``). Putting it back
and timing the whole model are delivery's (``delivery.install``, ``delivery.e2e``).

Parent side (no torch): ``modelfile`` (the file, read statically), ``process`` (a worker),
``ranking``, ``table``, ``extract``; their subcommands are ``cli.model_commands``. Worker side (``worker/``): loading the model, the profiler, capture into a
task file, and ``guard``, the code a delivered kernel module carries to install itself.
"""
