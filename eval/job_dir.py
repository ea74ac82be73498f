"""Read a Harbor job directory into per-trial records (no Harbor import; works on any copy of a job dir).
Runs in: the training venv (standard library only, with harbor_tasks and eval.metrics); eval.run, eval.score, tests.

Each trial becomes `{"task", "trial", "attempt", "reward", "rounds": [...], "exception", "outcome", "infra_kind",
"tamper"}` (tamper: what the harness recorded of the agent touching its verifier's runs, {kind: detail});
files that are missing or unreadable never raise. The job dir's layout and how a reward is read:
docs/evaluation.md#reading-a-job-dir-evaljob_dirpy.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval import metrics as M
from harbor_tasks.folder import TaskFolder
from harbor_tasks.verdict import agent_started, classify, read_reward_dir, read_tamper_dir, reward_from_rewards

CASE_SUMMARY = re.compile(r"CASE_SUMMARY\b(?P<rest>.*)")
_KV = re.compile(r"(total_cases|success_count)\s*=\s*(\d+)")
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(?P<type>[A-Za-z_]\w*)(?::|$)")
_TRIAL_MARKERS = ("result.json", "config.json", "trial.log", "exception.txt", "verifier", "steps", "agent")


class NotAJobDir(ValueError):
    """The path is not a Harbor job directory (one line, for the CLI)."""


@dataclass
class Job:
    path: Path
    config: dict = field(default_factory=dict)
    result: dict = field(default_factory=dict)
    trials: list[dict] = field(default_factory=list)
    n_rounds: dict[str, int] = field(default_factory=dict)  # declared rounds per multi-step task, when known

    # A Job also behaves as its list of trial records (`for trial in read_job(d)`, `compute_metrics(read_job(d))`);
    # pass `job.n_rounds` too (or call `job.metrics()`) so rounds no attempt reached still count 0.
    def __iter__(self):
        return iter(self.trials)

    def __len__(self) -> int:
        return len(self.trials)

    def __getitem__(self, index):
        return self.trials[index]

    @property
    def multi_step(self) -> bool:
        return M.is_multi_step(self.trials) or any(self.n_rounds.values())

    @property
    def agent(self) -> str | None:
        agents = self.config.get("agents") or []
        return (agents[0] or {}).get("name") if agents else None

    @property
    def model(self) -> str | None:
        agents = self.config.get("agents") or []
        return (agents[0] or {}).get("model_name") if agents else None

    @property
    def datasets(self) -> list[str]:
        names = []
        for ds in self.config.get("datasets") or []:
            name = ds.get("name") or ds.get("path") or ds.get("registry_url")
            if ds.get("name") and ds.get("version"):
                name = f"{ds['name']}@{ds['version']}"
            if name:
                names.append(str(name))
        return names

    def metrics(self, infra_errors: str = "exclude") -> dict:
        """The suite's metrics; infrastructure failures left out of the means (`exclude`) or counted 0 (`zero`)."""
        return M.compute_metrics(self.trials, self.n_rounds, infra_errors=infra_errors)


# ---------------------------------------------------------------- small readers

def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def parse_case_summary(text: str) -> tuple[int | None, int | None]:
    """(total_cases, success_count) from the last `CASE_SUMMARY total_cases=N success_count=M` line."""
    total = success = None
    for match in CASE_SUMMARY.finditer(text):
        found = dict(_KV.findall(match.group("rest")))
        if "total_cases" in found and "success_count" in found:
            total, success = int(found["total_cases"]), int(found["success_count"])
    return total, success


def read_case_summary(verifier_dir: Path) -> tuple[int | None, int | None]:
    """CASE_SUMMARY from the verifier's output: test-stdout.txt (Harbor sends stdout and stderr of test.sh
    there), then test-stderr.txt if an environment split them."""
    for name in ("test-stdout.txt", "test-stderr.txt"):
        try:
            text = (verifier_dir / name).read_text(errors="replace")
        except OSError:
            continue
        total, success = parse_case_summary(text)
        if total is not None:
            return total, success
    return None, None


def _exception_type(info: Any) -> str | None:
    if isinstance(info, dict):
        return info.get("exception_type") or None
    return None


