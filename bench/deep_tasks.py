"""Deep tasks: task folders generated per second and teacher episodes per minute, beside the shallow families.

    python bench/deep_tasks.py [--tasks 160] [--episodes 48] [--mistakes 0.2] [--out FILE]

Generation: `--tasks` folders written by harbor_tasks.generate.generate, round-robin over the deep set, beside the
same number over the shallow set (the baseline) in the same process. Teacher episodes: `episodes.oracle` in the
bash-tool harness in the local sandbox, one at a time: a deep task's teacher reads each tool output and types its next
command (3-8 calls, `--mistakes` P of wrong steps it recovers from) beside the shallow tasks' teacher, which replays
their one-line solutions. Reported: tasks/s, episodes/min, calls per episode, solved share; ratios deep/shallow.
Timings are not asserted.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from episodes.local import EpisodeLimits, EpisodeStats, TaskEnvironment  # noqa: E402
from episodes.oracle import oracle_episode  # noqa: E402
from harbor_tasks.generate import generate  # noqa: E402


def generation(work: Path, kind: str, n: int) -> dict:
    started = time.perf_counter()
    tasks = generate(work / f"gen-{kind}", 7, n, [kind])
    wall = time.perf_counter() - started
    return {"tasks": len(tasks), "wall_seconds": round(wall, 3), "tasks_per_second": round(len(tasks) / wall, 1)}


def teacher(work: Path, kind: str, n: int, mistakes: float) -> dict:
    tasks = generate(work / f"teach-{kind}", 8, n, [kind])
    env = TaskEnvironment(EpisodeLimits(), EpisodeStats())
    started = time.perf_counter()
    records = [oracle_episode(task, env, mistakes if kind == "deep" else 0.0) for task in tasks]
    wall = time.perf_counter() - started
    calls = [sum(1 for m in r["messages"] if m.get("tool_calls")) for r in records]
    return {"episodes": n, "wall_seconds": round(wall, 2), "episodes_per_minute": round(60 * n / wall, 1),
            "calls_per_episode": round(sum(calls) / n, 2),
            "solved": round(sum((r["metadata"]["reward"] or 0) >= 1.0 for r in records) / n, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python bench/deep_tasks.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=160, help="task folders generated per set")
    parser.add_argument("--episodes", type=int, default=48, help="teacher episodes per set")
    parser.add_argument("--mistakes", type=float, default=0.2, help="the deep teacher's mistake probability")
    parser.add_argument("--out", default=str(REPO / "bench/results/deep_tasks.json"))
    args = parser.parse_args()
    report: dict = {"command": " ".join(["python bench/deep_tasks.py", *sys.argv[1:]])}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        report["generation"] = {kind: generation(work, kind, args.tasks) for kind in ("shallow", "deep")}
        print(json.dumps(report["generation"]), flush=True)
        report["teacher"] = {kind: teacher(work, kind, args.episodes, args.mistakes) for kind in ("shallow", "deep")}
        print(json.dumps(report["teacher"]), flush=True)
    gen, teach = report["generation"], report["teacher"]
    report["ratios"] = {
        "generation_deep_over_shallow": round(gen["deep"]["tasks_per_second"] / gen["shallow"]["tasks_per_second"], 2),
        "episodes_deep_over_shallow": round(teach["deep"]["episodes_per_minute"]
                                            / teach["shallow"]["episodes_per_minute"], 2)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"deep tasks: {gen['deep']['tasks_per_second']}/s generated (shallow {gen['shallow']['tasks_per_second']}/s);"
          f" teacher episodes {teach['deep']['episodes_per_minute']}/min at {teach['deep']['calls_per_episode']} calls, "
          f"solved {teach['deep']['solved']} (shallow {teach['shallow']['episodes_per_minute']}/min at "
          f"{teach['shallow']['calls_per_episode']} calls); {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
