"""The wheel ships every package of the source tree (a missing entry installs a broken tool)."""

from __future__ import annotations

import os
import subprocess
import tomllib

import pytest

from .clihelp import REPO


def test_every_package_is_listed_for_the_wheel():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(REPO).parts) for init in (REPO / "kevin_agent").rglob("__init__.py")}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs the git checkout")
def test_no_tracked_link_points_outside_the_repository():
    """A committed link to a folder outside the checkout (a virtual environment elsewhere) is
    broken in every other checkout."""
    entries = git("ls-files", "-s").stdout.splitlines()
    links = [line.split("\t", 1)[1] for line in entries if line.startswith("120000 ")]
    outside = []
    for link in links:
        target = (REPO / link).parent / os.readlink(REPO / link) if (REPO / link).is_symlink() else None
        if target is None or not target.resolve().is_relative_to(REPO.resolve()):
            outside.append(link)
    assert outside == [], outside


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs the git checkout")
@pytest.mark.parametrize("name", [".venv", ".venv-main", ".venv-py312"])
def test_virtual_environments_and_links_to_them_are_ignored(name):
    assert git("check-ignore", "-q", "--no-index", name).returncode == 0, f"{name} is not ignored"
