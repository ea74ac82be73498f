"""What agentic GRPO trains on: Harbor task folders as prompt rows for TRL, and the reward that runs their tests.

Runs in: the training venv (Python 3.11). The harness is a bash tool (trainers/task_env.py; its definition, shared
with the eval agent harbor_plugins/bash_tool_agent.py, is common/bash_harness.py): the prompt is the task's
instruction plus one line on how to act, the policy calls `bash` as a Qwen3-style tool call, and the episode ends
when it answers without one (or at `max_tool_calling_iterations`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from common.bash_harness import BASH_TOOL, TOOL_NAME, harness_prompt
from common.errors import ConfigError
from trainers.task_env import EpisodeLimits, EpisodeStats, TaskEnvironment, episode_reward


@dataclass
class AgenticTaskArguments:
    """The tasks of an agentic GRPO run and the limits of its episodes (the YAML keys of configs/grpo/agentic-*)."""

    task_dirs: list[str] = field(default_factory=list, metadata={
        "help": "folders of Harbor task folders (instruction.md, environment/, tests/) to train on"})
    generate_seed: int | None = field(default=None, metadata={
        "help": "generate procedural tasks (eval/tasks/generate.py) with this seed into task_dirs[0] first"})
    generate_n: int = field(default=20, metadata={"help": "how many to generate"})
    generate_families: list[str] = field(default_factory=list, metadata={"help": "which families (default: all)"})
    command_timeout_sec: float = 30.0
    episode_wall_sec: float = 300.0
    max_output_chars: int = 2000
    limit_outcome: str = field(default="zero", metadata={"help": "an episode ended by episode_wall_sec: zero | mask"})
    sandbox_memory_mb: int = 1024

    def limits(self) -> EpisodeLimits:
        try:
            return EpisodeLimits(command_timeout_sec=self.command_timeout_sec, episode_wall_sec=self.episode_wall_sec,
                                 max_output_chars=self.max_output_chars, limit_outcome=self.limit_outcome,
                                 memory_mb=self.sandbox_memory_mb)
        except ValueError as err:
            raise ConfigError(f"episode limits: {err}") from None


def prepare_tasks(args: AgenticTaskArguments) -> list[Path]:
    """The task folders of the run (generated first when generate_seed is set), sorted."""
    if not args.task_dirs:
        raise ConfigError("task_dirs is empty: name at least one folder of Harbor task folders")
    if args.generate_seed is not None:
        from eval.tasks.generate import FAMILIES, generate

        unknown = [f for f in args.generate_families if f not in FAMILIES]
        if unknown:
            raise ConfigError(f"generate_families: unknown {', '.join(unknown)}; known: {', '.join(FAMILIES)}")
        out = Path(args.task_dirs[0])
        if not (out.is_dir() and any(out.iterdir())):
            generate(out, args.generate_seed, args.generate_n, args.generate_families or None)
    tasks = []
    for root in map(Path, args.task_dirs):
        if not root.is_dir():
            raise ConfigError(f"task_dirs: {root} is not a folder (give folders of Harbor task folders)")
        found = sorted(d for d in root.iterdir() if (d / "instruction.md").is_file() and (d / "tests").is_dir())
        if not found:
            raise ConfigError(f"task_dirs: {root} holds no task folder with instruction.md and tests/")
        tasks += found
    return tasks


def task_prompt(task: Path) -> list[dict]:
    """The conversation an episode starts from: the task's instruction and how to act (training and oracle alike)."""
    return [{"role": "user", "content": harness_prompt((task / "instruction.md").read_text())}]


def task_dataset(tasks: list[Path]):
    """One row per task: the conversational prompt TRL generates from, and `task_dir`, which reset() receives."""
    from datasets import Dataset

    rows = [{"prompt": task_prompt(t), "task_dir": str(t.resolve()), "task": t.name} for t in tasks]
    return Dataset.from_list(rows)


def environment_factory(args: AgenticTaskArguments, stats: EpisodeStats):
    """What GRPOTrainer(environment_factory=...) calls, once per pooled environment."""
    return partial(TaskEnvironment, args.limits(), stats)


def task_tests_reward(stats: EpisodeStats):
    """The reward function: each rollout's episode verified by its task's tests; None (not scored: kept out of the
    group's mean and std, advantage 0) for an infrastructure failure. Logs the episode counts as it goes."""

    def task_tests(environments, log_metric=None, **kwargs):
        rewards = [episode_reward(env) for env in environments]
        if log_metric is not None:
            scored = [r for r in rewards if r is not None]
            if scored:
                log_metric("episodes/pass_rate", sum(r >= 1.0 for r in scored) / len(scored))
            log_metric("episodes/masked", float(len(rewards) - len(scored)))
            totals = stats.as_dict()
            for kind, count in totals["masked_by_kind"].items():
                log_metric(f"episodes/masked_total/{kind}", float(count))
            log_metric("episodes/tool_errors_total", float(totals["tool_errors"]))
            if totals["sandbox_start_seconds_mean"] is not None:
                log_metric("episodes/sandbox_start_seconds", totals["sandbox_start_seconds_mean"])
        return rewards

    return task_tests


def oracle_episode(task: Path, env: TaskEnvironment) -> dict:
    """A chat record of the bash-tool harness in which the task's reference solution (solution/solve.sh as the
    scripted teacher's tool calls, `bash_tool_commands`) runs in the task's sandbox: real tool output, the tests'
    reward in metadata. Teacher data for SFT in the harness agentic GRPO trains, so an RL start can be partly right."""
    from eval.scripted_teacher import FINAL_ANSWER, bash_tool_commands

    commands = bash_tool_commands((task / "solution" / "solve.sh").read_text())
    env.reset(task_dir=str(task))
    messages = task_prompt(task)
    for i, command in enumerate(commands):
        call_id = f"call_{i}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": TOOL_NAME, "arguments": json.dumps({"command": command})}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "name": TOOL_NAME, "content": env.bash(command)})
    messages.append({"role": "assistant", "content": FINAL_ANSWER})
    reward = episode_reward(env)
    return {"messages": messages, "tools": [BASH_TOOL],
            "metadata": {"task": task.name, "source_trajectory_uid": task.name, "reward": reward}}


def main(argv: list[str] | None = None) -> int:
    from tqdm.auto import tqdm

    parser = argparse.ArgumentParser(prog="python -m trainers.agentic_tasks", description=__doc__)
    parser.add_argument("--tasks", required=True, nargs="+", help="folders of Harbor task folders")
    parser.add_argument("--collect", required=True, type=Path, help="JSONL file of oracle episodes to write (an SFT "
                        "source; keep the solved ones with min_reward: 1)")
    args = parser.parse_args(argv)
    try:
        tasks = prepare_tasks(AgenticTaskArguments(task_dirs=args.tasks))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stats = EpisodeStats()
    env = TaskEnvironment(EpisodeLimits(), stats)
    args.collect.parent.mkdir(parents=True, exist_ok=True)
    with args.collect.open("w") as out:
        for task in tqdm(tasks, desc="oracle episodes", unit="task"):
            out.write(json.dumps(oracle_episode(task, env)) + "\n")
    totals = stats.as_dict()
    print(f"{len(tasks)} oracle episodes in {args.collect}: {totals['passed']} solved, {totals['scored']} scored, "
          f"not scored by kind {totals['masked_by_kind'] or '{}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
