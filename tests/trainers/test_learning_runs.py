"""trainers/learning_runs.py: the families a run takes (sets and names, one clear error) and the replay baseline's
tasks (the train instructions over held-out worlds, with the train world's solution)."""

import pytest

from common.errors import ConfigError
from harbor_tasks.families import SETS
from harbor_tasks.folder import TaskFolder
from harbor_tasks.generate import generate
from trainers.learning_runs import checked_families, replay_tasks


def test_checked_families_takes_sets_and_names():
    assert checked_families(None) == SETS["shallow"]
    assert checked_families("deep,csv-column") == SETS["deep"] + ["csv-column"]
    assert checked_families(None, ["find-owner"]) == ["find-owner"]
    with pytest.raises(ConfigError, match="--families: unknown dep; sets: shallow, deep, multi-round; families: "):
        checked_families("dep")


def test_replay_tasks_are_the_train_instructions_over_held_out_worlds_with_the_train_solutions(tmp_path):
    train = generate(tmp_path / "train", 1, 16, ["shallow", "deep"])  # tasks 10-15: the first six deep families
    replayed = replay_tasks(tmp_path / "train", tmp_path / "replay", 1001, 6)
    assert len(replayed) == 6  # the first six tasks of a deep family (a shallow task has no other world)
    by_name = {t.name: t for t in train}
    for task in replayed:
        source = by_name[task.name.removesuffix("-w1001")]
        assert TaskFolder.of(task).config["metadata"]["world_seed"] == 1001
        assert (task / "instruction.md").read_bytes() == (source / "instruction.md").read_bytes()
        assert (task / "solution" / "solve.sh").read_bytes() == (source / "solution" / "solve.sh").read_bytes()
        assert (task / "tests" / "test.sh").read_bytes() != (source / "tests" / "test.sh").read_bytes()
