"""Task profiling before agentic GRPO (trainers/task_profiling.py): K trials of the start per train task, the tasks whose
trials disagree kept; a real Harbor job with the oracle agent, and the bookkeeping on eval.run's results."""

import json
import shutil

import pytest

from common.errors import ConfigError
from eval.settings import EvalSettings
from harbor_tasks.generate import generate
from trainers.profiling import ProfileOptions
from trainers.task_profiling import PROFILE_FILE, profile_tasks


def no_eval(*args, **kwargs):
    raise AssertionError("profiled again: the saved profile should have been reused")


def results(*trials):
    """eval.run's results: (Harbor task name, reward, outcome) per trial."""
    return {"harbor_job_dir": "job", "tasks": [{"task": task, "reward": reward, "outcome": outcome}
                                               for task, reward, outcome in trials]}


def suite(root, n=3):
    generate(root, 5, n, ["largest-file"])
    return sorted(p for p in root.iterdir() if p.is_dir())


def test_trials_become_a_profile_per_task_and_the_mixed_tasks_are_kept(tmp_path):
    a, b, c = suite(tmp_path / "tasks")
    calls = []

    def fake_eval(start, settings, results_dir, progress):  # a Harbor job's results, as eval.run returns them
        calls.append(settings)
        return results((f"terminal-recipes/{a.name}", 1.0, "scored"), (f"terminal-recipes/{a.name}", 0.0, "scored"),
                       (f"terminal-recipes/{b.name}", 1.0, "scored"), (f"terminal-recipes/{b.name}", 1.0, "scored"),
                       (f"terminal-recipes/{c.name}", None, "infra_failure"),
                       (f"terminal-recipes/{c.name}", None, "agent_failure"),
                       ("terminal-recipes/not-in-the-run", 1.0, "scored"))

    options = ProfileOptions(k=2, keep="mixed", temperature=1.0)
    kept, report = profile_tasks([a, b, c], "START", EvalSettings(suite="", max_tokens=99), options, tmp_path / "run",
                                 run_eval=fake_eval, progress=lambda line: None)
    [settings] = calls
    assert (settings.suite, settings.attempts, settings.temperature, settings.max_tokens) == (
        str(tmp_path / "tasks"), 2, 1.0, 99)
    assert settings.jobs_dir == str(tmp_path / "run" / "task_profile_jobs")
    assert kept == [a]
    # c: an infrastructure failure is no score (one scored trial: no spread), an agent's failure scores 0
    assert report["dropped"] == {"infrastructure": 1, "too_easy": 1}
    assert (report["tasks"], report["trials"], report["scored"]) == (3, 6, 5)
    saved = json.loads((tmp_path / "run" / PROFILE_FILE).read_text())
    assert saved["tasks"][a.name]["rewards"] == [1.0, 0.0] and saved["tasks"][a.name]["std"] == 0.5
    assert saved["tasks"][c.name]["rewards"] == [0.0] and saved["tasks"][c.name]["infra_failures"] == 1

    # a rerun with the same start, K and temperature reuses the trials; another keep rule applies to them
    kept, report = profile_tasks([a, b, c], "START", EvalSettings(suite="", max_tokens=99),
                                 ProfileOptions(k=2, keep="all", temperature=1.0), tmp_path / "run",
                                 run_eval=no_eval, progress=lambda line: None)
    assert kept == [a, b] and report["dropped"] == {"infrastructure": 1}
    # another start is profiled afresh
    with pytest.raises(AssertionError, match="profiled again"):
        profile_tasks([a, b, c], "OTHER", EvalSettings(suite=""), options, tmp_path / "run", run_eval=no_eval,
                      progress=lambda line: None)


def test_a_profile_that_keeps_nothing_names_the_counts_and_the_fix(tmp_path):
    [a] = suite(tmp_path / "tasks", 1)
    both_fail = results((a.name, 0.0, "scored"), (a.name, 0.0, "scored"))  # a task.toml-less name: the folder's
    with pytest.raises(ConfigError, match=r"no train task kept of 1 \(\{'no_variance': 1\}\).*generate_n.*"
                                          r"profile_attempts.*profile_keep: all"):
        profile_tasks([a], "START", EvalSettings(suite=""), ProfileOptions(k=2), tmp_path / "run",
                      run_eval=lambda *args, **kwargs: both_fail, progress=lambda line: None)


def test_the_profile_keys_are_checked_where_the_config_is_read():
    from trainers.agentic import AgenticTaskArguments

    assert AgenticTaskArguments(profile_attempts=4, profile_keep="hard", profile_max_mean=0.5).profile_options(
        0.9) == ProfileOptions(k=4, keep="hard", max_mean=0.5, temperature=0.9)
    for bad in ({"profile_attempts": 1}, {"profile_attempts": -1}, {"profile_keep": "easy"},
                {"profile_max_mean": 0.0}, {"profile_max_mean": 1.5}):
        with pytest.raises(ValueError, match="profile_"):
            AgenticTaskArguments(**bad)


@pytest.mark.slow
def test_a_real_harbor_profile_with_the_oracle_agent(tmp_path):
    """The oracle solves the generated tasks and fails the one whose solution was emptied: K=2 trials each in one
    Harbor job, the solved too easy and the broken with no spread."""
    good = suite(tmp_path / "tasks", 2)
    broken = tmp_path / "tasks" / "broken"
    shutil.copytree(good[0], broken)
    (broken / "solution" / "solve.sh").write_text("#!/bin/bash\nexit 0\n")
    text = (broken / "task.toml").read_text().replace(f'name = "terminal-recipes/{good[0].name}"',
                                                      'name = "terminal-recipes/broken"')
    (broken / "task.toml").write_text(text)
    tasks = sorted(good + [broken])
    settings = EvalSettings(suite="", agent="oracle", concurrency=2)
    lines = []
    kept, report = profile_tasks(tasks, "oracle", settings, ProfileOptions(k=2, keep="hard"), tmp_path / "run",
                                 progress=lines.append)
    assert kept == [broken]
    assert report["dropped"] == {"too_easy": 2} and (report["trials"], report["scored"]) == (6, 6)
    saved = json.loads((tmp_path / "run" / PROFILE_FILE).read_text())
    assert {name: p["rewards"] for name, p in saved["tasks"].items()} == {
        good[0].name: [1.0, 1.0], good[1].name: [1.0, 1.0], "broken": [0.0, 0.0]}
    assert (tmp_path / "run" / "task_profile_jobs" / "eval_results.json").is_file()
    assert any(line.startswith("task profile: kept 1 of 3") for line in lines)
    with pytest.raises(ConfigError, match="no train task kept of 3"):  # mixed: nothing varies; no new trials
        profile_tasks(tasks, "oracle", settings, ProfileOptions(k=2), tmp_path / "run", run_eval=no_eval,
                      progress=lines.append)
