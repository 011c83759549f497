"""What runs inside an evaluation worker: the entry point (``main``), the task's code, the
candidate's checks and timing, the confirmation's rounds, the guards. Every module here imports
torch.

Other kinds of worker (the model's, ``model.worker``) measure the same way with what this face
exports: the person's file imported and its errors described, the device named, outputs compared,
callables timed at their placements.
"""

from .candidate import Float32Reference, device_name, versions, wide
from .correctness import (LOW_PRECISION, Mismatch, Outcome, compare, judged, leaves, rounding_verdict,
                          same_values)
from .placements import Placements
from .taskcode import describe, import_file, to_device
from .timing import Timer
from .trials import FLOP_DTYPES, flop_dtype

__all__ = ["FLOP_DTYPES", "Float32Reference", "LOW_PRECISION", "Mismatch", "Outcome", "Placements", "Timer", "compare",
           "describe", "device_name", "flop_dtype", "import_file", "judged", "leaves", "rounding_verdict", "same_values",
           "to_device", "versions", "wide"]
