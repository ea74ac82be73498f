"""The tasks whose score changed between two evaluated checkpoints, each with the first action where the agents differ.
Runs in: the training venv (standard library only); `python -m eval.compare A B --changes`.

A mean that moves says how much; this says which tasks and where: for each suite both checkpoints were scored on,
the tasks whose reward changed (lost, gained), and for each the first command at which the two trajectories differ
(Harbor's `<trial>/agent/trajectory.json`, or its rounds' in order: Terminus-2's keystrokes, the bash tool's
command). A checkpoint that writes `echo Oslo > city.txt` where the other wrote `echo Graz > city.txt` after the same
three looks has kept the looking and lost the value it looked up (docs/learn.md reads agentic GRPO's fall this way).
Beside the counts, a sign test: 2 tasks lost and none gained is p = 0.5, a split a fair coin makes half the time;
`pooled` adds up the comparisons of several seeds, for a claim across them.
"""

from __future__ import annotations

import json
from pathlib import Path

from chat_corpus.harbor_trajectory import agent_commands
from common.stats import sign_test_p

RESULTS_KEY = "tasks"  # eval_results*.json: one entry per trial, {"task", "trial", "reward", "exception", ...}


def _trials(path: Path) -> dict[str, dict]:
    """task -> its trial entry of a results file (the first trial of each task: a pass@1 comparison)."""
    data = json.loads(path.read_text())
    trials: dict[str, dict] = {}
    for entry in data.get(RESULTS_KEY) or []:
        if isinstance(entry, dict) and entry.get("task"):
            trials.setdefault(str(entry["task"]).split("/")[-1], {**entry, "_results": path, "_job": data.get(
                "harbor_job_dir") or ""})
    return trials


def _round_number(path: Path) -> int:
    number = path.parent.parent.name.removeprefix("round-")
    return int(number) if number.isdigit() else 0


def trial_commands(entry: dict) -> list[str] | None:
    """The commands of a trial's agent, from its trajectory (a multi-step trial's rounds in order): in the job dir the
    results name, else in the eval_jobs/ folder beside the results file (a run moved or copied); None when no
    trajectory is found."""
    trial = entry.get("trial")
    if not trial:
        return None
    results = Path(entry["_results"])
    places = (([Path(entry["_job"]) / trial] if entry["_job"] else [])
              + sorted(results.parent.glob(f"eval_jobs/*/{trial}")))
    for place in places:
        paths = [place / "agent" / "trajectory.json"]
        if not paths[0].is_file():
            paths = sorted(place.glob("steps/round-*/agent/trajectory.json"), key=_round_number)
        try:
            if paths:
                return [c for path in paths for c in agent_commands(json.loads(path.read_text()))]
        except (OSError, ValueError):
            continue
    return None


def first_difference(a: list[str] | None, b: list[str] | None) -> dict:
    """{"index": the first action (0-based) at which they differ, "from", "to"} (None past the shorter one's end);
    {} when either trajectory is missing, {"index": None} when both ran the same commands."""
    if a is None or b is None:
        return {}
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return {"index": index, "from": x, "to": y}
    if len(a) == len(b):
        return {"index": None}
    index = min(len(a), len(b))
    return {"index": index, "from": a[index] if index < len(a) else None, "to": b[index] if index < len(b) else None}


def direction(before, after) -> str:
    """"lost" (the reward fell), "gained" (it rose), or "unscored" (one side was not scored: an infrastructure
    failure)."""
    if before is None or after is None:
        return "unscored"
    return "lost" if after < before else "gained"


def changes(before: Path, after: Path) -> dict:
    """{"before", "after", "tasks_in_both", "lost", "gained", "unscored", "unchanged", "sign_test_p", "changed":
    [{"task", "direction", "from", "to", "exceptions", "difference"}]} between two results files of one suite."""
    a, b = _trials(before), _trials(after)
    rows = []
    for task in sorted(set(a) & set(b)):
        ra, rb = a[task].get("reward"), b[task].get("reward")
        if ra == rb:
            continue
        rows.append({"task": task, "direction": direction(ra, rb), "from": ra, "to": rb,
                     "exceptions": [a[task].get("exception"), b[task].get("exception")],
                     "difference": first_difference(trial_commands(a[task]), trial_commands(b[task]))})
    count = {kind: sum(1 for r in rows if r["direction"] == kind) for kind in ("lost", "gained", "unscored")}
    in_both = len(set(a) & set(b))
    return {"before": str(before), "after": str(after), "tasks_in_both": in_both, **count,
            "unchanged": in_both - len(rows), "sign_test_p": sign_test_p(count["gained"], count["lost"]),
            "changed": rows}


def pooled(reports: list[dict]) -> dict:
    """The tasks of several comparisons together (one per seed: each run's start against its end): {"comparisons",
    "tasks_in_both", "lost", "gained", "unscored", "unchanged", "sign_test_p"}. Each task counts once per comparison,
    so a gain on one seed and a loss on another cancel, as they should in a claim across seeds."""
    total = {kind: sum(r[kind] for r in reports)
             for kind in ("tasks_in_both", "lost", "gained", "unscored", "unchanged")}
    return {"comparisons": len(reports), **total, "sign_test_p": sign_test_p(total["gained"], total["lost"])}


def _counts(report: dict) -> str:
    unscored = f", {report['unscored']} scored on one side only" if report["unscored"] else ""
    return (f"{report['lost']} lost, {report['gained']} gained{unscored}, {report['unchanged']} unchanged (of "
            f"{report['tasks_in_both']} tasks in both); sign test p = {report['sign_test_p']:.2g}")


def format_pooled(report: dict) -> str:
    """The line `eval.compare --changes` prints under several comparisons."""
    return f"pooled over {report['comparisons']} comparisons: {_counts(report)}"


def _score(reward) -> str:
    return "not scored" if reward is None else f"{reward:g}"


def _clip(text: str | None, start: int, width: int = 64) -> str:
    if text is None:
        return "(nothing)"
    part = text[start:start + width]
    return ("…" if start else "") + part + ("…" if start + width < len(text) else "")


def _pair(a: str | None, b: str | None) -> tuple[str, str]:
    """Two one-line commands, each cut to the same window around the first character where they differ."""
    a, b = (" ".join(t.split()) if t is not None else None for t in (a, b))
    same = 0
    while a is not None and b is not None and same < min(len(a), len(b)) and a[same] == b[same]:
        same += 1
    start = max(0, same - 24)
    return _clip(a, start), _clip(b, start)


def format_changes(report: dict) -> list[str]:
    """The lines `eval.compare --changes` prints for one suite."""
    lines = [f"{report['before']} -> {report['after']}: {_counts(report)}"]
    for row in report["changed"]:
        exc = [f" ({e})" if e else "" for e in row["exceptions"]]
        what = f"{row['direction']:<6}"
        diff = row["difference"]
        if not diff:
            where = "a trajectory is missing"
        elif diff["index"] is None:
            where = "the same commands"
        else:
            before, after = _pair(diff["from"], diff["to"])
            where = f"action {diff['index'] + 1}: {before}  ->  {after}"
        lines.append(f"  {what} {row['task']}: {_score(row['from'])}{exc[0]} -> {_score(row['to'])}{exc[1]}; {where}")
    return lines
