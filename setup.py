"""The packages, found rather than listed: ``kevin_agent`` and every package below it, and the
prompts and plugins folders at the top of the repository, which ship inside it as
``kevin_agent.prompts`` and ``kevin_agent.plugins`` (``[tool.setuptools.package-dir]``)."""

from setuptools import find_packages, setup

SHIPPED_INSIDE = ["prompts", "plugins"]

setup(packages=find_packages(include=["kevin_agent", "kevin_agent.*"])
      + [f"kevin_agent.{name}" for name in find_packages(include=[f"{top}*" for top in SHIPPED_INSIDE])])
