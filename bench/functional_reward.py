"""The functional pivot reward: a GRPO step's 64 scores (8 decision points x 8 samples), teacher side cached or not.

    python bench/functional_reward.py [--groups 8] [--samples 8] [--repeats 2] [--out FILE]

Rows are made as a user makes them: deep tasks generated (one per family), the scripted teacher collected in
Terminus-2 (`eval.scripted_teacher --collect`), `python -m trainers.data pivots --environment terminus_functional`.
One decision point per family (its middle turn) gets `--samples` policy actions, a GRPO group's mix: the teacher's
action behind `export A=1;`, the same with one character changed, `true`, `ls`. All 64 are posted at once to a
reward server on loopback (configs/rewards/terminus_functional.yaml, 2 sandbox workers), as the GRPO reward
function posts a step's completions. Side by side: the server as configured (the teacher's side of each decision
point played once per group: `teacher_cache`) and the baseline without it (`teacher_cache: 0`: every sample plays
the teacher's side too). A fresh server for each run. Timings are not asserted; the target is <= 10 s per step.
Also the share of the policy side's sandbox time spent replaying the earlier keystrokes: the most a cache of prefix
states could save. Writes bench/results/functional_reward.json.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harbor_tasks.families import select  # noqa: E402
from harbor_tasks.generate import write_task  # noqa: E402
from rewards.local import local_reward_server  # noqa: E402
from rewards.protocol import make_response  # noqa: E402


def decision_points(work: Path, groups: int) -> list[dict]:
    tasks = work / "tasks"
    for family in select(["deep"])[:groups]:
        write_task(tasks, family, 5, 0)
    subprocess.run([sys.executable, "-m", "eval.scripted_teacher", "--tasks", str(tasks), "--collect",
                    str(work / "jobs")], check=True, cwd=REPO, capture_output=True)
    subprocess.run([sys.executable, "-m", "trainers.data", "pivots", "--jobs", str(work / "jobs"), "--out",
                    str(work / "rows.jsonl"), "--environment", "terminus_functional"], check=True, cwd=REPO,
                   capture_output=True)
    by_task: dict[str, list[dict]] = {}
    for line in (work / "rows.jsonl").read_text().splitlines():
        row = json.loads(line)
        if json.loads(row["expected_answer"])["commands"]:
            by_task.setdefault(row["metadata"]["task_dir"], []).append(row)
    return [rows[len(rows) // 2] for rows in by_task.values()]


def samples(row: dict, n: int) -> list[str]:
    action = json.loads(row["expected_answer"])
    command = action["commands"][0]["keystrokes"].rstrip("\n")
    changed = command[:-1] + ("x" if command[-1] != "x" else "y")
    variants = [f"export A=1; {command}", changed, "true", "ls"]
    return [json.dumps(dict(action, commands=[{"keystrokes": variants[i % 4] + "\n", "duration": 0.5}]))
            for i in range(n)]


async def score(url: str, batch: list[tuple[dict, str]]) -> tuple[float, list[dict]]:
    async with httpx.AsyncClient(timeout=600) as client:
        started = time.perf_counter()
        replies = await asyncio.gather(*(client.post(f"{url}/verify", json=dict(row, response=make_response(text)))
                                         for row, text in batch))
        seconds = time.perf_counter() - started
    return seconds, [reply.json() for reply in replies]


def run(config: Path, batch: list[tuple[dict, str]]) -> dict:
    with local_reward_server(str(config)) as url:
        seconds, results = asyncio.run(score(url, batch))
    parts: Counter = Counter()  # the policy side's sandbox seconds by part (harbor_tasks.decision_point.Played)
    for r in results:
        parts.update((r.get("functional") or {}).get("seconds") or {})
    return {"seconds": round(seconds, 2), "rewards": Counter(str(r.get("reward")) for r in results),
            "masked": sum(bool(r.get("mask_sample")) for r in results),
            "judged_by": Counter((r.get("functional") or {}).get("judged_by", "none") for r in results),
            "policy_play_seconds": {part: round(value, 2) for part, value in parts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "bench/results/functional_reward.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-functional-") as tmp:
        work = Path(tmp)
        points = decision_points(work, args.groups)
        batch = [(row, text) for row in points for text in samples(row, args.samples)]
        base = yaml.safe_load((REPO / "configs/rewards/terminus_functional.yaml").read_text())
        configs = {}
        for name, cache in (("cached", 1024), ("no_cache", 0)):
            config = dict(base, terminus_functional=dict(base["terminus_functional"], teacher_cache=cache))
            configs[name] = work / f"{name}.yaml"
            configs[name].write_text(yaml.safe_dump(config))
        runs = {name: [] for name in configs}
        for _ in range(args.repeats):  # interleaved, each on a fresh server
            for name, config in configs.items():
                runs[name].append(run(config, batch))
    cached = statistics.median(r["seconds"] for r in runs["cached"])
    plain = statistics.median(r["seconds"] for r in runs["no_cache"])
    played = runs["cached"][0]["policy_play_seconds"]
    # the most a cache of prefix states (a snapshot after the earlier keystrokes) could save of the policy side
    prefix_share = round(played.get("prefix", 0.0) / played["total"], 3) if played.get("total") else None
    report = {"groups": len(points), "samples_per_group": args.samples, "scores_per_step": len(batch),
              "seconds_per_step": {"cached": cached, "no_cache": plain},
              "speedup": round(plain / cached, 2) if cached else None, "target_seconds": 10.0,
              "prefix_replay_share": prefix_share,
              "runs": runs, "cores": len(os.sched_getaffinity(0))}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, default=dict))
    print(f"{len(batch)} functional scores ({len(points)} decision points x {args.samples}): {cached:.1f} s with the "
          f"teacher's side cached, {plain:.1f} s without ({report['speedup']}x); "
          f"rewards {dict(runs['cached'][0]['rewards'])}, "
          f"judged by {dict(runs['cached'][0]['judged_by'])}, masked {runs['cached'][0]['masked']}; replaying the "
          f"earlier keystrokes is {prefix_share} of the policy side's sandbox time -> {args.out}")


if __name__ == "__main__":
    main()
