"""Task profiling for agentic GRPO: K trials of the start on every train task, and training on those that disagree.
Runs in: the trainer's main process (training venv), before the first step (recipes/grpo_agentic.py), when the config
sets `profile_attempts`.

A group whose episodes all pass or all fail has zero advantage. As PivotRL profiles pivot rows (trainers/profiling.py,
whose keep rules this applies), this profiles whole tasks once, up front: K trials of the start per task as an eval
in the run's harness (eval.run) at the training temperature; an infrastructure failure is not scored, an agent's
failure scores 0. The profile is output_dir/task_profile.json, reused by a rerun with the same start, K, temperature,
harness and tasks. Why and how: docs/agentic-grpo.md#task-profiling.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from common.errors import ConfigError
from eval.metrics import reward_or_zero
from eval.outcomes import is_infra
from eval.run import evaluate
from eval.settings import EvalSettings
from harbor_tasks.folder import TaskFolder
from trainers.profiling import DROP_REASONS, ProfileOptions, drop_reason, row_profile

PROFILE_FILE = "task_profile.json"
JOBS_DIR = "task_profile_jobs"


def harbor_names(tasks: list[Path]) -> dict[str, Path]:
    """Every name a Harbor trial may give a task (task.toml's [task] name, else the folder's name) -> its folder."""
    names = {}
    for task in tasks:
        declared = (TaskFolder.of(task).config.get("task") or {}).get("name")
        names[task.name] = task
        if isinstance(declared, str) and declared:
            names[declared] = task
    return names


def trial_score(entry: dict) -> float | None:
    """A trial's score in the profile: None when infrastructure ended it (never a score), else its reward (0 when an
    agent failure left none)."""
    return None if is_infra(entry) else reward_or_zero(entry.get("reward"))


def _setting(tasks: list[Path], start: str, settings: EvalSettings, options: ProfileOptions) -> dict:
    """What a reused profile must have been made with."""
    return {"start": str(start), "agent": settings.agent, "k": options.k, "temperature": options.temperature,
            "max_tokens": settings.max_tokens, "max_turns": settings.max_turns,
            "tasks": sorted(task.name for task in tasks)}


def _previous(path: Path, setting: dict) -> dict | None:
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return previous if isinstance(previous, dict) and previous.get("setting") == setting else None


def profile_tasks(tasks: list[Path], start: str, settings: EvalSettings, options: ProfileOptions,
                  output_dir: str | Path, run_eval=evaluate, progress=print) -> tuple[list[Path], dict]:
    """The tasks to train on (those `options` keep, in their order) and the profile (written to
    output_dir/task_profile.json). `settings`: the run's eval settings; suite, attempts, temperature and jobs_dir are
    set here. A profile that keeps no task is a ConfigError naming the counts and the fix."""
    output_dir = Path(output_dir)
    path = output_dir / PROFILE_FILE
    setting = _setting(tasks, start, settings, options)
    profile = _previous(path, setting)
    if profile is not None:
        progress(f"task profile: reused {path} ({profile['trials']} trials of {len(tasks)} tasks)")
    else:
        profile = _profile(tasks, start, settings, options, output_dir, run_eval, progress)
        profile["setting"] = setting
        output_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(profile, indent=2), encoding="utf-8")
    # the keep rule is applied on every run, so a rerun with another profile_keep or profile_max_mean reuses the trials
    dropped: Counter = Counter()
    kept = []
    for task in tasks:
        reason = drop_reason(profile["tasks"][task.name], options)
        if reason:
            dropped[reason] += 1
        else:
            kept.append(task)
    report = {"file": str(path), "tasks": len(tasks), "kept": len(kept),
              "dropped": {reason: dropped[reason] for reason in DROP_REASONS if dropped[reason]},
              "keep": options.keep, "max_mean": options.max_mean, "k": options.k,
              "temperature": options.temperature, "trials": profile["trials"], "scored": profile["scored"],
              "mean_pass_rate": profile["mean_pass_rate"], "seconds": profile["seconds"], "jobs": profile["jobs"]}
    progress(summary_line(report))
    if not kept:
        raise ConfigError(f"task profile ({path}): no train task kept of {len(tasks)} ({report['dropped']}) with "
                          f"profile_keep {options.keep}, profile_max_mean {options.max_mean}: train on more tasks "
                          f"(generate_n), raise profile_attempts, or set profile_keep: all")
    return kept, report


def _profile(tasks: list[Path], start: str, settings: EvalSettings, options: ProfileOptions, output_dir: Path,
             run_eval, progress) -> dict:
    """K trials of `start` on every task, one eval per task folder; {task: row_profile} and the counts."""
    names = harbor_names(tasks)
    scores: dict[str, list[float | None]] = {task.name: [] for task in tasks}
    jobs = []
    started = time.monotonic()
    for root in sorted({task.parent for task in tasks}):
        suite = replace(settings, suite=str(root), attempts=options.k, temperature=options.temperature,
                        jobs_dir=str(output_dir / JOBS_DIR))
        results = run_eval(str(start), suite, results_dir=output_dir / JOBS_DIR, progress=progress)
        jobs.append(results.get("harbor_job_dir"))
        for entry in results["tasks"]:
            task = names.get(entry["task"]) or names.get(str(entry["task"]).rsplit("/", 1)[-1])
            if task is not None:  # a folder's task the run does not train on is left out
                scores[task.name].append(trial_score(entry))
    by_task = {}
    for name, got in scores.items():
        got = (got + [None] * options.k)[:max(options.k, len(got))]  # a trial Harbor never ran counts as not scored
        by_task[name] = row_profile(got, str(start))
    scored = [score for got in scores.values() for score in got if score is not None]
    return {"tasks": by_task, "trials": sum(len(got) for got in scores.values()), "scored": len(scored),
            "mean_pass_rate": round(sum(scored) / len(scored), 4) if scored else None,
            "seconds": round(time.monotonic() - started, 1), "jobs": jobs}


def summary_line(report: dict) -> str:
    return (f"task profile: kept {report['kept']} of {report['tasks']} train tasks (keep {report['keep']}, mean below "
            f"{report['max_mean']}; dropped {report['dropped'] or '{}'}) from {report['k']} trials each at temperature "
            f"{report['temperature']}: {report['scored']} of {report['trials']} trials scored, pass rate "
            f"{report['mean_pass_rate']}, {report['seconds']} s; {report['file']}")
