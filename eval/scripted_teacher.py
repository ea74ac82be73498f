"""A scripted teacher: an OpenAI-compatible server that answers with each task's solution, or its family's policy.
Runs in: its own process, in the training venv (FastAPI, uvicorn); no model.

It speaks the harness of the request: Terminus-2 JSON actions, or `bash` tool calls when the request carries `tools`
(common/bash_harness.py). A deep task's teacher reads the screen or tool output it was sent and types its next command
(harbor_tasks/teacher.py; `--mistakes P`: wrong steps it recovers from); any other task's is its reference solution.

    python -m eval.scripted_teacher --tasks eval/tasks/terminal --port 8011
    python -m eval.run --model_url http://127.0.0.1:8011/v1 --model teacher --suite builtin:terminal [--agent bash-tool]
    python -m eval.scripted_teacher --tasks DIR --collect OUT [--agent terminus-2|bash-tool] [--mistakes P]

How it answers each turn: docs/evaluation.md#serving-a-checkpoint-evalservepy.
"""

import argparse
import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.bash_harness import FINAL_ANSWER, TOOL_NAME
from common.errors import RequestError
from common.harnesses import TERMINUS_2_HARNESS
from common.net import free_port, stop_process, wait_until_healthy
from eval.openai_api import chat_completion, message_text, model_list, request_tools, tool_call
from eval.openai_api import create_app as create_openai_app
from eval.run import evaluate_endpoint
from eval.settings import MODEL_AGENTS, EvalSettings
from harbor_tasks.folder import TaskFolder, read_text
from harbor_tasks.solution import bash_tool_commands, complete_command, heredoc, solution_lines
from harbor_tasks.teacher import Decision, Policy, decide, shown_output, task_policy

DEFAULT_MODEL = "teacher"
_SLOW = re.compile(r"\b(make|gcc|cc|python3?|pip|git|pytest|cargo|npm|\./\S+\.sh|bash)\b")


def _squash(text: str) -> str:
    return " ".join(text.split())


def _duration(command: str) -> float:
    """Terminus-2's own guidance: 0.1 s for immediate commands, longer for builds and scripts."""
    return 3.0 if _SLOW.search(command) else 0.1


def _step_duration(command: str) -> float:
    """A deep task's one command, whose output the next step reads: long enough for it to be on the screen when
    Terminus-2 reads it with many trials at once (a script runs in well under a second here; a build wants longer)."""
    return 1.0 if _SLOW.search(command) else 0.5


