"""Eval throughput in the local sandbox: trials per minute of the built-in terminal suite with the oracle agent
at concurrency 1, 2 and 4, and where a trial's time goes (sandbox start and copy-in, agent, verifier, tear-down).

    python bench/eval_throughput.py [--suite builtin:terminal] [--concurrency 1 2 4] [--repeats 1]
                                    [--entry python compiled]

Each run is a real `python -m eval.run --agent oracle` (Harbor job, --env local); the oracle's work is the task's
own solve.sh, so what is measured is the harness around it. The phases come from each trial's result.json
(Harbor's timestamps): environment_setup (sandbox start, Dockerfile replay, workspace copy-in), agent_setup,
agent_execution, verifier, and tear-down (the rest of the trial); and the CPU seconds per trial of everything the run
started (eval.run, Harbor, the sandboxes and their commands), which other load on the machine does not inflate.
``--entry``: the ways commands enter the sandbox (``--ek entry=...``, SandboxConfig.entry), run one after the other
at each concurrency. Writes bench/results/eval_throughput.json.
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")


def seconds(span: dict | None) -> float | None:
    if not span or not span.get("started_at") or not span.get("finished_at"):
        return None
    parse = lambda value: datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (parse(span["finished_at"]) - parse(span["started_at"])).total_seconds()


def phase_times(job_dir: Path) -> dict:
    per_phase = {phase: [] for phase in (*PHASES, "teardown", "trial")}
    for path in job_dir.glob("*/result.json"):
        trial = json.loads(path.read_text())
        total = seconds(trial)
        if total is None:
            continue
        per_phase["trial"].append(total)
        spent = 0.0
        for phase in PHASES:
            value = seconds(trial.get(phase))
            if value is not None:
                per_phase[phase].append(value)
                spent += value
        per_phase["teardown"].append(max(0.0, total - spent))
    return {phase: round(statistics.mean(values), 3) for phase, values in per_phase.items() if values}


def run(suite: str, concurrency: int, way: str) -> dict:
    """One eval.run of ``suite`` with the oracle at ``concurrency``, commands entering the sandbox ``way``."""
    checkpoint = Path(tempfile.mkdtemp(prefix="eval-bench-")) / "checkpoint-0"
    checkpoint.mkdir()
    started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([sys.executable, "-m", "eval.run", "--checkpoint", str(checkpoint), "--suite", suite,
                             "--agent", "oracle", "--concurrency", str(concurrency), "--env_kwargs", f"entry={way}"],
                            cwd=REPO, capture_output=True, text=True)
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    if result.returncode != 0:
        sys.exit(f"eval.run failed at concurrency {concurrency}:\n{result.stderr[-2000:]}")
    results = json.loads((checkpoint / "eval_results.json").read_text())
    n = results["metrics"]["n_trials"]
    return {"concurrency": concurrency, "entry": way, "trials": n, "wall_seconds": round(wall, 2),
            "trials_per_minute": round(60 * n / wall, 1), "cpu_seconds_per_trial": round(cpu_seconds / n, 3),
            "mean_reward": results["metrics"]["mean_reward"], "phases_seconds": phase_times(Path(results["harbor_job_dir"]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="builtin:terminal")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--entry", nargs="+", default=["auto"], choices=["auto", "compiled", "python"])
    parser.add_argument("--out", default=str(REPO / "bench/results/eval_throughput.json"))
    args = parser.parse_args()

    rows = []
    for concurrency in args.concurrency:
        for repeat in range(args.repeats):
            for way in args.entry:
                rows.append(run(args.suite, concurrency, way) | {"repeat": repeat})
                print(json.dumps(rows[-1]), flush=True)
    report = {"command": "python " + " ".join(sys.argv), "suite": args.suite, "runs": rows,
              "note": "wall includes eval.run's own start and Harbor's CLI start (about 3.5 s)"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"{'concurrency':>11} {'entry':>8} {'trials/min':>10} {'wall s':>7} {'CPU s/trial':>11}  "
          "mean phase seconds per trial")
    for row in rows:
        phases = "  ".join(f"{k} {v}" for k, v in row["phases_seconds"].items())
        print(f"{row['concurrency']:>11} {row['entry']:>8} {row['trials_per_minute']:>10} {row['wall_seconds']:>7} "
              f"{row['cpu_seconds_per_trial']:>11}  {phases}")


if __name__ == "__main__":
    main()
