"""Teacher episodes in the bash-tool harness: the teacher's policy run as tool calls in a task's sandbox, as SFT records.
Runs in: the training venv; `python -m episodes.oracle --tasks DIR... --collect OUT.jsonl [--mistakes P]`.

A deep task's teacher reads each tool output and types its next command (harbor_tasks/teacher.py); any other task's
is its reference solution (solve.sh as calls, harbor_tasks.solution). Real tool output, the tests' reward in metadata.
A multi-round task is one chat on one sandbox: each round's request a user turn, its tests run after it, and a failed
round's cases quoted in the user's words at the start of the next turn (grounded feedback).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

from common.bash_harness import BASH_TOOL, FINAL_ANSWER, TOOL_NAME, harness_prompt
from episodes.local import (EpisodeLimits, EpisodeStats, TaskEnvironment, end_episode, episode_reward, task_prompt,
                            verify_round)
from harbor_tasks.folder import TaskFolder, read_text, task_folders
from harbor_tasks.solution import bash_tool_commands
from harbor_tasks.teacher import Decision, decide, task_policy

MAX_CALLS = 40  # a teacher that has not finished by then has lost its way: the episode ends and is scored as it is


FAILED_CASE = re.compile(r"^FAIL [\w.-]+: (.+)$", flags=re.M)  # a round's verifier: `FAIL <case>: the user's words`


def _moves(task: Path, mistakes: float, step: str | None = None):
    """The teacher's decisions for `task` (its round `step`), each sent the output of the last: its policy's, else
    the solution's."""
    policy = task_policy(task, step)
    if policy is None:
        script = (read_text(task / "steps" / step / "solution" / "solve.sh") if step
                  else TaskFolder.of(task).solution_script or "")
        for command in bash_tool_commands(script):
            yield Decision(command)
        return
    history: list[tuple[str, str]] = []
    while len(history) < MAX_CALLS:
        decision = decide(policy, history, mistakes, key=f"{task.name}/{step}" if step else task.name)
        if decision.command is None:
            return
        output = yield decision
        history.append((decision.command, output))


def _act(moves, env: TaskEnvironment, messages: list[dict]) -> str | None:
    """The teacher's calls until it is done, each with its output, onto `messages`, then its final answer; the
    policy's error where it could not read what it needed."""
    output, error = None, None
    first_call = sum(1 for m in messages if m.get("tool_calls"))
    for i in range(first_call, first_call + MAX_CALLS):
        try:
            decision = next(moves) if output is None else moves.send(output)
        except StopIteration:
            break
        except LookupError as err:  # the policy did not find what it looks for in what it was shown
            error = str(err)
            break
        call_id = f"call_{i}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": TOOL_NAME, "arguments": json.dumps({"command": decision.command})}}],
            **({"train": False} if decision.mistake else {})})
        output = env.bash(decision.command)
        messages.append({"role": "tool", "tool_call_id": call_id, "name": TOOL_NAME, "content": output})
    messages.append({"role": "assistant", "content": FINAL_ANSWER})
    return error


def oracle_episode(task: Path, env: TaskEnvironment, mistakes: float = 0.0) -> dict:
    """A chat record of the bash-tool harness in which the teacher solves the task in its sandbox: real tool output,
    the tests' reward in metadata. A mistaken call (`mistakes`) is kept with `"train": false` and the recovery after it
    trained; `metadata.teacher_error` says where a policy could not read what it needed."""
    folder = TaskFolder.of(task)
    if folder.steps:
        return oracle_rounds(task, env, mistakes)
    env.reset(task_dir=str(task))
    messages = task_prompt(task)
    error = _act(_moves(task, mistakes), env, messages)
    return {"messages": messages, "tools": [BASH_TOOL],
            "metadata": {"task": task.name, "source_trajectory_uid": task.name, "reward": episode_reward(env),
                         "family": folder.family, "teacher_error": error}}


