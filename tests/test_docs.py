"""The docs say what the repository has: every relative link in README.md, docs/ and the READMEs beside the code
resolves (a `#anchor` to a heading of that slug, GitHub's rules), every `make TARGET` in their code is a Makefile
target, every `python -m MODULE` they name is a module here (or an allowed third-party one), and every path of a
repo file they name (`recipes/X.py`, `bench/X.py`, `trainers/X.py`, `configs/.../X.yaml`, ...) exists.

Standard library only, no network: it reads the Markdown files and the Makefile."""

import os
import re
from pathlib import Path

import pytest

from conftest import REPO

# folders whose READMEs are not docs of this repository: environments, generated outputs, vendored task fixtures
SKIP_DIRS = {".git", "outputs", "wandb", "node_modules", "__pycache__", "build", "dist"}
SKIP_PATHS = {Path("tests/fixtures")}
# a task's environment/ is the workspace the agent is handed: its README documents the task's app, not this repository
TASK_WORKSPACE = re.compile(r"eval/tasks/.+/environment")
# `python -m X` of other projects, named in the docs as commands to run: not modules of this repository
THIRD_PARTY_MODULES = {
    "pip", "pytest", "venv", "wandb", "vllm", "accelerate", "torch", "harbor", "trl", "json", "http.server",
    "deepspeed", "transformers", "datasets", "uvicorn", "build", "ensurepip",
}
# top-level folders whose files the docs name by path; a name in capitals (X.yaml, NAME.yaml) is a placeholder
CODE_FOLDERS = ("recipes", "bench", "trainers", "eval", "rewards", "episodes", "sandbox", "common",
                "harbor_plugins", "launch", "configs", "tests", "data")
CODE_SUFFIXES = (".py", ".sh", ".sbatch", ".yaml", ".yml")
# a Harbor task has a tests/ folder of its own (tests/test.sh): under tests/ only this repository's test files count
TESTS_PATH = re.compile(r"tests/(test_\w+\.py|conftest\.py|servers\.py|fixtures/.+)$")


def doc_files() -> list[Path]:
    """README.md, docs/**/*.md and every README.md beside the code."""
    files = {REPO / "README.md"}
    files.update((REPO / "docs").rglob("*.md"))
    for root, dirs, names in os.walk(REPO):
        rel = Path(root).relative_to(REPO)
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".venv")
                   and rel / d not in SKIP_PATHS and not TASK_WORKSPACE.fullmatch(str(rel / d))]
        if "README.md" in names:
            files.add(Path(root) / "README.md")
    return sorted(files)


def _blank(text: str) -> str:
    """The same length, newlines kept: offsets into the result are offsets into the original."""
    return re.sub(r"[^\n]", " ", text)


