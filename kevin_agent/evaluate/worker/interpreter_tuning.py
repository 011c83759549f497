"""``@triton.autotune`` in Triton's interpreter, which has no GPU driver to ask for a benchmarker:
each config timed by the median wall time of a few calls. It runs at a kernel's first call (a run's
compile stage, never its timing) and only picks which config the kernel keeps.

The run's workers call it on the cpu device; a delivered Triton module verified there carries this
file's text (so it needs torch and triton alone, and tunes as the run did): nothing here imports
kevin-opt.
"""

from __future__ import annotations

import time

INTERPRETER_TUNING_CALLS = 3


def interpreter_autotune() -> None:
    """Give every ``triton.autotune`` the wall-clock benchmarker where it has none of its own."""
    from triton.runtime import autotuner

    def bench(kernel_call, quantiles=None, **_):
        times = []
        for _ in range(INTERPRETER_TUNING_CALLS):
            start = time.perf_counter()
            kernel_call()
            times.append((time.perf_counter() - start) * 1e3)
        times.sort()
        median = times[len(times) // 2]
        return [median, times[0], times[-1]] if quantiles else median

    autotuner.Autotuner.do_bench = property(lambda self: self._do_bench or bench)
