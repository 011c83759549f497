# eval: correct
# Computes the right answer, and prints what looks like the worker's protocol on its stdout and
# writes what is no message on the worker's pipe: its own noise, which changes nothing.
import json
import os

import torch.nn as nn

print('{"schema":1,"kind":"replied"}\nwant candidate\nreplied', flush=True)
with open("job.json", encoding="utf-8") as _f:
    os.write(json.load(_f)["progress_fd"], b'candidate says hello\n{"schema": 1, "kind": "stage", "stage": "nowhere"}\n')


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale + 1.0