@dataclass
class ScriptedTask:
    name: str
    instruction: str
    script: str
    policy: Callable[[], Policy] | None = None  # a deep task's: its next command from what it was shown

    def commands(self) -> list[dict]:
        """The reference solution as Terminus-2 command objects."""
        lines = solution_lines(self.script)
        if lines and all(complete_command(line) for line in lines):
            return [{"keystrokes": line + "\n", "duration": _duration(line)} for line in lines]
        block = heredoc(self.script)
        return [{"keystrokes": block + "\n", "duration": float(min(30, 4 + (block.count("\n") - 1) // 8))}]

    def tool_commands(self) -> list[str]:
        """The reference solution as bash tool calls (bash_tool_commands)."""
        return bash_tool_commands(self.script)

    def first_action(self) -> dict:
        commands = self.commands()
        how = ("its commands one per line" if len(commands) > 1 or not commands[0]["keystrokes"].startswith("bash <<")
               else "it as one bash script (it has multi-line constructs)")
        # Only what the prompt shows (never the task's folder name): a student trained on these turns can learn
        # every token of them from its input.
        return {"analysis": "Nothing has been done yet.", "plan": f"Run {how}.",
                "commands": commands, "task_complete": False}

    @staticmethod
    def done_action() -> dict:
        return {"analysis": "The commands ran.", "plan": "Mark the task complete.", "commands": [],
                "task_complete": True}

    @staticmethod
    def step_action(decision: Decision, first: bool) -> dict:
        """A deep task's turn: one command, chosen from the last screen."""
        if decision.command is None:
            return {"analysis": "The output shows the task is done.", "plan": "Mark the task complete.",
                    "commands": [], "task_complete": True}
        analysis = ("Nothing has been done yet." if first else
                    f"The last command failed: {decision.after_mistake}" if decision.after_mistake else
                    "The output above shows what the next step needs.")
        plan = "Run the command again with the path corrected." if decision.after_mistake else "Run the next command."
        return {"analysis": analysis, "plan": plan,
                "commands": [{"keystrokes": decision.command + "\n", "duration": _step_duration(decision.command)}],
                "task_complete": False}


def action_text(action: dict) -> str:
    """An action as the teacher writes it (the layout Harbor's ATIF converter, chat_corpus/harbor_trajectory.py,
    rebuilds)."""
    return json.dumps(action, indent=2, ensure_ascii=False)


def load_tasks(tasks_dir: str | Path) -> list[ScriptedTask]:
    """Every task folder under tasks_dir with instruction.md and solution/solve.sh, and every step of a multi-step
    one with its own (`<task>/<step>`: each round's chat starts from its instruction)."""
    root = Path(tasks_dir)
    tasks = []
    for d in sorted(root.iterdir()):
        steps = [(f"{d.name}/{step}", d / "steps" / step, step) for step in TaskFolder.of(d).steps] \
            if d.is_dir() else []
        for name, where, step in steps or [(d.name, d, None)]:
            if (where / "instruction.md").is_file() and (where / "solution" / "solve.sh").is_file():
                tasks.append(ScriptedTask(name, read_text(where / "instruction.md").strip(),
                                          read_text(where / "solution" / "solve.sh"), task_policy(d, step)))
    if not tasks:
        raise FileNotFoundError(f"{root}: no task folders with instruction.md and solution/solve.sh")
    return tasks


class Teacher:
    def __init__(self, tasks: list[ScriptedTask], model: str = DEFAULT_MODEL, max_model_len: int = 32768,
                 mistakes: float = 0.0):
        self.tasks, self.model, self.max_model_len, self.mistakes = tasks, model, max_model_len, mistakes
        self._squashed = [(_squash(task.instruction), task) for task in tasks]
        self.created = int(time.time())

    def match(self, prompt: str) -> ScriptedTask | None:
        """The task whose instruction is in the prompt (the longest, should one contain another)."""
        text = _squash(prompt)
        hits = [(len(key), task) for key, task in self._squashed if key and key in text]
        return max(hits, key=lambda hit: hit[0])[1] if hits else None

    def answer(self, body) -> dict:
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError("messages must be a non-empty list of {role, content} objects", param="messages")
        if body.get("stream"):
            raise RequestError("stream=true is not supported by the scripted teacher", param="stream")
        users = [m for m in messages if m.get("role") in ("user", "system")]
        first = message_text(users[0].get("content")) if users else ""
        first = first if isinstance(first, str) else ""
        task = self.match(first)
        if task is None:
            raise RequestError(f"the first user message matches none of the {len(self.tasks)} tasks' instruction.md "
                               f"(its start: {first[:120]!r})", param="messages")
        turns = sum(1 for m in messages if m.get("role") == "assistant")
        tools = request_tools(body)
        if tools is not None:  # the bash-tool harness: the solution's commands as tool calls, one per turn
            if not any(tool["function"]["name"] == TOOL_NAME for tool in tools):
                raise RequestError(f"the scripted teacher calls the {TOOL_NAME!r} tool; tools has none of that name",
                                   param="tools")
            if task.policy is not None:
                command = self._decide(task, tool_history(messages)).command
            else:
                commands = task.tool_commands()
                command = commands[turns] if turns < len(commands) else None
            if command is not None:
                call = tool_call(TOOL_NAME, {"command": command}, f"call_{turns}")
                return chat_completion(self.model, None, "tool_calls", len(first) // 4,
                                       len(call["function"]["arguments"]) // 4, tool_calls=[call])
            return chat_completion(self.model, FINAL_ANSWER, "stop", len(first) // 4, len(FINAL_ANSWER) // 4)
        if task.policy is not None:
            history, completed = terminus_history(messages)
            action = (ScriptedTask.step_action(Decision(None), False) if completed
                      else ScriptedTask.step_action(self._decide(task, history), turns == 0))
        else:
            action = task.first_action() if turns == 0 else task.done_action()
        text = action_text(action)
        return chat_completion(self.model, text, "stop", len(first) // 4, len(text) // 4)

    def models(self) -> dict:
        return model_list(self.model, self.created, self.max_model_len)

    def _decide(self, task: ScriptedTask, history: list[tuple[str, str]]) -> Decision:
        try:
            return decide(task.policy, history, self.mistakes, key=task.name)
        except LookupError as err:  # the policy did not find what it needs in what it was shown: it stops there
            print(f"scripted teacher: {task.name}: {err}", file=sys.stderr, flush=True)
            return Decision(None)


def tool_history(messages: list[dict]) -> list[tuple[str, str]]:
    """(command, output) of each bash call in a bash-tool conversation, in order."""
    outputs = {m.get("tool_call_id"): message_text(m.get("content")) for m in messages if m.get("role") == "tool"}
    history = []
    for message in messages:
        for call in message.get("tool_calls") or [] if message.get("role") == "assistant" else []:
            try:
                command = json.loads(call["function"]["arguments"]).get("command", "")
            except (KeyError, TypeError, ValueError, AttributeError):
                command = ""
            history.append((command, outputs.get(call.get("id"), "") or ""))
    return history


def terminus_history(messages: list[dict]) -> tuple[list[tuple[str, str]], bool]:
    """(command, what the screen showed of it) of each Terminus-2 action in the conversation, and whether the last
    action marked the task complete (the user's turn is then its confirmation)."""
    history, completed = [], False
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        try:
            action = json.loads(message_text(message.get("content")) or "")
        except ValueError:
            continue
        completed = bool(action.get("task_complete"))
        screen = next((message_text(m.get("content")) for m in messages[i + 1:] if m.get("role") == "user"), "")
        for command in action.get("commands") or []:
            keys = str(command.get("keystrokes", "")).rstrip("\n")
            history.append((keys, shown_output(screen or "", keys)))
    return history, completed


def create_app(teacher: Teacher):
    async def complete(body) -> dict:
        return teacher.answer(body)

    return create_openai_app("terminal-recipes scripted teacher",
                             lambda: {"status": "ok", "model": teacher.model, "tasks": len(teacher.tasks)},
                             teacher.models, complete)


def collect(tasks_dir: str | Path, jobs_dir: str | Path, concurrency: int = 16, progress=print,
            agent: str = TERMINUS_2_HARNESS, mistakes: float = 0.0) -> dict:
    """Serve the teacher on a free loopback port and run `agent` (terminus-2 or bash-tool) on every task of
    `tasks_dir` against it (`eval.run.evaluate_endpoint`): the Harbor job, with every trial's agent/trajectory.json,
    lands in `jobs_dir`. Returns the job's eval results (mean_reward: the share of trials the teacher solved)."""

    port = free_port()
    log_path = Path(jobs_dir) / "scripted_teacher.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "eval.scripted_teacher", "--tasks", str(tasks_dir),
                                   "--port", str(port), "--mistakes", str(mistakes)], stdout=log,
                                  stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", server, timeout=60,
                           details=lambda: log_path.read_text(errors="replace")[-2000:])
        # temperature 0: the teacher ignores it; the agent's settings otherwise as eval.run's defaults
        # Terminus-2 keeps its chat as sent in each trial's result.json (agent_result.metadata.all_messages): the
        # record `python -m trainers.data pivots` reads the prompts from (its trajectory.json keeps only parsed actions)
        settings = EvalSettings(suite=str(tasks_dir), agent=agent, concurrency=concurrency, jobs_dir=str(jobs_dir),
                                temperature=0.0,
                                extra_agent_kwargs={"store_all_messages": True} if agent == TERMINUS_2_HARNESS else {})
        return evaluate_endpoint(f"http://127.0.0.1:{port}/v1", DEFAULT_MODEL, settings, progress=progress)
    finally:
        stop_process(server)


def family_summary(results: dict, tasks_dir: str | Path) -> str:
    """Solved trials by family (the tasks' `[metadata] family`, else "other"), naming the families the teacher failed."""
    counts: dict[str, Counter] = {}
    for trial in results.get("tasks") or []:
        family = TaskFolder.of(Path(tasks_dir) / str(trial.get("task")).rsplit("/", 1)[-1]).family or "other"
        counts.setdefault(family, Counter())["trials"] += 1
        counts[family]["solved"] += (trial.get("reward") or 0) >= 1.0
    line = "solved by family: " + ", ".join(f"{f} {c['solved']}/{c['trials']}" for f, c in sorted(counts.items()))
    failed = [f"{f} ({c['trials'] - c['solved']} of {c['trials']})" for f, c in sorted(counts.items())
              if c["solved"] < c["trials"]]
    return line + ("\nthe teacher failed tasks of: " + ", ".join(failed) if failed else "")


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m eval.scripted_teacher", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", required=True, help="a folder of Harbor tasks (instruction.md, solution/solve.sh)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the served model name (default: %(default)s)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--log_level", default="warning")
    parser.add_argument("--collect", metavar="OUT", help=(
        "instead of serving until stopped: serve on a free port, run --agent on every task against it and put "
        "the Harbor job (the teacher trajectories) into OUT"))
    parser.add_argument("--agent", choices=MODEL_AGENTS, default=TERMINUS_2_HARNESS, help=(
        "with --collect: the harness of the trajectories: Terminus-2's JSON keystrokes, or the bash tool that "
        "agentic GRPO trains (default: %(default)s)"))
    parser.add_argument("--concurrency", type=int, default=16, help="with --collect: trials at once (default: "
                        "%(default)s; the teacher answers at once, so trials wait only on their sandboxes)")
    parser.add_argument("--mistakes", type=float, default=0.0, help="deep tasks: probability per turn of a plausible "
                        "wrong step (a mistyped path in a looking command) that the teacher reads and recovers from "
                        "(default: %(default)s)")
    args = parser.parse_args(argv)
    if not 0.0 <= args.mistakes < 1.0:
        parser.error(f"--mistakes {args.mistakes}: a probability in [0, 1)")
    if args.collect:
        started = time.monotonic()
        try:
            results = collect(args.tasks, args.collect, args.concurrency, progress=lambda m: print(m, file=sys.stderr),
                              agent=args.agent, mistakes=args.mistakes)
        except Exception as err:  # a missing task folder, Harbor not installed, a teacher that did not start
            print(f"error: {err}", file=sys.stderr)
            return 2
        metrics = results["metrics"]
        print(f"collected {metrics.get('n_trials')} teacher trajectories in {time.monotonic() - started:.0f} s: "
              f"solved {metrics.get('mean_reward')}, errors {metrics.get('exceptions') or {}}; job "
              f"{results['harbor_job_dir']}", file=sys.stderr)
        print(family_summary(results, args.tasks), file=sys.stderr)
        return 0
    try:
        teacher = Teacher(load_tasks(args.tasks), args.model, mistakes=args.mistakes)
    except (OSError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"scripted teacher for {len(teacher.tasks)} tasks at http://{args.host}:{args.port}/v1 (model "
          f"{args.model})", file=sys.stderr, flush=True)
    uvicorn.run(create_app(teacher), host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
