"""Metrics of an existing Harbor job directory.
Runs in: the training venv (standard library only); reads the job dir, runs nothing.

    python -m eval.score JOB_DIR [--json] [--infra_errors exclude|zero]

Prints eval/metrics.py's suite metrics (mean_reward, pass_at_k, stderr, n_trials, infrastructure failures by kind,
exceptions; mt_at_k, case_score and rounds_reached for multi-step tasks). `--json` prints {"job_dir", "agent",
"model", "datasets", "multi_step", "metrics", "tasks"}. Exit status 2, with one line on stderr, when JOB_DIR is
missing or not a job directory.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from eval.job_dir import NotAJobDir, read_job
from eval.outcomes import INFRA_MODES


def score_job(job_dir: str | Path, infra_errors: str = "exclude") -> dict:
    """{"job_dir", "agent", "model", "datasets", "multi_step", "metrics", "tasks"} of one Harbor job dir."""
    job = read_job(job_dir)
    return {
        "job_dir": str(job.path),
        "agent": job.agent,
        "model": job.model,
        "datasets": job.datasets,
        "multi_step": job.multi_step,
        "metrics": job.metrics(infra_errors=infra_errors),
        "tasks": job.trials,
    }


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def metric_rows(metrics: dict) -> list[tuple[str, str]]:
    """(name, value) rows for a metrics dict, dicts spread one row per key."""
    rows = [("mean_reward", _fmt(metrics.get("mean_reward"))), ("stderr", _fmt(metrics.get("stderr")))]
    rows += [(f"pass@{k}", _fmt(v)) for k, v in (metrics.get("pass_at_k") or {}).items()]
    if "mt_at_k" in metrics:
        rows += [(f"MT@{k}", _fmt(v)) for k, v in (metrics.get("mt_at_k") or {}).items()]
        rows += [("case_score", _fmt(metrics.get("case_score"))),
                 ("rounds_reached", _fmt(metrics.get("rounds_reached"), 2))]
    rows.append(("n_trials", str(metrics.get("n_trials", 0))))
    if "n_scored" in metrics:
        rows.append(("n_scored", str(metrics["n_scored"])))
        infra = metrics.get("infra_errors") or {}
        rows.append((f"infra errors ({metrics.get('infra_errors_counted', 'excluded')})",
                     ", ".join(f"{k}: {v}" for k, v in infra.items()) or "none"))
    exceptions = metrics.get("exceptions") or {}
    rows.append(("exceptions", ", ".join(f"{k}: {v}" for k, v in exceptions.items()) or "none"))
    return rows


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    # piped output (CI logs, tests) gets a wide console instead of rich's 80 columns, so nothing is cut
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    title = f"{report['job_dir']}  ·  agent {report['agent'] or '?'}  ·  model {report['model'] or '?'}"
    summary = Table(title=title, show_header=True, title_justify="left")
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    for name, value in metric_rows(report["metrics"]):
        summary.add_row(name, value)
    console.print(summary)

    per_task = Table(title="per task", title_justify="left")
    per_task.add_column("task")
    per_task.add_column("attempts", justify="right")
    per_task.add_column("rewards")
    if report["multi_step"]:
        per_task.add_column("rounds passed (per attempt)")
        per_task.add_column("cases (per attempt)")
    per_task.add_column("exceptions")
    groups: dict[str, list[dict]] = {}
    for trial in report["tasks"]:
        groups.setdefault(trial["task"], []).append(trial)
    for task, trials in groups.items():
        row = [task, str(len(trials)), " ".join(_fmt(t["reward"], 2) for t in trials)]
        if report["multi_step"]:
            row.append("  ".join("".join("✓" if (r["reward"] or 0) >= 0.999 else "✗" for r in t["rounds"]) or "-"
                                 for t in trials))
            row.append("  ".join(",".join(f"{r['success_count']}/{r['total_cases']}" if r["total_cases"] is not None
                                          else "-" for r in t["rounds"]) or "-" for t in trials))
        row.append(", ".join(sorted({t["exception"] + (f" (infra: {t['infra_kind']})" if t.get("infra_kind") else "")
                                     for t in trials if t["exception"]})) or "")
        per_task.add_row(*row)
    console.print(per_task)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.score", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job_dir", metavar="JOB_DIR", help="a Harbor job directory (jobs/<job_name>)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--infra_errors", choices=INFRA_MODES, default="exclude",
                        help="infrastructure failures: left out of the means, or counted 0 (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        report = score_job(args.job_dir, args.infra_errors)
    except NotAJobDir as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
