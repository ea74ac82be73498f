"""trainers/learning_runs.py: the families a run takes (sets and names, one clear error), the replay baseline's
tasks (the train instructions over held-out worlds, with the train world's solution) and the stages `--resume` reads
back."""

import json

import pytest

from common.errors import ConfigError
from harbor_tasks.families import SETS
from harbor_tasks.folder import TaskFolder
from harbor_tasks.generate import generate
from trainers.learning_runs import Stages, checked_families, replay_tasks


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


def test_resume_reads_back_the_stages_that_finished_and_runs_the_one_that_stopped(tmp_path, capsys):
    out, ran = tmp_path / "run", []

    def work(name, result, fail=False):
        def run():
            ran.append(name)
            if fail:
                raise RuntimeError(f"{name} stopped")
            return result
        return run

    stage = Stages("test", out, {}, {"seed": 0, "families": ("a", "b")}, resume=False)
    assert stage("tasks", work("tasks", None)) is None
    assert stage("teacher", work("teacher", {"solved": 1.0, "job": "j"})) == {"solved": 1.0, "job": "j"}
    with pytest.raises(RuntimeError):
        stage("arm", work("arm", 1, fail=True))
    timings = {}
    stage = Stages("test", out, timings, {"seed": 0, "families": ("a", "b")}, resume=True)
    assert stage("tasks", work("tasks", None)) is None
    assert stage("teacher", work("teacher", {})) == {"solved": 1.0, "job": "j"}  # what it returned then
    assert stage("arm", work("arm", 2)) == 2
    assert ran == ["tasks", "teacher", "arm", "arm"] and stage.read_back == ["tasks", "teacher"]
    assert set(timings) == {"tasks", "teacher", "arm"}
    assert "=== test: teacher: done before" in capsys.readouterr().out
    recorded = json.loads((out / "stages.json").read_text())
    assert list(recorded["stages"]) == ["tasks", "teacher", "arm"] and recorded["arguments"]["families"] == ["a", "b"]


def test_resume_refuses_a_folder_made_with_other_arguments_and_a_fresh_run_starts_empty(tmp_path):
    out = tmp_path / "run"
    Stages("test", out, {}, {"seed": 0, "steps": 30}, resume=False)("tasks", lambda: None)
    (out / "stale.txt").write_text("from before")
    with pytest.raises(ConfigError, match=r"--resume: .*run was made with other arguments \(steps: 30 there, 40 "
                                          r"now\); pass the same ones, or leave out --resume"):
        Stages("test", out, {}, {"seed": 0, "steps": 40}, resume=True)
    assert (out / "stale.txt").is_file()  # refused: nothing removed
    stage = Stages("test", out, {}, {"seed": 0, "steps": 40}, resume=False)
    assert not (out / "stale.txt").exists() and stage.done == {}
    assert Stages("test", tmp_path / "new", {}, {}, resume=True).done == {}  # nothing to resume: from nothing
    old = tmp_path / "old"  # a run made before --resume (no stages.json): refused, not emptied
    (old / "checkpoint-4").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"--resume: .*old holds a run without stages.json, which --resume cannot "
                                          r"read back; nothing removed; leave out --resume"):
        Stages("test", old, {}, {}, resume=True)
    assert (old / "checkpoint-4").is_dir()
