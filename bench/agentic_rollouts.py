"""Agentic GRPO rollouts in the local sandbox: episodes per minute at concurrency 1, 2 and 4 against the same
episodes run one at a time, and the share of an episode's wall time spent outside the model.

    python bench/agentic_rollouts.py [--tasks 16] [--seed 31] [--concurrency 1,2,4] [--model_seconds 0.2] [--remote]

An episode is what the agentic GRPO recipe runs per rollout: `TaskEnvironment.reset` (a fresh sandbox, the task's
Dockerfile replayed), one `bash` tool call per command of the task's reference solution (`oracle_episode`), then
`episode_reward` (the task's tests; the sandbox is stopped). There is no model here: each turn "thinks" for a fixed
`--model_seconds` (a time.sleep before every tool call) so that the part outside the model can be measured. This
measures the sandbox side only; in training a real policy's generation time replaces the sleep.

Tasks: `--tasks` procedural tasks (harbor_tasks/generate.py; families write-value, count-lines, count-words,
sum-numbers) in a temporary folder. Baseline: every episode one at a time in one thread with one environment.
Then, per `--concurrency` value, a ThreadPoolExecutor whose workers each own a TaskEnvironment and share one
EpisodeStats. Per setting: episodes per minute, the speedup over the baseline, mean sandbox start and verify
seconds, mean sandbox-side seconds per episode (episode wall minus the model's sleep: start, commands, verify,
tear-down), the sandbox overhead per episode (sandbox-side minus the commands, i.e. start + verify + tear-down;
the target is < 1 s; tear-down is shown as that overhead less the mean start and verify), the share of episode
time outside the model, and the solved count (should equal episodes). Timings are not asserted.

`--remote` runs every setting a second time through an episode server on loopback (`python -m episodes.server` in
its own process over the same tasks; `RemoteTaskEnvironment` in the workers, as with `sandbox_urls`), so the two
sit side by side: what HTTP and a second process add per episode. Start and verify are then as the trainer waits
for them (the round trip); the server tears a sandbox down after answering /verify, off the trainer's path. On a
shared machine the settings run minutes apart under different loads, so `--remote` also runs paired episodes:
every task once in process and once remote, back to back (the order alternating), twice over; it reports the
medians of each side and of the per-pair differences (remote minus in-process), of the overhead (start + verify +
tear-down as the trainer waits for them) and of the whole sandbox side (the commands' round trips included).
Writes outputs/bench/agentic_rollouts.json.
"""

import argparse
import json
import queue
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.net import free_port, stop_process, wait_until_healthy  # noqa: E402
from episodes.local import EpisodeLimits, EpisodeStats, TaskEnvironment  # noqa: E402
from episodes.oracle import oracle_episode  # noqa: E402
from episodes.remote import EpisodeServers, RemoteTaskEnvironment  # noqa: E402
from harbor_tasks.generate import generate  # noqa: E402

FAMILIES = ["write-value", "count-lines", "count-words", "sum-numbers"]


class Thinking:
    """An environment whose every tool call is preceded by the model's (simulated) turn; it times both."""

    def __init__(self, model_seconds: float, *args):
        super().__init__(*args)
        self._model_seconds, self.model_time, self.exec_time = model_seconds, 0.0, 0.0

    def bash(self, command: str) -> str:
        started = time.perf_counter()
        time.sleep(self._model_seconds)
        slept = time.perf_counter()
        output = super().bash(command)
        self.model_time += slept - started
        self.exec_time += time.perf_counter() - slept
        return output


class ThinkingEnvironment(Thinking, TaskEnvironment):
    pass


class ThinkingRemoteEnvironment(Thinking, RemoteTaskEnvironment):
    pass


def environment(model_seconds: float, stats: EpisodeStats, servers: EpisodeServers | None) -> Thinking:
    if servers is None:
        return ThinkingEnvironment(model_seconds, EpisodeLimits(), stats)
    return ThinkingRemoteEnvironment(model_seconds, servers, EpisodeLimits(), stats)


