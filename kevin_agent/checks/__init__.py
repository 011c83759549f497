"""Static checks on a candidate's source, before it runs: the rules (``rules``), Python scoping
(``scopes``), what kind of value a name holds (``kinds``) and a reader of the C++ and CUDA sources
a candidate builds (``sources``)."""

from __future__ import annotations

from .rules import RULES, run_checks, syntax_violation

__all__ = ["RULES", "run_checks", "syntax_violation"]
