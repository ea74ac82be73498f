"""Oracle episodes: a task's reference solution run as bash-tool calls in its sandbox, recorded as an SFT chat record.
Runs in: the training venv; `python -m episodes.oracle --tasks DIR... --collect OUT.jsonl`.

Teacher data in the harness agentic GRPO trains (real tool output, the tests' reward in metadata), so an RL start
can be partly right; the scripted teacher's tool calls are the same commands (harbor_tasks.solution).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common.bash_harness import BASH_TOOL, FINAL_ANSWER, TOOL_NAME
from episodes.local import EpisodeLimits, EpisodeStats, TaskEnvironment, episode_reward, task_prompt
from harbor_tasks.folder import TaskFolder, task_folders
from harbor_tasks.solution import bash_tool_commands


def oracle_episode(task: Path, env: TaskEnvironment) -> dict:
    """A chat record of the bash-tool harness in which the task's reference solution (solution/solve.sh as the
    scripted teacher's tool calls, `bash_tool_commands`) runs in the task's sandbox: real tool output, the tests'
    reward in metadata. Teacher data for SFT in the harness agentic GRPO trains, so an RL start can be partly right."""
    commands = bash_tool_commands(TaskFolder.of(task).solution_script or "")
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

    parser = argparse.ArgumentParser(prog="python -m episodes.oracle", description=__doc__)
    parser.add_argument("--tasks", required=True, nargs="+", help="folders of Harbor task folders")
    parser.add_argument("--collect", required=True, type=Path, help="JSONL file of oracle episodes to write (an SFT "
                        "source; keep the solved ones with min_reward: 1)")
    args = parser.parse_args(argv)
    tasks = [t for root in args.tasks for t in task_folders(root) if TaskFolder.of(t).solution_script is not None
             and TaskFolder.of(t).single_step_runnable]
    if not tasks:
        print(f"error: --tasks {' '.join(args.tasks)}: no task folder with task.toml, instruction.md, tests/test.sh "
              "and solution/solve.sh", file=sys.stderr)
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