@contextmanager
def episode_server(tasks_dir: Path, max_sessions: int):
    """`python -m episodes.server` on loopback over the bench's tasks, in its own process: its URL."""
    port = free_port()
    log = tempfile.TemporaryFile()
    process = subprocess.Popen([sys.executable, "-m", "episodes.server", "--tasks", str(tasks_dir), "--port",
                                str(port), "--max_sessions", str(max_sessions), "--log_level", "warning"],
                               cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", process, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process)


def episode(task: Path, env: Thinking) -> dict:
    env.model_time = env.exec_time = 0.0
    started = time.perf_counter()
    reward = oracle_episode(task, env)["metadata"]["reward"]
    wall = time.perf_counter() - started
    return {"wall": wall, "model": env.model_time, "exec": env.exec_time, "reward": reward}


def run(tasks: list[Path], concurrency: int | None, model_seconds: float, server: str | None = None) -> dict:
    """All episodes once: one at a time in this thread (concurrency None), or over `concurrency` workers; in local
    sandboxes, or on the episode server at `server`."""
    stats = EpisodeStats()
    servers = EpisodeServers([server]) if server else None
    started = time.perf_counter()
    if concurrency is None:
        env = environment(model_seconds, stats, servers)
        episodes = [episode(task, env) for task in tasks]
    else:
        todo, episodes = queue.Queue(), []
        for task in tasks:
            todo.put(task)

        def worker():
            env = environment(model_seconds, stats, servers)
            while True:
                try:
                    task = todo.get_nowait()
                except queue.Empty:
                    return
                episodes.append(episode(task, env))  # list.append is atomic under the GIL

        with ThreadPoolExecutor(concurrency) as pool:
            for future in [pool.submit(worker) for _ in range(concurrency)]:
                future.result()
    wall = time.perf_counter() - started
    totals = stats.as_dict()
    mean = lambda values: round(statistics.mean(values), 3)
    median = lambda values: round(statistics.median(values), 3)
    sandbox_side = [e["wall"] - e["model"] for e in episodes]
    overhead = [e["wall"] - e["model"] - e["exec"] for e in episodes]  # start + verify + tear-down
    setting = "one at a time" if concurrency is None else f"concurrency {concurrency}"
    return {"setting": f"remote, {setting}" if server else setting, "remote": bool(server),
            "concurrency": concurrency, "episodes": len(episodes), "wall_seconds": round(wall, 2),
            "episodes_per_minute": round(60 * len(episodes) / wall, 1),
            "sandbox_start_seconds_mean": totals["sandbox_start_seconds_mean"],
            "verify_seconds_mean": totals["verify_seconds_mean"],
            "commands_seconds_mean": mean([e["exec"] for e in episodes]),
            "sandbox_side_seconds_mean": mean(sandbox_side),
            "sandbox_overhead_seconds_mean": mean(overhead), "sandbox_overhead_seconds_median": median(overhead),
            "teardown_seconds_mean": round(mean(overhead) - totals["sandbox_start_seconds_mean"]
                                           - totals["verify_seconds_mean"], 3),
            "model_seconds_mean": mean([e["model"] for e in episodes]),
            "episode_seconds_mean": mean([e["wall"] for e in episodes]),
            "outside_model_share": round(sum(sandbox_side) / sum(e["wall"] for e in episodes), 3),
            "solved": sum(1 for e in episodes if e["reward"] is not None and e["reward"] >= 1.0),
            "masked_by_kind": totals["masked_by_kind"]}


def paired(tasks: list[Path], model_seconds: float, server: str, rounds: int = 2) -> dict:
    """Each task in process and remote back to back, the order alternating: the medians and the paired differences."""
    envs = {"in process": environment(model_seconds, EpisodeStats(), None),
            "remote": environment(model_seconds, EpisodeStats(), EpisodeServers([server]))}
    measured = {side: {"overhead": [], "sandbox_side": []} for side in envs}
    for r in range(rounds):
        for i, task in enumerate(tasks):
            for side in (("in process", "remote") if (i + r) % 2 == 0 else ("remote", "in process")):
                e = episode(task, envs[side])
                measured[side]["overhead"].append(e["wall"] - e["model"] - e["exec"])
                measured[side]["sandbox_side"].append(e["wall"] - e["model"])
    median = lambda values: round(statistics.median(values), 3)
    report = {"pairs": rounds * len(tasks)}
    for key in ("overhead", "sandbox_side"):
        local, remote = measured["in process"][key], measured["remote"][key]
        report[f"{key}_seconds_median_in_process"] = median(local)
        report[f"{key}_seconds_median_remote"] = median(remote)
        report[f"{key}_seconds_median_remote_minus_in_process"] = median([b - a for a, b in zip(local, remote)])
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--concurrency", default="1,2,4", help="comma-separated worker counts")
    parser.add_argument("--model_seconds", type=float, default=0.2, help="simulated model time per turn")
    parser.add_argument("--remote", action="store_true", help=(
        "also run every setting through an episode server on loopback (python -m episodes.server)"))
    parser.add_argument("--out", default=str(REPO / "outputs/bench/agentic_rollouts.json"))
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]

    pairs = None
    with tempfile.TemporaryDirectory(prefix="agentic-bench-") as tmp:
        tasks = generate(Path(tmp), args.seed, args.tasks, FAMILIES)
        run(tasks[:1], None, 0.0)  # warm-up: imports, page cache of the sandbox's tools; not reported
        rows = [run(tasks, None, args.model_seconds)] + [run(tasks, c, args.model_seconds) for c in levels]
        if args.remote:
            with episode_server(Path(tmp), max(levels, default=1)) as url:
                run(tasks[:1], None, 0.0, url)  # warm-up of the server process
                rows += [run(tasks, None, args.model_seconds, url)]
                rows += [run(tasks, c, args.model_seconds, url) for c in levels]
                pairs = paired(tasks, args.model_seconds, url)
    for row in rows:
        row["speedup"] = round(rows[0]["wall_seconds"] / row["wall_seconds"], 2)
    report = {"command": "python " + " ".join(sys.argv), "tasks": args.tasks, "seed": args.seed,
              "families": FAMILIES, "model_seconds_per_turn": args.model_seconds, "runs": rows,
              "sandbox_overhead_seconds_mean": rows[0]["sandbox_overhead_seconds_mean"],
              "sandbox_overhead_seconds_median": rows[0]["sandbox_overhead_seconds_median"],
              "sandbox_overhead_target_seconds": 1.0, "remote_vs_in_process": pairs,
              "note": "the model is a fixed sleep per turn; only the sandbox side is measured"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))

    columns = [("setting", "setting", 23), ("episodes", "episodes", 8), ("wall s", "wall_seconds", 7),
               ("ep/min", "episodes_per_minute", 7), ("speedup", "speedup", 7),
               ("start s", "sandbox_start_seconds_mean", 7), ("verify s", "verify_seconds_mean", 8),
               ("teardown s", "teardown_seconds_mean", 10), ("sandbox s/ep", "sandbox_side_seconds_mean", 12),
               ("overhead s/ep", "sandbox_overhead_seconds_mean", 13),
               ("outside model", "outside_model_share", 13), ("solved", "solved", 6), ("masked", "masked_by_kind", 8)]
    print("  ".join(f"{title:>{width}}" for title, _, width in columns))
    for row in rows:
        print("  ".join(f"{str(row[key] if key != 'masked_by_kind' else row[key] or '{}'):>{width}}"
                        for _, key, width in columns))
    print(f"sandbox overhead per episode (start + verify + tear-down), one at a time: "
          f"mean {report['sandbox_overhead_seconds_mean']} s, median {report['sandbox_overhead_seconds_median']} s "
          f"(target < 1 s); model: {args.model_seconds} s per turn (simulated). Written to {args.out}")
    if args.remote:
        p = pairs
        print(f"remote against in process, {p['pairs']} paired episodes (medians): overhead "
              f"{p['overhead_seconds_median_in_process']} s in process, "
              f"{p['overhead_seconds_median_remote']} s remote, "
              f"{p['overhead_seconds_median_remote_minus_in_process']:+} s per pair; sandbox side (commands included) "
              f"{p['sandbox_side_seconds_median_in_process']} s / {p['sandbox_side_seconds_median_remote']} s, "
              f"{p['sandbox_side_seconds_median_remote_minus_in_process']:+} s per pair")


if __name__ == "__main__":
    main()
