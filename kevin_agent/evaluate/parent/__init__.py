"""The tool's side of evaluation: the evaluator, its worker processes as the parent sees them, the
device gate, the warm pool and the confirmation's parent side. Nothing here imports torch."""
