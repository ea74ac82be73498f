"""The packages sit in layers and imports flow down (docs/development.md "Layout"): every import of the repo's own
code, at module level or inside a function, goes to a lower layer or stays in its package; no modules import each
other in a cycle, within a package or type-only either; an import inside a function is for code that pulls in a
third-party library a light path should not pay for, never to dodge a cycle; the bottom layers are standard library
only. Read from the source (ast), nothing imported."""

from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# bottom first; a package may import its own modules and those of lower layers only
LAYERS = [
    ("common", "sandbox"),       # shared helpers and the sandbox core
    ("harbor_tasks",),           # task folders and verifier verdicts
    ("rewards", "chat_corpus"),  # the reward server and its client; the corpus
    ("episodes",),               # an episode in a sandbox, locally or on an episode server
    ("modeling",),               # the model: the embedded tiny model, kernels, FLOPs
    ("eval", "harbor_plugins"),  # evals, and what Harbor loads
    ("trainers",),               # the training glue
    ("recipes", "bench", "launch", "data", "docs", "tests"),  # entry points and everything that only calls in
]
LAYER = {package: i for i, names in enumerate(LAYERS) for package in names}
TOP = len(LAYERS) - 1
# files run by path inside the sandbox (`python -I FILE`), where the package cannot be imported: they load their
# siblings by path, or by package when imported as one
RUN_BY_PATH = ("sandbox.enter", "sandbox.pid1")
STDLIB_ONLY = ("sandbox", "harbor_tasks", "common/bash_harness.py", "common/digest.py", "common/cache_dir.py",
               "common/harnesses.py", "common/model_families.py", "common/reasoning.py", "common/terminus_2.py")
