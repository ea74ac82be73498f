"""eval_results.json, the one file an eval leaves in the checkpoint dir: its name, its keys, building it, suite slugs.
Runs in: the training venv (standard library only); written by eval.run, read by the eval callback and eval/.

    {"checkpoint", "global_step", "suite", "agent", "model", "metrics", "tasks": [{"task", "trial", "reward",
     "rounds", "exception", "outcome", "infra_kind", "tamper"}], "harbor_job_dir", "settings", "wall_seconds"}

`metrics` is `eval.metrics.compute_metrics`'s dict; `summary_line` is the one line a finished eval prints.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

RESULTS_FILE = "eval_results.json"
RESULTS_GLOB = "eval_results*.json"
RESULT_KEYS = ("checkpoint", "global_step", "suite", "agent", "model", "metrics", "tasks", "harbor_job_dir",
               "settings", "wall_seconds")
TASK_KEYS = ("task", "trial", "reward", "rounds", "exception", "outcome", "infra_kind", "tamper")


def suite_slug(suite: str) -> str:
    """The suite's name in W&B keys and file names: builtin:terminal -> terminal, a local task folder -> its name,
    terminal-bench@2.0 -> terminal-bench_2.0."""
    name = (Path(suite).name if not suite.startswith("builtin:") and Path(suite).exists()
            else suite.removeprefix("builtin:"))
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def results_file(suite: str, several_suites: bool = False) -> str:
    """The results file of a suite: eval_results.json, or eval_results_<slug>.json when a checkpoint gets
    several suites."""
    return f"eval_results_{suite_slug(suite)}.json" if several_suites else RESULTS_FILE


def build_results(*, checkpoint: str | Path, global_step: int | None, settings, model: str | None, metrics: dict,
                  trials: list[dict], harbor_job_dir: str | Path, wall_seconds: float) -> dict:
    """The eval_results dict (RESULT_KEYS, in order) of one suite on one checkpoint; `settings` an EvalSettings."""
    return {
        "checkpoint": str(checkpoint), "global_step": global_step, "suite": settings.suite,
        "agent": settings.agent, "model": model, "metrics": metrics,
        "tasks": [{key: trial.get(key) for key in TASK_KEYS} for trial in trials],
        "harbor_job_dir": str(harbor_job_dir), "settings": asdict(settings),
        "wall_seconds": round(wall_seconds, 1),
    }


def write_results(results: dict, checkpoint: str | Path, results_file: str,
                  results_dir: str | Path | None = None) -> None:
    """`results_file` into `results_dir`, else into the checkpoint's folder when it is one (a hub name has none)."""
    folder = Path(results_dir) if results_dir is not None else Path(checkpoint)
    if results_dir is not None:
        folder.mkdir(parents=True, exist_ok=True)
    if folder.is_dir():
        (folder / results_file).write_text(json.dumps(results, indent=2))


def _fmt(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def summary_line(results: dict) -> str:
    """`eval: step S SUITE (AGENT): mean_reward M over N scored trials, pass@1 P; K infrastructure failures left
    out (network 2, ...); exceptions {...}; job DIR` (or "counted as 0" with infra_errors zero)."""
    m = results["metrics"]
    step = f"step {results['global_step']} " if results.get("global_step") is not None else ""
    text = (f"eval: {step}{results['suite']} ({results['agent']}): mean_reward {_fmt(m.get('mean_reward'))} over "
            f"{m.get('n_scored', m.get('n_trials'))} scored trials, pass@k {m.get('pass_at_k')}")
    n_infra = m.get("n_infra_errors") or 0
    if n_infra:
        kinds = ", ".join(f"{k} {v}" for k, v in (m.get("infra_errors") or {}).items())
        how = "counted as 0" if m.get("infra_errors_counted") == "as 0" else "left out"
        text += f"; {n_infra} infrastructure failure{'s' if n_infra > 1 else ''} {how} ({kinds})"
    else:
        text += "; no infrastructure failures"
    if m.get("n_tampered"):
        kinds = ", ".join(f"{k} {v}" for k, v in (m.get("tampered") or {}).items())
        text += f"; {m['n_tampered']} with tamper evidence ({kinds})"
    return text + f"; exceptions {m.get('exceptions') or {}}; job {results['harbor_job_dir']}"
