"""The package's layout holds: the tool's own process never imports torch (only what runs inside
the workers, ``evaluate.worker`` and ``model.worker``, does), and no module imports another that
imports it back, not even for type checkers."""

from __future__ import annotations

import subprocess
import sys

from .clihelp import REPO

PARENT_SIDE = '''
import importlib, pathlib, sys
import kevin_agent
# Read from the files: walking the packages would import the workers' own, torch and all.
root = pathlib.Path(kevin_agent.__file__).parent
inside = ("kevin_agent.evaluate.worker", "kevin_agent.model.worker")
names = sorted(".".join(("kevin_agent",) + p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
               for p in root.rglob("*.py"))
names = [n for n in names if n != "kevin_agent" and not any(n == p or n.startswith(p + ".") for p in inside)]
for name in names:
    importlib.import_module(name)
    if "torch" in sys.modules:
        print("torch imported by", name)
        break
else:
    print(f"{len(names)} modules, no torch")
'''


def test_no_module_outside_the_workers_imports_torch():
    # A fresh interpreter: the test process itself has torch loaded.
    out = subprocess.run([sys.executable, "-c", PARENT_SIDE], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("modules, no torch"), out.stdout
    assert int(out.stdout.split()[0]) > 60  # the walk saw the package, not an empty folder


def _imports(typing: bool = False) -> dict[str, set[str]]:
    """Every module of the package and the package's modules it imports (at the top or inside a
    function: a circle through a deferred import is a circle all the same; those for type checkers
    alone with ``typing``)."""
    import ast

    root = REPO / "kevin_agent"
    modules = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # Imports for type checkers only never run.
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and getattr(block.test, "id", getattr(block.test, "attr", "")) == "TYPE_CHECKING"
                       for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in typing_only and not typing:
                continue
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    graph[name].add(full if full in modules else target)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names)
    return {name: {t for t in targets if t in modules and t != name} for name, targets in graph.items()}


def test_no_import_circle_in_the_package():
    graph = _imports(typing=True)
    circles, done = [], set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            circles.append(path[path.index(name):] + [name])
            return
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert not circles, "\n".join(" -> ".join(c) for c in circles[:5])
    assert len(graph) > 60 and sum(map(len, graph.values())) > 100  # the walk read real imports
