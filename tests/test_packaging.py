"""The wheel ships every package of the source tree (a missing entry installs a broken tool)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from .clihelp import REPO


@pytest.mark.slow
def test_the_wheel_ships_every_package_with_the_prompts_and_plugins_inside(tmp_path):
    """Built from a copy of the sources (the build writes beside them), without the network."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    for folder in ("kevin_agent", "prompts", "plugins"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(source),
                          "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("kevin_opt-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    packages = {p.relative_to(REPO).as_posix() for p in (REPO / "kevin_agent").rglob("__init__.py")}
    assert len(packages) > 20 and packages <= shipped, sorted(packages - shipped)
    inside = {"kevin_agent/prompts/prompt.j2", "kevin_agent/prompts/examples/cuda_add.py",
              "kevin_agent/plugins/junit.py", "kevin_agent/tui/app.tcss"}
    assert inside <= shipped, sorted(inside - shipped)


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