def split_code(text: str) -> tuple[str, str]:
    """(prose, code): two copies of text of its length, one with the code blanked out, one with all else blanked."""
    prose, code = [], []
    fence = None
    for line in text.splitlines(keepends=True):
        marker = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and marker:
            fence = marker.group(1)[0] * 3
            prose.append(_blank(line)); code.append(_blank(line))
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
                prose.append(_blank(line)); code.append(_blank(line))
            else:
                prose.append(_blank(line)); code.append(line)
        else:
            prose.append(line); code.append(_blank(line))
    prose_text, code_text = "".join(prose), list("".join(code))
    # inline code spans (a span may wrap onto the next line of its paragraph)
    spans = list(re.finditer(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", prose_text, flags=re.S))
    prose_chars = list(prose_text)
    for m in spans:
        start, end = m.span()
        code_text[start:end] = list(m.group(0))
        prose_chars[start:end] = list(_blank(m.group(0)))
    return "".join(prose_chars), "".join(code_text)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def github_slug(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link's text
    text = re.sub(r"<[^>]+>", "", text)                           # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)                          # punctuation goes, letters/digits/_/- stay
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    prose, _ = split_code(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    found = set()
    original = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(prose.splitlines()):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = github_slug(re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", original[number]).group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def link_problems(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    prose, _ = split_code(text)
    problems = []
    for m in LINK.finditer(prose):
        target = m.group(1)
        where = f"{path.relative_to(REPO)}:{line_of(text, m.start())}: ({target})"
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):   # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if file_part and not resolved.exists():
            problems.append(f"{where} no such file or folder")
            continue
        if not resolved.is_relative_to(REPO):
            problems.append(f"{where} points outside the repository")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where} no heading #{anchor} in {resolved.relative_to(REPO)}")
    return problems


def makefile_targets() -> set[str]:
    targets = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-][A-Za-z0-9_.\- ]*?)\s*::?(?!=)", line)
        if m and not line.startswith("\t"):
            targets.update(name for name in m.group(1).split() if not name.startswith("."))
    return targets


def make_problems(path: Path, targets: set[str]) -> list[str]:
    text = path.read_text(encoding="utf-8")
    _, code = split_code(text)
    problems = []
    for m in re.finditer(r"(?<![\w.-])make\s+([A-Za-z][\w-]*)(?![\w=])", code):
        if m.group(1) not in targets:
            problems.append(f"{path.relative_to(REPO)}:{line_of(text, m.start())}: make {m.group(1)}: "
                            f"no such Makefile target (targets: {', '.join(sorted(targets))})")
    return problems


def module_exists(module: str) -> bool:
    base = REPO.joinpath(*module.split("."))
    return (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file())


def module_problems(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    problems = []
    for m in re.finditer(r"\bpython(?:3(?:\.\d+)?)?\s+-m\s+([A-Za-z_][\w.]*)", text):
        module = m.group(1).rstrip(".")
        if module in THIRD_PARTY_MODULES or module.split(".")[0] in THIRD_PARTY_MODULES:
            continue
        if not module_exists(module):
            problems.append(f"{path.relative_to(REPO)}:{line_of(text, m.start())}: python -m {module}: no "
                            f"{module.replace('.', '/')}.py or {module.replace('.', '/')}/__main__.py here "
                            f"(a third-party module goes into THIRD_PARTY_MODULES)")
    return problems


CODE_PATH = re.compile(r"(?<![\w/.~$-])((?:%s)/[\w./-]*?[\w-](?:%s))(?![\w/-])"
                       % ("|".join(CODE_FOLDERS), "|".join(re.escape(s) for s in CODE_SUFFIXES)))


def path_problems(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    _, code = split_code(text)
    problems = []
    for m in CODE_PATH.finditer(code):
        named = m.group(1)
        if re.fullmatch(r"[A-Z_]+", Path(named).stem):    # configs/sft/X.yaml, configs/rewards/NAME.yaml
            continue
        if named.startswith("tests/") and not TESTS_PATH.match(named):   # a task folder's tests/test.sh
            continue
        if not (REPO / named).exists():
            problems.append(f"{path.relative_to(REPO)}:{line_of(text, m.start())}: {named}: no such file")
    return problems


DOCS = doc_files()
IDS = [str(p.relative_to(REPO)) for p in DOCS]


def test_the_docs_are_found():
    names = set(IDS)
    assert {"README.md", "docs/README.md"} <= names, names
    assert not any(name.startswith(("outputs/", ".venv", "tests/fixtures/")) for name in names)


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_relative_links_resolve(path):
    problems = link_problems(path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_make_targets_exist(path):
    problems = make_problems(path, makefile_targets())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_python_modules_exist(path):
    problems = module_problems(path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_named_repo_files_exist(path):
    problems = path_problems(path)
    assert not problems, "\n".join(problems)


def test_the_checks_read_what_they_should():
    """The slugs are GitHub's, the Makefile's rules are read, code is told from prose."""
    assert github_slug("Metrics (`eval_results.json` → `metrics`)") == "metrics-eval_resultsjson--metrics"
    assert github_slug("Agentic GRPO from the learning run: does it raise the held-out pass rate?") == \
        "agentic-grpo-from-the-learning-run-does-it-raise-the-held-out-pass-rate"
    assert {"sft", "test", "learn", "grpo-agentic"} <= makefile_targets()
    assert "setup" in makefile_targets() and "PHONY" not in makefile_targets()
    assert module_exists("eval.run") and not module_exists("eval.no_such_module")
    prose, code = split_code("a `make sft` b\n```\nmake nope\n```\nit makes sense [x](y.md)\n")
    assert "make sft" in code and "make nope" in code and "makes" not in code and "[x](y.md)" in prose
