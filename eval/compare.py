"""Every checkpoint's eval scores across runs: a table in the terminal and a PNG plot.
Runs in: the training venv (matplotlib for the plot); reads the eval_results*.json files eval.run writes.

    python -m eval.compare DIR... [--out report.png] [--json] [--by_family]
    python -m eval.compare CHECKPOINT_A CHECKPOINT_B [A2 B2 ...] --changes [--json]   # each may be one eval_results*.json

Each DIR is a run output dir or a checkpoint dir. `--json` prints the rows instead of the table; `--by_family`
adds the mean reward per family of generated tasks; `--changes` lists, per suite both were scored on, the tasks whose
score changed from A to B and the first command where their agents differ, with a sign test on the tasks gained
against those lost; several pairs (each seed's start and end) are also pooled (eval/task_changes.py). Exit status 2, with
one line on stderr, when a DIR is missing or holds no eval results. More: docs/evaluation.md#comparing-runs-evalcomparepy.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from common.checkpoints import checkpoints, global_step, step_from_name
from eval.results import RESULTS_FILE, RESULTS_GLOB
from eval.task_changes import changes, format_changes, format_pooled, pooled

RESULTS_STEM = Path(RESULTS_FILE).stem  # eval_results: a suite's file is eval_results_<suite>.json


class CompareError(ValueError):
    pass


def _step_of(ckpt_dir: Path, data: dict) -> int | None:
    """The results file's own global_step when it has one, else the checkpoint's."""
    step = data.get("global_step")
    return step if isinstance(step, int) and not isinstance(step, bool) else global_step(ckpt_dir)


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CompareError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        raise CompareError(f"{path}: not an eval_results file (no \"metrics\" object)")
    return data


def _suite_of(path: Path, data: dict) -> str:
    """The suite a results file scored: its own `suite`, else the one its name carries (eval_results_<suite>.json)."""
    return str(data.get("suite") or path.stem.removeprefix(RESULTS_STEM).strip("_-.") or "?")


def collect(dirs: list[str | Path]) -> list[dict]:
    """Rows {"run", "checkpoint", "step", "suite", "agent", "model", "metrics", "path"} of every result found."""
    rows: list[dict] = []
    for raw in dirs:
        d = Path(raw)
        if not d.is_dir():
            raise CompareError(f"{d}: no such directory")
        ckpts = checkpoints(d)
        resolved = d.resolve()
        if ckpts:  # a run dir: its checkpoints, then its own results (the final model)
            run_dir = resolved
            places = ckpts + [d]
        else:  # a checkpoint dir (its run is the parent), or a run dir holding results without checkpoints
            run_dir = resolved.parent if step_from_name(resolved) is not None else resolved
            places = [d]
        found = 0
        for place in places:
            for path in sorted(place.glob(RESULTS_GLOB)):
                data = _load(path)
                found += 1
                rows.append({
                    "run": run_dir.name,
                    "checkpoint": "final" if (ckpts and place == d) else place.resolve().name,
                    "step": _step_of(place, data),
                    "suite": _suite_of(path, data),
                    "agent": data.get("agent"),
                    "model": data.get("model"),
                    "metrics": data["metrics"],
                    "path": str(path),
                    "_run_dir": run_dir,
                })
        if not found:
            raise CompareError(f"{d}: no {RESULTS_GLOB} in it or in its checkpoint-*/ dirs")
    # Two runs with the same dir name: tell them apart by their parent.
    dirs_by_name: dict[str, set[Path]] = {}
    for row in rows:
        dirs_by_name.setdefault(row["run"], set()).add(row["_run_dir"])
    for row in rows:
        run_dir = row.pop("_run_dir")
        if len(dirs_by_name[row["run"]]) > 1:
            row["run"] = f"{run_dir.parent.name}/{run_dir.name}"
    rows.sort(key=lambda r: (r["run"], r["step"] if r["step"] is not None else float("inf"), r["checkpoint"], r["suite"]))
    return rows


def _suite_columns(rows: list[dict]) -> dict[str, list[str]]:
    """Per suite, the metric columns to show, in a fixed order."""
    cols: dict[str, list[str]] = {}
    for row in rows:
        m = row["metrics"]
        names = cols.setdefault(row["suite"], [])
        wanted = ["mean_reward", "stderr"] + [f"pass@{k}" for k in (m.get("pass_at_k") or {})]
        if "mt_at_k" in m:
            wanted += [f"MT@{k}" for k in (m.get("mt_at_k") or {})] + ["case_score", "rounds_reached"]
        wanted += ["n_trials"] + (["n_infra_errors"] if "n_infra_errors" in m else []) + (
            ["n_tampered"] if "n_tampered" in m else []) + ["errors"]
        for name in wanted:
            if name not in names:
                names.append(name)
    order = ["mean_reward", "stderr", "pass@", "MT@", "case_score", "rounds_reached", "n_trials", "n_infra_errors",
             "n_tampered", "errors"]

    def rank(name: str):
        for i, prefix in enumerate(order):
            if name == prefix or (prefix.endswith("@") and name.startswith(prefix)):
                return (i, int(name.split("@")[1]) if "@" in name else 0)
        return (len(order), 0)

    return {suite: sorted(names, key=rank) for suite, names in cols.items()}


def metric_value(metrics: dict, name: str):
    if name.startswith("pass@"):
        return (metrics.get("pass_at_k") or {}).get(name[5:])
    if name.startswith("MT@"):
        return (metrics.get("mt_at_k") or {}).get(name[3:])
    if name == "errors":
        return sum((metrics.get("exceptions") or {}).values())
    return metrics.get(name)


def table_rows(rows: list[dict]) -> tuple[list[str], list[list]]:
    """(header, rows): one row per run/checkpoint/step, one column per suite metric."""
    cols = _suite_columns(rows)
    header = ["run", "checkpoint", "step"] + [f"{suite} {name}" for suite, names in cols.items() for name in names]
    by_ckpt: dict[tuple, dict] = {}
    for row in rows:
        key = (row["run"], row["checkpoint"], row["step"])
        by_ckpt.setdefault(key, {})[row["suite"]] = row["metrics"]
    out = []
    for (run, ckpt, step), suites in by_ckpt.items():
        line = [run, ckpt, step]
        for suite, names in cols.items():
            for name in names:
                line.append(metric_value(suites[suite], name) if suite in suites else None)
        out.append(line)
    return header, out


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def print_table(rows: list[dict]) -> None:
    """One table per suite: a row per run/checkpoint/step, a column per metric of that suite."""
    from rich.console import Console
    from rich.table import Table

    # piped output (CI logs, tests) gets a wide console instead of rich's 80 columns, so nothing is cut
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    for suite, names in _suite_columns(rows).items():
        table = Table(title=f"{suite}: scores by checkpoint", title_justify="left")
        for name in ("run", "checkpoint", "step"):
            table.add_column(name, no_wrap=True, justify="right" if name == "step" else "left")
        for name in names:
            table.add_column(name, justify="right", no_wrap=True)
        for row in rows:
            if row["suite"] == suite:
                table.add_row(row["run"], row["checkpoint"], _fmt(row["step"]),
                              *(_fmt(metric_value(row["metrics"], name)) for name in names))
        console.print(table)


_GENERATED = re.compile(r"^(?P<family>.+)-\d+-\d+$")


def task_family(task: str) -> str:
    """The family of a generated task's name (`<family>-<seed>-<index>`, after an `org/` prefix such as the
    generated task.toml's `terminal-recipes/`); any other task is its own family."""
    name = (task or "?").rsplit("/", 1)[-1]
    match = _GENERATED.match(name)
    return match["family"] if match else name


