"""The docs say what the repository has: every relative link in README.md, docs/ and the READMEs beside the code
resolves (a `#anchor` to a heading of that slug, GitHub's rules), every `make TARGET` in their code is a Makefile
target, every `python -m MODULE` they name is a module here (or an allowed third-party one), and every path of a
repo file they name (`recipes/X.py`, `bench/X.py`, `trainers/X.py`, `configs/.../X.yaml`, ...) exists, and every
`--flag` their commands show (`python -m MODULE [SUBCOMMAND]`, `python recipes/X.py`, `accelerate launch ...
recipes/X.py`, `make TARGET ARGS="..."`) is an option of the parser that answers that command's `--help`.

No network: it reads the Markdown files and the Makefile, and asks the commands' parsers in one subprocess, each
module or script run as `__main__` with `--help` (it stops at the parser's help: nothing else of the command runs)."""

import os
import re
from pathlib import Path

import pytest

from conftest import REPO

# folders whose READMEs are not docs of this repository: environments, generated outputs, vendored task fixtures
SKIP_DIRS = {".git", "outputs", "wandb", "node_modules", "__pycache__", "build", "dist", ".pytest_cache"}
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


INLINE_CODE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", flags=re.S)


def _fenced(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(fence lines, lines inside fences): the (start, end) of each, its newline included."""
    fences, inside = [], []
    fence, offset = None, 0
    for line in text.splitlines(keepends=True):
        where = (offset, offset + len(line))
        offset += len(line)
        marker = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and marker:
            fence = marker.group(1)[0] * 3
            fences.append(where)
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
                fences.append(where)
            else:
                inside.append(where)
    return fences, inside


def _blank_parts(text: str, parts) -> str:
    chars = list(text)
    for start, end in parts:
        chars[start:end] = list(_blank(text[start:end]))
    return "".join(chars)


def split_code(text: str) -> tuple[str, str]:
    """(prose, code): two copies of text of its length, one with the code blanked out, one with all else blanked."""
    fences, inside = _fenced(text)
    outside = _blank_parts(text, fences + inside)
    # inline code spans (a span may wrap onto the next line of its paragraph)
    spans = [m.span() for m in INLINE_CODE.finditer(outside)]
    prose = _blank_parts(outside, spans)
    code = list(_blank(text))
    for start, end in inside + spans:
        code[start:end] = list(text[start:end])
    return prose, "".join(code)


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


# --- the flags of the documented commands -------------------------------------------------------------------------
# A command of this repository the docs show with flags: `python -m MODULE [SUBCOMMAND] --flags`, `python recipes/X.py
# --flags`, `python bench/X.py --flags` (any script of the repository alike; `.venv/bin/python`, `python3` too),
# `accelerate launch [its flags] recipes/X.py --flags` and `make TARGET ARGS="--flags"` where the Makefile runs
# `recipes/X.py $(ARGS)` for TARGET. Each `--flag` must be an option of the parser that answers the command's `--help`
# (a subcommand's, after one). What follows a `...` word goes to another program (`python -m eval.serve ... --x`).
PYTHON = r"(?<![\w/.$-])(?:[\w.~$/-]*/)?python(?:3(?:\.\d+)?)?"
SCRIPT = re.compile(rf"(?:\./)?((?:{'|'.join(CODE_FOLDERS)})/[\w/.-]*\.py)")
COMMAND = re.compile(
    rf"{PYTHON}[ \t]+(?:-m[ \t]+(?P<module>[A-Za-z_][\w.]*)|(?P<script>{SCRIPT.pattern}))(?![\w/.-])"
    r"|(?<![\w/.$-])(?:[\w.~$/-]*/)?accelerate[ \t]+launch(?![\w-])"
    r"|(?<![\w.$-])make[ \t]+(?P<target>[A-Za-z][\w-]*)(?![\w=-])")
# modules and scripts whose flags are not checked: their --help cannot be asked without side effects (none today)
UNPROBED: set[str] = set()
# a subcommand that hands the flags it does not know to another command's parser: those are checked against that one
FORWARDS = {("trainers.data", "prepare"): "recipes/sft.py"}   # `--key value` overrides of the SFT config
# The parsers of the commands, read in one subprocess: each module or script runs as `__main__` with `--help` (after
# the subcommand, if any), and the parser whose print_help is called is the one the user meets; nothing else runs.
PROBE = r"""
import argparse, contextlib, io, json, os, runpy, sys

class Answered(BaseException):  # not an Exception: a module's `except Exception` does not swallow it
    pass

answered = []

def print_help(self, file=None):
    answered.append(self)
    raise Answered

argparse.ArgumentParser.print_help = print_help

def parser_of(target, argv):
    answered.clear()
    sys.argv = [target, *argv, "--help"]
    cwd, environ, path = os.getcwd(), dict(os.environ), list(sys.path)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            if target.endswith(".py"):
                sys.path.insert(0, os.path.dirname(os.path.abspath(target)))  # as `python recipes/X.py` has it
                runpy.run_path(target, run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__")
    except Answered:
        pass
    except SystemExit as err:
        return None, f"it exited ({err.code!r}) before any parser printed its help"
    except BaseException as err:
        return None, f"{type(err).__name__}: {err}"
    finally:
        os.chdir(cwd)
        os.environ.clear(); os.environ.update(environ)
        sys.path[:] = path
    if not answered:
        return None, "it ran to the end and no parser printed its help"
    return answered[-1], None

def options(parser):
    found = {s for action in parser._actions for s in action.option_strings}
    # TrlParser takes `--config PATH` out of argv itself, before its HfArgumentParser parses the rest
    if any(cls.__name__ == "TrlParser" for cls in type(parser).__mro__):
        found.add("--config")
    subcommands = sorted(name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
                         for name in action.choices)
    return {"options": sorted(found), "subcommands": subcommands}

result = {}
for target, subcommand in json.loads(sys.argv[1]):
    if target not in result:
        parser, error = parser_of(target, [])
        result[target] = {"error": error, **(options(parser) if parser else {}), "sub": {}}
    top = result[target]
    if subcommand and subcommand in top.get("subcommands", ()) and subcommand not in top["sub"]:
        parser, error = parser_of(target, [subcommand])
        top["sub"][subcommand] = {"error": error, **(options(parser) if parser else {})}
print("PROBED " + json.dumps(result))
"""


def _pieces(text: str) -> list[tuple[str, list[int]]]:
    """Each command line of text's code, with the offset into text of each of its characters: a fenced line (with
    the lines a trailing backslash continues it onto) or an inline span's text (newlines in it are spaces)."""
    fences, inside = _fenced(text)
    pieces: list[tuple[str, list[int]]] = []
    joined = False
    for start, end in inside:
        line = text[start:end].rstrip("\r\n")
        offsets = list(range(start, start + len(line)))
        if joined:
            previous, previous_offsets = pieces.pop()
            line, offsets = previous + line, previous_offsets + offsets
        joined = line.endswith("\\")
        if joined:
            line, offsets = line[:-1] + " ", offsets
        pieces.append((line, offsets))
    outside = _blank_parts(text, fences + inside)
    for m in INLINE_CODE.finditer(outside):
        pieces.append((m.group(2).replace("\n", " "), list(range(m.start(2), m.end(2)))))
    return pieces


def shell_words(line: str, offsets: list[int], start: int = 0) -> list[tuple[str, list[int]]]:
    """The words of the command that starts at line[start:], each with the offset of each of its characters, up to
    the command's end: the line's, or a shell operator (`|`, `&&`, `;`, `>`, a `#` comment). Quotes are taken off and
    group; `\\|` is a `|`, and so is one between two words (`local|docker`: the docs' alternatives, not a pipe);
    `<job>` is a placeholder, not a redirection."""
    words: list[tuple[str, list[int]]] = []
    word: list[tuple[str, int]] | None = None
    quote = None
    i = start
    while i < len(line):
        c, after = line[i], line[i + 1:i + 2]
        if quote:
            if c == quote:
                quote = None
            else:
                word.append((c, offsets[i]))
            i += 1
            continue
        if c.isspace():
            if word is not None:
                words.append(("".join(ch for ch, _ in word), [at for _, at in word]))
                word = None
            i += 1
            continue
        if (c == "|" and (word is None or after in ("", "|") or after.isspace())) or c in ";>" \
                or (c == "&" and (after in ("", "&") or after.isspace())) or (c == "#" and word is None) \
                or (c == "<" and not re.match(r"<[\w.-]+>", line[i:])):
            break
        if word is None:
            word = []
        if c == "\\" and after:
            word.append((after, offsets[i + 1]))
            i += 2
        elif c in "\"'" and c in line[i + 1:]:
            quote, i = c, i + 1
        elif c == "<":
            end = i + re.match(r"<[\w.-]+>", line[i:]).end()
            word.extend(zip(line[i:end], offsets[i:end]))
            i = end
        else:
            word.append((c, offsets[i]))
            i += 1
    if word is not None:
        words.append(("".join(ch for ch, _ in word), [at for _, at in word]))
    return words


def flags_of(words: list[tuple[str, list[int]]]) -> list[tuple[str, int]]:
    """The `--flag`s among words (`[--strict]`, `--agent=x`), each with its offset: up to a `...` word, after which
    the words are passed through to another program, or a `--`."""
    flags = []
    for word, offsets in words:
        if word in ("...", "--"):
            break
        bare = word.lstrip("[(")
        m = re.match(r"--[A-Za-z][\w-]*", bare)
        if m:
            flags.append((m.group(0), offsets[len(word) - len(bare)]))
    return flags


def make_scripts() -> dict[str, str]:
    """Makefile target -> the script its rule runs with $(ARGS) after it: `make learn ARGS="..."` passes them to it."""
    scripts, target = {}, None
    for line in (REPO / "Makefile").read_text().splitlines():
        if not line.startswith("\t"):
            m = re.match(r"^([A-Za-z0-9_.\-][A-Za-z0-9_.\- ]*?)\s*::?(?!=)", line)
            target = m.group(1).split()[0] if m else None
        elif target:
            m = re.search(r"((?:recipes|bench)/\w+\.py)\s+\$\(ARGS\)", line)
            if m:
                scripts[target] = m.group(1)
    return scripts


def documented_commands(text: str, scripts: dict[str, str]) -> list[dict]:
    """The repository's commands text shows in its code, each a dict: shown (how the report names it), target (a
    module or a script path), subcommand (the word after it, if a word: the parser says whether it is one), flags
    [(flag, offset)]."""
    commands = []
    for line, offsets in _pieces(text):
        for m in COMMAND.finditer(line):
            words = shell_words(line, offsets, m.end())
            if m.group("module"):
                target, shown = m.group("module").rstrip("."), f"python -m {m.group('module').rstrip('.')}"
                if target.split(".")[0] in THIRD_PARTY_MODULES or not module_exists(target):
                    continue
            elif m.group("script"):
                target = SCRIPT.fullmatch(m.group("script")).group(1)
                shown = f"python {target}"
            elif m.group("target"):
                if m.group("target") not in scripts:
                    continue
                target, shown = scripts[m.group("target")], f"make {m.group('target')} ARGS"
                args = [(w, at) for w, at in words if w.startswith("ARGS=")]
                if not args:
                    continue
                value, at = args[0]   # the value's words: split again, each character at its place in text
                words = shell_words(value[len("ARGS="):], at[len("ARGS="):])
                commands.append({"shown": shown, "target": target, "subcommand": None, "flags": flags_of(words)})
                continue
            else:   # accelerate launch [its own flags] recipes/X.py --flags: those after the script are the recipe's
                at_script = next((k for k, (w, _) in enumerate(words) if SCRIPT.fullmatch(w.strip("[]"))), None)
                if at_script is None:
                    continue
                target = SCRIPT.fullmatch(words[at_script][0].strip("[]")).group(1)
                shown, words = f"accelerate launch {target}", words[at_script + 1:]
            if target.endswith(".py") and not (REPO / target).is_file():
                continue   # path_problems names it
            first = words[0][0] if words else ""
            subcommand = first if re.fullmatch(r"[a-z][\w-]*", first) else None
            commands.append({"shown": shown, "target": target, "subcommand": subcommand, "flags": flags_of(words)})
    return commands


def probe_parsers(requests: set[tuple[str, str | None]]) -> dict:
    """{target: {error, options, subcommands, sub: {subcommand: {error, options}}}}, read by PROBE in one process."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(sorted(requests, key=str))], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    answer = [line for line in done.stdout.splitlines() if line.startswith("PROBED ")]
    assert answer, f"the probe of the parsers failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(answer[-1][len("PROBED "):])


_PARSERS: dict | None = None


def documented_parsers() -> dict:
    """The parsers of every command with flags in every doc: probed once per test session."""
    global _PARSERS
    if _PARSERS is None:
        scripts = make_scripts()
        requests = {(c["target"], c["subcommand"]) for path in DOCS
                    for c in documented_commands(path.read_text(encoding="utf-8"), scripts)
                    if c["flags"] and c["target"] not in UNPROBED}
        requests |= {(FORWARDS[request], None) for request in requests if request in FORWARDS}
        _PARSERS = probe_parsers(requests)
    return _PARSERS


def _listing(options: list[str], flag: str) -> str:
    import difflib

    # HfArgumentParser's dash aliases (--max-steps of --max_steps) are accepted, and left out of the listing
    options = [o for o in options
               if not (o.startswith("--") and "-" in o[2:] and "--" + o[2:].replace("-", "_") in options)]
    if len(options) <= 40:
        return ", ".join(options)
    close = difflib.get_close_matches(flag, options, n=6, cutoff=0.6)
    return f"{len(options)} of them, the closest: {', '.join(close) or 'none'}"


def flag_problems(path: Path, parsers: dict) -> list[str]:
    return text_flag_problems(str(path.relative_to(REPO)), path.read_text(encoding="utf-8"), parsers, make_scripts())


def text_flag_problems(name: str, text: str, parsers: dict, scripts: dict[str, str]) -> list[str]:
    problems = []
    for command in documented_commands(text, scripts):
        if not command["flags"] or command["target"] in UNPROBED:
            continue
        parser, shown = parsers[command["target"]], command["shown"]
        forward = FORWARDS.get((command["target"], command["subcommand"]))
        if command["subcommand"] in parser.get("sub", {}):
            parser, shown = parser["sub"][command["subcommand"]], f"{shown} {command['subcommand']}"
        if parser["error"]:
            problems.append(f"{name}:{line_of(text, command['flags'][0][1])}: {shown}: its --help did not answer "
                            f"({parser['error']}); one that cannot goes into UNPROBED")
            continue
        elsewhere = f"; nor of {forward}" if forward else \
            f"; its subcommands: {', '.join(parser['subcommands'])}" if parser.get("subcommands") else ""
        for flag, at in command["flags"]:
            if flag not in parser["options"] and not (forward and flag in parsers[forward].get("options", ())):
                problems.append(f"{name}:{line_of(text, at)}: {shown}: {flag} is not an option of it (its options: "
                                f"{_listing(parser['options'], flag)}{elsewhere})")
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


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_documented_flags_are_accepted(path):
    problems = flag_problems(path, documented_parsers())
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


def test_the_flag_check_reads_what_it_should():
    """Commands are found in code blocks (a backslash continues one) and inline spans (one may wrap), up to their
    end (`|`, `&&`, ` #`); a subcommand's flags go to its parser; what follows `...` is passed through; an unknown
    flag is refused; the parsers are read from `--help` (TrlParser's --config and HfArgumentParser's aliases too)."""
    doc = ("Run:\n\n```bash\n"
           "python -m trainers.data inspect a.jsonl \\\n"                                  # line 4
           "    --strict --json   # then --not_checked\n"
           "N=1 .venv/bin/python recipes/learn.py --seed 1 | tee --not_checked\n"           # line 6
           "make learn ARGS=\"--config configs/sft/learn-bash.yaml --seed 2\"  # make learn --x\n"
           "accelerate launch --config_file configs/accelerate/cpu.yaml recipes/sft.py --max_steps 2 && ls --x\n"
           "```\n\n"
           "Serve it (`python -m eval.serve --checkpoint CK ... --tool-call-parser X`), run it (`python3 -m\n"
           "eval.run --suite DIR|builtin:x [--env local\\|docker] <job> --no_such_flag`), `python -m pytest -x`.\n")
    found = [(c["shown"], c["subcommand"], [(flag, line_of(doc, at)) for flag, at in c["flags"]])
             for c in documented_commands(doc, make_scripts())]
    assert found == [
        ("python -m trainers.data", "inspect", [("--strict", 5), ("--json", 5)]),
        ("python recipes/learn.py", None, [("--seed", 6)]),
        ("make learn ARGS", None, [("--config", 7), ("--seed", 7)]),
        ("accelerate launch recipes/sft.py", None, [("--max_steps", 8)]),
        ("python -m eval.serve", None, [("--checkpoint", 11)]),
        ("python -m eval.run", None, [("--suite", 12), ("--env", 12), ("--no_such_flag", 12)]),
    ], found
    assert documented_commands(doc, make_scripts())[2]["target"] == "recipes/learn.py"
    known = {"recipes/learn.py": ["--seed", "--config"], "recipes/sft.py": ["--max_steps"],
             "eval.serve": ["--checkpoint"], "eval.run": ["--suite", "--env"]}
    parsers = {target: {"error": None, "options": ["-h", "--help", *options], "subcommands": [], "sub": {}}
               for target, options in known.items()}
    parsers["trainers.data"] = {"error": None, "options": ["-h", "--help"], "subcommands": ["inspect"],
                                "sub": {"inspect": {"error": None, "options": ["--strict", "--json"]}}}
    assert text_flag_problems("x.md", doc, parsers, make_scripts()) == [
        "x.md:12: python -m eval.run: --no_such_flag is not an option of it (its options: -h, --help, --suite, --env)"]
    parsers["trainers.data"]["sub"]["prepare"] = {"error": None, "options": ["--config"]}   # the rest: FORWARDS
    assert text_flag_problems("y.md", "`python -m trainers.data prepare --config X --max_steps 2 --bogus`", parsers,
                              {}) == ["y.md:1: python -m trainers.data prepare: --bogus is not an option of it (its "
                                      "options: --config; nor of recipes/sft.py)"]
    del parsers["trainers.data"]["sub"]["inspect"]   # no such subcommand: its flags are the top-level parser's
    assert len(text_flag_problems("x.md", doc, parsers, make_scripts())) == 3
    real = documented_parsers()
    assert "--strict" in real["trainers.data"]["sub"]["inspect"]["options"]
    assert {"--config", "--max_steps", "--max-steps", "--no-gradient-checkpointing"} <= \
        set(real["recipes/sft.py"]["options"])
