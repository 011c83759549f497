"""Whole models: profile one, group its identical module instances, rank the groups and choose
those worth a kernel (or take those the person names, ``named``), extract one into a task, and
what a delivered kernel module says about the model it goes back into (``delivered``, ``marks``).
Putting kernels back and timing the whole model are delivery's (``delivery.install``, ``delivery.e2e``).

Parent side (no torch): ``modelfile`` (the file, read statically), ``process`` (a worker),
``groups``, ``ranking``, ``choose``, ``named``, ``table``, ``extract``; their subcommands are
``cli.model_commands``. Worker side (``worker/``): loading the model, the profiler, each module's
identity, capture into a task file, the whole model with kernels and without (``whole_model``),
and ``guard``, the code a delivered kernel module carries to install itself.
"""
