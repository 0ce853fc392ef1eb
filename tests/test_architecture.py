"""The architecture's rules, enforced (docs/architecture.md).

* The import contracts in pyproject.toml hold (``lint-imports``, import-linter: layers per
  package), and their list of evaluator internals names every evaluator package and module
  but the API.
* Packages by concept: nothing at the root of a package but ``api``, ``model`` and
  ``errors``; every subpackage's docstring says what it owns.
* No import cycle anywhere in either package, ``TYPE_CHECKING`` imports included.
* No module over 600 lines in ``evolve/`` or ``evaluator/`` (concept decides placement; a
  module that long is a sign it holds two).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600
ROOT_MODULES = {"evaluator": {"api", "model"}, "evolve": {"errors"}}


def _contracts() -> list[dict]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["importlinter"]["contracts"]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "BROKEN" not in out.stdout


def test_the_evaluator_boundary_names_every_internal_module():
    (contract,) = [c for c in _contracts() if "only through evaluator.api" in c["name"]]
    internal = {f"evaluator.{p.stem}" for p in (ROOT / "evaluator").glob("*.py")
                if p.stem not in ("api", "__init__")}
    internal |= {f"evaluator.{p.parent.name}" for p in (ROOT / "evaluator").glob("*/__init__.py")}
    assert internal == set(contract["forbidden_modules"])


@pytest.mark.parametrize("package", sorted(ROOT_MODULES))
def test_only_the_seams_live_at_a_package_root(package):
    loose = {p.stem for p in (ROOT / package).glob("*.py")} - {"__init__"}
    assert loose == ROOT_MODULES[package]


@pytest.mark.parametrize("package", sorted(ROOT_MODULES))
def test_every_subpackage_says_what_it_owns(package):
    silent = [str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("__init__.py")
              if len(ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "") < 20]
    assert silent == []


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(
                        nxt)))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycles():
    graph = grimp.build_graph("evolve", "evaluator", exclude_type_checking_imports=False)
    # a package's __init__ importing its own submodules is not a cycle of the design
    for pkg in [m for m in graph.modules if (ROOT / m.replace(".", "/") / "__init__.py").exists()]:
        for child in graph.find_children(pkg):
            if graph.direct_import_exists(importer=pkg, imported=child):
                graph.remove_import(importer=pkg, imported=child)
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for m in ("a", "b", "c"):
        graph.add_module(m)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", ["evolve", "evaluator"])
def test_modules_are_short(package):
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}
