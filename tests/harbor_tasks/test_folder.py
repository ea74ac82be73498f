"""A Harbor task folder has one owner (harbor_tasks/folder.py): one definition of a task, what its task.toml says, and
no other module opens task.toml."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import UNBOUNDED_FILE_KINDS, make_unbounded_file

from harbor_tasks.folder import TaskFolder, TaskFolderError, is_task, read_config, task_folders, task_seeds
from harbor_tasks.generate import write_task
from harbor_tasks.suites import BUILTIN_SUITES, SuiteError, local_suite

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "tests" / "fixtures" / "harbor_tasks" / "hello-world"


def test_one_definition_of_a_task(tmp_path):
    assert is_task(HELLO)
    for suite in BUILTIN_SUITES.values():  # single-step (instruction.md) and multi-step (steps/) alike
        assert task_folders(suite) and all(is_task(t) for t in task_folders(suite))
    only_instruction = tmp_path / "only-instruction"
    only_instruction.mkdir()
    (only_instruction / "instruction.md").write_text("do it\n")
    only_toml = tmp_path / "only-toml"
    only_toml.mkdir()
    (only_toml / "task.toml").write_text("[task]\n")
    assert not is_task(only_instruction) and not is_task(only_toml) and not is_task(tmp_path / "missing")
    assert task_folders(tmp_path) == [] and task_folders(HELLO) == [HELLO]


def test_what_task_toml_says(tmp_path):
    task = TaskFolder.of(HELLO)
    assert task.name == "hello-world" and task.instruction.startswith("Create a file called /app/hello.txt")
    limits = (task.verifier_timeout_sec, task.agent_timeout_sec, task.memory_mb, task.storage_mb)
    assert limits == (60.0, 60.0, 1024, 512)
    assert task.single_step_runnable and task.steps == [] and task.test_scripts() == [HELLO / "tests" / "test.sh"]
    assert task.solution_script.startswith("#!/bin/bash") and task.family is None and task.seed is None
    # Harbor's network rule: network_mode, else allow_internet, default allowed; declared only when said so
    assert task.allow_internet and not task.internet_declared
    evo = TaskFolder.of(BUILTIN_SUITES["builtin:evocode"] / "evo-kvstore")
    assert len(evo.steps) >= 3 and not evo.single_step_runnable and len(evo.test_scripts()) >= 1
    generated = TaskFolder.of(write_task(tmp_path / "gen", "write-value", 7, 3))
    assert (generated.family, generated.seed, generated.index) == ("write-value", 7, 3)
    assert task_seeds(tmp_path / "gen") == {7: 1} and task_seeds(HELLO) == {}


def test_a_changed_task_toml_is_read_again_and_a_broken_one_is_one_line(tmp_path):
    copy = tmp_path / "hello"
    shutil.copytree(HELLO, copy)
    assert TaskFolder.of(copy).verifier_timeout_sec == 60.0
    toml = copy / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\ntimeout_sec = 60.0", "[verifier]\ntimeout_sec = 5.5")
                    + '\n[environment.extra]\nnetwork_mode = "public"\n')
    assert TaskFolder.of(copy).verifier_timeout_sec == 5.5
    toml.write_text("[verifier\ntimeout_sec = 1\n")
    with pytest.raises(TaskFolderError, match=r"task.toml: does not parse"):
        read_config(copy)
    assert TaskFolder.of(copy).verifier_timeout_sec == 120.0  # Harbor's default: a folder never raises on read


def test_the_digest_covers_every_file(tmp_path):
    a, b = tmp_path / "a" / "hello", tmp_path / "b" / "hello"
    shutil.copytree(HELLO, a)
    shutil.copytree(HELLO, b)
    assert TaskFolder.of(a).digest == TaskFolder.of(b).digest
    (b / "tests" / "extra.txt").write_text("x")
    c = tmp_path / "c" / "hello"
    shutil.copytree(b, c)
    assert TaskFolder.of(c).digest != TaskFolder.of(a).digest


def test_suites_resolve_with_one_line_errors(tmp_path):
    folder, tasks = local_suite("builtin:terminal")
    assert folder == BUILTIN_SUITES["builtin:terminal"] and len(tasks) == 10
    assert local_suite(str(HELLO)) == (HELLO, [HELLO])
    for suite, message in [("builtin:nope", "unknown built-in suite"),
                           ("terminal-bench@2.0", "cannot be read offline"),
                           (str(tmp_path / "missing"), "no such file or directory"),
                           (str(tmp_path), "no Harbor tasks")]:
        with pytest.raises(SuiteError, match=message):
            local_suite(suite)


def test_no_other_module_opens_task_toml():
    """The guard behind the one owner: outside harbor_tasks/folder.py no code parses TOML or names task.toml as a
    path to open (docs and error messages may name it)."""
    opens = re.compile(r"tomllib|\"task\.toml\"\)?\s*\.(read_text|open|read_bytes)|/ \"task\.toml\"")
    offenders = []
    for path in sorted(REPO.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if (rel.startswith((".venv", "tests/", "eval/tasks/terminal/", "eval/tasks/evocode/", "data/"))
                or rel == "harbor_tasks/folder.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if opens.search(line):
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


BOUNDED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))  # a read without a bound dies here, not the machine
sys.path.insert(0, sys.argv[1])
from harbor_tasks.folder import TaskFolder, TaskFolderError, read_config
task = TaskFolder(__import__("pathlib").Path(sys.argv[2]), {})
for call in (lambda: read_config(task.path), lambda: task.instruction, lambda: task.solution_script,
             lambda: task.read_text("tests/test.sh")):
    try:
        call()
        print("read")
    except TaskFolderError as err:
        print(type(err).__name__, err)
"""


@pytest.mark.parametrize("kind", UNBOUNDED_FILE_KINDS)
def test_task_files_that_are_no_regular_files_or_huge_are_refused(tmp_path, kind):
    task = tmp_path / "task"
    names = ["task.toml", "instruction.md", "solution/solve.sh", "tests/test.sh"]
    for name in names:
        make_unbounded_file(task / name, kind)
    proc = subprocess.run([sys.executable, "-c", BOUNDED, str(REPO), str(task)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == len(names), proc.stdout
    for name, line in zip(names, lines):
        assert line.startswith(f"TaskFolderError {task / name}: "), line  # one line, naming the file
        assert ("not a regular file" if kind != "sparse" else "bytes") in line, line
