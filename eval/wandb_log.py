"""Eval results into a W&B run: `eval/<suite>/<metric>` at the checkpoint's global step, and a per-task table.
Runs in: the training venv (wandb), in the trainer's eval callback or eval.run.

The keys use `train/global_step` as their x-axis, so evals land at their checkpoint's step even when they arrive later.
"""

from __future__ import annotations

import json

from eval.results import TASK_KEYS, suite_slug
from harbor_tasks.verdict import INFRA_KINDS, TAMPER_KINDS


def eval_payload(results: dict) -> dict:
    """Flat scalars: eval/<suite>/mean_reward, eval/<suite>/pass_at_k/<k>, eval/<suite>/exceptions/<Type>,
    eval/<suite>/n_infra_errors, eval/<suite>/infra_errors/<kind> (every kind, 0 when none), likewise
    eval/<suite>/n_tampered and eval/<suite>/tampered/<kind>, ..."""
    prefix = f"eval/{suite_slug(results['suite'])}"
    metrics = dict(results["metrics"])
    if "n_infra_errors" in metrics:  # every kind at every step, so the charts have no gaps
        metrics["infra_errors"] = {**{k: 0 for k in INFRA_KINDS}, **(metrics.get("infra_errors") or {})}
    if "n_tampered" in metrics:
        metrics["tampered"] = {**{k: 0 for k in TAMPER_KINDS}, **(metrics.get("tampered") or {})}
    payload = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            payload.update({f"{prefix}/{key}/{k}": v for k, v in value.items() if isinstance(v, (int, float))})
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            payload[f"{prefix}/{key}"] = value
    return payload


def log_results(run, results: dict) -> None:
    """Log into an active run (the training run itself, in-process)."""
    import wandb

    prefix = f"eval/{suite_slug(results['suite'])}"
    run.define_metric("train/global_step")
    run.define_metric("eval/*", step_metric="train/global_step")
    # rounds (a list) as a JSON string: a table cell holds a scalar
    table = wandb.Table(columns=list(TASK_KEYS),
                        data=[[json.dumps(t.get(key) or ([] if key == "rounds" else {})) if key in ("rounds", "tamper")
                               else t.get(key) for key in TASK_KEYS]
                              for t in results["tasks"]])
    run.log({**eval_payload(results), f"{prefix}/tasks": table, "train/global_step": results["global_step"] or 0})


def log_to_run(results: dict, run_id: str, project: str) -> None:
    """Resume a run by id (e.g. from `python -m eval.run --wandb_run_id`) and log into it."""
    import wandb

    run = wandb.init(id=run_id, project=project, resume="allow")
    try:
        log_results(run, results)
    finally:
        run.finish()