def oracle_rounds(task: Path, env: TaskEnvironment, mistakes: float = 0.0) -> dict:
    """A multi-round task as one chat on one sandbox: each round's request a user turn (the first with how to act),
    the teacher's calls, the round's tests; after a failed round the next turn opens with its failing cases in the
    user's words. `metadata.rounds`: each round's reward; `metadata.reward`: their mean (None if one was not
    scored)."""
    folder = TaskFolder.of(task)
    env.reset(task_dir=str(task))
    messages: list[dict] = []
    rewards, errors, feedback = [], [], ""
    for k, step in enumerate(folder.steps):
        request = read_text(task / "steps" / step / "instruction.md").strip()
        messages.append({"role": "user", "content": harness_prompt(request) if k == 0 else feedback + request})
        errors.append(_act(_moves(task, mistakes, step), env, messages))
        reward, printed = verify_round(env, task / "steps" / step / "tests")
        rewards.append(reward)
        failing = FAILED_CASE.findall(printed) if reward is not None and reward < 1.0 else []
        feedback = (f"That is not right yet: {'; '.join(failing)}. Please fix it too.\n\n" if failing else "")
    end_episode(env)
    scored = None not in rewards
    return {"messages": messages, "tools": [BASH_TOOL],
            "metadata": {"task": task.name, "source_trajectory_uid": task.name, "family": folder.family,
                         "rounds": rewards, "reward": sum(rewards) / len(rewards) if scored and rewards else None,
                         "teacher_error": next((e for e in errors if e), None)}}


def solve_rates(records: list[dict]) -> dict[str, dict]:
    """{family (or "other"): {"scored", "solved", "rate"}} of teacher episodes; a reward of None is not scored."""
    counts: dict[str, Counter] = {}
    for record in records:
        meta = record["metadata"]
        family = counts.setdefault(meta.get("family") or "other", Counter())
        if meta["reward"] is not None:
            family["scored"] += 1
            family["solved"] += meta["reward"] >= 1.0
    return {name: {"scored": c["scored"], "solved": c["solved"],
                   "rate": round(c["solved"] / c["scored"], 4) if c["scored"] else None}
            for name, c in sorted(counts.items())}


def main(argv: list[str] | None = None) -> int:
    from tqdm.auto import tqdm

    parser = argparse.ArgumentParser(prog="python -m episodes.oracle", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", required=True, nargs="+", help="folders of Harbor task folders")
    parser.add_argument("--collect", required=True, type=Path, help="JSONL file of teacher episodes to write (an SFT "
                        "source; keep the solved ones with min_reward: 1)")
    parser.add_argument("--mistakes", type=float, default=0.0, help="probability per turn of a plausible wrong step "
                        "(a mistyped path in a looking command) that the teacher then reads and recovers from; "
                        "deep tasks only (default: %(default)s)")
    args = parser.parse_args(argv)
    if not 0.0 <= args.mistakes < 1.0:
        parser.error(f"--mistakes {args.mistakes}: a probability in [0, 1)")
    tasks = [t for root in args.tasks for t in task_folders(root) if TaskFolder.of(t).steps or (
        TaskFolder.of(t).solution_script is not None and TaskFolder.of(t).single_step_runnable)]
    if not tasks:
        print(f"error: --tasks {' '.join(args.tasks)}: no task folder with task.toml, instruction.md, tests/test.sh "
              "and solution/solve.sh", file=sys.stderr)
        return 2
    stats = EpisodeStats()
    env = TaskEnvironment(EpisodeLimits(), stats)
    args.collect.parent.mkdir(parents=True, exist_ok=True)
    records = []
    with args.collect.open("w") as out:
        for task in tqdm(tasks, desc="teacher episodes", unit="task"):
            records.append(oracle_episode(task, env, args.mistakes))
            out.write(json.dumps(records[-1]) + "\n")
    totals = stats.as_dict()
    print(f"{len(tasks)} teacher episodes in {args.collect}: {totals['passed']} solved, {totals['scored']} scored, "
          f"not scored by kind {totals['masked_by_kind'] or '{}'}")
    rates = solve_rates(records)
    failing = {name: r for name, r in rates.items() if r["scored"] and r["solved"] < r["scored"]}
    print("solved by family: " + ", ".join(f"{name} {r['solved']}/{r['scored']}" for name, r in rates.items()))
    if failing:
        print("the teacher failed tasks of: " + ", ".join(f"{name} ({r['scored'] - r['solved']} of {r['scored']})"
                                                          for name, r in failing.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