SKIP = ("tests/fixtures/", "eval/tasks/terminal/", "eval/tasks/evocode/", ".venv")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(REPO.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(SKIP) or "/." in f"/{rel}" or rel.split("/")[0] not in LAYER:
            continue
        name = rel[:-3].replace("/", ".").removesuffix(".__init__")
        out[name] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The repo module an import names (its longest known prefix), or None for a third-party or stdlib one."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in MODULES:
            return ".".join(parts[:n])
    return None


def _absolute(module: str, level: int, name: str | None) -> str:
    """The absolute name a `from` import names: `from .x import y` in a.b.c is a.b.x (level 0: the name itself)."""
    if not level:
        return name or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    parts = package.split(".")
    base = ".".join(parts[:len(parts) - (level - 1)])
    return f"{base}.{name}" if name else base


@lru_cache(maxsize=None)
def _imports(module: str) -> tuple[tuple[str, int, bool], ...]:
    """(imported name, line, inside a function) for every import of a module."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    found = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = _absolute(module, child.level, child.module)
                # `from pkg import mod` names a module when pkg.mod is one
                for alias in child.names:
                    dotted = f"{base}.{alias.name}" if base else alias.name
                    found.append((dotted if dotted in MODULES or not base else base, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return tuple(found)


def _shown(path: Path) -> str:
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


def _package(module: str) -> str:
    return module.split(".")[0]


@lru_cache(maxsize=None)
def _loads_at_import(module: str) -> frozenset[str]:
    """The repo modules a module's import runs (its module-level imports, transitively, and its packages)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        parts = current.split(".")
        for n in range(1, len(parts)):  # importing a.b.c runs a/__init__ and a/b/__init__
            parent = ".".join(parts[:n])
            if parent in MODULES and parent not in seen:
                seen.add(parent)
                todo.append(parent)
        for name, _, in_function in _imports(current):
            target = _resolve(name)
            if target and not in_function and target not in seen:
                seen.add(target)
                todo.append(target)
    return frozenset(seen)


def _third_party_at_import(module: str) -> set[str]:
    names = set()
    for current in {module} | _loads_at_import(module):
        for name, _, in_function in _imports(current):
            top = name.split(".")[0]
            if not in_function and _resolve(name) is None and top not in (*sys.stdlib_module_names, "__future__"):
                names.add(top)
    return names


def test_imports_flow_down_the_layers():
    wrong = []
    for module in MODULES:
        package = _package(module)
        for name, line, _ in _imports(module):
            target = _resolve(name)
            if target is None or _package(target) == package:
                continue
            if LAYER[_package(target)] >= LAYER[package] and LAYER[package] != TOP:
                wrong.append(f"{_shown(MODULES[module])}:{line}: {package} (layer {LAYER[package]}) imports "
                             f"{target} (layer {LAYER[_package(target)]})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def _cycles() -> list[list[str]]:
    """The import cycles among the repo's modules, each a strongly connected set of two or more (Tarjan's): every
    import counts, at module level, under `if TYPE_CHECKING:` or inside a function, within a package too. A module's
    import of its package's `__init__` is Python's doing, not an edge."""
    graph = {m: sorted({t for name, _, _ in _imports(m) if (t := _resolve(name)) and t != m}) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in graph:  # iterative, so a long chain of imports does not meet the recursion limit
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, targets = work[-1]
            step = next(targets, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    work.append((step, iter(graph[step])))
                elif step in stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def test_no_import_cycle_among_the_repos_modules():
    """Modules of one package too import in one direction: no two modules reach each other through imports of any
    kind (a type-only import under `if TYPE_CHECKING:` still ties the two files into one unit to read and change)."""
    wrong = []
    for members in _cycles():
        edges = [f"  {_shown(MODULES[m])}:{line}: imports {t}" for m in members for name, line, _ in _imports(m)
                 if (t := _resolve(name)) in members and t != m]
        wrong.append(f"{' <-> '.join(members)}:\n" + "\n".join(dict.fromkeys(edges)))
    assert not wrong, "import cycles (give the modules an order; a Protocol names what a lower one calls):\n" + \
        "\n".join(wrong)


def test_no_function_level_import_of_our_own_code_dodges_a_cycle():
    """Below the top layer, an import of our own code inside a function must be of a module that pulls in a
    third-party library at import (the only reason to defer it), and must not be one whose import would import the
    importer (a cycle kept out of sight)."""
    wrong = []
    for module in MODULES:
        if LAYER[_package(module)] == TOP or module in RUN_BY_PATH:
            continue
        for name, line, in_function in _imports(module):
            target = _resolve(name)
            if not in_function or target is None or target == module:
                continue
            where = f"{_shown(MODULES[module])}:{line}: {target}"
            if module in _loads_at_import(target):
                wrong.append(f"{where}: a cycle (importing it imports {module})")
            elif not _third_party_at_import(target):
                wrong.append(f"{where}: nothing heavy to defer (import it at the top)")
    assert not wrong, "function-level imports of our own code:\n" + "\n".join(dict.fromkeys(wrong))


@pytest.mark.parametrize("where", STDLIB_ONLY)
def test_the_bottom_is_standard_library_only(where):
    """What the Harbor venv and `nobody` run from a copy imports nothing outside the standard library."""
    modules = [m for m, p in MODULES.items() if p.relative_to(REPO).as_posix() == where
               or p.relative_to(REPO).as_posix().startswith(where + "/")]
    assert modules, where
    outside = {m: sorted(_third_party_at_import(m)) for m in modules if _third_party_at_import(m)}
    assert not outside, outside


def test_the_layer_table_names_every_package():
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")} | {"recipes", "bench", "launch"}
    assert packages <= set(LAYER), packages - set(LAYER)


def test_the_checks_catch_what_they_are_for(tmp_path, monkeypatch):
    """The rules fail on a made-up upward import, on a lazy import that hides a cycle, and on a cycle inside a
    package made of a type-only import and a relative one."""
    fake = {"common.low": tmp_path / "low.py", "common.other": tmp_path / "other.py",
            "trainers.top": tmp_path / "top.py", "sandbox.fake_a": tmp_path / "fake_a.py",
            "sandbox.fake_b": tmp_path / "fake_b.py"}
    fake["common.low"].write_text("from trainers.top import thing\n\ndef f():\n    from common.other import x\n")
    fake["common.other"].write_text("import common.low\n")
    fake["trainers.top"].write_text("thing = 1\n")
    fake["sandbox.fake_a"].write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from sandbox.fake_b import B\n")
    fake["sandbox.fake_b"].write_text("from .fake_a import A\n")
    monkeypatch.setattr(sys.modules[__name__], "MODULES", {**MODULES, **fake})
    _imports.cache_clear()
    _loads_at_import.cache_clear()
    try:
        with pytest.raises(AssertionError, match="common.low|common \\(layer 0\\) imports trainers.top"):
            test_imports_flow_down_the_layers()
        with pytest.raises(AssertionError, match="a cycle"):
            test_no_function_level_import_of_our_own_code_dodges_a_cycle()
        with pytest.raises(AssertionError, match=r"sandbox\.fake_a <-> sandbox\.fake_b:\n.*fake_a\.py:3: imports "
                           r"sandbox\.fake_b\n.*fake_b\.py:1: imports sandbox\.fake_a"):
            test_no_import_cycle_among_the_repos_modules()
    finally:
        _imports.cache_clear()
        _loads_at_import.cache_clear()
