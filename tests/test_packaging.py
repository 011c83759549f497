"""The wheel ships every package of the source tree (a missing entry installs a broken tool)."""

from __future__ import annotations

import tomllib

from .clihelp import REPO


def test_every_package_is_listed_for_the_wheel():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(REPO).parts) for init in (REPO / "kevin_agent").rglob("__init__.py")}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