def exception_from_text(path: Path) -> str | None:
    """The exception type from Harbor's exception.txt (a traceback: its last `pkg.mod.Type: message` line)."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith((" ", "\t", "Traceback", "The above", "During handling")):
            continue
        match = _EXC_LINE.match(line.strip())
        if match:
            return match.group("type")
    return None


def _natural_key(name: str):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _declared_steps(task_dir: Path) -> list[str] | None:
    return TaskFolder.of(task_dir).steps or None


def _task_dir_candidates(job_path: Path, trial_config: dict) -> list[Path]:
    task = (trial_config or {}).get("task") or {}
    raw = task.get("path")
    out = []
    if raw:
        p = Path(raw)
        out += [p] if p.is_absolute() else [job_path.parent.parent / p, job_path.parent / p, Path.cwd() / p]
    if task.get("download_dir") and task.get("name"):
        out.append(Path(task["download_dir"]) / str(task["name"]).split("/")[-1])
    return out


# ---------------------------------------------------------------- trials

def is_trial_dir(path: Path) -> bool:
    return path.is_dir() and any((path / marker).exists() for marker in _TRIAL_MARKERS)


def _is_job_like(path: Path) -> bool:
    """A job dir: its own config.json or result.json, and trial dirs inside."""
    if not ((path / "config.json").is_file() or (path / "result.json").is_file()):
        return False
    try:
        return any(is_trial_dir(q) for q in path.iterdir())
    except OSError:
        return False


def _round_record(index: int, name: str, step_result: dict | None, step_dir: Path) -> dict:
    verifier_dir = step_dir / "verifier"
    reward = None
    if step_result is not None and step_result.get("verifier_result") is not None:
        reward = reward_from_rewards((step_result.get("verifier_result") or {}).get("rewards"))
    elif step_result is None:
        reward = read_reward_dir(verifier_dir)
    total, success = read_case_summary(verifier_dir)
    return {"round": index, "name": name, "reward": reward, "total_cases": total, "success_count": success,
            "exception": _exception_type((step_result or {}).get("exception_info"))}


def read_trial(trial_dir: Path) -> dict:
    """One trial dir -> record (attempt is filled in by `read_job`)."""
    result = _read_json(trial_dir / "result.json")
    result = result if isinstance(result, dict) else None
    config = _read_json(trial_dir / "config.json")
    config = config if isinstance(config, dict) else {}

    task = (result or {}).get("task_name")
    if not task:
        task_cfg = config.get("task") or {}
        task = (task_cfg.get("name") or "").split("/")[-1] or Path(str(task_cfg.get("path") or "")).name
    if not task:
        task = trial_dir.name.rsplit("__", 1)[0]

    steps_dir = trial_dir / "steps"
    step_results = (result or {}).get("step_results")
    rounds: list[dict] = []
    if isinstance(step_results, list):
        for i, step in enumerate(step_results, start=1):
            name = str((step or {}).get("step_name") or f"step-{i}")
            rounds.append(_round_record(i, name, step or {}, steps_dir / name))
    elif steps_dir.is_dir():  # no (readable) result.json: Harbor's per-step dirs, in natural order
        names = sorted((p.name for p in steps_dir.iterdir() if p.is_dir()), key=_natural_key)
        rounds = [_round_record(i, name, None, steps_dir / name) for i, name in enumerate(names, start=1)]

    if result is not None:
        reward = reward_from_rewards((result.get("verifier_result") or {}).get("rewards"))
        exception = _exception_type(result.get("exception_info"))
    else:
        # No result.json: Harbor never finished the trial, so it has no reward (counts 0), even if a
        # verifier/reward.txt was left behind. Rounds still come from steps/<step>/verifier/ files.
        reward = None
        exception = exception_from_text(trial_dir / "exception.txt")
    if exception is None:
        exception = next((r["exception"] for r in rounds if r["exception"]), None)
    outcome, infra_kind = classify(exception, agent_started(result))
    tamper = read_tamper_dir(trial_dir / "verifier")
    for step in sorted(steps_dir.iterdir()) if steps_dir.is_dir() else []:
        for kind, detail in read_tamper_dir(step / "verifier").items():
            tamper.setdefault(kind, f"{step.name}: {detail}")

    return {"task": task, "trial": trial_dir.name, "attempt": None, "reward": reward, "rounds": rounds,
            "exception": exception, "outcome": outcome, "infra_kind": infra_kind, "tamper": tamper,
            "_started_at": (result or {}).get("started_at") or "", "_config": config}


def read_job(path: str | Path) -> Job:
    """Read every trial of a Harbor job directory. Raises NotAJobDir with a one-line reason."""
    job_path = Path(path)
    if not job_path.exists():
        raise NotAJobDir(f"{job_path}: no such directory")
    if not job_path.is_dir():
        raise NotAJobDir(f"{job_path}: not a directory (expected a Harbor job directory)")
    config = _read_json(job_path / "config.json")
    result = _read_json(job_path / "result.json")
    subdirs = sorted(p for p in job_path.iterdir() if p.is_dir())
    if (job_path / "verifier").is_dir() or (job_path / "steps").is_dir() or (
            isinstance(result, dict) and "trial_name" in result):
        raise NotAJobDir(f"{job_path}: a trial directory, not a job directory; pass its parent {job_path.parent}")
    if not isinstance(config, dict) and not isinstance(result, dict):
        jobs = [p.name for p in subdirs if _is_job_like(p)]
        if jobs:
            more = f" (+{len(jobs) - 5} more)" if len(jobs) > 5 else ""
            raise NotAJobDir(f"{job_path}: a folder of {len(jobs)} Harbor job(s), not a job directory; "
                             f"pass one of: {', '.join(jobs[:5])}{more}")
        if not any(is_trial_dir(p) for p in subdirs):
            raise NotAJobDir(f"{job_path}: not a Harbor job directory (no config.json, result.json or trial dirs)")
    trial_dirs = [p for p in subdirs if is_trial_dir(p)]

    trials = [read_trial(p) for p in trial_dirs]
    n_rounds: dict[str, int] = {}
    for trial in trials:
        if trial["task"] in n_rounds:
            continue
        for candidate in _task_dir_candidates(job_path, trial["_config"]):
            steps = _declared_steps(candidate)
            if steps:
                n_rounds[trial["task"]] = len(steps)
                break
    # attempts: 1.. per task, in start order (Harbor records no attempt index)
    by_task: dict[str, list[dict]] = {}
    for trial in trials:
        by_task.setdefault(trial["task"], []).append(trial)
    for group in by_task.values():
        group.sort(key=lambda t: (t["_started_at"], t["trial"]))
        for i, trial in enumerate(group, start=1):
            trial["attempt"] = i
    for trial in trials:
        del trial["_started_at"], trial["_config"]
    trials.sort(key=lambda t: (t["task"], t["attempt"]))
    return Job(path=job_path, config=config if isinstance(config, dict) else {},
               result=result if isinstance(result, dict) else {}, trials=trials, n_rounds=n_rounds)