def family_rows(rows: list[dict]) -> list[dict]:
    """Per result row: {"run", "checkpoint", "step", "suite", "path", "families": {family: [mean reward, trials]}}, the
    trials of its eval_results file grouped by task family (a missing reward counts 0, as the means count it)."""
    out = []
    for row in rows:
        trials = _load(Path(row["path"])).get("tasks") or []
        grouped: dict[str, list[float]] = {}
        for trial in trials:
            grouped.setdefault(task_family(trial.get("task")), []).append(float(trial.get("reward") or 0.0))
        out.append({**{k: row[k] for k in ("run", "checkpoint", "step", "suite", "path")},
                    "families": {f: [round(sum(v) / len(v), 3), len(v)] for f, v in sorted(grouped.items())}})
    return out


def print_family_table(rows: list[dict]) -> None:
    """A table per suite: a row per task family, a column per run/checkpoint (mean reward, trials)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    by_suite: dict[str, list[dict]] = {}
    for row in family_rows(rows):
        by_suite.setdefault(row["suite"], []).append(row)
    several_runs = len({row["run"] for row in rows}) > 1
    for suite, suite_rows in by_suite.items():
        families = sorted({f for row in suite_rows for f in row["families"]})
        table = Table(title=f"{suite}: mean reward by task family (trials)", title_justify="left")
        table.add_column("family", no_wrap=True)
        names = []
        for row in suite_rows:
            name = row["checkpoint"] if row["step"] is None else f"step {row['step']}"
            names.append(f"{row['run']} {name}" if several_runs else name)
        for name, row in zip(names, suite_rows):  # one checkpoint's several results: their files tell them apart
            label = f"{name} {Path(row['path']).stem}" if names.count(name) > 1 else name
            table.add_column(label, justify="right", no_wrap=True)
        for family in families:
            table.add_row(family, *(f"{row['families'][family][0]:.2f} ({row['families'][family][1]})"
                                    if family in row["families"] else "-" for row in suite_rows))
        console.print(table)


def plot(rows: list[dict], out: str | Path) -> Path:
    """Score against step, one line per run and suite; a panel per score (mean_reward, and MT@k/case for multi-step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ["mean_reward"]
    if any("mt_at_k" in r["metrics"] for r in rows):
        panels += ["MT@k", "case_score"]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    series: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        series.setdefault((row["run"], row["suite"]), []).append(row)
    palette = plt.rcParams["axes.prop_cycle"].by_key().get("color") or ["C0"]
    colors = {key: palette[i % len(palette)] for i, key in enumerate(series)}  # one colour per line in every panel
    for ax, panel in zip(axes[0], panels):
        for (run, suite), points in series.items():
            points = sorted((p for p in points if p["step"] is not None), key=lambda p: p["step"])
            if panel == "MT@k" and not any("mt_at_k" in p["metrics"] for p in points):
                continue
            if panel == "case_score" and not any("case_score" in p["metrics"] for p in points):
                continue
            xs, ys, errs = [], [], []
            for p in points:
                m = p["metrics"]
                if panel == "MT@k":
                    mt = m.get("mt_at_k") or {}
                    y = mt[max(mt, key=int)] if mt else None
                else:
                    y = m.get(panel)
                if y is None:
                    continue
                xs.append(p["step"])
                ys.append(y)
                errs.append(m.get("stderr") or 0.0 if panel == "mean_reward" else 0.0)
            if not xs:
                continue
            label = f"{run} · {suite}"
            if any(errs):
                ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=label, color=colors[(run, suite)])
            else:
                ax.plot(xs, ys, marker="o", label=label, color=colors[(run, suite)])
        ax.set_title(panel if panel != "MT@k" else "MT@k (k = attempts)")
        ax.set_xlabel("global step")
        ax.set_ylabel("score")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def suite_changes(before: str, after: str) -> list[dict]:
    """eval.task_changes.changes for each suite that both checkpoints (or result dirs) were scored on: the same suite,
    else suites of the same folder name (each run's copy of one suite)."""
    results = []
    for d in (before, after):
        if Path(d).is_file():  # one results file: a checkpoint scored more than once on a suite (other settings)
            results.append({_suite_of(Path(d), _load(Path(d))): Path(d)})
            continue
        rows = collect([d])
        by_suite = {}
        for row in rows:
            if row["suite"] in by_suite:
                raise CompareError(f"{d}: more than one result for suite {row['suite']} (a run dir, or a checkpoint "
                                   "scored twice?): name a checkpoint dir, e.g. DIR/checkpoint-N, or one results "
                                   f"file, e.g. {row['path']}")
            by_suite[row["suite"]] = Path(row["path"])
        results.append(by_suite)
    pairs = [(results[0][suite], results[1][suite]) for suite in results[0] if suite in results[1]]
    if not pairs:  # two runs, each scored on its own copy of a suite (outputs/run-a/heldout, outputs/run-b/heldout)
        by_name = [{Path(suite).name: path for suite, path in r.items()} for r in results]
        pairs = [(by_name[0][name], by_name[1][name]) for name in by_name[0] if name in by_name[1]]
    if not pairs:
        raise CompareError(f"{before} and {after}: no suite scored in both ({', '.join(results[0])} against "
                           f"{', '.join(results[1])})")
    return [changes(a, b) for a, b in pairs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="run output dirs or checkpoint dirs")
    parser.add_argument("--out", default="report.png", help="PNG to write (default: report.png)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    parser.add_argument("--by_family", action="store_true", help="also the mean reward per generated task family")
    parser.add_argument("--changes", action="store_true",
                        help="DIRs in pairs (A B [A2 B2 ...]: each seed's start and end): the tasks whose score "
                             "changed from A to B, and where; with several pairs, all of them pooled")
    args = parser.parse_args(argv)
    if args.changes:
        if len(args.dirs) % 2:
            parser.error(f"--changes compares checkpoint dirs in pairs (A B, or A B A2 B2 ...), got {len(args.dirs)}")
        try:
            pairs = [suite_changes(a, b) for a, b in zip(args.dirs[::2], args.dirs[1::2])]
        except CompareError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        every = [report for reports in pairs for report in reports]
        if args.json:  # one pair: its reports (one per suite); several: each pair's, and the pooled counts
            json.dump(pairs[0] if len(pairs) == 1 else {"pairs": pairs, "pooled": pooled(every)}, sys.stdout, indent=2)
            print()
        else:
            print("\n\n".join("\n".join(format_changes(report)) for report in every))
            if len(every) > 1:
                print(f"\n{format_pooled(pooled(every))}")
        return 0
    try:
        rows = collect(args.dirs)
    except CompareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        out = plot(rows, args.out)
    except OSError as err:
        print(f"error: --out {args.out}: {err.strerror or err}", file=sys.stderr)
        return 2
    if args.json:
        header, lines = table_rows(rows)
        extra = {"by_family": family_rows(rows)} if args.by_family else {}
        json.dump({"header": header, "rows": lines, "results": rows, "plot": str(out), **extra}, sys.stdout, indent=2)
        print()
    else:
        print_table(rows)
        if args.by_family:
            print_family_table(rows)
        print(f"plot: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
