"""Every module of the packages opens with what it is (line 1) and where it runs (line 2, `Runs in: ...`); the
reasoning lives in docs/ (CONVENTIONS: a module docstring is a label, not an essay)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "sandbox", "harbor_tasks", "rewards", "chat_corpus", "episodes", "modeling", "eval",
            "harbor_plugins", "trainers")
MODULES = sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py")
                 if not p.relative_to(REPO).as_posix().startswith(("eval/tasks/terminal/", "eval/tasks/evocode/")))
MAX_LINES = 16  # a usage block may take a few; past this the text belongs in docs/


@pytest.mark.parametrize("path", MODULES, ids=[p.relative_to(REPO).as_posix() for p in MODULES])
def test_a_module_says_what_it_is_and_where_it_runs(path):
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    assert doc, "no module docstring"
    lines = doc.strip("\n").splitlines()
    assert len(lines) >= 2 and lines[0].strip() and lines[1].startswith("Runs in"), lines[:2]
    assert len(lines) <= MAX_LINES, f"{len(lines)} lines: move the reasoning to docs/"


MAX_SOURCE_LINES = 900  # past this a module holds more than one sitting's reading: split it by what it holds


def test_no_source_file_outside_tests_is_over_900_lines():
    sources = [p for p in REPO.rglob("*.py") if not p.relative_to(REPO).as_posix().startswith(("tests/", ".venv"))
               and "/." not in f"/{p.relative_to(REPO).as_posix()}"]
    assert len(sources) > 100
    long = {p.relative_to(REPO).as_posix(): n for p in sources if (n := len(p.read_text().splitlines())) >
            MAX_SOURCE_LINES}
    assert not long, long
