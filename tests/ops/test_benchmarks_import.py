"""The benchmarks cannot rot unnoticed: each imports, and every import of the project's own code in them,
at the top or inside a function, names a module and a name that exist (a class that moved broke the
live fuzz run once: ``from benchmarks.bench_durability import Server`` inside ``main``). Imports of other
packages inside functions stay lazy on purpose (vLLM, TRL: heavy, or set up by the code before them)."""

from __future__ import annotations

import ast
import importlib

import pytest

from tests.helpers import ROOT

BENCHMARKS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if p.name != "__init__.py")
PROJECT = ("benchmarks", "rlrouter", "serve", "jobs", "tests", "tools")


def project_imports(path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of every import of the project's code in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in PROJECT:
            out += [(node.lineno, node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] in PROJECT]
    return out


def test_every_benchmark_is_found():
    assert len(BENCHMARKS) >= 20 and any(p.name == "bench_fuzz.py" for p in BENCHMARKS)


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_a_benchmark_imports_and_its_project_imports_resolve(path):
    importlib.import_module(f"benchmarks.{path.stem}")
    missing = []
    for line, module, name in project_imports(path):
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{path.name}:{line}: {module}: {e}")
            continue
        if name is not None and name != "*" and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")  # a submodule
            except ImportError:
                missing.append(f"{path.name}:{line}: cannot import name '{name}' from '{module}'")
    assert not missing, missing


def test_the_check_catches_the_rot_it_is_for(tmp_path):
    bad = tmp_path / "bench_rotten.py"
    bad.write_text("def main():\n    from benchmarks.bench_durability import Server\n")
    [(line, module, name)] = project_imports(bad)
    assert (line, module, name) == (2, "benchmarks.bench_durability", "Server")
    assert not hasattr(importlib.import_module(module), name)
