"""The learning run's SFT trajectories from another policy (`recipes/learn.py --source*`): imitated or re-solved.
Runs in: the training venv, in recipes/learn.py's driver process.

The Terminal-Universe ablation (docs/learn.md, "Re-solving against imitating"): a weaker policy's trajectories on the
train tasks either train the student as they are (`imitate`: solved or not, the config's `min_reward` dropped), or
only show where the work happens: environments rebuilt from them alone (eval.from_trajectories, Stage 1 and the
source stand-in for stages 2-3), re-solved by the scripted teacher, its verified solutions kept (`resolve`).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import yaml

from common.errors import ConfigError
from eval.from_trajectories import SourceStandIn, rebuild_environments
from eval.job_dir import NotAJobDir, read_job
from eval.run import evaluate
from eval.scripted_teacher import collect as collect_teacher
from harbor_tasks.folder import TaskFolder, task_folders
from harbor_tasks.verdict import INFRA_FAILURE

USES = ("imitate", "resolve")
NOT_COPIED = ("eval_jobs", "eval_results*", "optimizer.pt", "scheduler.pt", "rng_state*")  # of a source checkpoint


def run_policy(checkpoint: Path, tasks: Path, out: Path, settings) -> Path:
    """`checkpoint`'s trajectories on every task of `tasks`, with the run's eval `settings` (its harness, greedy):
    the checkpoint is copied to out/source-policy first (the eval writes its results beside it; nothing is written
    outside the run). Returns the Harbor job."""
    if not (checkpoint / "config.json").is_file():
        raise ConfigError(f"--source_checkpoint {checkpoint}: no config.json there; name a saved checkpoint "
                          "(a checkpoint-N folder or a final model)")
    policy = out / "source-policy"
    shutil.copytree(checkpoint, policy, ignore=shutil.ignore_patterns(*NOT_COPIED))
    settings = dataclasses.replace(settings, suite=str(tasks), jobs_dir=str(out / "source"))
    return Path(evaluate(str(policy), settings, "eval_results_source.json")["harbor_job_dir"])


def check_source(job: Path, train: Path) -> dict:
    """The source job's trials against the run's train tasks: every trial must be of one (the held-out tasks stay
    unseen); its size and solved share."""
    try:
        trials = read_job(job).trials
    except NotAJobDir as err:
        raise ConfigError(f"--source {job}: {err}") from None
    if not trials:
        raise ConfigError(f"--source {job}: no trial there; name a Harbor job dir of the policy on the train tasks")
    names = {TaskFolder.of(task).name for task in task_folders(train)}
    foreign = sorted({t["task"].split("/")[-1] for t in trials} - names)
    if foreign:
        raise ConfigError(f"--source {job}: {len(foreign)} trials are of tasks that are not this run's train tasks "
                          f"(e.g. {', '.join(foreign[:3])}); run the policy on {train} (same --train_seed and "
                          "--families)")
    scores = [t["reward"] or 0.0 for t in trials if t["outcome"] != INFRA_FAILURE]
    return {"job": str(job), "trials": len(trials), "solved": round(sum(scores) / len(scores), 4) if scores else None}


def imitate_config(config: dict, path: Path) -> Path:
    """The SFT config with its trajectory source's `min_reward` dropped, written to `path`: every trajectory."""
    datasets = [dict(d) if isinstance(d, dict) else {"path": d} for d in config["datasets"]]
    datasets[0].pop("min_reward", None)
    path.write_text(yaml.safe_dump({**config, "datasets": datasets}, sort_keys=False))
    return path


def imitate(job: Path, teacher: Path) -> dict:
    """The source's trajectories as the run's SFT data, in teacher/ where the config reads it."""
    shutil.copytree(job, teacher / job.name)
    return {"sft_trajectories": len(read_job(job).trials)}


def resolve(job: Path, out: Path, teacher: Path, concurrency: int, agent: str) -> dict:
    """Environments rebuilt from the source's trajectories alone (out/tasks/rebuilt; the source stand-in completes
    them), re-solved by the scripted teacher into teacher/; the config's min_reward keeps the verified."""
    rebuilt = out / "tasks" / "rebuilt"
    report = rebuild_environments([str(job)], rebuilt, SourceStandIn(), run_check=False)
    if not task_folders(rebuilt):
        raise ConfigError(f"--source {job}: no environment could be rebuilt from its trajectories (skipped: "
                          f"{report.get('skipped')}); see {rebuilt / 'report.json'}")
    solved = collect_teacher(rebuilt, teacher, concurrency, agent=agent)
    stages = report["stages_2_3"]
    return {"rebuilt": report.get("rebuilt"), "skipped": report.get("skipped"), "kept": stages["kept"],
            "rejected": len(stages["rejected"]), "infra_failures": len(stages["infra_failures"]),
            "teacher_trials": solved["metrics"].get("n_trials"), "teacher_solved": solved["metrics"].get("mean_reward")}
