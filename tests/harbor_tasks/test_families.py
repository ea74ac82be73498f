"""harbor_tasks/families: the registry (sets, --list, select), a deep family's two streams (same instruction, another
world, another solution), and the shallow families unchanged by the move into the registry."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from common.digest import files_digest
from conftest import REPO
from harbor_tasks.families import DEFAULT_SET, FAMILIES, SETS, UnknownFamily, select
from harbor_tasks.generate import generate, write_task
from harbor_tasks.solution import solution_lines

DEEP = SETS["deep"]


def _tree(task) -> dict[str, bytes]:
    return {p.relative_to(task).as_posix(): p.read_bytes() for p in sorted(task.rglob("*")) if p.is_file()}


def test_the_sets():
    assert set(SETS) == {"shallow", "deep", "multi-round"} and DEFAULT_SET == "shallow"
    assert len(SETS["multi-round"]) >= 2
    assert len(DEEP) >= 8 and len(SETS["shallow"]) == 10
    assert all(FAMILIES[name].teach is not None and FAMILIES[name].ask is not None for name in DEEP)
    assert select(None) == select("") == SETS["shallow"]
    assert select("deep,csv-column,find-owner") == DEEP + ["csv-column"]
    assert select(["shallow", "deep"]) == SETS["shallow"] + DEEP


def test_an_unknown_family_is_refused_with_the_list():
    with pytest.raises(UnknownFamily) as refused:
        select("deep,nope,shalow", key="generate_families")
    message = str(refused.value)
    assert message.startswith("generate_families: unknown nope, shalow; sets: shallow, deep")
    assert all(name in message for name in FAMILIES)


def test_list_prints_every_family_with_its_set_and_what_to_do():
    listed = subprocess.run([sys.executable, "-m", "harbor_tasks.generate", "--list"], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.strip().splitlines()
    assert len(rows) == len(FAMILIES)
    for row, family in zip(rows, FAMILIES.values()):
        name, kind, summary = re.split(r"\s{2,}", row.strip(), maxsplit=2)
        assert (name, kind, summary) == (family.name, family.set, family.summary) and len(summary) > 20


@pytest.fixture
def shallow_seed_one(tmp_path):
    generate(tmp_path / "tasks", 1, 20)
    return tmp_path / "tasks"


def test_shallow_tasks_of_seed_one_are_byte_for_byte_as_before(shallow_seed_one):
    """The learning runs' world (seed 1's first 20 tasks): the digest taken before the families moved into the
    registry."""
    files = sorted(p for p in shallow_seed_one.rglob("*") if p.is_file())
    assert len(files) > 60
    assert files_digest(files, shallow_seed_one) == "30146da19cc6ffc43f44a9943196016e"


@pytest.mark.parametrize("family", DEEP)
def test_another_world_same_instruction_other_environment_and_solution(tmp_path, family):
    for index in range(6):
        a = write_task(tmp_path / "a", family, 3, index)
        b = write_task(tmp_path / "b", family, 3, index, world_seed=77)
        assert b.name == f"{a.name}-w77"
        tree_a, tree_b = _tree(a), _tree(b)
        assert tree_a["instruction.md"] == tree_b["instruction.md"]
        env = {k: v for k, v in tree_a.items() if k.startswith("environment/")}
        assert env != {k: v for k, v in tree_b.items() if k.startswith("environment/")}
        assert tree_a["solution/solve.sh"] != tree_b["solution/solve.sh"]
        assert 'world_seed = 77' in tree_b["task.toml"].decode() and 'set = "deep"' in tree_b["task.toml"].decode()


@pytest.mark.parametrize("family", DEEP)
def test_the_instruction_says_all_that_was_asked(family):
    """The teacher knows a task by its instruction and acts on what was asked: two instances that ask different
    things have different instructions, and instances vary."""
    kind = FAMILIES[family]
    by_instruction: dict[str, object] = {}
    for seed in range(40):
        instruction = kind.instance(seed, 0).instruction
        assert by_instruction.setdefault(instruction, kind.asked(seed, 0)) == kind.asked(seed, 0), instruction
    assert len(by_instruction) >= 4


@pytest.mark.parametrize("family", DEEP)
def test_the_instruction_never_states_what_the_world_hides(tmp_path, family):
    """A value the solution types that changes with the world (a path, a name, a number) is not in the instruction:
    the instruction is the same for every world, so such a value can only come from looking."""
    for index in range(6):
        solves = [solution_lines((write_task(tmp_path / f"w{w}", family, 5, index, world_seed=w) / "solution" /
                                  "solve.sh").read_text()) for w in (1, 2, 3)]
        instruction = (tmp_path / "w1" / f"{family}-5-{index}-w1" / "instruction.md").read_text()
        tokens = [set(re.findall(r"[\w./-]+", " ".join(lines))) for lines in solves]
        hidden = (tokens[0] - tokens[1]) | (tokens[0] - tokens[2])
        stated = sorted(t for t in hidden if len(t) > 3 and re.search(rf"(?<![\w./-]){re.escape(t)}(?![\w-])",
                                                                         instruction))
        assert not stated, (family, index, stated)


@pytest.mark.parametrize("family", DEEP)
def test_a_deep_solution_takes_three_to_eight_actions(tmp_path, family):
    counts = {len([line for line in solution_lines((write_task(tmp_path, family, 2, i) / "solution" /
                                                     "solve.sh").read_text()) if not line.startswith("cd ")])
              for i in range(10)}
    assert min(counts) >= 3 and max(counts) <= 8, counts


MULTI = SETS["multi-round"]


@pytest.mark.parametrize("family", MULTI)
def test_a_multi_round_task_is_harbors_multi_step_layout_with_a_verifier_per_round(tmp_path, family):
    """(tests/harbor_tasks/test_generate.py runs every round's oracle and nop through eval/tasks/check.py, which reads
    each round's CASE_SUMMARY.)"""
    from harbor_tasks.folder import TaskFolder

    a = write_task(tmp_path / "a", family, 6, 0)
    b = write_task(tmp_path / "b", family, 6, 0, world_seed=66)
    folder = TaskFolder.of(a)
    assert folder.steps == ["round-1", "round-2", "round-3"] and not (a / "instruction.md").exists()
    assert folder.config["schema_version"] == "1.2" and folder.config["multi_step_reward_strategy"] == "mean"
    assert folder.config["metadata"]["set"] == "multi-round"
    for step in folder.steps:
        assert (a / "steps" / step / "instruction.md").read_bytes() == (b / "steps" / step / "instruction.md")\
            .read_bytes()
        test = (a / "steps" / step / "tests" / "test.sh").read_text()
        assert "CASE_SUMMARY total_cases=" in test and "FAIL " in test and "PASS " in test
        assert (a / "steps" / step / "solution" / "solve.sh").read_text() != \
            (b / "steps" / step / "solution" / "solve.sh").read_text() or step == "round-1"
