"""Terminus-2 episodes (episodes/terminus.py) one at a time: the sandbox's overhead per episode, not the model's waits.

    python bench/terminus_episodes.py [--tasks 8] [--seed 41]

Per episode: `reset` (a fresh sandbox, the task's Dockerfile replayed), `terminus_first_message` (tmux started, the
first screen captured), one step per command of the task's reference solution typed with duration 0 (the step's own
cost: send-keys, the scrollback capture and diff, has-session), the two completion steps, then `episode_reward` (the
task's tests; teardown goes to a background thread). Then the same tasks again, each `reset` + first message +
`end_episode` (teardown waited for) to time the teardown alone. Reports the means; target: start + tmux + verify
(what the trainer waits for outside the model and the commands' durations) under 1 s. Timings are not asserted.
Writes outputs/bench/terminus_episodes.json.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from episodes.local import EpisodeLimits, EpisodeStats, end_episode, episode_reward  # noqa: E402
from episodes.terminus import TerminusEnvironment, terminus_first_message, terminus_step  # noqa: E402
from harbor_tasks.generate import generate  # noqa: E402

FAMILIES = ["write-value", "count-lines", "count-words", "sum-numbers"]


def action(keystrokes: list[str], done: bool = False) -> str:
    return json.dumps({"analysis": "", "plan": "", "commands": [{"keystrokes": k, "duration": 0} for k in keystrokes],
                       "task_complete": done})


def solution(task: Path) -> list[str]:
    lines = (task / "solution" / "solve.sh").read_text().splitlines()
    return [line + "\n" for line in lines if line and not line.startswith(("#!", "set "))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--seed", type=int, default=41)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="terminus-bench-"))
    tasks = generate(root, args.seed, args.tasks, FAMILIES)
    stats = EpisodeStats()
    env = TerminusEnvironment(EpisodeLimits(), stats)
    rows = []
    for task in tasks:
        t0 = time.perf_counter()
        env.reset(task_dir=str(task))
        t1 = time.perf_counter()
        terminus_first_message(env)
        t2 = time.perf_counter()
        steps = [action([k]) for k in solution(task)] + [action([], True), action([], True)]
        for text in steps:
            terminus_step(env, text)
        t3 = time.perf_counter()
        reward = episode_reward(env)
        t4 = time.perf_counter()
        rows.append({"start": t1 - t0, "tmux": t2 - t1, "step": (t3 - t2) / len(steps), "verify": t4 - t3,
                     "reward": reward})
    teardowns = []
    for task in tasks:
        env.reset(task_dir=str(task))
        terminus_first_message(env)
        started = time.perf_counter()
        end_episode(env)
        teardowns.append(time.perf_counter() - started)
    mean = {key: round(statistics.mean(r[key] for r in rows), 4) for key in ("start", "tmux", "step", "verify")}
    result = {"episodes": len(rows), "solved": sum(r["reward"] == 1.0 for r in rows), "mean_seconds": mean,
              "overhead_seconds": round(mean["start"] + mean["tmux"] + mean["verify"], 4),
              "teardown_seconds": round(statistics.mean(teardowns), 4), "stats": stats.as_dict()}
    out = REPO / "outputs" / "bench" / "terminus_episodes.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "stats"}, indent=2))


if __name__ == "__main__":
    main()
