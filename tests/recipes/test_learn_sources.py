"""The learning run on another policy's trajectories (recipes/learn.py --source, trainers/trajectory_sources.py):
re-solved (environments rebuilt from them alone, the scripted teacher's verified solutions trained) or imitated (the
trajectories as they are). A scripted teacher's job on the run's own train tasks plays the source policy here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, scripted_teacher_job
from test_learn import small_config

SEED, N, FAMILIES = 3, 4, ["find-owner", "json-join"]


@pytest.fixture(scope="module")
def source_job(tmp_path_factory) -> Path:
    """The source policy's job on the tasks a run with --train_seed 3 --train_tasks 4 --families find-owner,json-join
    trains on (generated elsewhere: the run replaces its own folder)."""
    return scripted_teacher_job(tmp_path_factory.mktemp("source"), SEED, N, FAMILIES)


def learn(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    config = small_config(tmp_path, "learn.yaml", max_steps=2, save_steps=2, eval_steps=2)
    return subprocess.run([sys.executable, "recipes/learn.py", "--config", str(config), "--train_tasks", str(N),
                           "--eval_tasks", "1", "--overfit_tasks", "0", "--families", ",".join(FAMILIES),
                           "--train_seed", str(SEED), "--eval_seed", "7", "--copy_steps", "5", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_resolve_rebuilds_the_sources_environments_and_trains_on_the_teachers_solutions(tmp_path, source_job):
    """Into --output_dir, as an ablation's arms run: the SFT step too reads the relocated config (it once read the
    given one, and trained into the config's folder)."""
    out = tmp_path / "moved"
    run = learn(tmp_path, "--source", str(source_job), "--source_use", "resolve", "--output_dir", str(out))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert not (tmp_path / "learn").exists() and (out / "checkpoint-2" / "model.safetensors").is_file()
    source = json.loads((out / "learn_summary.json").read_text())["teacher"]["source"]
    assert source["use"] == "resolve" and source["trials"] == N and source["solved"] == 1.0
    assert source["rebuilt"] == N and source["kept"] == N and source["teacher_solved"] == 1.0
    rebuilt = sorted(p.name for p in (out / "tasks" / "rebuilt").iterdir() if (p / "task.toml").is_file())
    assert len(rebuilt) == N
    for name in rebuilt:  # the user's request recovered as the instruction, the environment the source's
        task = out / "tasks" / "rebuilt" / name
        assert 'stand_in = "source"' in (task / "task.toml").read_text()
    # SFT read the teacher's re-solutions of the rebuilt tasks, with the config's min_reward
    [job] = [p for p in (out / "teacher").iterdir() if p.is_dir()]
    solved = {json.loads(t.read_text())["config"]["task"]["path"] for t in job.glob("*/result.json")}
    assert len(solved) == N and all(str(out / "tasks" / "rebuilt") in path for path in solved)
    assert "used to resolve: trials 4" in run.stdout and not (out / "sft-config.yaml").exists()


def test_imitate_keeps_every_trajectory_and_drops_only_min_reward(tmp_path, source_job):
    from common.errors import ConfigError
    from trainers.trajectory_sources import check_source, imitate, imitate_config

    from harbor_tasks.generate import generate

    train = tmp_path / "train"
    generate(train, SEED, N, FAMILIES)
    assert check_source(source_job, train) == {"job": str(source_job), "trials": N, "solved": 1.0}
    assert imitate(source_job, tmp_path / "teacher") == {"sft_trajectories": N}
    assert sorted(p.name for p in (tmp_path / "teacher" / source_job.name).iterdir()) == \
        sorted(p.name for p in source_job.iterdir())
    config = yaml.safe_load((REPO / "configs" / "sft" / "learn-deep.yaml").read_text())
    written = yaml.safe_load(imitate_config(config, tmp_path / "sft.yaml").read_text())
    assert written["datasets"] == [{"path": "outputs/learn-deep/teacher"}]
    assert {k: v for k, v in written.items() if k != "datasets"} == {k: v for k, v in config.items() if k != "datasets"}
    other = tmp_path / "other"
    generate(other, SEED + 1, N, FAMILIES)
    with pytest.raises(ConfigError, match=r"4 trials are of tasks that are not this run's train tasks \(e.g. "
                                          r"find-owner-3-0"):
        check_source(source_job, other)
    with pytest.raises(ConfigError, match="no trial there|not a Harbor job"):
        check_source(train, train)


def test_a_source_the_run_would_replace_or_a_source_without_its_use_is_refused(tmp_path):
    config = small_config(tmp_path, "learn.yaml")
    inside = tmp_path / "learn" / "checkpoint-2"
    inside.mkdir(parents=True)
    run = subprocess.run([sys.executable, "recipes/learn.py", "--config", str(config), "--source_checkpoint",
                          str(inside), "--source_use", "imitate"], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and f"{inside} lies under {tmp_path / 'learn'}, which this run replaces" in run.stderr
    assert inside.is_dir()  # refused before anything was removed
    run = subprocess.run([sys.executable, "recipes/learn.py", "--config", str(config), "--source", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and "--source_use goes with --source" in run.stderr
