"""The tool's side of evaluation: the evaluator, the probe, the device gate, the warm pool, builds
and the confirmation's parent side; the worker processes themselves go through ``workers``.
Nothing here imports torch."""
