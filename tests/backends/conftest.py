import sys

import pytest


@pytest.fixture(autouse=True)
def _forget_stand_in_vllm():
    """A test that imports a stand-in ``vllm`` from its tmp_path leaves it in ``sys.modules``, where
    a later test in the same process would take it for an installed vLLM: forget what it imported."""
    before = {name for name in sys.modules if name == "vllm" or name.startswith("vllm.")}
    yield
    for name in [n for n in sys.modules if (n == "vllm" or n.startswith("vllm.")) and n not in before]:
        del sys.modules[name]
