# eval: runtime_error
# Writes half a message on the worker's pipe and dies (a crash in the middle of a line): the
# worker died, during correctness, and that is the candidate's failure.
import json
import os

import torch.nn as nn

with open("job.json", encoding="utf-8") as _f:
    _pipe = json.load(_f)["progress_fd"]


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        os.write(_pipe, b'{"schema":1,"kind":"stage","sta')
        os.abort()
